"""The model math shared by the distributed engine and the simulator.

One optimisation step is split in two so that both backends can build the same global gradient:

1. :meth:`Trainer.weighted_gradient` accumulates, for worker batches of sizes b_1..b_N with
   B = sum_i b_i, the global gradient

       g = sum_i (b_i / B) g_i,     g_i = grad of the mean loss over worker i's b_i samples,

   which equals the gradient of the mean loss over the union batch (the weighting the paper's
   heterogeneous batches need; plain averaging of per-worker means would over-weight small batches).
   It also returns each worker's |g_i|^2, which gradient-noise estimators need before aggregation.
2. :meth:`Trainer.apply` sets the learning rate for this iteration (:mod:`dynamix.train.optim`) and
   takes the optimiser step. Exactly one step per iteration, whatever the batch sizes.

Batch norm statistics are computed per worker batch, as in data-parallel training without SyncBN.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from dynamix.config import OptimConfig
from dynamix.data.batches import normalise
from dynamix.metrics.gradstats import flat_grad
from dynamix.train.optim import build_optimizer, learning_rate


@dataclass(frozen=True)
class LocalStats:
    """One worker's contribution to one iteration."""

    n: int  # samples
    loss: float  # mean cross-entropy over the batch
    correct: int  # correctly classified samples
    grad_sqnorm: float = float("nan")  # |g_i|^2 of the local mean-loss gradient, when tracked

    @property
    def acc(self) -> float:
        return self.correct / max(self.n, 1)


class Trainer:
    """A model, its optimiser and the iteration counter; device-agnostic."""

    def __init__(self, model: nn.Module, optim: OptimConfig, total_iters: int, device: str = "cpu") -> None:
        self.model = model.to(device)
        self.cfg = optim
        self.total_iters = total_iters
        self.device = device
        self.opt = build_optimizer(model.parameters(), optim)
        self.iteration = 0
        self.lr = optim.lr

    def zero_grad(self) -> None:
        self.opt.zero_grad(set_to_none=False)
        for p in self.model.parameters():
            if p.grad is None:
                p.grad = torch.zeros_like(p)

    def local_gradient(self, x: torch.Tensor, y: torch.Tensor, weight: float = 1.0) -> LocalStats:
        """Add ``weight`` x grad(mean loss on (x, y)) into the parameters' ``.grad``."""
        self.model.train()
        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        out = self.model(x)
        loss = F.cross_entropy(out, y)
        (loss * weight).backward()
        correct = int((out.argmax(1) == y).sum())
        return LocalStats(int(y.numel()), float(loss.detach()), correct)

    def weighted_gradient(
        self, batches: list[tuple[torch.Tensor, torch.Tensor]], track_local: bool = True
    ) -> tuple[list[LocalStats], list[torch.Tensor] | None]:
        """Leave sum_i (b_i/B) g_i in ``.grad``; return per-worker stats (and g_i when tracked)."""
        self.zero_grad()
        total = sum(int(y.numel()) for _, y in batches)
        stats, grads = [], [] if track_local else None
        before = flat_grad(self.model) if track_local else None
        for x, y in batches:
            w = int(y.numel()) / total
            s = self.local_gradient(x, y, w)
            if track_local:
                after = flat_grad(self.model)
                g = (after - before) / w
                before = after
                grads.append(g)
                s = LocalStats(s.n, s.loss, s.correct, float(g.dot(g)))
            stats.append(s)
        return stats, grads

    def apply(self, global_batch: int, lr_scale: float = 1.0) -> float:
        """Set this iteration's learning rate, take one optimiser step; returns the lr used."""
        self.lr = learning_rate(self.cfg, self.iteration, self.total_iters, global_batch, lr_scale)
        for group in self.opt.param_groups:
            group["lr"] = self.lr
        self.opt.step()
        self.iteration += 1
        return self.lr

    def step(self, x: torch.Tensor, y: torch.Tensor, lr_scale: float = 1.0) -> LocalStats:
        """Single-process convenience: gradient on (x, y) and one step."""
        (stats,), (g,) = self.weighted_gradient([(x, y)])
        self.apply(int(y.numel()), lr_scale)
        return stats

    @torch.no_grad()
    def evaluate(self, x_uint8: torch.Tensor, y: torch.Tensor, batch: int = 1000) -> tuple[float, float]:
        """(mean loss, accuracy) on uint8 images, in eval mode."""
        self.model.eval()
        loss_sum, correct = 0.0, 0
        for i in range(0, len(y), batch):
            xb = normalise(x_uint8[i : i + batch]).to(self.device)
            yb = y[i : i + batch].to(self.device)
            out = self.model(xb)
            loss_sum += float(F.cross_entropy(out, yb, reduction="sum"))
            correct += int((out.argmax(1) == yb).sum())
        n = max(len(y), 1)
        return loss_sum / n, correct / n

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "opt": self.opt.state_dict(), "iteration": self.iteration}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["opt"])
        self.iteration = state["iteration"]
