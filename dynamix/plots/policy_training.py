"""The policy-training stage's figure: the reward per episode, the warm start's teacher before PPO."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from dynamix.plots.style import legend_below, save


MAX_POINTS = 400
"""Episodes drawn per training seed at most (every k-th, k well inside the rolling window of a fortieth)."""


def reward_curve(progress: pd.DataFrame, stem: str | Path, window: int = 0,
                 teacher: pd.DataFrame | None = None) -> plt.Figure:
    """Policy training: cumulative reward per episode (mean over workers of each worker's return).

    ``progress``: PPO's episodes (:mod:`dynamix.rl.learn`'s CSV). Episodes run on randomised clusters,
    so single returns scatter widely: each training seed's returns are smoothed by a rolling mean over
    ``window`` episodes (0: a fortieth of the episodes, at least 5) before anything is drawn. A
    ``seed`` column with several training seeds gives the mean of the smoothed curves over seeds and
    a 95% bootstrap band over them; one seed, its raw returns behind the smoothed curve and the rolling
    interquartile range as the band. ``teacher``: the LB-BSP teacher's episodes of the imitation phase
    (episodes -n..-1, before PPO's 0), shaded apart, and their mean return as a horizontal reference.
    The legend sits beneath the panel, which keeps the figure's whole width for the curve.
    """
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    if teacher is not None and len(teacher):
        ax.axvspan(teacher["episode"].min() - 0.5, -0.5, color="tab:orange", alpha=0.08, lw=0)
        ax.plot(teacher["episode"], teacher["return"], ".", color="tab:orange", alpha=0.6,
                label="LB-BSP teacher's episodes (imitation phase)")
        ax.axhline(teacher["return"].mean(), color="tab:orange", ls="--", lw=1.2,
                   label=f"teacher's mean return ({teacher['return'].mean():.2f})")
    if len(progress):
        ax.axvspan(-0.5, progress["episode"].max() + 0.5, color="tab:blue", alpha=0.05, lw=0)
    seeds = progress["seed"].nunique() if "seed" in progress else 1
    per_seed = progress.groupby("seed")["episode"].nunique().min() if "seed" in progress else len(progress)
    window = window or max(5, int(per_seed) // 40)
    if seeds > 1:
        smooth = progress.sort_values(["seed", "episode"]).assign(
            smoothed=lambda d: d.groupby("seed")["return"].transform(lambda r: r.rolling(window, min_periods=1).mean()))
        # the band is bootstrapped at every drawn episode: at most MAX_POINTS of them, a step well inside
        # the rolling window, so a run of 10^4-10^5 short episodes draws in seconds and looks the same
        step = max(1, int(per_seed) // MAX_POINTS)
        smooth = smooth[smooth["episode"] % step == 0]
        label = f"PPO: rolling mean of {window} episodes,\nmean of {seeds} training seeds (band: 95% CI)"
        sns.lineplot(data=smooth, x="episode", y="smoothed", errorbar=("ci", 95), seed=0, ax=ax,
                     color="tab:blue", label=label)
    elif len(progress):
        ep, r = progress["episode"], progress["return"]
        roll = r.rolling(window, min_periods=1)
        ax.plot(ep, r, alpha=0.3, color="tab:blue", label="PPO: per episode")
        ax.plot(ep, roll.mean(), color="tab:blue", label=f"PPO: rolling mean of {window} episodes")
        ax.fill_between(ep, roll.quantile(0.25), roll.quantile(0.75), color="tab:blue", alpha=0.2, lw=0,
                        label="rolling interquartile range (one training seed)")
    ax.axvline(-0.5, color="0.3", lw=0.8)
    ax.set_xlabel("episode (negative: imitation phase; 0 on: PPO)")
    ax.set_ylabel("cumulative reward (a.u.)")
    ax.set_title("DYNAMIX policy training: reward per episode")
    legend_below(fig, ax, ncol=2)
    return save(fig, stem)
