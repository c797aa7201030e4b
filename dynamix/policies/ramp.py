"""Batch ramp: multiply the batch by ``factor`` every N iterations (or epochs) instead of decaying the LR.

Smith, Kindermans, Ying & Le, "Don't decay the learning rate, increase the batch size" (ICLR'18).
SGD's noise scale is g ~ lr * D / B (D: training-set size), so multiplying B by ``factor`` cools
training as much as dividing the LR by it, with fewer, larger steps. After n = floor(progress /
every) ramps every worker's batch is b_i(n) = clamp(b_i(0) * factor**n, bounds). Once the bounds
stop the growth, Smith et al. fall back to decaying the learning rate; with ``decay_at_cap`` the
shortfall factor**n / (B(n)/B(0)) goes into ``Decision.lr_scale`` = (B(n)/B(0)) / factor**n, so the
noise scale keeps following the schedule.

Spec: ``ramp`` or ``ramp:factor=2,every=200`` (iterations) or ``ramp:factor=2,epochs=1.5``;
``decay_at_cap=false`` keeps the LR fixed once the batch is capped. Stateless: the decision is a
function of the progress reported in the :class:`~dynamix.metrics.schema.GlobalWindow`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from dynamix.config import ConfigError, rng, setting
from dynamix.metrics.schema import GlobalWindow, WorkerWindow
from dynamix.policies.base import BatchSizePolicy, Decision, parse_spec_args, register


DEFAULT_EVERY = 200  # iterations per step when the spec names neither ``every`` nor ``epochs``


@dataclass(frozen=True)
class RampOptions:
    factor: float = setting(2.0, rng(1.0, 1024.0))  # batch multiplier per ramp step
    every: int = setting(0, rng(0, None))  # iterations between steps (0: use ``epochs``)
    epochs: float = setting(0.0, rng(0.0, None))  # epochs between steps (0: use ``every``)
    decay_at_cap: bool = setting(True)  # once bounds cap the batch, decay the LR by the shortfall

    def __post_init__(self) -> None:
        if (self.every > 0) == (self.epochs > 0):
            raise ConfigError(
                f"policy spec ramp: set exactly one of every (iterations, >= 1) or epochs (> 0); "
                f"got every={self.every}, epochs={self.epochs}"
            )


class RampPolicy(BatchSizePolicy):
    name = "ramp"

    def __init__(self, options: RampOptions = RampOptions(every=DEFAULT_EVERY), name: str = "ramp") -> None:
        self.options = options
        self.name = name  # the spec string: distinguishes runs with different arguments

    def steps(self, glob: GlobalWindow) -> int:
        """Ramp steps n taken by the progress reported in ``glob``."""
        o = self.options
        if o.every > 0:
            return glob.iteration // o.every
        return int(math.floor(glob.epoch / o.epochs + 1e-9))

    def decide(self, workers: Sequence[WorkerWindow], glob: GlobalWindow) -> Decision:
        ctx, o = self.ctx, self.options
        target = o.factor ** self.steps(glob)
        sizes = tuple(ctx.bounds.clamp(b * target) for b in ctx.initial_batch_sizes)
        lr_scale = 1.0
        if o.decay_at_cap:
            start = sum(ctx.bounds.clamp(b) for b in ctx.initial_batch_sizes)
            lr_scale = min(1.0, sum(sizes) / start / target)
        return Decision(sizes, lr_scale)


@register("ramp")
def _make(arg: str) -> RampPolicy:
    name = f"ramp:{arg}" if arg else "ramp"
    keys = {part.partition("=")[0].strip() for part in arg.split(",")}
    if not keys & {"every", "epochs"}:
        arg = f"{arg},every={DEFAULT_EVERY}" if arg else f"every={DEFAULT_EVERY}"
    return RampPolicy(parse_spec_args("ramp", arg, RampOptions), name)
