"""Per-run readings of runs.csv rows: final accuracy, duration, iterations, batch and throughput.

A runs.csv frame has one row per (window, rank) (:data:`~dynamix.metrics.schema.RUNS_COLUMNS`); every
reading here first keeps one row per window. Time to target is not here: it needs a target, set across
runs (:mod:`dynamix.evaluation.targets`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd


def run_totals(frame: pd.DataFrame) -> dict:
    """One run's final accuracy, total (virtual) time, iterations and mean global batch.

    ``mean_global_batch`` weights each window's global batch by its iterations.
    """
    per_window = frame.drop_duplicates("window")
    acc = per_window["test_acc"].dropna()
    return {
        "final_accuracy": float(acc.iloc[-1]) if len(acc) else math.nan,
        "total_time_s": float(per_window["elapsed_s"].iloc[-1]),
        "iterations": int(per_window["iteration"].iloc[-1]),
        "mean_global_batch": float(np.average(per_window["global_batch"],
                                              weights=per_window["iteration"].diff().fillna(per_window["iteration"]))),
    }


def run_summary(runs: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One row per run (``run_id``) of a runs.csv frame, with ``keys`` and ``seed`` and:

    - ``final_accuracy``: the last test accuracy evaluated (fraction in [0, 1]);
    - ``total_time_s``: the run's (virtual) duration;
    - ``iterations``, ``epochs``: the optimiser steps taken and the epochs of the training set seen;
    - ``throughput_samples_per_s``: samples processed over the whole run / total_time_s, where a
      window contributes global_batch x (iterations in that window);
    - ``clamped`` (when ``runs`` has that column, :func:`dynamix.evaluation.runner.simulate_task`): the
      policy could not run as its spec asked (e.g. a global batch beyond n x bounds).
    """
    rows = []
    for rid, run in runs.groupby("run_id", sort=False):
        w = run.drop_duplicates("window").sort_values("window")
        iters = w["iteration"].diff().fillna(w["iteration"].iloc[0])
        total_s = float(w["elapsed_s"].iloc[-1])
        acc = w["test_acc"].dropna()
        row = {"run_id": rid, **{k: w[k].iloc[0] for k in keys}, "seed": int(w["seed"].iloc[0])}
        row["final_accuracy"] = float(acc.iloc[-1]) if len(acc) else math.nan
        row["total_time_s"] = total_s
        row["iterations"] = int(w["iteration"].iloc[-1])
        row["epochs"] = float(w["epoch"].iloc[-1])
        row["throughput_samples_per_s"] = float((w["global_batch"] * iters).sum()) / total_s if total_s > 0 else math.nan
        if "clamped" in w:
            row["clamped"] = bool(w["clamped"].any())
        rows.append(row)
    return pd.DataFrame(rows)


PLATEAU_FRACTION = 0.2
"""The "last fifth" of a run over which a converged run may gain little (:func:`late_gain_pts`)."""


def late_gain_pts(run: pd.DataFrame, fraction: float = PLATEAU_FRACTION, smooth: int = 3) -> float:
    """Test accuracy a run gained over its last ``fraction`` of iterations, in points: the mean of its
    last ``smooth`` tests minus the mean of the ``smooth`` tests up to (1 - fraction) of its iterations.
    Averaging a few tests keeps one test's noise (+-1.1 points on 2,000 images) from deciding it.
    NaN when the run has fewer than 2 ``smooth`` tests."""
    w = run.drop_duplicates("window").sort_values("window").dropna(subset=["test_acc"])
    w = w.drop_duplicates("iteration")  # a test is repeated on the windows until the next one
    if len(w) < 2 * smooth:
        return float("nan")
    cut = (1.0 - fraction) * float(w["iteration"].iloc[-1])
    early = w[w["iteration"] <= cut]["test_acc"].tail(smooth)
    if len(early) < smooth:
        return float("nan")
    return 100.0 * (float(w["test_acc"].tail(smooth).mean()) - float(early.mean()))


def floor_cost(run: pd.DataFrame, floor: int) -> dict:
    """What the per-worker floor costs one run's balance (docs/protocol.md, the oracle bound).

    Per window, from each worker's batch b_i and compute time t_i (its rate r_i = b_i / t_i samples/ms):
    the compute time a split free of the floor would give, T* = B / sum_i r_i (every worker busy for the
    same time), against the slowest worker's, max_i t_i. ``floored``: the share of windows with a worker
    at ``floor``; ``lost``: sum over windows of (max_i t_i - T*) / sum of iteration times, the share of
    the run's time the imbalance left by the floor (and the split's rounding) costs; ``wait``: the mean
    barrier-wait share of the workers' iteration times. Fixed per-iteration costs are counted as compute,
    so T* is a bound, not a schedule."""
    w = run.assign(rate=run["batch_size"] / run["compute_ms"].clip(lower=1e-9)).groupby("window")
    ideal = w["batch_size"].sum() / w["rate"].sum()
    lost = (w["compute_ms"].max() - ideal).clip(lower=0.0)
    return {"floored": float((w["batch_size"].min() <= floor).mean()),
            "lost": float(lost.sum() / w["iter_time_ms"].first().sum()),
            "wait": float(run["wait_ms"].sum() / run["iter_time_ms"].sum())}


def curves(runs: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per (keys, window): elapsed time, test accuracy and cluster throughput (sum over ranks).

    ``runs`` is a runs.csv frame (one row per window and rank); the result has one row per window
    with ``elapsed_s``, ``test_acc``, ``global_batch``, ``epoch``, ``iter_time_ms`` (the slowest rank)
    and ``throughput_samples_per_s``.
    """
    g = runs.groupby(keys + ["window"], sort=False)
    return g.agg(
        elapsed_s=("elapsed_s", "first"),
        epoch=("epoch", "first"),
        test_acc=("test_acc", "first"),
        global_batch=("global_batch", "first"),
        iter_time_ms=("iter_time_ms", "max"),
        throughput_samples_per_s=("throughput_samples_per_s", "sum"),
    ).reset_index()
