"""The prepare stage's figure: the simulator's calibration, t(b) = a + c b per model."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from dynamix.plots.style import legend_outside, save


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
    legend_outside(fig, ax)
    return save(fig, stem)
