"""The selection stage's figure: every candidate's score on the validation clusters beside LB-BSP's."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from dynamix.plots.style import legend_below, save


def scores(score: pd.Series, table: pd.DataFrame | None, ships: str, stem: str | Path) -> plt.Figure:
    """Horizontal bars of ``score`` (policy label -> geometric mean over validation clusters of its mean
    censored time to target over the fastest's, :mod:`dynamix.evaluation.selection`; 1 = fastest on every
    cluster), candidates in one colour and the LB-BSP global batches in another, the policy that ships
    outlined, and each bar labelled with its runs that missed the target (``table``: the scored runs,
    ``confirm`` False; the confirmation's runs are not scored). Without a choice (``table`` None) the
    panel says which policy ships instead."""
    if table is None:
        fig, ax = plt.subplots(figsize=(6.4, 1.6))
        ax.set_axis_off()
        ax.text(0.5, 0.5, f"no selection (experiments.policy_training.select is off): {ships} ships",
                ha="center", va="center", transform=ax.transAxes)
        return save(fig, stem)
    scored = table[~table["confirm"].astype(bool)]
    missed = scored.groupby("policy")["time_to_target_s"].apply(lambda s: int(s.isna().sum()))
    runs = scored.groupby("policy").size()
    candidate = scored.groupby("policy")["candidate"].first().astype(bool)
    palette = dict(zip(("candidate", "LB-BSP (global batch)"), sns.color_palette(n_colors=2)))
    fig, ax = plt.subplots(figsize=(6.4, 0.35 * len(score) + 1.4))
    for i, (policy, value) in enumerate(score.items()):
        kind = "candidate" if candidate.get(policy, True) else "LB-BSP (global batch)"
        ax.barh(i, value, color=palette[kind], label=kind, edgecolor="black" if policy == ships else "none",
                linewidth=1.5)
        ax.annotate(f"{missed.get(policy, 0)}/{runs.get(policy, 0)} missed", (value, i), xytext=(3, 0),
                    textcoords="offset points", va="center", fontsize=7)
    ax.set_yticks(range(len(score)), list(score.index))
    ax.invert_yaxis()
    ax.axvline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("score: time to target over the fastest, geometric mean over validation clusters (x)")
    ax.set_ylabel("")
    ax.set_title(f"Selection on the validation clusters: {ships} ships (outlined)")
    legend_below(fig, ax, ncol=2)
    return save(fig, stem)
