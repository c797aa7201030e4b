"""Static batch size: every worker at b for the whole run (the paper's baseline sweep)."""

from __future__ import annotations

from typing import Sequence

from dynamix.config import ConfigError
from dynamix.metrics.schema import GlobalWindow, WorkerWindow
from dynamix.policies.base import BatchSizePolicy, Decision, PolicyContext, register


class StaticPolicy(BatchSizePolicy):
    """``static:B`` fixes every worker at B; bare ``static`` keeps the run's initial sizes."""

    def __init__(self, batch_size: int | None = None) -> None:
        if batch_size is not None and batch_size < 1:
            raise ConfigError(f"policy spec 'static:{batch_size}': batch size {batch_size} is out of range: "
                              "must be an integer >= 1")
        self.batch_size = batch_size
        self.name = "static" if batch_size is None else f"static:{batch_size}"

    def check_bounds(self, bounds) -> None:
        if self.batch_size is not None and not bounds.min <= self.batch_size <= bounds.max:
            raise ConfigError(f"policy spec '{self.name}': batch size {self.batch_size} is out of range: must be in "
                              f"[batch.min, batch.max] = [{bounds.min}, {bounds.max}]")

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
        batch_size = int(arg)
    except ValueError:
        raise ConfigError(f"policy spec 'static:{arg}': the argument must be an integer batch size >= 1, "
                          f"got {arg!r}") from None
    return StaticPolicy(batch_size)
