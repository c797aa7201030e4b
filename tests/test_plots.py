"""The figures a reader sees first: what they show is what the tables say."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import pandas as pd  # noqa: E402

from dynamix import plots  # noqa: E402


def _row(cluster, policy, t, reached, total=40.0):
    return {"optimizer": "sgd", "cluster": cluster, "policy": policy, "n_seeds": 5, "time_to_target_s": t,
            "time_to_target_s_lo": t - 1, "time_to_target_s_hi": t + 1, "time_to_target_s_reached": reached,
            "total_time_s": total}


def test_time_to_target_has_a_panel_per_cluster_one_policy_order_and_misses_apart(tmp_path):
    nan = math.nan
    agg = pd.DataFrame([_row("a", "dynamix", 10.0, 0.8), _row("a", "static:64", 20.0, 1.0),
                        _row("b", "static:64", 15.0, 1.0), _row("b", "dynamix", nan, 0.0)])
    fig = plots.inference_time_to_target(agg, tmp_path / "ttt")
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == ["a", "b"]
    assert [t.get_text() for t in panels[0].get_yticklabels()] == ["dynamix", "static:64"]
    bars = [[(p.get_y() + p.get_height() / 2, p.get_width()) for p in ax.patches] for ax in panels]
    assert bars[0] == [(0.0, 10.0), (1.0, 20.0)] and bars[1] == [(1.0, 15.0)]  # the miss has no bar
    texts = [[t.get_text() for t in ax.texts] for ax in panels]
    assert texts == [["4/5 reached"], ["missed 5/5"]]
    assert any(list(line.get_xdata()) == [40.0] and line.get_marker() == "x" for line in panels[1].lines)
    assert (tmp_path / "ttt.png").exists()
