"""Target accuracy and time to target (the project's one definition), and censoring of unreached runs.

The target is set per cluster (and per group, e.g. optimiser) from the runs themselves:
``evaluation.target_fraction`` x the best policy's mean final accuracy over seeds, unless
``evaluation.target_accuracy`` fixes it (:mod:`dynamix.evaluation`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from dynamix.config import Config
from dynamix.evaluation import stats


def time_to_target(frame: pd.DataFrame, target: float) -> float:
    """When test accuracy first reaches ``target`` (virtual s); NaN if never.

    A run records one test accuracy per window, at its end (``batch.window`` iterations apart), so the
    first window at or above the target only bounds the crossing: reading its end time would quantise
    every time to target by a whole window, a tenth or more of a short evaluation run, and ratios of
    such times jump by that much between neighbouring windows. The crossing is instead interpolated
    linearly between the window before, (t0, a0), and the first window at or above the target, (t1, a1):

        t* = t0 + (target - a0) / (a1 - a0) * (t1 - t0)

    With no tested window before it t* = t1, never earlier than a measurement. Where tests are sparser
    than windows (``train.eval_every`` > ``batch.window``) a window repeats the last accuracy, and t0,
    the end of the window before, is no earlier than that test: the estimate errs late, not early.
    """
    per_window = frame.drop_duplicates("window")
    evals = per_window.loc[per_window["test_acc"].notna(), ["elapsed_s", "test_acc"]].to_numpy(dtype=float)
    hit = np.flatnonzero(evals[:, 1] >= target)
    if not len(hit):
        return math.nan
    k = int(hit[0])
    t1, a1 = evals[k]
    if k == 0:
        return float(t1)
    t0, a0 = evals[k - 1]
    return float(t0 + (target - a0) / (a1 - a0) * (t1 - t0))


def target_accuracy(rows: pd.DataFrame, fraction: float, fixed: float = 0.0, by: str | list[str] = "policy") -> float:
    """The target of one cluster's per-run ``rows``: ``fixed`` when > 0, else ``fraction`` x the best
    mean final accuracy over seeds among the groups of ``by`` (the policies; e.g. policy and
    compression when both settings share one target)."""
    return fixed if fixed > 0 else fraction * float(rows.groupby(by)["final_accuracy"].mean().max())


def set_targets(summary: pd.DataFrame, runs: pd.DataFrame, fraction: float, fixed: float = 0.0) -> pd.DataFrame:
    """Fill ``target_accuracy`` and ``time_to_target_s`` per cluster of a per-run ``summary``.

    ``runs`` holds the runs' rows (``cluster``, ``policy``, ``seed`` identify a run); the target is
    :func:`target_accuracy`: ``fixed`` when > 0, else ``fraction`` x the best policy's mean final
    accuracy on that cluster.
    """
    summary = summary.copy()
    for name, rows in summary.groupby("cluster"):
        target = target_accuracy(rows, fraction, fixed)
        summary.loc[rows.index, "target_accuracy"] = target
        for i, r in rows.iterrows():
            run = runs[(runs["cluster"] == name) & (runs["policy"] == r["policy"]) & (runs["seed"] == r["seed"])]
            summary.loc[i, "time_to_target_s"] = time_to_target(run, target)
    return summary


def with_targets(per_run: pd.DataFrame, runs: pd.DataFrame, cfg: Config, by: list[str],
                 fixed: float | None = None) -> pd.DataFrame:
    """``per_run`` with ``target_accuracy`` and ``time_to_target_s`` set by :func:`set_targets`
    separately within each group of ``by`` (e.g. optimiser, cluster size), with ``cfg.rl``'s fraction
    or fixed target; ``fixed`` (> 0) gives every group that one target instead."""
    parts = []
    for key, rows in per_run.groupby(by, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        mask = pd.Series(True, index=runs.index)
        for col, val in zip(by, key):
            mask &= runs[col] == val
        parts.append(set_targets(rows.assign(time_to_target_s=float("nan"), target_accuracy=float("nan")),
                                 runs[mask], cfg.evaluation.target_fraction,
                                 cfg.evaluation.target_accuracy if fixed is None else fixed))  # fmt: skip
    return pd.concat(parts).sort_index()


CELL_KEYS = ("workload", "cluster", "optimizer", "n_workers", "pair", "backend")
"""The columns that name a comparison's cell: the runs that share one target and one censoring
horizon. A per-run summary is grouped by those of them it has."""


def cells(summary: pd.DataFrame) -> list[str]:
    """The :data:`CELL_KEYS` that ``summary`` has; none: the whole summary is one cell."""
    return [k for k in CELL_KEYS if k in summary.columns]


def horizon(summary: pd.DataFrame) -> pd.Series:
    """Per run, its cell's censoring horizon tau: the longest total time of any run in the cell
    (virtual s), the same for every policy there (``docs/protocol.md``, "Censoring"). A part of a cell
    carries its whole cell's tau in ``horizon_s`` (the selection's confirmation runs beside a sweep
    they are not in), and the longer of it and its own runs counts."""
    total = summary["total_time_s"].astype(float)
    if "horizon_s" in summary.columns:
        total = total.where(total > summary["horizon_s"], summary["horizon_s"].astype(float))
    keys = cells(summary)
    return total.groupby([summary[k] for k in keys], sort=False).transform("max") if keys else total.where(False, total.max())


def missed(summary: pd.DataFrame) -> pd.Series:
    """Per run, whether it never reached its target."""
    return summary["time_to_target_s"].isna()


def censored_time(summary: pd.DataFrame) -> pd.Series:
    """The project's one censoring rule: time to target, a run that never reached it counted at its
    cell's horizon tau (:func:`horizon`), the restricted time to target min(T, tau) of survival analysis.

    Every run's time to target is at most its own total time, which is at most tau, so a run that
    missed is never faster than one on the same cell that reached the target, whatever its own length.
    (At equal epochs a larger batch finishes sooner: charging a miss its own total time would make
    missing the target look fast.) Every time comparison of the project reads times through this
    function; ``summary`` must hold the whole cell, since tau is read from it."""
    return summary["time_to_target_s"].astype(float).fillna(horizon(summary))


def ratio_cells(per_run: pd.DataFrame, keys: list[str], num: str, den: str) -> list[pd.Series]:
    """Per group of ``keys``: the per-seed ratios of censored times (:func:`censored_time`) ``num`` /
    ``den``, indexed by seed; none when either policy is absent."""
    t = stats.paired(per_run, censored_time(per_run), keys)
    if num not in t.columns or den not in t.columns:
        return []
    r = t[num] / t[den]
    return [g.droplevel(list(range(len(keys)))) for _, g in r.groupby(level=list(range(len(keys))), sort=False)]


def at_levels(per_run: pd.DataFrame, runs: pd.DataFrame, levels, fraction: float) -> pd.DataFrame:
    """``per_run`` once per target level (column ``level``), with ``target_accuracy`` and
    ``time_to_target_s`` read at that level from each run's windows in ``runs`` (by ``run_id``).

    A level is a fraction of the best policy's mean final accuracy, like ``fraction``, the level of
    ``per_run``'s own targets, so a level's target is ``target_accuracy`` x level / fraction: the
    same best policy sets every level. A time to target is the crossing of a knife edge (the first
    learning-rate drop lets runs of a few hundred samples over it, larger ones only later or never);
    reading it at several levels shows whether a comparison depends on where the edge was put."""
    windows = dict(tuple(runs.groupby("run_id", sort=False)))
    parts = []
    for level in sorted({float(fraction), *map(float, levels)}):
        part = per_run.assign(level=level, target_accuracy=per_run["target_accuracy"] * level / fraction)
        part["time_to_target_s"] = [time_to_target(windows[rid], t) if rid in windows else math.nan
                                    for rid, t in zip(part["run_id"], part["target_accuracy"])]
        parts.append(part)
    return pd.concat(parts, ignore_index=True)
