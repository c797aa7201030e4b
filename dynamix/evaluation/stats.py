"""Aggregates over seeds: point estimates, bootstrap intervals, per-seed pairing.

Following Agarwal et al. (NeurIPS'21, "Deep RL at the edge of the statistical precipice"): the point
estimate is the interquartile mean (IQM: the mean of the middle 50% of the values, robust to one bad
seed; with fewer than 4 values it is the plain mean) or the mean, and the interval is a percentile
bootstrap over seeds with ``n_boot`` resamples at coverage ``ci`` (``experiments.aggregate``,
``n_boot``, ``ci``). Comparisons between policies are paired by seed (every policy of a seed starts
from the same weights and data order): :func:`paired` lines the values up, one row per seed.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np
import pandas as pd

from dynamix.config import Config
from dynamix.seeding import derive_seed

def iqm(values: Iterable[float]) -> float:
    """Interquartile mean: mean of the values between the 25th and 75th percentile ranks.

    Sorted x_1..x_n, trimmed by floor(n/4) on each side; for n < 4 nothing is trimmed (the mean).
    NaNs are dropped; an empty input gives NaN.
    """
    x = np.sort(np.asarray([v for v in values if not _isnan(v)], dtype=float))
    if x.size == 0:
        return math.nan
    k = x.size // 4
    return float(x[k : x.size - k].mean())


def _isnan(v: Any) -> bool:
    return v is None or (isinstance(v, (float, np.floating)) and math.isnan(v))


def point_estimate(values: Iterable[float], method: str) -> float:
    """IQM or mean of ``values`` (NaNs dropped; NaN when none is left)."""
    if method == "iqm":
        return iqm(values)
    if method == "mean":
        x = [v for v in values if not _isnan(v)]
        return float(np.mean(x)) if x else math.nan
    raise ValueError(f"experiments.aggregate = {method!r}: must be 'iqm' or 'mean'")


def bootstrap_ci(
    values: Iterable[float], method: str = "iqm", n_boot: int = 2000, ci: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile-bootstrap interval of ``point_estimate(values, method)`` over resampled seeds.

    One value gives a degenerate interval (that value); none gives (NaN, NaN).
    """
    x = np.asarray([v for v in values if not _isnan(v)], dtype=float)
    if x.size == 0:
        return math.nan, math.nan
    if x.size == 1:
        return float(x[0]), float(x[0])
    rng = np.random.default_rng(derive_seed(seed, "bootstrap"))
    samples = x[rng.integers(0, x.size, size=(n_boot, x.size))]
    if method == "mean":
        stats = samples.mean(axis=1)
    else:
        samples.sort(axis=1)
        k = x.size // 4
        stats = samples[:, k : x.size - k].mean(axis=1)
    lo, hi = np.quantile(stats, [(1 - ci) / 2, 1 - (1 - ci) / 2])
    return float(lo), float(hi)


def estimate(values: Iterable[float], cfg: Config) -> dict:
    """``estimate``, ``ci_lo``, ``ci_hi`` and ``n_seeds`` of the finite ``values`` (e.g. per-seed
    ratios), with the method, resamples and coverage of ``cfg.experiments``."""
    e = cfg.experiments
    vals = [float(v) for v in values if np.isfinite(v)]
    lo, hi = bootstrap_ci(vals, e.aggregate, e.n_boot, e.ci)
    return {"estimate": point_estimate(vals, e.aggregate), "ci_lo": lo, "ci_hi": hi, "n_seeds": len(vals)}


def paired(per_run: pd.DataFrame, value: pd.Series, keys: list[str]) -> pd.DataFrame:
    """One row per (keys, seed), one column per policy, of ``value`` (aligned with ``per_run``'s rows):
    a per-seed difference or ratio of two columns is then paired by seed."""
    return per_run.assign(_v=value.values).pivot_table(index=keys + ["seed"], columns="policy", values="_v",
                                                       aggfunc="first")


def aggregate(
    df: pd.DataFrame, by: list[str], values: list[str], method: str = "iqm", n_boot: int = 2000, ci: float = 0.95
) -> pd.DataFrame:
    """One row per group of ``by``: for each value column ``v``: ``v`` (IQM or mean over the rows,
    i.e. seeds), ``v_lo`` and ``v_hi`` (bootstrap interval), and ``n_seeds`` (rows in the group).
    Also ``v_reached``: the fraction of rows where ``v`` is not missing (e.g. target reached)."""
    rows = []
    for key, group in df.groupby(by, sort=False, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        row = dict(zip(by, key))
        row["n_seeds"] = len(group)
        for v in values:
            col = group[v].astype(float).tolist()
            row[v] = point_estimate(col, method)
            row[f"{v}_lo"], row[f"{v}_hi"] = bootstrap_ci(col, method, n_boot, ci)
            row[f"{v}_reached"] = float(np.mean([not _isnan(c) for c in col]))
        rows.append(row)
    return pd.DataFrame(rows)


def aggregate_cfg(df: pd.DataFrame, by: list[str], values: list[str], cfg: Config) -> pd.DataFrame:
    """:func:`aggregate` with the method, resamples and coverage from ``cfg.experiments``."""
    e = cfg.experiments
    return aggregate(df, by, values, e.aggregate, e.n_boot, e.ci)
