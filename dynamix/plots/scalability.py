"""The scalability stage's figure: time to target and throughput against the number of workers."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from dynamix.plots.bars import mark_unreached
from dynamix.plots.style import legend_outside, save


def scalability(agg: pd.DataFrame, stem: str | Path) -> plt.Figure:
    """Time to target and cluster throughput against the number of workers, one line per policy."""
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    markers = ["o", "s", "^", "D", "v", "P", "X", "*"]
    for i, (policy, sub) in enumerate(agg.groupby("policy", sort=False)):
        sub = sub.sort_values("n_workers")
        for ax, y in zip(axes, ("time_to_target_s", "throughput_samples_per_s")):
            err = np.vstack([sub[y] - sub[f"{y}_lo"], sub[f"{y}_hi"] - sub[y]]).clip(min=0)
            line = ax.errorbar(sub["n_workers"], sub[y], yerr=err, marker=markers[i % len(markers)],
                               capsize=3, ls=["-", "--", "-.", ":"][i % 4], label=policy)
            if y == "time_to_target_s":
                budget = "total_time_s" if "total_time_s" in sub else None
                mark_unreached(ax, sub["n_workers"], sub, y, budget, line[0].get_color(), text=False)
    for ax, ylabel in zip(axes, ("time to target accuracy (s, virtual)", "cluster throughput (samples/s)")):
        ax.set_xscale("log", base=2)
        ticks = sorted(agg["n_workers"].unique())
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.set_xlabel("workers")
        ax.set_ylabel(ylabel)
    legend_outside(fig, axes, title="policy (mean, 95% t interval)")
    axes[0].set_title("Scalability: time to target")
    axes[1].set_title("Scalability: throughput")
    return save(fig, stem)
