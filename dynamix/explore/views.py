"""The playground's figures and table: what a user reads off a set of runs on one cluster.

- :func:`cluster`: the workers (colour and size by relative speed), their links (width by bandwidth)
  and the synchronisation (ring, or parameter servers in the middle), with events and noise listed;
- :func:`accuracy_vs_time`: test accuracy against training time per policy and seed, the target
  accuracy and where each run crossed it;
- :func:`batch_sizes`: each worker's batch size over time, one panel per policy;
- :func:`time_split`: each worker's time per iteration split into compute, communication and wait
  (time at the barrier for slower peers), one panel per policy;
- :func:`table`: time to target and final accuracy per policy.

Figures are returned closed, so a figure that is a cell's value is shown once (not again by the
inline backend). Times are the simulator's virtual seconds (wall seconds for engine runs); legends
sit outside the data; :func:`save_all` writes PNG and PDF through :func:`dynamix.plots.style.save`.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.lines import Line2D
from matplotlib.ticker import ScalarFormatter

from dynamix import io
from dynamix.cluster import ClusterSpec
from dynamix.explore.results import RunSet
from dynamix.plots.style import save

SPLIT = (("compute_ms", "compute"), ("comm_ms", "communication"), ("wait_ms", "wait"))
"""The columns of the iteration-time split and their legend names."""

SPLIT_COLORS = ("#4C72B0", "#DD8452", "#B0B0B0")

LABEL_LIMIT = 16
"""Above this many workers the cluster drawing omits per-worker text (the colour bar still reads)."""

TIME_LABEL = "training time (s, virtual)"


def _outside(ax: plt.Axes, **kw) -> None:
    """The axes' legend to the right of the data."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False, **kw)


def _done(fig: plt.Figure) -> plt.Figure:
    plt.close(fig)
    return fig


def _empty(title: str, message: str) -> plt.Figure:
    fig, ax = plt.subplots(figsize=(6, 1.6))
    ax.axis("off")
    ax.text(0.5, 0.5, message, ha="center", va="center")
    ax.set_title(title)
    return _done(fig)


def _panels(n: int, width: float = 3.6, height: float = 2.9, sharey: bool = True):
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False,
                             sharey=sharey, sharex=True)
    flat = axes.ravel()
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def worker_labels(runs: pd.DataFrame) -> dict[int, str]:
    """``rank -> "w0 (2x)"``: the relative speed each worker had in its first window."""
    first = runs.sort_values("window").drop_duplicates("rank").set_index("rank")
    speed = first["speed"] if "speed" in first.columns else pd.Series(np.nan, index=first.index)
    return {int(r): (f"w{int(r)} ({s:.3g}x)" if np.isfinite(s) else f"w{int(r)}") for r, s in speed.items()}


# ----------------------------------------------------------------------------------------------
# The cluster
# ----------------------------------------------------------------------------------------------


def _events_text(spec: ClusterSpec) -> str:
    parts = []
    for e in spec.events:
        when = f"t={e.at_time_s:g} s" if e.at_time_s >= 0 else f"iteration {e.at_iteration}"
        who = ", ".join(f"w{w}" for w in e.workers) or "all workers"
        what = "speed" if e.kind == "slowdown" else "bandwidth"
        span = f" for {e.duration_iterations} iterations" if e.duration_iterations else ""
        parts.append(f"{when}: {what} x{e.factor:g} on {who}{span}")
    if spec.stragglers.probability > 0:
        parts.append(f"stragglers: each iteration p={spec.stragglers.probability:g} of running at "
                     f"x{spec.stragglers.factor:g}")
    if spec.jitter > 0:
        parts.append(f"compute jitter: lognormal sigma {spec.jitter:g}")
    return "\n".join(parts)


