"""The inference stage's figures: accuracy against time, time to target per held-out cluster, final
accuracy, and the batch sizes the engine run's arbitrator decided."""

from __future__ import annotations

from pathlib import Path

import matplotlib.lines as mlines
import matplotlib.patches as mpatches
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from dynamix.plots.bars import bars_figure
from dynamix.plots.curves import curves_figure
from dynamix.plots.style import legend_outside, save


def inference_accuracy_vs_time(curves: pd.DataFrame, stem: str | Path, cluster: str = "") -> plt.Figure:
    """DYNAMIX vs baselines: test accuracy against time on one cluster, one panel per optimiser."""
    return save(curves_figure(curves, "policy", "optimizer", f"Accuracy vs time {cluster}".strip()), stem)


_FAMILY_PALETTES = {"dynamix": "Blues", "static": "Oranges", "lbbsp": "Greens", "gns": "Purples",
                    "oracle": "Greys"}
_OTHER_PALETTES = ["Reds", "YlOrBr", "PuRd", "BuGn"]


def policy_colors(policies: list[str]) -> dict[str, tuple]:
    """One colour per policy: a hue per family (the name before ``:``: DYNAMIX blue, the static sweep
    orange, LB-BSP green, GNS purple, the oracle grey) and darker-to-lighter shades of it for the
    family's variants, in the order given. Deterministic: the same list gives the same colours."""
    families: dict[str, list[str]] = {}
    for policy in policies:
        families.setdefault(str(policy).split(":")[0], []).append(policy)
    others = iter(_OTHER_PALETTES * len(families))
    colors = {}
    for family, members in families.items():
        shades = sns.color_palette(_FAMILY_PALETTES.get(family) or next(others), len(members) + 2)[2:][::-1]
        colors.update(zip(members, shades))
    return colors


_MISS_HATCH = "////"


def inference_time_to_target(agg: pd.DataFrame, stem: str | Path) -> plt.Figure:
    """DYNAMIX vs baselines: time to the target accuracy (s), one small panel per cluster (and
    optimiser), each panel on its own time axis, the policies in one order and colour down every
    panel's y axis. A solid bar is the mean over the seeds that reached the target, with its 95% t
    interval, and "k/n missed" beside it when k of the n seeds did not; a policy none of whose seeds
    reached it gets a hatched, unfilled bar to the run's length (the time it ran without reaching the
    target) and "n/n missed". The oracle's time is a dotted reference line across its panel (besides
    its own bar); its target accuracy is in the panel's title when ``agg`` has ``target_accuracy``.
    A spare grid cell holds the key; with none, the key sits right of the panels."""
    keys = ["cluster"] + (["optimizer"] if agg["optimizer"].nunique() > 1 else [])
    panels = list(dict.fromkeys(agg[keys].itertuples(index=False, name=None)))
    policies = list(dict.fromkeys(agg["policy"]))
    colors = policy_colors(policies)
    ncols = min(3, len(panels))
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.3 * ncols, 0.7 + (1.0 + 0.24 * len(policies)) * nrows),
                             squeeze=False, sharey=True)
    for ax, panel in zip(axes.flat, panels):
        sub = agg[(agg[keys].apply(tuple, axis=1)) == panel].set_index("policy").reindex(policies)
        _time_panel(ax, sub, colors)
        title = " · ".join(map(str, panel))
        if "target_accuracy" in sub and np.isfinite(sub["target_accuracy"]).any():
            title += f" (target {100 * np.nanmean(sub['target_accuracy']):.1f} % test acc.)"
        ax.set_title(title)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    axes[0, 0].set_yticks(np.arange(len(policies)), policies)  # the y axis is shared
    axes[0, 0].set_ylim(len(policies) - 0.5, -0.5)  # first policy on top
    grey = "0.35"
    key = [
        (mpatches.Patch(color=grey), "mean time over the seeds that reached the target"),
        (mlines.Line2D([], [], color="black", marker="|", ms=6, lw=0.8), "95% t interval over those seeds"),
        (mpatches.Patch(facecolor="none", edgecolor=grey, hatch=_MISS_HATCH),
         "no seed reached the target: bar to the run's length"),
        (mlines.Line2D([], [], color=colors.get("oracle", "0.2"), ls=":", lw=1.2),
         "oracle's time (reference)"),
    ][: 4 if "oracle" in colors else 3]
    keyed = {"fontsize": "small", "frameon": False, "title_fontsize": "small",
             "title": "k/n missed: k of n seeds never\nreached the target accuracy"}
    spare = axes.flat[len(panels)] if len(panels) < axes.size else None
    if spare is not None:  # the key in the grid's empty cell: no extra width
        spare.set_visible(True)
        spare.axis("off")
        spare.legend(*zip(*key), loc="center", **keyed)
    else:
        fig.legend(*zip(*key), **keyed)
    fig.suptitle("Time to target accuracy per cluster (lower is better)", fontsize="large")
    fig.tight_layout()
    return save(fig, stem)


