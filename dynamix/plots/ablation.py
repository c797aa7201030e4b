"""The ablation stage's figure: each step's time to target over the median static, per cluster."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from dynamix.plots.style import legend_outside, save


def ablation(compared: pd.DataFrame, order: list[str], stem: str | Path, bar: float = 0.7) -> plt.Figure:
    """Ablation: time to target over the median static's, per policy (the ladder's steps in order, then
    the baselines), one point per cluster, held-out and validation side by side; the bar and parity
    as lines."""
    splits = [s for s in ("heldout", "validation") if (compared["split"] == s).any()]
    fig, axes = plt.subplots(1, len(splits), figsize=(5.5 * len(splits), 3.6), sharey=True, squeeze=False)
    for ax, split in zip(axes[0], splits):
        rows = compared[compared["split"] == split]
        sns.stripplot(data=rows, x="policy", y="ratio_vs_median_static", order=[p for p in order if p in set(rows["policy"])],
                      hue="cluster" if split == "heldout" else None, color=None if split == "heldout" else "0.4",
                      dodge=False, jitter=0.15, size=5, ax=ax)
        means = rows.groupby("policy")["ratio_vs_median_static"].mean()
        xs = [p for p in order if p in means.index]
        ax.scatter(range(len(xs)), [means[p] for p in xs], marker="_", s=400, color="black", zorder=3, label="mean")
        ax.axhline(bar, color="tab:red", ls="--", lw=1)
        ax.axhline(1.0, color="0.5", ls=":", lw=1)
        ax.set_xlabel("")
        ax.set_ylabel("time to target / median static")
        ax.set_title(f"{split} ({rows['cluster'].nunique()} clusters)")
        ax.tick_params(axis="x", rotation=35)
    legend_outside(fig, axes)
    return save(fig, stem)
