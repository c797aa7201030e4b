"""Accuracy against time: each seed's runs on one time grid (:func:`on_time_grid`), policies whose runs
are identical named together (:func:`same_runs`), the mean line with a bootstrap band over seeds
(:func:`curves_figure`). Drawn by the baselines and inference figures."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns


def on_time_grid(curves: pd.DataFrame, keys: list[str], points: int = 60) -> pd.DataFrame:
    """Test accuracy of each run (``keys`` + ``seed``) resampled onto one time grid per ``keys``
    group, holding the last evaluation (step interpolation), so seeds can be averaged at equal times.

    Columns: ``keys``, ``seed``, ``elapsed_s``, ``test_acc``. Runs with no evaluation are dropped.
    """
    curves = curves.dropna(subset=["test_acc"])
    rows = []
    for key, group in curves.groupby(keys, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        grid = np.linspace(0.0, float(group["elapsed_s"].max()), points)
        for seed, run in group.groupby("seed", sort=False):
            run = run.sort_values("elapsed_s")
            idx = np.searchsorted(run["elapsed_s"].to_numpy(), grid, side="right") - 1
            acc = np.where(idx >= 0, run["test_acc"].to_numpy()[np.clip(idx, 0, None)], np.nan)
            keep = grid <= float(run["elapsed_s"].max())
            rows.append(pd.DataFrame({**dict(zip(keys, key)), "seed": seed, "elapsed_s": grid[keep], "test_acc": acc[keep]}))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=keys + ["seed", "elapsed_s", "test_acc"])


def same_runs(curves: pd.DataFrame, hue: str, others: list[str]) -> dict[str, str]:
    """Values of ``hue`` whose runs are identical to an earlier value's (every ``others`` group and
    seed: the same evaluation times and accuracies), e.g. ``{"ramp": "static:64"}`` for a ramp that
    never ramps within the budget. Their lines would hide each other."""
    cols = others + ["seed", "elapsed_s", "test_acc"]
    first: dict[str, str] = {}
    out = {}
    for value, group in curves.groupby(hue, sort=False):
        key = group[cols].sort_values(cols[:-1]).to_csv(index=False) if len(group) else repr(value)
        if key in first:
            out[value] = first[key]
        else:
            first[key] = value
    return out


def curves_figure(curves: pd.DataFrame, hue: str, col: str | None, title: str) -> plt.Figure:
    """Mean test accuracy over seeds against time, one line per ``hue`` (colour, dash and marker
    differ), a 95% bootstrap band over seeds around it, one panel per ``col``."""
    keys = [hue] + ([col] if col else [])
    dup = same_runs(curves.dropna(subset=["test_acc"]), hue, [col] if col else [])
    grid = on_time_grid(curves, keys)
    grid = grid.assign(test_acc_pct=100 * grid["test_acc"])
    grid[hue] = [f"{v} (same runs as {dup[v]})" if v in dup else v for v in grid[hue]]
    g = sns.relplot(
        data=grid, x="elapsed_s", y="test_acc_pct", hue=hue, style=hue, markers=True, dashes=True, col=col,
        kind="line", errorbar=("ci", 95), height=3.2, aspect=1.3, facet_kws={"sharex": False},
        markevery=6, markersize=5, legend="full", seed=0,
    )  # fmt: skip
    g.set_axis_labels("training time (s, virtual)", "test accuracy (%)")
    g.figure.suptitle(f"{title} (band: 95% CI over seeds)", y=1.02)
    return g.figure
