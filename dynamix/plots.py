"""One function per figure; each saves ``<stem>.png`` and ``<stem>.pdf`` and returns the Figure.

Inputs are the tidy tables the experiments write (``runs.csv`` curves, ``summary.csv`` aggregates),
so a figure can be redrawn from results without rerunning anything. Every axis names its unit;
intervals are the bootstrap 95% intervals over seeds from :func:`dynamix.experiments.common.aggregate`
(bars), or seaborn's bootstrap band over seeds on a common time grid (curves).

PNG is what DVC's plots and the README show (DVC's HTML renderer needs a CDN; PNGs do not); PDF is
for papers.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

log = logging.getLogger(__name__)

sns.set_theme(context="paper", style="whitegrid")


def save(fig: plt.Figure, stem: str | Path) -> plt.Figure:
    """Write ``stem.png`` (150 dpi) and ``stem.pdf``; parents are created."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(stem.with_suffix(".png"), dpi=150, bbox_inches="tight")
    fig.savefig(stem.with_suffix(".pdf"), bbox_inches="tight")
    log.info("figure %s.{png,pdf}", stem)
    return fig


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


def _curves_figure(curves: pd.DataFrame, hue: str, col: str | None, title: str) -> plt.Figure:
    keys = [hue] + ([col] if col else [])
    grid = on_time_grid(curves, keys)
    grid = grid.assign(test_acc_pct=100 * grid["test_acc"])
    g = sns.relplot(
        data=grid, x="elapsed_s", y="test_acc_pct", hue=hue, col=col, kind="line", errorbar=("ci", 95),
        height=3.2, aspect=1.3, facet_kws={"sharex": False},
    )  # fmt: skip
    g.set_axis_labels("training time (s, virtual)", "test accuracy (%)")
    g.figure.suptitle(title, y=1.02)
    return g.figure


def _bars_figure(
    agg: pd.DataFrame, x: str, y: str, ylabel: str, title: str, hue: str | None = None, col: str | None = None
) -> plt.Figure:
    """Bars of ``y`` with its ``y_lo``/``y_hi`` interval, one panel per ``col`` value."""
    panels = [None] if col is None else list(dict.fromkeys(agg[col]))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        data = agg if panel is None else agg[agg[col] == panel]
        xs = list(dict.fromkeys(data[x]))
        hues = [None] if hue is None else list(dict.fromkeys(data[hue]))
        width = 0.8 / len(hues)
        for j, h in enumerate(hues):
            sub = data if h is None else data[data[hue] == h]
            sub = sub.set_index(x).reindex(xs)
            pos = np.arange(len(xs)) + (j - (len(hues) - 1) / 2) * width
            err = np.vstack([sub[y] - sub[f"{y}_lo"], sub[f"{y}_hi"] - sub[y]]).clip(min=0)
            ax.bar(pos, sub[y], width, yerr=err, capsize=3, label=None if h is None else str(h))
        ax.set_xticks(np.arange(len(xs)), [str(v) for v in xs], rotation=30, ha="right")
        ax.set_xlabel(x.replace("_", " "))
        ax.set_ylabel(ylabel)
        ax.set_title(title if panel is None else f"{title} ({col} = {panel})")
        if hue is not None:
            ax.legend(title=hue, fontsize="small")
    return fig


# --------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------


def baselines_accuracy_vs_time(curves: pd.DataFrame, stem: str | Path) -> plt.Figure:
    """Static sweep: test accuracy against (virtual) training time, one line per batch size."""
    return save(_curves_figure(curves, "policy", None, "Static batch sizes: accuracy vs time"), stem)


def baselines_throughput_vs_batch(agg: pd.DataFrame, stem: str | Path) -> plt.Figure:
    """Static sweep: cluster throughput (samples/s) against the per-worker batch size."""
    fig, ax = plt.subplots(figsize=(4.5, 3.4))
    err = np.vstack(
        [agg["throughput_samples_per_s"] - agg["throughput_samples_per_s_lo"],
         agg["throughput_samples_per_s_hi"] - agg["throughput_samples_per_s"]]
    ).clip(min=0)  # fmt: skip
    ax.errorbar(agg["batch_size"], agg["throughput_samples_per_s"], yerr=err, marker="o", capsize=3, label="static")
    ax.set_xscale("log", base=2)
    ax.set_xticks(agg["batch_size"], [str(b) for b in agg["batch_size"]])
    ax.set_xlabel("per-worker batch size (samples)")
    ax.set_ylabel("cluster throughput (samples/s)")
    ax.set_title("Static batch sizes: throughput")
    ax.legend()
    return save(fig, stem)


def reward_curve(progress: pd.DataFrame, stem: str | Path, window: int = 5) -> plt.Figure:
    """Policy training: cumulative reward per episode (mean over workers of each worker's return),
    raw and a rolling mean over ``window`` episodes (``progress``: :mod:`dynamix.rl.train`'s CSV)."""
    fig, ax = plt.subplots(figsize=(5, 3.4))
    ep = progress["episode"]
    r = progress["return"]
    ax.plot(ep, r, alpha=0.35, label="per episode")
    ax.plot(ep, r.rolling(window, min_periods=1).mean(), label=f"rolling mean ({window} episodes)")
    ax.set_xlabel("episode")
    ax.set_ylabel("cumulative reward (a.u.)")
    ax.set_title("DYNAMIX policy training")
    ax.legend()
    return save(fig, stem)


def inference_accuracy_vs_time(curves: pd.DataFrame, stem: str | Path, cluster: str = "") -> plt.Figure:
    """DYNAMIX vs baselines: test accuracy against time on one cluster, one panel per optimiser."""
    return save(_curves_figure(curves, "policy", "optimizer", f"Accuracy vs time {cluster}".strip()), stem)