def cluster(spec: ClusterSpec) -> plt.Figure:
    """The workers on a circle: colour and marker area by relative speed, each worker's link drawn with
    a width growing with its bandwidth (log scale); a ring joins neighbours, a parameter server sits in
    the middle with a spoke to every worker. Events, stragglers and jitter are listed underneath."""
    n = spec.n_workers
    speeds = np.array(spec.speeds, dtype=float)
    bw = np.array([w.bandwidth_gbps for w in spec.workers], dtype=float)
    lat = np.array([w.latency_ms for w in spec.workers], dtype=float)
    angle = np.pi / 2 - 2 * np.pi * np.arange(n) / n
    xy = np.stack([np.cos(angle), np.sin(angle)], axis=1)
    lo, hi = np.log10(bw.min()), np.log10(bw.max())

    def width(b: float) -> float:  # 1..6 points over the cluster's bandwidth range (log)
        return 1.0 + (5.0 * (np.log10(b) - lo) / (hi - lo) if hi > lo else 2.5)

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    arch = spec.architecture
    link_color = "#555555"
    if arch.kind == "ps":
        ax.scatter([0], [0], marker="s", s=900, color="#DD8452", zorder=3)
        ax.text(0, 0, f"PS\nx{arch.num_servers}", ha="center", va="center", fontsize=8, zorder=4)
        for i in range(n):
            ax.plot([0, xy[i, 0]], [0, xy[i, 1]], color=link_color, lw=width(bw[i]), zorder=1, alpha=0.7)
        sync = f"parameter server ({arch.num_servers} x {arch.server_bandwidth_gbps:g} Gbit/s)"
    else:
        for i in range(n):
            j = (i + 1) % n
            if j == i:
                continue
            ax.plot([xy[i, 0], xy[j, 0]], [xy[i, 1], xy[j, 1]], color=link_color,
                    lw=width(min(bw[i], bw[j])), zorder=1, alpha=0.7)
        sync = "ring all-reduce"
    if arch.overlap > 0:
        sync += f", {100 * arch.overlap:.0f}% of communication overlapped"
    norm = plt.Normalize(vmin=min(speeds.min(), 1.0), vmax=max(speeds.max(), 1.0))
    sizes = (250 + 650 * (speeds / speeds.max())) * min(1.0, 8.0 / n)  # smaller markers for large clusters
    points = ax.scatter(xy[:, 0], xy[:, 1], s=sizes, c=speeds, cmap="viridis", norm=norm,
                        edgecolors="black", linewidths=0.6, zorder=3)
    if n <= LABEL_LIMIT:
        for i in range(n):
            ax.text(xy[i, 0], xy[i, 1], f"w{i}", ha="center", va="center", fontsize=8, zorder=4,
                    color="white" if norm(speeds[i]) < 0.6 else "black")
            x, y = xy[i]
            ax.annotate(f"{speeds[i]:.3g}x\n{bw[i]:g} Gbit/s\n{lat[i]:g} ms", xy[i], xytext=1.22 * xy[i],
                        ha="left" if x > 0.3 else "right" if x < -0.3 else "center",
                        va="bottom" if y > 0.3 else "top" if y < -0.3 else "center", fontsize=7)
    ax.set_xlim(-1.9, 1.9)
    ax.set_ylim(-1.7, 1.7)
    ax.set_aspect("equal")
    ax.axis("off")
    bar = fig.colorbar(points, ax=ax, fraction=0.04, pad=0.02)
    bar.set_label("relative compute speed (x reference machine)")
    legend_bw = sorted(set(bw.tolist()))
    if len(legend_bw) > 4:
        legend_bw = [legend_bw[0], legend_bw[len(legend_bw) // 2], legend_bw[-1]]
    handles = [Line2D([], [], color=link_color, lw=width(b), alpha=0.7, label=f"link {b:g} Gbit/s") for b in legend_bw]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.3, 1.0), frameon=False, title="worker links")
    ax.set_title(f"{spec.name}: {n} workers, {sync}", fontsize=9)
    notes = _events_text(spec)
    if notes:
        fig.text(0.02, -0.02, notes, ha="left", va="top", fontsize=7)
    return _done(fig)


# ----------------------------------------------------------------------------------------------
# Runs
# ----------------------------------------------------------------------------------------------


