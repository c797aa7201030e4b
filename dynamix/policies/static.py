"""Static batch size: every worker at b for the whole run (the paper's baseline sweep)."""

from __future__ import annotations

from typing import Sequence

from dynamix.metrics.schema import GlobalWindow, WorkerWindow
from dynamix.policies.base import BatchSizePolicy, Decision, PolicyContext, register


class StaticPolicy(BatchSizePolicy):
    """``static:B`` fixes every worker at B; bare ``static`` keeps the run's initial sizes."""

    def __init__(self, batch_size: int | None = None) -> None:
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"static policy: batch size must be >= 1, got {batch_size}")
        self.batch_size = batch_size
        self.name = "static" if batch_size is None else f"static:{batch_size}"

    def _sizes(self, ctx: PolicyContext) -> tuple[int, ...]:
        if self.batch_size is None:  # the run's initial sizes, clamped as BatchSizePolicy.initial does
            return tuple(ctx.bounds.clamp(b) for b in ctx.initial_batch_sizes)
        return (self.batch_size,) * ctx.n_workers

    def initial(self, ctx: PolicyContext) -> Decision:
        return Decision(self._sizes(ctx))

    def decide(self, workers: Sequence[WorkerWindow], glob: GlobalWindow) -> Decision:
        return Decision(self._sizes(self.ctx))


@register("static")
def _make(arg: str) -> StaticPolicy:
    if not arg:
        return StaticPolicy()
    try:
        return StaticPolicy(int(arg))
    except ValueError:
        raise ValueError(f"policy spec 'static:{arg}': the argument must be an integer batch size")
