"""Optimisers and the learning-rate rule.

The learning rate at iteration t for global batch B is

    lr(t, B) = lr0 * warmup(t) * schedule(t) * scaling(B) * lr_scale

- warmup(t) = min(1, (t+1)/warmup_iters) (linear warm-up, Goyal et al. 2017; 1 when warmup_iters=0);
- schedule: constant 1; cosine 0.5 (1 + cos(pi p)) (Loshchilov & Hutter 2017), p the fraction of the
  run done; step 0.1^(t // s); multistep 0.1^(number of milestones m_j <= p) (He et al. 2016: m = 1/2, 3/4);
- scaling(B): 1 (none), B / base_batch (linear rule, Goyal et al. 2017) or sqrt(B / base_batch);
- lr_scale: a policy's per-window factor (e.g. AdaScale's gain r, Johnson et al. 2020).

Because batch sizes change at run time, the rule is evaluated every iteration rather than baked
into a torch scheduler. For the same reason p is the run's own progress in samples where the caller
knows it (the simulator: epochs seen over the schedule's horizon, or iterations over ``max_iters``,
:func:`dynamix.train.loop.schedule_progress`), so a policy that takes larger batches, and so fewer
iterations, decays as it works through its epochs, as the paper's training recipes do; otherwise
p = t / T over the T iterations the run would take at its initial batch.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from dynamix.config import OptimConfig


def build_optimizer(params, cfg: OptimConfig) -> torch.optim.Optimizer:
    if cfg.name == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)


def learning_rate(cfg: OptimConfig, iteration: int, total_iters: int, global_batch: int,
                  lr_scale: float = 1.0, progress: float | None = None) -> float:
    """lr(t, B) as in the module docstring; ``progress`` is p (None: iteration / total_iters)."""
    warm = min(1.0, (iteration + 1) / cfg.warmup_iters) if cfg.warmup_iters else 1.0
    if progress is None:
        progress = iteration / max(total_iters, 1)
    if cfg.schedule == "cosine":
        sched = 0.5 * (1.0 + math.cos(math.pi * min(max(progress, 0.0), 1.0)))
    elif cfg.schedule == "multistep":
        sched = 0.1 ** sum(progress >= m for m in cfg.milestones)
    elif cfg.schedule == "step":
        sched = 0.1 ** (iteration // cfg.step_every_iters)
    else:
        sched = 1.0
    return cfg.lr * warm * sched * batch_scaling(cfg.lr_scaling, global_batch, cfg.base_batch) * lr_scale


def schedule_factor(cfg: OptimConfig, lr, global_batch):
    """warmup(t) * schedule(t) * lr_scale of learning rates ``lr`` at global batches ``global_batch``:
    lr / (lr0 * scaling(B)), the part of the rule that the batch does not set (scalars or arrays)."""
    scaling = np.vectorize(lambda b: batch_scaling(cfg.lr_scaling, b, cfg.base_batch))(global_batch)
    return np.asarray(lr, float) / (cfg.lr * scaling)


def batch_scaling(rule: str, global_batch: float, base_batch: int) -> float:
    """scaling(B) of the module docstring for ``optim.lr_scaling`` = ``rule``: 1, B / base_batch or
    sqrt(B / base_batch)."""
    ratio = global_batch / base_batch
    return {"none": 1.0, "linear": ratio, "sqrt": math.sqrt(ratio)}[rule]
