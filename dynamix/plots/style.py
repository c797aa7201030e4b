"""The look every figure shares: the seaborn theme (set on import), :func:`save` (PNG at 150 dpi and a
byte-stable PDF) and the figure legends that sit outside the data (:func:`legend_outside`,
:func:`legend_below`)."""

from __future__ import annotations

import logging
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns

log = logging.getLogger(__name__)

sns.set_theme(context="paper", style="whitegrid")


def save(fig: plt.Figure, stem: str | Path) -> plt.Figure:
    """Write ``stem.png`` (150 dpi) and ``stem.pdf``; parents are created. The panels fill the figure
    (tight layout) and every figure-level legend is then placed beyond its right edge (or, one made by
    :func:`legend_below`, beneath the panels), where the tight bounding box of the saved image takes
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


def legend_outside(fig: plt.Figure, axes, title: str | None = None, ncol: int = 1):
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


def legend_below(fig: plt.Figure, axes, ncol: int = 1) -> None:
    """Like :func:`legend_outside`, but :func:`save` places the legend centred beneath the panels, in
    ``ncol`` columns: for a wide single panel, whose legend on the right would double its width."""
    legend = legend_outside(fig, axes, ncol=ncol)
    if legend is not None:
        legend.dynamix_below = True
