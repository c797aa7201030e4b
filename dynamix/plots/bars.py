"""Bars with their intervals, side by side per hue and one panel per column (:func:`bars_figure`,
:func:`bar_panel`), and a target no seed reached marked at the run's budget (:func:`mark_unreached`)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from dynamix.plots.style import legend_outside


def mark_unreached(ax, pos, sub: pd.DataFrame, y: str, budget: str | None, color=None, text: bool = True) -> None:
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


def bars_figure(
    agg: pd.DataFrame, x: str, y: str, ylabel: str, title: str, hue: str | None = None,
    col: str | None = None, budget: str | None = None,
) -> plt.Figure:
    """Bars of ``y`` with its ``y_lo``/``y_hi`` interval, one panel per ``col`` value; with ``budget``
    (a column: the runs' length) a ``y`` no seed reached is an ``x`` at the budget
    (:func:`mark_unreached`)."""
    panels = [None] if col is None else list(dict.fromkeys(agg[col]))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        bar_panel(ax, agg if panel is None else agg[agg[col] == panel], x, y, ylabel, hue, budget)
        ax.set_title(title if panel is None else f"{title} ({col} = {panel})")
    legend_outside(fig, axes, title=hue)
    return fig


def bar_panel(ax, data: pd.DataFrame, x: str, y: str, ylabel: str, hue: str | None = None,
               budget: str | None = None) -> None:
    """One panel of :func:`bars_figure`: bars of ``y`` per ``x`` (side by side per ``hue``) with their
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
        mark_unreached(ax, pos, sub, y, budget, color)
    ax.set_xticks(np.arange(len(xs)), [str(v) for v in xs], rotation=30, ha="right")
    ax.set_xlabel(x.replace("_", " "))
    ax.set_ylabel(ylabel)
