"""The baselines stage's figures: the static sweep's accuracy against time and its throughput."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from dynamix.plots.curves import curves_figure
from dynamix.plots.style import save


def baselines_accuracy_vs_time(curves: pd.DataFrame, stem: str | Path) -> plt.Figure:
    """Static sweep: test accuracy against (virtual) training time, one line per batch size."""
    return save(curves_figure(curves, "policy", None, "Static batch sizes: accuracy vs time"), stem)


def baselines_throughput_vs_batch(agg: pd.DataFrame, stem: str | Path) -> plt.Figure:
    """Static sweep: cluster throughput (samples/s) against the per-worker batch size."""
    fig, ax = plt.subplots(figsize=(4.5, 3.4))
    err = np.vstack(
        [agg["throughput_samples_per_s"] - agg["throughput_samples_per_s_lo"],
         agg["throughput_samples_per_s_hi"] - agg["throughput_samples_per_s"]]
    ).clip(min=0)  # fmt: skip
    ax.errorbar(agg["batch_size"], agg["throughput_samples_per_s"], yerr=err, marker="o", capsize=3)
    ax.set_xscale("log", base=2)
    ax.set_xticks(agg["batch_size"], [str(b) for b in agg["batch_size"]])
    ax.set_xlabel("per-worker batch size (samples)")
    ax.set_ylabel("cluster throughput (samples/s)")
    ax.set_title("Static batch sizes: throughput (mean, 95% t interval over seeds)")
    return save(fig, stem)