def inference_time_to_target(agg: pd.DataFrame, stem: str | Path) -> plt.Figure:
    """DYNAMIX vs baselines: time to the target accuracy (IQM over seeds, 95% bootstrap interval)."""
    fig = _bars_figure(agg, "policy", "time_to_target_s", "time to target accuracy (s, virtual)", "Time to target",
                       hue="cluster", col="optimizer")
    return save(fig, stem)


def inference_final_accuracy(agg: pd.DataFrame, stem: str | Path) -> plt.Figure:
    """DYNAMIX vs baselines: final test accuracy (%), IQM over seeds with 95% interval."""
    agg = agg.assign(**{c: 100 * agg[c] for c in ("final_accuracy", "final_accuracy_lo", "final_accuracy_hi")})
    fig = _bars_figure(agg, "policy", "final_accuracy", "final test accuracy (%)", "Final accuracy",
                       hue="cluster", col="optimizer")
    return save(fig, stem)


def engine_batch_sizes(runs: pd.DataFrame, stem: str | Path) -> plt.Figure:
    """End-to-end engine run: each worker's batch size per window as decided through the arbitrator."""
    fig, ax = plt.subplots(figsize=(5, 3.4))
    for rank, sub in runs.groupby("rank"):
        ax.step(sub["iteration"], sub["batch_size"], where="post", label=f"rank {rank} (speed {sub['speed'].iloc[0]:.2g})")
    ax.set_xlabel("iteration")
    ax.set_ylabel("batch size (samples)")
    ax.set_title("Engine + gRPC arbitrator: decided batch sizes")
    ax.legend(fontsize="small")
    return save(fig, stem)


def scalability(agg: pd.DataFrame, stem: str | Path) -> plt.Figure:
    """Time to target and cluster throughput against the number of workers, one line per policy."""
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for policy, sub in agg.groupby("policy", sort=False):
        sub = sub.sort_values("n_workers")
        for ax, y in zip(axes, ("time_to_target_s", "throughput_samples_per_s")):
            err = np.vstack([sub[y] - sub[f"{y}_lo"], sub[f"{y}_hi"] - sub[y]]).clip(min=0)
            ax.errorbar(sub["n_workers"], sub[y], yerr=err, marker="o", capsize=3, label=policy)
    for ax, ylabel in zip(axes, ("time to target accuracy (s, virtual)", "cluster throughput (samples/s)")):
        ax.set_xscale("log", base=2)
        ticks = sorted(agg["n_workers"].unique())
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.set_xlabel("workers")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize="small")
    axes[0].set_title("Scalability: time to target")
    axes[1].set_title("Scalability: throughput")
    return save(fig, stem)


def transfer(agg: pd.DataFrame, stem: str | Path) -> plt.Figure:
    """Transfer: time to target on each target workload for the transferred policy, a policy trained
    on the target, and the static baseline."""
    fig = _bars_figure(agg, "pair", "time_to_target_s", "time to target accuracy (s, virtual)", "Policy transfer", hue="policy")
    return save(fig, stem)


def calibration(table: pd.DataFrame, stem: str | Path) -> plt.Figure:
    """Calibration: measured median compute time per iteration against batch size, per model, with the
    fitted line t(b) = a + c b (``table``: prepare's summary.csv, JSON lists in two columns)."""
    fig, ax = plt.subplots(figsize=(5, 3.4))
    for row in table.itertuples():
        b = np.asarray(json.loads(row.batch_sizes), float)
        t = np.asarray(json.loads(row.median_ms), float)
        (line,) = ax.plot(b, t, "o", label=f"{row.model} (w {row.width:g}), R² = {row.r2:.3f}")
        grid = np.linspace(0, b.max(), 50)
        ax.plot(grid, row.a_ms + row.c_ms_per_sample * grid, "-", color=line.get_color(), alpha=0.7)
    ax.set_xlabel("batch size (samples)")
    ax.set_ylabel("compute time per iteration (ms)")
    ax.set_title("Simulator calibration: t(b) = a + c·b")
    ax.legend(fontsize="small")
    return save(fig, stem)


def claims(per_config: pd.DataFrame, paper: dict[str, float], stem: str | Path) -> plt.Figure:
    """DYNAMIX vs the median static batch size per held-out cluster and optimiser: final-accuracy gain
    (points) and time-to-target reduction (%), IQM over seeds with 95% intervals; dashed: the paper."""
    labels = {"accuracy_gain_pts": "final-accuracy gain (points)", "time_reduction_pct": "time-to-target reduction (%)"}
    fig, axes = plt.subplots(1, 2, figsize=(9, 0.5 * per_config["cluster"].nunique() * 2 + 2.2))
    for ax, (metric, label) in zip(axes, labels.items()):
        sub = per_config[per_config["metric"] == metric].reset_index(drop=True)
        y = np.arange(len(sub))
        err = np.vstack([sub["estimate"] - sub["ci_lo"], sub["ci_hi"] - sub["estimate"]]).clip(min=0)
        ax.errorbar(sub["estimate"], y, xerr=err, fmt="o", capsize=3, label="ours")
        ax.axvline(paper[metric], ls="--", color="grey", label=f"paper: up to {paper[metric]:g}")
        ax.axvline(0, color="black", lw=0.8)
        ax.set_yticks(y, [f"{c}\n{o}" for c, o in zip(sub["cluster"], sub["optimizer"])])
        ax.set_xlabel(label)
        ax.legend(fontsize="small")
    axes[0].set_title("DYNAMIX vs static: accuracy")
    axes[1].set_title("DYNAMIX vs static: time to target")
    return save(fig, stem)