def _windows(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (policy, seed, window)."""
    return runs.drop_duplicates(["policy", "seed", "window"]).sort_values(["policy", "seed", "window"])


def accuracy_vs_time(rs: RunSet) -> plt.Figure:
    """Test accuracy (%) against training time, a line per run (policy colour; seeds as separate lines),
    the target accuracy dashed and each run's time to target marked where it crosses."""
    title = f"Test accuracy: {rs.title}"
    if rs.runs.empty or rs.runs["test_acc"].notna().sum() == 0:
        return _empty(title, "no test accuracy yet")
    w = _windows(rs.runs).dropna(subset=["test_acc"]).assign(test_acc_pct=lambda d: 100 * d["test_acc"])
    palette = dict(zip(rs.policies, sns.color_palette(n_colors=len(rs.policies))))
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    sns.lineplot(data=w, x="elapsed_s", y="test_acc_pct", hue="policy", hue_order=rs.policies, palette=palette,
                 units="seed", estimator=None, marker="o", markersize=3, ax=ax)
    s = rs.summary
    for target in sorted(set(s["target_accuracy"].dropna())):
        ax.axhline(100 * target, ls="--", lw=1, color="grey", label=f"target {100 * target:.1f}%")
    hit = s.dropna(subset=["time_to_target_s"])
    for _, r in hit.iterrows():
        ax.plot(r["time_to_target_s"], 100 * r["target_accuracy"], marker="X", ms=8, ls="none",
                color=palette.get(r["policy"], "black"), zorder=5)
    if len(hit):
        ax.plot([], [], marker="X", ms=8, ls="none", color="black", label="time to target")
    ax.set_xlabel(TIME_LABEL)
    ax.set_ylabel("test accuracy (%)")
    ax.set_xlim(left=0)
    ax.set_title(title, fontsize=9)
    _outside(ax)
    return _done(fig)


def batch_sizes(rs: RunSet, seed: int | None = None) -> plt.Figure:
    """Each worker's batch size (samples, log2 axis) over training time, one panel per policy, for one
    seed (default: the first); a window's size holds from its start to its end."""
    if rs.runs.empty:
        return _empty("Batch sizes", "no runs yet")
    seed = int(rs.runs["seed"].min()) if seed is None else seed
    runs = rs.runs[rs.runs["seed"] == seed]
    labels = worker_labels(runs)
    colors = dict(zip(sorted(labels), sns.color_palette("viridis", n_colors=len(labels))))
    policies = [p for p in rs.policies if p in set(runs["policy"])]
    fig, axes = _panels(len(policies))
    for ax, policy in zip(axes, policies):
        run = runs[runs["policy"] == policy]
        ends = run.drop_duplicates("window").sort_values("window").set_index("window")["elapsed_s"]
        starts = ends.shift(1, fill_value=0.0)
        for rank, g in run.sort_values("window").groupby("rank"):
            t = np.column_stack([starts.loc[g["window"]].to_numpy(), ends.loc[g["window"]].to_numpy()]).ravel()
            b = np.repeat(g["batch_size"].to_numpy(), 2)
            # thinner lines on top: workers at equal sizes stay visible
            ax.plot(t, b, color=colors[int(rank)], lw=1.2 + 2.8 * (1 - int(rank) / max(1, len(labels) - 1)),
                    label=labels[int(rank)], alpha=0.9)
        ax.set_yscale("log", base=2)
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.set_title(policy, fontsize=9)
        ax.set_xlabel(TIME_LABEL)
        ax.set_ylabel("batch size per worker (samples)")
        ax.label_outer()
    return _finish_panels(fig, axes, "worker (speed)", f"Batch size per worker, seed {seed}: {rs.title}")


def _finish_panels(fig: plt.Figure, axes, legend_title: str, title: str) -> plt.Figure:
    """One legend for all panels, outside them on the right; the figure's title."""
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="upper left", bbox_to_anchor=(1.0, 0.95), frameon=False, title=legend_title)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return _done(fig)


