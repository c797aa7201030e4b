"""One function per figure; each saves ``<stem>.png`` and ``<stem>.pdf`` and returns the Figure.

Inputs are the tidy tables the experiments write (``runs.csv`` curves, ``summary.csv`` aggregates),
so a figure can be redrawn from results without rerunning anything. Every axis names its unit;
intervals are the 95% t intervals over seeds from :func:`dynamix.evaluation.stats.aggregate` (bars),
or seaborn's bootstrap band over seeds on a common time grid (curves).

Legends sit outside the data (right of the panels, beneath a single wide panel, or in a grid's empty
cell), so no curve or bar hides behind one; a run that never reaches the target accuracy is marked
(an ``x`` at its budget, "not reached"; in the time-to-target figure a hatched bar to the run's
length, "n/n missed") rather than left out; lines differ in style and marker as well as colour, and
policies whose runs are identical are named together in the legend. Bootstrap bands use a fixed
seed and PDFs carry no creation date, so redrawing from the same tables gives the same files.

PNG is what DVC's plots and the README show (DVC's HTML renderer needs a CDN; PNGs do not); PDF is
for papers.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import matplotlib.lines as mlines
import matplotlib.patches as mpatches
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

log = logging.getLogger(__name__)

sns.set_theme(context="paper", style="whitegrid")


def save(fig: plt.Figure, stem: str | Path) -> plt.Figure:
    """Write ``stem.png`` (150 dpi) and ``stem.pdf``; parents are created. The panels fill the figure
    (tight layout) and every figure-level legend is then placed beyond its right edge (or, one made by
    :func:`_legend_below`, beneath the panels), where the tight bounding box of the saved image takes
    it in: a legend never covers a panel."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    for legend in fig.legends:
        if getattr(legend, "dynamix_below", False):
            legend.set_loc("upper center")
            legend.set_bbox_to_anchor((0.5, 0.0), transform=fig.transFigure)
        else:
            legend.set_loc("center left")
            legend.set_bbox_to_anchor((1.0, 0.5), transform=fig.transFigure)
    fig.savefig(stem.with_suffix(".png"), dpi=150, bbox_inches="tight")
    fig.savefig(stem.with_suffix(".pdf"), bbox_inches="tight", metadata={"CreationDate": None})  # byte-stable
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


def _curves_figure(curves: pd.DataFrame, hue: str, col: str | None, title: str) -> plt.Figure:
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


def _legend_outside(fig: plt.Figure, axes, title: str | None = None, ncol: int = 1):
    """One figure legend (``ncol`` columns) from the labelled artists of ``axes`` (deduplicated),
    placed by :func:`save`; returns it (None: nothing labelled)."""
    handles, labels = [], []
    for ax in np.ravel(axes):
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels and not lab.startswith("_"):
                handles.append(h)
                labels.append(lab)
        if ax.get_legend() is not None:
            ax.get_legend().remove()
    if not handles:
        return None
    return fig.legend(handles, labels, title=title, fontsize="small", frameon=False, ncol=ncol)


def _legend_below(fig: plt.Figure, axes, ncol: int = 1) -> None:
    """Like :func:`_legend_outside`, but :func:`save` places the legend centred beneath the panels, in
    ``ncol`` columns: for a wide single panel, whose legend on the right would double its width."""
    legend = _legend_outside(fig, axes, ncol=ncol)
    if legend is not None:
        legend.dynamix_below = True


def _mark_unreached(ax, pos, sub: pd.DataFrame, y: str, budget: str | None, color=None, text: bool = True) -> None:
    """Where ``y`` (a time to target) was reached by none of the seeds: an ``x`` at the run budget,
    "not reached"; by some: "k/n reached" above the bar (the bar is over those seeds)."""
    if f"{y}_reached" not in sub or "n_seeds" not in sub:
        return
    for p, (_, r) in zip(pos, sub.iterrows()):
        frac, n = r[f"{y}_reached"], r["n_seeds"]
        if not np.isfinite(frac) or not np.isfinite(n):
            continue
        if frac == 0 and budget and np.isfinite(r.get(budget, np.nan)):
            ax.plot([p], [r[budget]], marker="x", ms=8, mew=2, ls="none", color=color or "black")
            ax.plot([], [], marker="x", ms=8, mew=2, ls="none", color="black",
                    label="target not reached: x at the run budget")
            if text:
                ax.annotate("not reached", (p, r[budget]), textcoords="offset points", xytext=(0, -8),
                            ha="center", va="top", rotation=90, fontsize="x-small")
            ax.set_ylim(top=max(ax.get_ylim()[1], 1.08 * r[budget]))
        elif 0 < frac < 1 and np.isfinite(r[y]) and text:
            top = r[f"{y}_hi"] if np.isfinite(r[f"{y}_hi"]) else r[y]
            ax.annotate(f"{round(frac * n):.0f}/{n:.0f}", (p, top), textcoords="offset points", xytext=(0, 3),
                        ha="center", fontsize="x-small")


