"""The compression stage's figure: the policies with and without lossless compression, per cluster."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from dynamix.plots.bars import bar_panel
from dynamix.plots.style import legend_outside, save


def compression(agg: pd.DataFrame, ratios: pd.DataFrame, stem: str | Path, tie_band: tuple[float, float]) -> plt.Figure:
    """Policies with and without lossless compression, one row of panels per cluster: time to target
    and the mean global batch each policy runs at (bars: mean over seeds, 95% t interval, side by side
    per compression), and each policy's time with compression over its time without (geometric mean
    over seeds, t interval on the logs; shaded: the tie band; runs that missed the target, counted at
    their budget, are named: their ratio is a bound)."""
    clusters = list(dict.fromkeys(agg["cluster"]))
    fig, axes = plt.subplots(len(clusters), 3, figsize=(13, 3.6 * len(clusters)), squeeze=False)
    for row, name in zip(axes, clusters):
        data = agg[agg["cluster"] == name]
        budget = "total_time_s" if "total_time_s" in data else None
        bar_panel(row[0], data, "policy", "time_to_target_s", "time to target accuracy (s, virtual)",
                   hue="compression", budget=budget)
        row[0].set_title(f"Time to target ({name})")
        bar_panel(row[1], data, "policy", "mean_global_batch", "mean global batch (samples)", hue="compression")
        row[1].set_title(f"Batch size chosen ({name})")
        r = ratios[ratios["cluster"] == name].reset_index(drop=True)
        ax = row[2]
        ax.axvspan(*tie_band, color="0.85", lw=0, label="tie band")
        ax.axvline(1.0, color="black", lw=0.8)
        err = np.vstack([r["ratio"] - r["ci_lo"], r["ci_hi"] - r["ratio"]]).clip(min=0)
        ax.errorbar(r["ratio"], r.index, xerr=err, fmt="o", capsize=3, color="tab:green",
                    label="lhc / none (geometric mean, 95% t interval)")
        for i, q in r.iterrows():  # a censored time makes the ratio a bound (docs/protocol.md)
            missed = [f"{int(q[f'unreached_{c}'])} {c}" for c in ("lhc", "none") if q[f"unreached_{c}"] > 0]
            if missed:
                ax.annotate(f"unreached: {', '.join(missed)} (a bound)", (q["ratio"], i), textcoords="offset points",
                            xytext=(0, 5), ha="center", fontsize="x-small")
        ax.set_yticks(r.index, r["policy"])
        ax.invert_yaxis()
        ax.set_xlim(left=0.0, right=max(1.1 * tie_band[1], 1.05 * float(r["ci_hi"].max())))
        ax.set_xlabel("time to target with lhc / without (ratio)")
        ax.set_title(f"What compression saves ({name})")
    legend_outside(fig, axes, title="compression")
    return save(fig, stem)