def _time_panel(ax, sub: pd.DataFrame, colors: dict) -> None:
    """One cluster's panel of :func:`inference_time_to_target` (``sub`` indexed by policy, in order):
    bars, intervals, "k/n missed" labels beside them (never over a bar), the oracle's line."""
    y = "time_to_target_s"
    ends = []  # the right end of what each row draws: interval, or the run's length for a miss
    for i, (policy, r) in enumerate(sub.iterrows()):
        n = r.get("n_seeds", np.nan)
        reached = r.get(f"{y}_reached", 1.0 if np.isfinite(r[y]) else 0.0)
        total = r.get("total_time_s", np.nan)
        label = None
        if np.isfinite(r[y]) and reached > 0:
            lo, hi = r[y] - r[f"{y}_lo"], r[f"{y}_hi"] - r[y]
            err = [[max(lo, 0)], [max(hi, 0)]] if np.isfinite(lo) and np.isfinite(hi) else None
            ax.barh(i, r[y], 0.7, xerr=err, capsize=2, color=colors[policy], error_kw={"lw": 0.8})
            end = max(r[y], r[f"{y}_hi"]) if np.isfinite(r[f"{y}_hi"]) else r[y]
            if reached < 1 and np.isfinite(n):
                label = f"{round((1 - reached) * n):.0f}/{n:.0f} missed"
        elif np.isfinite(total):
            ax.barh(i, total, 0.7, facecolor="none", edgecolor=colors[policy], hatch=_MISS_HATCH, lw=0.8)
            end = total
            label = f"{n:.0f}/{n:.0f} missed" if np.isfinite(n) else "missed"
        else:
            continue
        ends.append(end)
        if label:
            backing = {"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8}  # over lines
            ax.annotate(label, (end, i), xytext=(3, 0), textcoords="offset points", va="center", ha="left",
                        fontsize="x-small", color="0.15", bbox=backing)
    oracle = sub.loc["oracle"] if "oracle" in sub.index else None  # dynamix.evaluation.oracle.ORACLE
    if oracle is not None and np.isfinite(oracle[y]) and oracle.get(f"{y}_reached", 1.0) > 0:
        ax.axvline(oracle[y], color=colors["oracle"], ls=":", lw=1.2, zorder=1.5)
    right = max(ends) if ends else np.nan
    ax.set_xlim(0, 1.35 * right if np.isfinite(right) and right > 0 else None)
    ax.set_xlabel("time to target (s, virtual)")


def inference_final_accuracy(agg: pd.DataFrame, stem: str | Path) -> plt.Figure:
    """DYNAMIX vs baselines: final test accuracy (%), mean over seeds with 95% t interval."""
    agg = agg.assign(**{c: 100 * agg[c] for c in ("final_accuracy", "final_accuracy_lo", "final_accuracy_hi")})
    fig = bars_figure(agg, "policy", "final_accuracy", "final test accuracy (%)", "Final accuracy",
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
    legend_outside(fig, ax)
    return save(fig, stem)
