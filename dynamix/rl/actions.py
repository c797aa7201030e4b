"""What one decision of the agent moves (``rl.action``): each worker's batch, or the global batch.

``worker`` (the paper, Sec. III-A): one decision per worker, b_i <- clamp(b_i + step), the steps
``batch.actions`` = {-100, -25, 0, +25, +100}, clamped to [``batch.min``, ``batch.max``]; the shared
policy reads each worker's row (:func:`dynamix.rl.state.apply_actions`).

``global``: one decision per cluster and window, B <- clamp(f B, [N b_min, N b_max]) with f one of
:data:`GLOBAL_FACTORS`, then B split over the workers by measured speed, b_i proportional to
b_i / compute_i (LB-BSP's split, Chen et al. SoCC'20: the allocation that equalises compute times,
the ``lb_gap`` feature's b*_i), by :func:`dynamix.policies.allocation.allocate` with zero fixed
costs (integers within the bounds summing to B). The agent then learns only the scale, a schedule of
B; balancing is the rule's. Why multiplicative steps: B spans N x [32, 1024], five octaves whatever N
is, so an additive step (+100) would be a large move at N = 2 and none at N = 32, and a move at
B = 128 nothing at B = 4096. x2 and x0.5 cross an octave per window (the whole range in five
windows), x1.25 and x0.8 adjust finely and undo each other exactly (1.25 x 0.8 = 1), x1 stays.

How it fits SB3 (:class:`dynamix.rl.env.WorkerVecEnv`): the cluster is one slot instead of N. Its
observation is the mean over workers of their rows (:meth:`ActionScheme.view`): the global features
are the same on every row, so they pass unchanged, and the local ones become cluster means,
independent of worker order and count; its reward is the mean of the workers' rewards. One
transition per window, whose action alone moved the batch: no slot is credited for a vote that was
not applied (the alternative, N voting slots with worker 0's vote applied, would feed PPO N - 1
transitions per window whose actions changed nothing).

``rl.residual_span`` s > 0 (residual control around the teacher's rule): the global batch starts at the
teacher's m = ``rl.warm_start_batch`` (split equally in the first window, as ``lbbsp:batch=m`` starts)
and every decision is clamped to [m / s, m s]. With ``rl.residual_per_worker`` p > 0 the start is
m(N) = max(m, N p) on N workers: a fixed m would sit every worker of a large cluster at ``batch.min``
(512 on 16 workers is 32 each, where every policy that held it missed the target on every seed), and
the span could not grow with the cluster. Doing nothing is then a plain rule,
:attr:`ActionScheme.base_rule`: m split by the last window's speeds, every window. It is the teacher
``lbbsp:batch=m`` (the strongest heuristic on the validation clusters) without its fitted intercept,
history and dead band, and the held-out comparison runs it beside the agent, so that what the agent
adds to it is measured. The agent learns only how far from it to go and when. Why a bound and not only the start: the surrogate the agent trains on overrates schedules that
peak high early (about 1.5 points of final accuracy per doubling of the peak over the real math,
docs/journal/rl.md), so the span caps what that error can buy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from dynamix.config import Config
from dynamix.metrics.schema import WorkerWindow
from dynamix.policies.allocation import allocate, equal_split
from dynamix.policies.base import Bounds, floored_global_batch
from dynamix.rl.state import EPS, apply_actions

ACTIONS = ("worker", "global")
"""``rl.action``'s values."""
GLOBAL_FACTORS = (0.5, 0.8, 1.0, 1.25, 2.0)
"""``rl.action: global``: the factors one decision multiplies the global batch by (module docstring)."""


def split_global(batch_sizes: Sequence[int], factor: float, compute_ms: Sequence[float],
                 bounds: Bounds, limits: tuple[int, int] | None = None) -> tuple[int, ...]:
    """B' = clamp(round(factor B), N x bounds) split with b_i proportional to b_i / compute_i.

    ``compute_ms``: each worker's compute time per iteration in the window that just ran at
    ``batch_sizes``; c_i = compute_i / b_i ms per sample is its speed's inverse, and
    :func:`~dynamix.policies.allocation.allocate` with a_i = 0 gives b_i = B' / (c_i sum_j 1/c_j),
    clamped to the bounds and rounded to integers that sum to B'. ``limits``: a narrower [low, high]
    for B' (the residual span), within N x bounds."""
    b = np.asarray(batch_sizes, dtype=np.float64)
    n = len(b)
    lo, hi = bounds.global_range(n)
    if limits is not None:
        lo, hi = max(lo, min(limits[0], hi)), min(hi, max(limits[1], lo))
    target = int(min(max(round(factor * float(b.sum())), lo), hi))
    per_sample = np.maximum(np.asarray(compute_ms, dtype=np.float64), EPS) / np.maximum(b, 1.0)
    return allocate(target, [0.0] * n, per_sample.tolist(), bounds.min, bounds.max)


