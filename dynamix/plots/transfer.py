"""The transfer stage's figure: time to target of the transferred, target-trained and static policies."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from dynamix.plots.bars import bars_figure
from dynamix.plots.style import save


def transfer(agg: pd.DataFrame, stem: str | Path) -> plt.Figure:
    """Transfer: time to target on each target workload for the transferred policy, a policy trained
    on the target, and the static baseline."""
    fig = bars_figure(agg, "pair", "time_to_target_s", "time to target accuracy (s, virtual)", "Policy transfer",
                       hue="policy", budget="total_time_s" if "total_time_s" in agg else None)
    return save(fig, stem)
