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

The device, mixed precision and memory layout come from :mod:`dynamix.train.device`. With fp16 the
loss is scaled before backward and the gradient unscaled right after (:class:`LossScaler`), so
whatever reads ``.grad`` (per-worker statistics, the engine's reduction) sees true gradients.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from dynamix.config import OptimConfig
from dynamix.data.batches import normalise
from dynamix.metrics.gradstats import flat_grad
from dynamix.train.device import AMP_DTYPES, deterministic_cuda
from dynamix.train.optim import build_optimizer, learning_rate

EVAL_CHUNK_CPU = 64
"""Images per forward pass when evaluating on the CPU. Activations of 64 CIFAR images stay in cache:
tiny-cnn and resnet8 evaluate 1.7-2.8x faster than in 1000-image passes (one thread, this machine),
and in eval mode every image's logits are the same bits either way (checked), so results do not change."""


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


class LossScaler:
    """Dynamic loss scaling for fp16 (Micikevicius et al. 2018; the rule of ``torch.amp.GradScaler``).

    The loss is multiplied by ``scale`` before backward so small gradients survive fp16; a step whose
    gradient is not finite is skipped and the scale halves; after ``interval`` finite steps in a row
    it doubles. Not GradScaler itself: the engine all-reduces gradients between backward and step, so
    finiteness must be judged on the reduced gradient, which every rank then judges alike.
    """

    def __init__(self, scale: float = 2.0**16, growth: float = 2.0, backoff: float = 0.5,
                 interval: int = 2000) -> None:
        self.scale, self.growth, self.backoff, self.interval = scale, growth, backoff, interval
        self.good_steps = 0

    def update(self, finite: bool) -> None:
        if not finite:
            self.scale *= self.backoff
            self.good_steps = 0
            return
        self.good_steps += 1
        if self.good_steps >= self.interval:
            self.scale *= self.growth
            self.good_steps = 0

    def state_dict(self) -> dict:
        return {"scale": self.scale, "good_steps": self.good_steps}

    def load_state_dict(self, state: dict) -> None:
        self.scale, self.good_steps = state["scale"], state["good_steps"]


class Trainer:
    """A model, its optimiser and the iteration counter on one device.

    ``amp`` is ``none``, ``bf16`` or ``fp16`` (CUDA only, :func:`dynamix.train.device.check_amp`);
    ``channels_last`` keeps weights and inputs in NHWC layout.
    """

    def __init__(self, model: nn.Module, optim: OptimConfig, total_iters: int, device: str = "cpu",
                 amp: str = "none", channels_last: bool = False) -> None:
        self.device = str(device)
        if self.device.startswith("cuda"):
            deterministic_cuda()
        self.model = model.to(self.device)
        if channels_last and all(p.grad is None for p in model.parameters()):
            # (a model whose .grad is already bound to flat buffers, as in the engine, is converted
            # by its owner before binding: converting here would copy the gradients out of the buffers)
            self.model = self.model.to(memory_format=torch.channels_last)
        self.channels_last = channels_last
        self.amp_dtype = AMP_DTYPES.get(amp)  # None: float32
        self.scaler = LossScaler() if amp == "fp16" else None
        self.skipped_steps = 0  # fp16 steps skipped for a non-finite gradient
        self.cfg = optim
        self.total_iters = total_iters
        self.opt = build_optimizer(model.parameters(), optim)
        self.iteration = 0
        self.lr = optim.lr

    def _autocast(self):
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type="cuda", dtype=self.amp_dtype)

    def _inputs(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.device, non_blocking=True)
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x

    def zero_grad(self) -> None:
        self.opt.zero_grad(set_to_none=False)
        for p in self.model.parameters():
            if p.grad is None:
                p.grad = torch.zeros_like(p)

    def local_gradient(self, x: torch.Tensor, y: torch.Tensor, weight: float = 1.0) -> LocalStats:
        """Add ``weight`` x grad(mean loss on (x, y)) into the parameters' ``.grad`` (times the loss
        scale under fp16: call :meth:`unscale_` before reading ``.grad``)."""
        self.model.train()
        x, y = self._inputs(x), y.to(self.device, non_blocking=True)
        with self._autocast():
            out = self.model(x)
            loss = F.cross_entropy(out, y)
        (loss * (weight if self.scaler is None else weight * self.scaler.scale)).backward()
        correct = int((out.argmax(1) == y).sum())
        return LocalStats(int(y.numel()), float(loss.detach()), correct)

    def unscale_(self) -> None:
        """Divide ``.grad`` by the fp16 loss scale (a no-op without fp16). The scale is a power of
        two, so this is exact."""
        if self.scaler is None:
            return
        inv = 1.0 / self.scaler.scale
        for p in self.model.parameters():
            if p.grad is not None:
                p.grad.mul_(inv)

    def gradient_finite(self) -> bool:
        """Whether every entry of ``.grad`` is finite (one device synchronisation)."""
        flags = [torch.isfinite(p.grad).all() for p in self.model.parameters() if p.grad is not None]
        return bool(torch.stack(flags).all()) if flags else True

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
                g = (after - before) / (w if self.scaler is None else w * self.scaler.scale)
                before = after
                grads.append(g)
                s = LocalStats(s.n, s.loss, s.correct, float(g.dot(g)))
            stats.append(s)
        self.unscale_()
        return stats, grads

    def apply(self, global_batch: int, lr_scale: float = 1.0, progress: float | None = None) -> float:
        """Set this iteration's learning rate, take one optimiser step; returns the lr used. ``progress``:
        the fraction of the run's budget spent (:func:`~dynamix.train.optim.learning_rate`). Under fp16
        a non-finite gradient skips the step (the iteration still counts) and halves the loss scale."""
        self.lr = learning_rate(self.cfg, self.iteration, self.total_iters, global_batch, lr_scale, progress)
        for group in self.opt.param_groups:
            group["lr"] = self.lr
        if self.scaler is None:
            self.opt.step()
        elif self.gradient_finite():
            self.opt.step()
            self.scaler.update(True)
        else:
            self.scaler.update(False)
            self.skipped_steps += 1
        self.iteration += 1
        return self.lr

    def step(self, x: torch.Tensor, y: torch.Tensor, lr_scale: float = 1.0) -> LocalStats:
        """Single-process convenience: gradient on (x, y) and one step."""
        (stats,), (g,) = self.weighted_gradient([(x, y)])
        self.apply(int(y.numel()), lr_scale)
        return stats

    @torch.inference_mode()
    def evaluate(self, x_uint8: torch.Tensor, y: torch.Tensor, batch: int = 1000) -> tuple[float, float]:
        """(mean loss, accuracy) on uint8 images, in eval mode.

        The loss is summed per ``batch`` images (that grouping fixes its float rounding); on the CPU
        each batch's forward pass runs in near-equal chunks of about :data:`EVAL_CHUNK_CPU` images.
        """
        self.model.eval()
        loss_sum, correct = 0.0, 0
        for i in range(0, len(y), batch):
            xb = x_uint8[i : i + batch]
            yb = y[i : i + batch].to(self.device)
            parts = -(-len(xb) // EVAL_CHUNK_CPU) if self.device == "cpu" else 1
            with self._autocast():
                out = torch.cat([self.model(self._inputs(normalise(p))) for p in torch.tensor_split(xb, parts)])
            loss_sum += float(F.cross_entropy(out.float(), yb, reduction="sum"))
            correct += int((out.argmax(1) == yb).sum())
        n = max(len(y), 1)
        return loss_sum / n, correct / n

    def state_dict(self) -> dict:
        state = {"model": self.model.state_dict(), "opt": self.opt.state_dict(), "iteration": self.iteration}
        if self.scaler is not None:
            state["loss_scale"] = self.scaler.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["opt"])
        self.iteration = state["iteration"]
        if self.scaler is not None and "loss_scale" in state:
            self.scaler.load_state_dict(state["loss_scale"])