@dataclass(frozen=True)
class ActionScheme:
    """``rl.action``'s decision: ``kind`` (:data:`ACTIONS`) and its ``choices`` (``worker``: the
    additive steps ``batch.actions``; ``global``: :data:`GLOBAL_FACTORS`); ``anchor`` and ``span``: the
    residual span's start m and bound s (module docstring; 0: none); ``per_worker``: p, the start's floor
    per worker (m(N) = max(m, N p); 0: m whatever N)."""

    kind: str
    choices: tuple[float, ...]
    bounds: Bounds
    anchor: int = 0
    span: float = 0.0
    per_worker: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ACTIONS:
            raise ValueError(f"rl.action = {self.kind!r} is not allowed: must be one of {', '.join(map(repr, ACTIONS))}")
        if self.anchor and (self.kind != "global" or self.span < 1.0):
            raise ValueError(f"a residual span (anchor {self.anchor}, span {self.span}) needs rl.action = 'global' "
                             "and a span of at least 1")
        if self.per_worker and not self.anchor:
            raise ValueError(f"a residual start's floor per worker ({self.per_worker}) needs a residual span")

    @classmethod
    def of(cls, kind: str, worker_steps: Sequence[int], bounds: Bounds, anchor: int = 0,
           span: float = 0.0, per_worker: int = 0) -> "ActionScheme":
        return cls(kind, tuple(worker_steps) if kind == "worker" else GLOBAL_FACTORS, bounds, anchor, span,
                   per_worker)

    @property
    def base_rule(self) -> str | None:
        """The policy spec of the rule that x1 is under a residual span (module docstring): LB-BSP on the
        last window alone (``history=1``: a_i = 0, c_i = compute_i / b_i) with no dead band; None without
        a span. With a floor per worker p, LB-BSP's B is max(m, N p) (its ``per_worker``)."""
        if not self.anchor:
            return None
        floor = f",per_worker={self.per_worker}" if self.per_worker else ""
        return f"lbbsp:batch={self.anchor}{floor},history=1,deadband=0"

    def start(self, n_workers: int) -> int:
        """m(N) = max(m, N p), the residual span's start on ``n_workers`` (0 without a span)."""
        return floored_global_batch(self.anchor, n_workers, self.per_worker) if self.anchor else 0

    def limits(self, n_workers: int) -> tuple[int, int] | None:
        """[m(N) / s, m(N) s], the global batches the residual span allows on ``n_workers`` (before the
        bounds); None without one."""
        m = self.start(n_workers)
        if not m:
            return None
        return math.ceil(m / self.span - 1e-9), math.floor(m * self.span + 1e-9)

    def initial(self, n_workers: int) -> tuple[int, ...] | None:
        """The first window's sizes under a residual span: m(N) split equally (nothing is known of the
        speeds yet), held by the bounds; None without a span (the run's own initial batch)."""
        if not self.anchor:
            return None
        return equal_split(self.start(n_workers), n_workers, self.bounds.min, self.bounds.max)

    @property
    def stay(self) -> int:
        """The choice that leaves the batch as it is (the smallest step, or the factor nearest 1)."""
        if self.kind == "worker":
            return int(np.argmin(np.abs(self.choices)))
        return int(np.argmin([abs(math.log(f)) for f in self.choices]))

    def slots(self, n_workers: int) -> int:
        """Decisions per window: one per worker, or one per cluster."""
        return n_workers if self.kind == "worker" else 1

    def view(self, obs: np.ndarray) -> np.ndarray:
        """What the network reads: the per-worker rows ``[N, D]`` (``worker``) or their mean ``[1, D]``."""
        return obs if self.kind == "worker" else obs.mean(axis=0, keepdims=True, dtype=np.float64).astype(np.float32)

    def apply(self, workers: Sequence[WorkerWindow], actions: Sequence[int]) -> tuple[int, ...]:
        """The next window's batch sizes from the window that just ran and one action per slot."""
        actions = np.asarray(actions).reshape(-1)
        sizes = [int(w.batch_size) for w in workers]
        if self.kind == "worker":
            return apply_actions(sizes, actions, tuple(int(s) for s in self.choices), self.bounds)
        if len(actions) != 1:
            raise ValueError(f"rl.action = 'global' takes one action per window, got {len(actions)}")
        a = int(actions[0])
        if not 0 <= a < len(self.choices):
            raise ValueError(f"action {a} is out of range: must be in [0, {len(self.choices) - 1}]")
        return split_global(sizes, self.choices[a], [w.compute_ms for w in workers], self.bounds,
                            self.limits(len(sizes)))


def scheme_of(cfg: Config) -> ActionScheme:
    """What the agent of ``cfg`` decides (``rl.action``, its residual span): the one place training and
    the policy artifact build it."""
    span = cfg.rl.residual_span
    return ActionScheme.of(cfg.rl.action, cfg.batch.actions, Bounds(cfg.batch.min, cfg.batch.max),
                           cfg.rl.warm_start_batch if span else 0, span, cfg.rl.residual_per_worker)
