"""Splitting a global batch across workers so that all finish together (LB-BSP's allocation math).

Pure functions, no state: shared by the LB-BSP policy and by GNS/Pollux (which splits its chosen
global batch the same way). Worker i's compute time per iteration is modelled as affine in its batch,

    t_i(b) = a_i + c_i * b            (a_i >= 0 ms fixed cost, c_i > 0 ms per sample),

and the synchronous iteration waits for the slowest worker, T = max_i t_i(b_i). For a fixed global
batch B = sum_i b_i, T is minimised when all workers finish at the same time T* (Chen et al., "Semi-
dynamic load balancing: efficient distributed learning in non-dedicated environments", SoCC'20;
OmniLearn uses the same rule). Setting t_i(b_i) = T* for every i and summing b_i = (T* - a_i)/c_i:

    T* = (B + sum_i a_i / c_i) / sum_i (1 / c_i),        b_i = (T* - a_i) / c_i.

With bounds lo <= b_i <= hi some workers saturate; then T* solves
S(T) = sum_i clip((T - a_i)/c_i, lo, hi) = B. S is continuous, piecewise linear and non-decreasing
in T with breakpoints at a_i + c_i*lo and a_i + c_i*hi, so :func:`balance` finds the segment that
contains B and solves it exactly (no iteration). Integer sizes come from the largest-remainder method
(:func:`round_to_total`), which keeps the sum at exactly B and every size within the bounds.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def _check(total: float, a: np.ndarray, c: np.ndarray, lo: int, hi: int) -> None:
    n = len(a)
    if n == 0 or len(c) != n:
        raise ValueError(f"allocation: a and c must be non-empty and equally long, got {len(a)} and {len(c)}")
    if lo > hi:
        raise ValueError(f"allocation: bounds lo = {lo} exceeds hi = {hi}")
    if not n * lo <= total <= n * hi:
        raise ValueError(
            f"allocation: global batch {total} is out of range for {n} workers: "
            f"must be in [{n * lo}, {n * hi}] (n x bounds)"
        )
    if not (np.all(np.isfinite(a)) and np.all(a >= 0)):
        raise ValueError(f"allocation: fixed costs a_i must be finite and >= 0 ms, got {a.tolist()}")
    if not (np.all(np.isfinite(c)) and np.all(c > 0)):
        raise ValueError(f"allocation: per-sample costs c_i must be finite and > 0 ms, got {c.tolist()}")


def balance(total: float, a: Sequence[float], c: Sequence[float], lo: int, hi: int) -> tuple[float, np.ndarray]:
    """(T*, b) with b_i = clip((T* - a_i)/c_i, lo, hi) summing to ``total``: the continuous optimum.

    ``a`` in ms, ``c`` in ms per sample; T* in ms is the predicted compute time of every worker not
    held at a bound (a worker at ``lo`` is slower than T*, one at ``hi`` faster).
    """
    a_ = np.asarray(a, dtype=np.float64)
    c_ = np.asarray(c, dtype=np.float64)
    _check(total, a_, c_, lo, hi)

    def sizes(t: float) -> np.ndarray:
        return np.clip((t - a_) / c_, lo, hi)

    points = np.unique(np.concatenate([a_ + c_ * lo, a_ + c_ * hi]))
    sums = np.array([sizes(t).sum() for t in points])
    k = int(np.searchsorted(sums, total, side="left"))
    if k == 0:
        t_star = float(points[0])
    elif k >= len(points):
        t_star = float(points[-1])
    else:  # S is linear on [points[k-1], points[k]]: interpolate exactly
        t0, t1, s0, s1 = points[k - 1], points[k], sums[k - 1], sums[k]
        t_star = float(t0 + (total - s0) * (t1 - t0) / (s1 - s0))
    return t_star, sizes(t_star)


def round_to_total(x: Sequence[float], total: int, lo: int, hi: int) -> tuple[int, ...]:
    """Integers within [lo, hi] summing to ``total``, nearest to ``x`` by the largest-remainder method.

    Floors first, then hands the missing units to the largest fractional parts (ties: lower rank);
    an excess (only from floating-point error) is taken from the smallest fractional parts.
    """
    xs = np.clip(np.asarray(x, dtype=np.float64), lo, hi)
    if not len(xs) * lo <= total <= len(xs) * hi:
        raise ValueError(f"round_to_total: total {total} must be in [{len(xs) * lo}, {len(xs) * hi}]")
    base = np.clip(np.floor(xs + 1e-9), lo, hi).astype(np.int64)
    frac = xs - base
    missing = int(total - base.sum())
    while missing != 0:
        step = 1 if missing > 0 else -1
        room = base < hi if step > 0 else base > lo
        order = [i for i in np.argsort(-frac * step, kind="stable") if room[i]]
        if not order:  # unreachable when total is within n x bounds (checked above)
            raise RuntimeError(f"round_to_total: cannot reach {total} from {base.tolist()}")
        for i in order[: abs(missing)]:
            base[i] += step
            frac[i] -= step
        missing -= step * min(abs(missing), len(order))
    return tuple(int(v) for v in base)


def allocate(total: int, a: Sequence[float], c: Sequence[float], lo: int, hi: int) -> tuple[int, ...]:
    """Integer per-worker batch sizes summing to ``total`` that equalise predicted compute times."""
    _, x = balance(total, a, c, lo, hi)
    return round_to_total(x, int(total), lo, hi)


def equal_split(total: int, n_workers: int, lo: int, hi: int) -> tuple[int, ...]:
    """A global batch ``total`` held to what ``n_workers`` workers in [lo, hi] can take, split equally:
    the first window of a policy that splits a global batch, before any speed is measured."""
    total = min(max(int(total), n_workers * lo), n_workers * hi)
    return allocate(total, [0.0] * n_workers, [1.0] * n_workers, lo, hi)


def predicted_times_ms(b: Sequence[float], a: Sequence[float], c: Sequence[float]) -> np.ndarray:
    """t_i(b_i) = a_i + c_i b_i in ms, per worker."""
    return np.asarray(a, dtype=np.float64) + np.asarray(c, dtype=np.float64) * np.asarray(b, dtype=np.float64)