def _bars_figure(
    agg: pd.DataFrame, x: str, y: str, ylabel: str, title: str, hue: str | None = None,
    col: str | None = None, budget: str | None = None,
) -> plt.Figure:
    """Bars of ``y`` with its ``y_lo``/``y_hi`` interval, one panel per ``col`` value; with ``budget``
    (a column: the runs' length) a ``y`` no seed reached is an ``x`` at the budget
    (:func:`_mark_unreached`)."""
    panels = [None] if col is None else list(dict.fromkeys(agg[col]))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        _bar_panel(ax, agg if panel is None else agg[agg[col] == panel], x, y, ylabel, hue, budget)
        ax.set_title(title if panel is None else f"{title} ({col} = {panel})")
    _legend_outside(fig, axes, title=hue)
    return fig


def _bar_panel(ax, data: pd.DataFrame, x: str, y: str, ylabel: str, hue: str | None = None,
               budget: str | None = None) -> None:
    """One panel of :func:`_bars_figure`: bars of ``y`` per ``x`` (side by side per ``hue``) with their
    ``y_lo``/``y_hi`` intervals, unreached times marked at ``budget``."""
    xs = list(dict.fromkeys(data[x]))
    hues = [None] if hue is None else list(dict.fromkeys(data[hue]))
    width = 0.8 / len(hues)
    for j, h in enumerate(hues):
        sub = data if h is None else data[data[hue] == h]
        sub = sub.set_index(x).reindex(xs)
        pos = np.arange(len(xs)) + (j - (len(hues) - 1) / 2) * width
        err = np.vstack([sub[y] - sub[f"{y}_lo"], sub[f"{y}_hi"] - sub[y]]).clip(min=0)
        bars = ax.bar(pos, sub[y], width, yerr=err, capsize=3, label=None if h is None else str(h))
        color = bars.patches[0].get_facecolor() if bars.patches else None
        _mark_unreached(ax, pos, sub, y, budget, color)
    ax.set_xticks(np.arange(len(xs)), [str(v) for v in xs], rotation=30, ha="right")
    ax.set_xlabel(x.replace("_", " "))
    ax.set_ylabel(ylabel)


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
    ax.errorbar(agg["batch_size"], agg["throughput_samples_per_s"], yerr=err, marker="o", capsize=3)
    ax.set_xscale("log", base=2)
    ax.set_xticks(agg["batch_size"], [str(b) for b in agg["batch_size"]])
    ax.set_xlabel("per-worker batch size (samples)")
    ax.set_ylabel("cluster throughput (samples/s)")
    ax.set_title("Static batch sizes: throughput (mean, 95% t interval over seeds)")
    return save(fig, stem)


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
    _legend_below(fig, ax, ncol=2)
    return save(fig, stem)


def inference_accuracy_vs_time(curves: pd.DataFrame, stem: str | Path, cluster: str = "") -> plt.Figure:
    """DYNAMIX vs baselines: test accuracy against time on one cluster, one panel per optimiser."""
    return save(_curves_figure(curves, "policy", "optimizer", f"Accuracy vs time {cluster}".strip()), stem)


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
    _legend_outside(fig, ax)
    return save(fig, stem)


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
                _mark_unreached(ax, sub["n_workers"], sub, y, budget, line[0].get_color(), text=False)
    for ax, ylabel in zip(axes, ("time to target accuracy (s, virtual)", "cluster throughput (samples/s)")):
        ax.set_xscale("log", base=2)
        ticks = sorted(agg["n_workers"].unique())
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.set_xlabel("workers")
        ax.set_ylabel(ylabel)
    _legend_outside(fig, axes, title="policy (mean, 95% t interval)")
    axes[0].set_title("Scalability: time to target")
    axes[1].set_title("Scalability: throughput")
    return save(fig, stem)


def transfer(agg: pd.DataFrame, stem: str | Path) -> plt.Figure:
    """Transfer: time to target on each target workload for the transferred policy, a policy trained
    on the target, and the static baseline."""
    fig = _bars_figure(agg, "pair", "time_to_target_s", "time to target accuracy (s, virtual)", "Policy transfer",
                       hue="policy", budget="total_time_s" if "total_time_s" in agg else None)
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
    _legend_outside(fig, ax)
    return save(fig, stem)


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
    _legend_outside(fig, axes, title="mean, 95% t interval over seeds")
    return save(fig, stem)


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
    _legend_outside(fig, axes)
    return save(fig, stem)


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
        _bar_panel(row[0], data, "policy", "time_to_target_s", "time to target accuracy (s, virtual)",
                   hue="compression", budget=budget)
        row[0].set_title(f"Time to target ({name})")
        _bar_panel(row[1], data, "policy", "mean_global_batch", "mean global batch (samples)", hue="compression")
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
    _legend_outside(fig, axes, title="compression")
    return save(fig, stem)
