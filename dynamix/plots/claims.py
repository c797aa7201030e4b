"""The claims stage's figure: DYNAMIX against the median and the best static batch, and the paper's values."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from dynamix.plots.style import legend_outside, save


def claims(per_config: pd.DataFrame, paper: dict[str, float], stem: str | Path) -> plt.Figure:
    """DYNAMIX against the median static batch size (circles) and the best static one (squares) per
    held-out cluster and optimiser: final-accuracy gain (points) and time-to-target reduction (%), mean
    over seeds with 95% intervals; dashed: the paper's "up to" value."""
    labels = {"accuracy_gain_pts": "final-accuracy gain (points)",
              "time_reduction_pct": "time-to-target reduction (%)"}
    if "reference" not in per_config:
        per_config = per_config.assign(reference="median static")
    cells = list(dict.fromkeys(zip(per_config["cluster"], per_config["optimizer"])))
    fig, axes = plt.subplots(1, 2, figsize=(9, 0.5 * len(cells) + 2.2))
    refs = [("median static", "o", 0.12), ("best static", "s", -0.12)]
    for ax, (metric, label) in zip(axes, labels.items()):
        for ref, marker, dy in refs:
            sub = per_config[(per_config["metric"] == metric) & (per_config["reference"] == ref)]
            if sub.empty:
                continue
            y = np.array([cells.index((c, o)) for c, o in zip(sub["cluster"], sub["optimizer"])]) + dy
            err = np.vstack([sub["estimate"] - sub["ci_lo"], sub["ci_hi"] - sub["estimate"]]).clip(min=0)
            ax.errorbar(sub["estimate"], y, xerr=err, fmt=marker, capsize=3, label=f"vs the {ref}")
        unit = "points" if metric == "accuracy_gain_pts" else "%"
        ax.axvline(paper[metric], ls="--", color="grey", label=f"paper: up to {paper[metric]:g} {unit}")
        ax.axvline(0, color="black", lw=0.8)
        ax.set_yticks(np.arange(len(cells)), [f"{c}\n{o}" for c, o in cells])
        ax.set_xlabel(label)
    axes[0].set_title("DYNAMIX vs static: accuracy")
    axes[1].set_title("DYNAMIX vs static: time to target")
    legend_outside(fig, axes, title="mean, 95% t interval over seeds")
    return save(fig, stem)
