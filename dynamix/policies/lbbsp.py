"""LB-BSP: keep the global batch, give each worker a share proportional to its speed.

Chen et al., "Semi-dynamic load balancing: efficient distributed learning in non-dedicated
environments" (SoCC'20), and OmniLearn's proportional allocation. Every window the policy refits each
worker's time model t_i(b) = a_i + c_i b (:mod:`dynamix.policies.timing`; the EWMA of b_i/t_i while
the intercept is unidentifiable) and splits the global batch B so that all workers are predicted to
finish together (:func:`dynamix.policies.allocation.allocate`):

    T* = (B + sum_i a_i/c_i) / sum_i (1/c_i),   b_i = (T* - a_i)/c_i,  clamped, integers summing to B.

Dead band: the new split is adopted only if the predicted iteration time of the current split
exceeds the new one's by more than ``deadband`` (relative). Measurement noise then cannot make the
sizes oscillate, and each change pays for the re-sharding it causes. ``deadband=0`` is no dead band:
every window's split is adopted, ties included (a worker held at the floor sets both predictions).
With ``history=1`` besides, the rule is the agent's residual base, its decision x1
(:func:`dynamix.rl.actions.split_global`): ``lbbsp:batch=512,history=1,deadband=0`` (with
``per_worker=64`` under ``rl.residual_per_worker: 64``).

Spec: ``lbbsp`` or ``lbbsp:deadband=0.05,history=8,decay=0.7,batch=0,per_worker=0`` (``batch`` > 0
fixes B, otherwise B is the run's initial global batch; ``per_worker`` p > 0 floors it at N p on N
workers, the agent's residual start m(N) = max(m, N p), :mod:`dynamix.rl.actions`). A B that the workers cannot hold within the bounds
(e.g. 512 on 32 workers with batch.min = 32) runs at the nearest one they can, and says so
(:meth:`~dynamix.policies.base.BatchSizePolicy.unmet_request`: a logged warning and the run's
``clamped`` flag in the evaluation summaries).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

from dynamix.config import rng, setting
from dynamix.metrics.schema import GlobalWindow, WorkerWindow
from dynamix.policies.allocation import allocate, equal_split
from dynamix.policies.base import (
    BatchSizePolicy,
    Bounds,
    Decision,
    PolicyContext,
    floored_global_batch,
    parse_spec_args,
    register,
    unheld_global_batch,
)
from dynamix.policies.timing import ClusterTimeModel

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LbbspOptions:
    deadband: float = setting(0.05, rng(0.0, 10.0))  # relative predicted gain needed to re-split
    history: int = setting(8, rng(1, 10000))  # windows kept per worker for the time fit
    decay: float = setting(0.7, rng(0.0, 1.0))  # weight of a window one step older in the fit
    batch: int = setting(0, rng(0, None))  # global batch B; 0: sum of the initial batch sizes
    per_worker: int = setting(0, rng(0, None))  # B at least N x this on N workers; 0: no floor


class SpeedSplitter:
    """Splits a global batch in proportion to fitted speeds, with a dead band; used by LB-BSP and GNS."""

    def __init__(self, n_workers: int, bounds: Bounds, history: int, decay: float, deadband: float) -> None:
        self.model = ClusterTimeModel(n_workers, history, decay)
        self.bounds = bounds
        self.deadband = deadband

    def observe(self, workers: Sequence[WorkerWindow]) -> None:
        self.model.observe(workers)

    def split(self, global_batch: int, current: tuple[int, ...]) -> tuple[int, ...]:
        """The speed-proportional split of ``global_batch``, or ``current`` inside a dead band."""
        n, lo, hi = len(current), self.bounds.min, self.bounds.max
        global_batch = min(max(global_batch, n * lo), n * hi)
        a, c = self.model.params()
        proposal = allocate(global_batch, a, c, lo, hi)
        if not self.deadband or sum(current) != global_batch:
            return proposal
        t_cur, t_new = self.model.iter_ms(current), self.model.iter_ms(proposal)
        if t_cur > (1.0 + self.deadband) * t_new:
            log.debug("re-split %s -> %s: predicted %.2f -> %.2f ms", current, proposal, t_cur, t_new)
            return proposal
        return current


class LbbspPolicy(BatchSizePolicy):
    name = "lbbsp"

    def __init__(self, options: LbbspOptions = LbbspOptions(), name: str = "lbbsp") -> None:
        self.options = options
        self.name = name  # the spec string: distinguishes runs with different arguments

    def reset(self, ctx: PolicyContext) -> None:
        super().reset(ctx)
        o = self.options
        self.global_batch = self.batch_for(ctx)
        self.splitter = SpeedSplitter(ctx.n_workers, ctx.bounds, o.history, o.decay, o.deadband)

    def batch_for(self, ctx: PolicyContext) -> int:
        """B on this run: ``batch`` (or the initial global batch), at least N x ``per_worker``."""
        return floored_global_batch(self.options.batch or sum(ctx.initial_batch_sizes), ctx.n_workers,
                                    self.options.per_worker)

    def unmet_request(self, n_workers: int, bounds: Bounds) -> str | None:
        batch = self.options.batch and floored_global_batch(self.options.batch, n_workers, self.options.per_worker)
        return unheld_global_batch(self.name, batch, n_workers, bounds)

    def initial(self, ctx: PolicyContext) -> Decision:
        """Equal split of B before any measurement (nothing is known about speeds yet)."""
        return Decision(equal_split(self.batch_for(ctx), ctx.n_workers, ctx.bounds.min, ctx.bounds.max))

    def decide(self, workers: Sequence[WorkerWindow], glob: GlobalWindow) -> Decision:
        self.splitter.observe(workers)
        current = tuple(int(w.batch_size) for w in workers)
        return Decision(self.splitter.split(self.global_batch, current))

    def state_dict(self) -> dict:
        return {"time_model": self.splitter.model.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.splitter.model.load_state_dict(state["time_model"])


@register("lbbsp")
def _make(arg: str) -> LbbspPolicy:
    return LbbspPolicy(parse_spec_args("lbbsp", arg, LbbspOptions), f"lbbsp:{arg}" if arg else "lbbsp")