def split(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean time per iteration (ms) of each policy's workers in compute, communication and wait,
    each window weighted by its iterations, averaged over seeds. Columns: policy, rank, the
    :data:`SPLIT` columns and ``iter_time_ms``."""
    w = runs.sort_values(["policy", "seed", "window", "rank"]).copy()
    per_window = w.drop_duplicates(["policy", "seed", "window"])[["policy", "seed", "window", "iteration"]]
    per_window["iters"] = per_window.groupby(["policy", "seed"])["iteration"].diff().fillna(per_window["iteration"])
    w = w.merge(per_window[["policy", "seed", "window", "iters"]], on=["policy", "seed", "window"])
    cols = [c for c, _ in SPLIT] + ["iter_time_ms"]
    weighted = w[cols].mul(w["iters"], axis=0).assign(policy=w["policy"], rank=w["rank"], iters=w["iters"])
    sums = weighted.groupby(["policy", "rank"], sort=False).sum()
    return sums[cols].div(sums["iters"], axis=0).reset_index()


def time_split(rs: RunSet) -> plt.Figure:
    """Stacked bars per worker: the mean time per iteration in compute, communication and wait (ms),
    one panel per policy. Equal bar lengths mean a synchronous iteration; the grey part is what a
    faster worker spends waiting for the slowest."""
    if rs.runs.empty:
        return _empty("Iteration time split", "no runs yet")
    table_ = split(rs.runs)
    labels = worker_labels(rs.runs)
    policies = [p for p in rs.policies if p in set(table_["policy"])]
    fig, axes = _panels(len(policies), height=0.9 + 0.32 * len(labels))
    for ax, policy in zip(axes, policies):
        t = table_[table_["policy"] == policy].sort_values("rank")
        y = np.arange(len(t))
        left = np.zeros(len(t))
        for (col, name), color in zip(SPLIT, SPLIT_COLORS):
            ax.barh(y, t[col].to_numpy(), left=left, color=color, label=name, height=0.7)
            left += t[col].to_numpy()
        ax.set_yticks(y, [labels.get(int(r), f"w{int(r)}") for r in t["rank"]])
        ax.invert_yaxis()
        ax.set_title(policy, fontsize=9)
        ax.set_xlabel("time per iteration (ms, virtual)")
        ax.label_outer()
    return _finish_panels(fig, axes, "per iteration", f"Iteration time split per worker: {rs.title}")


TABLE_COLUMNS = ["policy", "runs", "reached", "target_accuracy_pct", "time_to_target_s", "final_accuracy_pct",
                 "total_time_s", "mean_global_batch"]
"""Columns of :func:`table`."""


def table(rs: RunSet) -> pd.DataFrame:
    """One row per policy: runs (seeds), how many reached the target, the target (%), the median time to
    target over seeds (s; empty unless every seed reached it), the mean final accuracy (%), the median
    total time (s) and the mean global batch (samples; mean over windows weighted by iterations)."""
    s = rs.summary
    rows = []
    for policy in rs.policies:
        g = s[s["policy"] == policy]
        ttt = g["time_to_target_s"].astype(float)
        mean_b = g["mean_global_batch"].mean() if "mean_global_batch" in g.columns else _mean_batch(rs.runs, policy)
        rows.append({
            "policy": policy,
            "runs": len(g),
            "reached": int(ttt.notna().sum()),
            "target_accuracy_pct": 100 * float(g["target_accuracy"].mean()),
            "time_to_target_s": float(ttt.median()) if ttt.notna().all() else math.nan,
            "final_accuracy_pct": 100 * float(g["final_accuracy"].mean()),
            "total_time_s": float(g["total_time_s"].median()),
            "mean_global_batch": float(mean_b),
        })
    return pd.DataFrame(rows, columns=TABLE_COLUMNS).round(
        {"target_accuracy_pct": 1, "final_accuracy_pct": 1, "time_to_target_s": 3, "total_time_s": 3,
         "mean_global_batch": 1})


def _mean_batch(runs: pd.DataFrame, policy: str) -> float:
    w = _windows(runs[runs["policy"] == policy])
    iters = w.groupby("seed")["iteration"].diff().fillna(w["iteration"])
    return float(np.average(w["global_batch"], weights=iters)) if iters.sum() > 0 else math.nan


def figures(rs: RunSet) -> dict[str, plt.Figure]:
    """Every view of ``rs`` by name: ``cluster`` (when its spec is known), ``accuracy_vs_time``,
    ``batch_sizes`` and ``time_split``."""
    out = {"cluster": cluster(rs.spec)} if rs.spec is not None else {}
    out.update(accuracy_vs_time=accuracy_vs_time(rs), batch_sizes=batch_sizes(rs), time_split=time_split(rs))
    return out


def save_all(rs: RunSet, fig_dir: str | Path) -> list[Path]:
    """Write every view of ``rs`` as ``fig_dir/<name>.png`` and ``.pdf``, and the table as ``table.csv``."""
    fig_dir = Path(fig_dir)
    written = []
    for name, fig in figures(rs).items():
        save(fig, fig_dir / name)
        written.append(fig_dir / f"{name}.png")
    io.write_csv(table(rs), fig_dir / "table.csv")
    return written
