"""Oracle: the balance no online policy can beat, read from the simulator's knowledge of the future.

Simulator only. Before every window the policy reads, through the simulator's
:class:`~dynamix.policies.base.Foresight`, the true speeds, bandwidths and scheduled events of the
coming k iterations (no fitted model, no history) and splits its global batch B for them. For one
iteration with true per-worker compute times t_i(b) (the cost model's, non-decreasing in b) the best
integer split minimises the iteration's slowest compute,

    T* = min { T : sum_i b_i(T) >= B },   b_i(T) = max { b in [lo, hi_i] : t_i(b) <= T },

found exactly by a binary search over the table of t_i(b) (:func:`minimax_split`); workers over B
give back one sample at a time, slowest first, so every worker not held at a bound finishes within
one sample's compute of T* (equal finish up to integer rounding, the continuous optimum of
:mod:`dynamix.policies.allocation` when t is affine). hi_i is min(batch.max, the device's max_batch).

A decision holds for a whole window. When the k iterations' speeds are equal (no jitter, events at
window boundaries) that split is optimal for each of them. Otherwise the candidates are the split of
every distinct iteration, the split that equalises the window's summed compute, and the best of
these refined by one-sample moves while the window's summed critical compute falls (:func:`refine`);
the oracle replays the window under each (:meth:`Foresight.window`, the simulator's own times,
communication included) and keeps the fastest. Then no window policy beats it by much, but it is not
proven optimal for a window whose speeds change inside it (jitter, stragglers, an event mid-window). It is the per-cluster upper bound of the evaluation: its global batch comes from
the spec, and :func:`dynamix.evaluation.oracle.oracle_search` chooses it in hindsight.

Spec: ``oracle:batch=B`` (``batch=0`` or bare ``oracle``: the run's initial global batch);
``oracle:batch=B,then=B2,at=E`` is the two-phase member of the bound's family: B until the window
that starts at or after epoch E, then B2, each at the learning rate the batch-scaling rule gives it
(:mod:`dynamix.train.optim`), as a schedule of large batches late in training would use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from dynamix.config import rng, setting
from dynamix.metrics.schema import GlobalWindow, WorkerWindow
from dynamix.policies.base import (
    BatchSizePolicy,
    Bounds,
    Decision,
    Foresight,
    PolicyContext,
    parse_spec_args,
    register,
    unheld_global_batch,
)


@dataclass(frozen=True)
class OracleOptions:
    batch: int = setting(0, rng(0, None))  # global batch B; 0: sum of the initial batch sizes
    then: int = setting(0, rng(0, None))  # two-phase: the global batch from epoch ``at`` on; 0: B throughout
    at: float = setting(0.0, rng(0.0, None))  # two-phase: the epoch of the switch to ``then``


def minimax_split(total: int, table: np.ndarray, lo: int) -> tuple[int, ...]:
    """Integer sizes summing to ``total`` that minimise max_i t_i(b_i) (module docstring).

    ``table[j, i]`` is worker i's time at batch lo + j, non-decreasing in j, ``inf`` above its cap.
    """
    n = table.shape[1]
    caps = lo - 1 + np.isfinite(table).sum(axis=0)
    if not n * lo <= total <= caps.sum():
        raise ValueError(f"minimax_split: total {total} is out of range: must be in [{n * lo}, {int(caps.sum())}]")
    values = np.unique(table[np.isfinite(table)])
    values = values[values >= table[0].max()]  # every worker must take at least lo

    def held(t: float) -> np.ndarray:  # b_i(T): the largest size each worker finishes by T
        return lo - 1 + (table <= t).sum(axis=0)

    left, right = 0, len(values) - 1  # the smallest T whose sizes reach the total
    while left < right:
        mid = (left + right) // 2
        if held(values[mid]).sum() >= total:
            right = mid
        else:
            left = mid + 1
    sizes = held(values[left])
    for _ in range(int(sizes.sum()) - total):  # the slowest worker gives back one sample
        times = np.where(sizes > lo, table[sizes - lo, np.arange(n)], -np.inf)
        sizes[int(np.argmax(times))] -= 1
    return tuple(int(b) for b in sizes)


def refine(sizes: Sequence[int], tables: np.ndarray, lo: int) -> tuple[int, ...]:
    """Steepest descent on the window's summed critical compute G(b) = sum_t max_i t_{i,t}(b_i) by
    moves of one sample between two workers, from ``sizes``, until no move lowers G.

    ``tables[t, j, i]`` is worker i's time in iteration t at batch lo + j (``inf`` above its cap). A move
    i -> j changes only columns i and j, so the new maximum is the largest of i's and j's new times and
    the largest time of the other workers (the first of each iteration's three largest not i or j).
    """
    k, _, n = tables.shape
    b, cols = np.array(sizes, dtype=np.int64), np.arange(n)
    pad = np.full((k, 3), -np.inf)
    while True:
        cur = tables[:, b - lo, cols]  # (k, n)
        give = np.where(b > lo, tables[:, np.maximum(b - 1 - lo, 0), cols], np.inf)
        take = tables[:, np.minimum(b + 1 - lo, tables.shape[1] - 1), cols]
        take = np.where(b + 1 - lo < tables.shape[1], take, np.inf)
        order = np.argsort(-cur, axis=1, kind="stable")[:, :3]
        vals = np.concatenate([np.take_along_axis(cur, order, axis=1), pad], axis=1)[:, :3]
        idx = np.concatenate([order, np.full((k, 3), -1)], axis=1)[:, :3]
        i, j = cols[None, :, None], cols[None, None, :]
        rest = np.full((k, n, n), -np.inf)
        for r in reversed(range(3)):  # the first of the three largest that is neither i nor j
            other = (idx[:, r, None, None] != i) & (idx[:, r, None, None] != j)
            rest = np.where(other, vals[:, r, None, None], rest)
        moved = np.maximum(rest, np.maximum(give[:, :, None], take[:, None, :])).sum(axis=0)
        moved[cols, cols] = np.inf
        src, dst = np.unravel_index(int(np.argmin(moved)), moved.shape)
        if not moved[src, dst] < cur.max(axis=1).sum() * (1 - 1e-12):
            return tuple(int(v) for v in b)
        b[src] -= 1
        b[dst] += 1


class OraclePolicy(BatchSizePolicy):
    name = "oracle"

    def __init__(self, options: OracleOptions = OracleOptions(), name: str = "oracle") -> None:
        self.options = options
        self.name = name  # the spec string: distinguishes runs with different global batches
        self.view: Foresight | None = None

    def foresee(self, view: Foresight) -> None:
        self.view = view

    def reset(self, ctx: PolicyContext) -> None:
        super().reset(ctx)
        if self.view is None:
            raise RuntimeError(f"{self.name} needs the simulator's foresight (it runs only in the simulator)")
        lo = ctx.bounds.min
        self.caps = np.maximum(np.minimum(ctx.bounds.max, self.view.max_batch), lo)
        self.global_batch = self._held(self.options.batch or sum(ctx.initial_batch_sizes))
        self.sizes = np.arange(lo, int(self.caps.max()) + 1)[:, None]  # the rows of every time table

    def _held(self, requested: int) -> int:
        """``requested`` within what the workers can hold: [n x batch.min, sum of their caps]."""
        return int(min(max(requested, self.ctx.n_workers * self.ctx.bounds.min), self.caps.sum()))

    def unmet_request(self, n_workers: int, bounds: Bounds) -> str | None:
        return unheld_global_batch(self.name, max(self.options.batch, self.options.then), n_workers, bounds)

    def _table(self, speeds: np.ndarray) -> np.ndarray:
        table = np.asarray(self.view.compute_ms(self.sizes, speeds), dtype=np.float64)  # (sizes, workers)
        return np.where(self.sizes <= self.caps, table, np.inf)

    def plan(self, current: Sequence[int]) -> tuple[int, ...]:
        """The split of B for the coming window (module docstring)."""
        lo, total = self.ctx.bounds.min, self.global_batch
        speeds = self.view.window(current).speeds
        _, first = np.unique(speeds, axis=0, return_index=True)
        if len(first) == 1:  # one speed vector for the whole window: its minimax is optimal throughout
            return minimax_split(total, self._table(speeds[0]), lo)
        tables = np.stack([self._table(s) for s in speeds])
        candidates = [minimax_split(total, tables[i], lo) for i in sorted(first)]
        candidates.append(minimax_split(total, tables.sum(axis=0), lo))
        fastest = min(candidates, key=lambda c: float(np.max(tables[:, np.array(c) - lo, np.arange(len(c))],
                                                               axis=1).sum()))
        candidates.append(refine(fastest, tables, lo))
        window_ms = [float(self.view.window(c).iter_ms.sum()) for c in candidates]
        return candidates[int(np.argmin(window_ms))]

    def initial(self, ctx: PolicyContext) -> Decision:
        return Decision(self.plan(tuple(ctx.bounds.clamp(b) for b in ctx.initial_batch_sizes)))

    def decide(self, workers: Sequence[WorkerWindow], glob: GlobalWindow) -> Decision:
        if self.options.then and glob.epoch >= self.options.at:
            self.global_batch = self._held(self.options.then)
        return Decision(self.plan(tuple(int(w.batch_size) for w in workers)))


@register("oracle", simulator_only=True)
def _make(arg: str) -> OraclePolicy:
    return OraclePolicy(parse_spec_args("oracle", arg, OracleOptions), f"oracle:{arg}" if arg else "oracle")
