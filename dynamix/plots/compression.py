"""The compression stage's figures: the policies with and without lossless compression per workload and
cluster, and each workload's gradient density and bytes per iteration by batch size."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from dynamix.plots.bars import bar_panel
from dynamix.plots.style import legend_outside, save


def compression(agg: pd.DataFrame, ratios: pd.DataFrame, stem: str | Path, tie_band: tuple[float, float]) -> plt.Figure:
    """Policies with and without lossless compression, one row of panels per workload and cluster: time
    to target and the mean global batch each policy runs at (bars: mean over seeds, 95% t interval, side
    by side per compression), and each policy's time with compression over its time without (geometric
    mean over seeds, t interval on the logs; shaded: the tie band; runs that missed the target, counted
    at their budget, are named: their ratio is a bound). A static cluster's row has the static policies
    alone."""
    cells = list(dict.fromkeys(zip(agg["workload"], agg["cluster"])))
    fig, axes = plt.subplots(len(cells), 3, figsize=(13, 3.6 * len(cells)), squeeze=False)
    for row, (workload, name) in zip(axes, cells):
        where = f"{workload}, {name}"
        data = agg[(agg["workload"] == workload) & (agg["cluster"] == name)]
        budget = "total_time_s" if "total_time_s" in data else None
        bar_panel(row[0], data, "policy", "time_to_target_s", "time to target accuracy (s, virtual)",
                   hue="compression", budget=budget)
        row[0].set_title(f"Time to target ({where})")
        bar_panel(row[1], data, "policy", "mean_global_batch", "mean global batch (samples)", hue="compression")
        row[1].set_title(f"Batch size chosen ({where})")
        r = ratios[(ratios["workload"] == workload) & (ratios["cluster"] == name)].reset_index(drop=True)
        ax = row[2]
        ax.axvspan(*tie_band, color="0.85", lw=0, label="tie band")
        ax.axvline(1.0, color="black", lw=0.8)
        err = np.vstack([r["ratio"] - r["ci_lo"], r["ci_hi"] - r["ratio"]]).clip(min=0)
        ax.errorbar(r["ratio"], r.index, xerr=np.nan_to_num(err), fmt="o", capsize=3, color="tab:green",
                    label="lhc / none (geometric mean, 95% t interval)")
        for i, q in r.iterrows():  # a censored time makes the ratio a bound (docs/protocol.md)
            missed = [f"{int(q[f'unreached_{c}'])} {c}" for c in ("lhc", "none") if q[f"unreached_{c}"] > 0]
            if missed:
                ax.annotate(f"unreached: {', '.join(missed)} (a bound)", (q["ratio"], i), textcoords="offset points",
                            xytext=(0, 5), ha="center", fontsize="x-small")
        ax.set_yticks(r.index, r["policy"])
        ax.invert_yaxis()
        hi = np.nanmax([float(r["ci_hi"].max()), float(r["ratio"].max())])
        ax.set_xlim(left=0.0, right=max(1.1 * tie_band[1], 1.05 * hi))
        ax.set_xlabel("time to target with lhc / without (ratio)")
        ax.set_title(f"What compression saves ({where})")
    legend_outside(fig, axes, title="compression")
    return save(fig, stem)


def density(table: pd.DataFrame, stem: str | Path) -> plt.Figure:
    """Per workload (one line each; one style per worker count): the fraction of the gradient that is
    non-zero, one worker's and the workers' merged support (what LHC's sketch carries), and the MB one
    worker sends per iteration without and with LHC (the static runs' mean), against the batch size per
    worker (log scales)."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), squeeze=False)
    dens, sent = axes[0]
    colors = dict(zip(dict.fromkeys(table["workload"]), plt.rcParams["axes.prop_cycle"].by_key()["color"] * 4))
    for (workload, workers), rows in table.groupby(["workload", "workers"], sort=False):
        rows = rows.sort_values("batch_per_worker")
        x, c = rows["batch_per_worker"], colors[workload]
        dens.plot(x, rows["density_merged"], "o-", color=c, label=f"{workload}: merged over {workers} workers")
        dens.plot(x, rows["density_worker"], "o--", color=c, label=f"{workload}: one worker")
        sent.plot(x, rows["comm_mb_per_iter_none"], "s:", color=c, label=f"{workload}: none ({workers} workers)")
        sent.plot(x, rows["comm_mb_per_iter_lhc"], "o-", color=c, label=f"{workload}: lhc ({workers} workers)")
    for ax in (dens, sent):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch per worker (samples)")
    dens.set_ylabel("gradient elements non-zero (fraction)")
    dens.set_title("Gradient density")
    sent.set_ylabel("MB one worker sends per iteration")
    sent.set_title("Bytes on the wire (static runs)")
    for ax in (dens, sent):
        ax.legend(fontsize="x-small")
    return save(fig, stem)
