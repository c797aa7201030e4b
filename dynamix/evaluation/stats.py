"""The project's one statistics module: estimates over seeds, their intervals, and the verdict rule.

The protocol is told once in ``docs/protocol.md``; in short:

- Seeds are the replicates. Comparisons are paired by seed (every policy of a seed starts from the
  same weights and data order; :func:`paired`).
- A time comparison is the per-seed log ratio d_s = log(T_a,s / T_b,s). Its estimate is the geometric
  mean ratio exp(mean d) and its interval is the Student-t interval on the d_s (:func:`ratio_interval`):

      exp( mean(d) +- t_{n-1, (1+ci)/2} * sd(d) / sqrt(n) )

  which has its stated coverage at n = 3 or 5 when the d_s are roughly normal; a percentile bootstrap
  over 3 seeds is the [min, max] of the values and covers about 75 % (``tests/test_stats.py`` measures
  both). A difference (accuracy points) is the same interval without the logs (:func:`mean_interval`).
- Several cells (clusters) at once: pooled, the per-seed mean of the cells' d_s, one value per seed
  (:func:`pooled_interval`); "up to" the largest cell, with Bonferroni-adjusted cell intervals whose
  maxima bound the largest true effect (:func:`max_interval`).
- The verdict (:func:`verdict`) reads an interval against the null and a tie band stated up front
  (``experiments.tie_margin``: a ratio within [1/(1+m), 1+m]; ``tie_margin_pts`` for accuracy points):
  on the claimed side of the null, on the other side, wholly inside the tie band (``tie``), or none of
  these (``inconclusive``). Under the null its false-verdict rate is at most 1 - ci.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats as _sp

SIDES = ("above", "below")
KINDS = ("paper", "ours")
VERDICTS = ("reproduced", "holds", "direction only", "tie", "inconclusive", "not reproduced", "does not hold",
            "not measured")


def finite(values: Iterable[float]) -> np.ndarray:
    """The finite values as a float array (NaN, inf and None dropped)."""
    x = np.asarray([np.nan if v is None else v for v in values], dtype=float)
    return x[np.isfinite(x)]


def mean_interval(values: Iterable[float], ci: float = 0.95) -> dict:
    """Mean of the finite ``values`` and its Student-t interval at coverage ``ci``.

    ``{"estimate", "ci_lo", "ci_hi", "n_seeds"}``; one value gives a degenerate interval (that value),
    none gives NaNs. Identical values give a zero-width interval.
    """
    x = finite(values)
    n = int(x.size)
    if n == 0:
        return {"estimate": math.nan, "ci_lo": math.nan, "ci_hi": math.nan, "n_seeds": 0}
    m = float(x.mean())
    if n == 1:
        return {"estimate": m, "ci_lo": m, "ci_hi": m, "n_seeds": 1}
    half = float(_sp.t.ppf((1 + ci) / 2, n - 1) * x.std(ddof=1) / math.sqrt(n))
    return {"estimate": m, "ci_lo": m - half, "ci_hi": m + half, "n_seeds": n}


def _exp(est: dict) -> dict:
    return {**est, **{k: float(np.exp(est[k])) for k in ("estimate", "ci_lo", "ci_hi")}}


def _logs(ratios: Iterable[float]) -> np.ndarray:
    r = finite(ratios)
    return np.log(r[r > 0])


def ratio_interval(ratios: Iterable[float], ci: float = 0.95) -> dict:
    """Geometric mean of per-seed ``ratios`` and the t interval of their logs, exponentiated."""
    return _exp(mean_interval(_logs(ratios), ci))


def pooled_interval(cells: Sequence[pd.Series], ci: float = 0.95) -> dict:
    """One ratio over several cells: per seed, the mean over cells of its log ratios, then the t
    interval over seeds, exponentiated. ``cells`` are per-seed ratios indexed by seed; a seed missing
    from a cell averages over the cells that have it. ``n_cells`` is added."""
    cols = [np.log(c.where(c > 0)).astype(float).rename(i) for i, c in enumerate(cells)]
    if not cols:
        return {**mean_interval([], ci), "n_cells": 0}
    per_seed = pd.concat(cols, axis=1).replace([np.inf, -np.inf], np.nan).mean(axis=1, skipna=True)
    return {**_exp(mean_interval(per_seed.to_numpy(), ci)), "n_cells": len(cols)}


def max_interval(cells: Sequence[Iterable[float]], ci: float = 0.95) -> dict:
    """"Up to": the largest cell estimate, with an interval for the largest true cell effect.

    Each of the k cells gets its t interval at coverage 1 - (1 - ci) / k (Bonferroni), so with
    probability at least ci every true effect lies in its interval at once, and then the largest
    true effect lies in [max_i lo_i, max_i hi_i]. The winning cell's own interval would ignore that
    it was picked for being high (the winner's curse). ``argmax`` indexes the winning cell.
    """
    xs = [finite(c) for c in cells]
    keep = [i for i, x in enumerate(xs) if x.size]
    if not keep:
        return {**mean_interval([], ci), "n_cells": 0, "argmax": -1}
    adj = 1 - (1 - ci) / len(keep)
    ests = [mean_interval(xs[i], adj) for i in keep]
    best = int(np.argmax([e["estimate"] for e in ests]))
    return {"estimate": ests[best]["estimate"], "ci_lo": max(e["ci_lo"] for e in ests),
            "ci_hi": max(e["ci_hi"] for e in ests), "n_seeds": min(e["n_seeds"] for e in ests),
            "n_cells": len(keep), "argmax": keep[best]}


def tie_band(null: float, unit: str, margin: float, margin_pts: float) -> tuple[float, float]:
    """The interval of "no practical difference" around ``null`` for a row of ``unit``: a ratio within
    a factor 1 + margin, a percentage within 100 margin, accuracy points within margin_pts."""
    if unit == "pts":
        return null - margin_pts, null + margin_pts
    if unit == "%":
        return null - 100 * margin, null + 100 * margin
    return null / (1 + margin), null * (1 + margin)


def verdict(ci_lo: float, ci_hi: float, null: float, side: str, paper: float = math.nan, kind: str = "paper",
            tie_lo: float = math.nan, tie_hi: float = math.nan) -> str:
    """The verdict of one row from its interval [ci_lo, ci_hi] alone.

    ``null`` is "no effect" (1 for ratios, 0 for differences); ``side`` where the claim puts the effect
    (``above`` or ``below`` the null); ``paper`` the paper's number (NaN when it states none); ``kind``
    ``paper`` (a claim of the paper) or ``ours``; [tie_lo, tie_hi] the tie band (:func:`tie_band`).

    - ``not measured``: the interval is not finite;
    - ``reproduced`` (ours: ``holds``): the interval lies wholly on the claim's side of the null and does
      not fall wholly short of the paper's number; ``direction only`` when it does (paper claims only);
    - ``not reproduced`` (ours: ``does not hold``): wholly on the other side of the null;
    - ``tie``: wholly inside the tie band;
    - ``inconclusive``: it holds the null but reaches outside the tie band: the seeds cannot tell.
    """
    if side not in SIDES:
        raise ValueError(f"side = {side!r} is not allowed: must be one of {', '.join(SIDES)}")
    if kind not in KINDS:
        raise ValueError(f"kind = {kind!r} is not allowed: must be one of {', '.join(KINDS)}")
    if not (math.isfinite(ci_lo) and math.isfinite(ci_hi)):
        return "not measured"
    if ci_lo > null or ci_hi < null:
        if (ci_lo > null) != (side == "above"):
            return "not reproduced" if kind == "paper" else "does not hold"
        short = ci_hi < paper if side == "above" else ci_lo > paper  # False when paper is NaN
        if kind == "paper":
            return "direction only" if short else "reproduced"
        return "holds"
    if tie_lo <= ci_lo and ci_hi <= tie_hi:
        return "tie"
    return "inconclusive"


def row_verdict(row: Mapping) -> str:
    """:func:`verdict` of one row of a claims table (a dict or a pandas row)."""
    def num(key: str) -> float:
        v = row.get(key) if isinstance(row, Mapping) else row[key]
        return float(v) if v is not None and v == v else math.nan
    return verdict(num("ci_lo"), num("ci_hi"), num("null"), str(row["side"]), num("paper"), str(row["kind"]),
                   num("tie_lo"), num("tie_hi"))


def paired(per_run: pd.DataFrame, value: pd.Series, keys: list[str], across: str = "policy") -> pd.DataFrame:
    """One row per (keys, seed), one column per value of ``across`` (the policy, or e.g. the
    compression), of ``value`` (aligned with ``per_run``'s rows): a per-seed difference or ratio of
    two columns is then paired by seed."""
    return per_run.assign(_v=value.values).pivot_table(index=keys + ["seed"], columns=across, values="_v",
                                                       aggfunc="first")


def aggregate(df: pd.DataFrame, by: list[str], values: list[str], ci: float = 0.95) -> pd.DataFrame:
    """One row per group of ``by``: for each value column ``v``: ``v`` (mean over the group's rows, i.e.
    seeds, of its finite values), ``v_lo`` and ``v_hi`` (t interval), ``v_reached`` (the fraction of rows
    where ``v`` is not missing, e.g. the target reached), and ``n_seeds`` (rows in the group)."""
    rows = []
    for key, group in df.groupby(by, sort=False, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        row = dict(zip(by, key))
        row["n_seeds"] = len(group)
        for v in values:
            col = group[v].astype(float)
            est = mean_interval(col, ci)
            row[v], row[f"{v}_lo"], row[f"{v}_hi"] = est["estimate"], est["ci_lo"], est["ci_hi"]
            row[f"{v}_reached"] = float(col.notna().mean())
        rows.append(row)
    return pd.DataFrame(rows)
