"""The figures a reader sees first: what they show is what the tables say."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import pandas as pd  # noqa: E402

from dynamix.plots import inference, policy_training  # noqa: E402


def _row(cluster, policy, t, reached, total=40.0):
    return {"optimizer": "sgd", "cluster": cluster, "policy": policy, "n_seeds": 5, "time_to_target_s": t,
            "time_to_target_s_lo": t - 1, "time_to_target_s_hi": t + 1, "time_to_target_s_reached": reached,
            "total_time_s": total}


def test_time_to_target_has_a_panel_per_cluster_one_policy_order_and_misses_apart(tmp_path):
    nan = math.nan
    agg = pd.DataFrame([_row("a", "dynamix", 10.0, 0.8), _row("a", "static:64", 20.0, 1.0),
                        _row("b", "static:64", 15.0, 1.0), _row("b", "dynamix", nan, 0.0)])
    fig = inference.inference_time_to_target(agg, tmp_path / "ttt")
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == ["a", "b"]
    assert [t.get_text() for t in panels[0].get_yticklabels()] == ["dynamix", "static:64"]
    bars = [[(p.get_y() + p.get_height() / 2, p.get_width(), bool(p.get_hatch())) for p in ax.patches]
            for ax in panels]
    assert bars[0] == [(0.0, 10.0, False), (1.0, 20.0, False)]
    assert bars[1] == [(0.0, 40.0, True), (1.0, 15.0, False)]  # the miss: hatched, to the run's length
    texts = [[t.get_text() for t in ax.texts] for ax in panels]
    assert texts == [["1/5 missed"], ["5/5 missed"]]
    assert (tmp_path / "ttt.png").exists() and (tmp_path / "ttt.pdf").exists()


def _drawn_texts(fig):
    """Every piece of text the saved figure shows, with its extent in display units."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    texts = list(fig.texts)
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        if ax.axison:
            texts += [ax.title, ax.xaxis.label, ax.yaxis.label, *ax.texts]
            texts += [t for axis in (ax.xaxis, ax.yaxis) for tick in axis.get_major_ticks()
                      if tick.get_visible() and tick.label1.get_visible() for t in [tick.label1]
                      if ax.get_xlim()[0] <= tick.get_loc() <= ax.get_xlim()[1] or axis is ax.yaxis]
        if ax.get_legend() is not None:
            texts += [ax.get_legend().get_title(), *ax.get_legend().get_texts()]
    for legend in fig.legends:
        texts += [legend.get_title(), *legend.get_texts()]
    texts = [t for t in texts if t.get_visible() and t.get_text().strip()]
    return [(t.get_text(), t.get_window_extent(renderer)) for t in texts]


def test_time_to_target_front_door_figure_reads_without_overlaps(tmp_path):
    """The README's figure at its real size: five clusters, twelve policies, misses of every kind."""
    nan = math.nan
    policies = ["dynamix", "static:32", "static:64", "static:128", "static:256", "static:512", "lbbsp",
                "lbbsp:tuned", "lbbsp:tuned-global", "lbbsp:batch=512", "gns", "oracle"]
    clusters = ["gpu-overlap-4", "comm-ring-8", "ps-incast-6", "dyn-bandwidth-4", "dyn-interference-6"]
    rows = []
    for c, cluster in enumerate(clusters):
        for p, policy in enumerate(policies):
            reached = [1.0, 0.8, 0.4, 0.0][(c + p) % 4]
            t = nan if reached == 0 else 10.0 + 3 * p + 5 * c
            rows.append({**_row(cluster, policy, t, reached, total=20.0 + 4 * p), "target_accuracy": 0.6})
    agg = pd.DataFrame(rows)
    fig = inference.inference_time_to_target(agg, tmp_path / "ttt")
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.axison]
    assert [ax.get_title().split(" (")[0] for ax in panels] == clusters  # every cluster its own panel
    for ax in panels:  # the same policy order down every panel
        assert ax.get_yticks().tolist() == list(range(len(policies)))
    assert [t.get_text() for t in panels[0].get_yticklabels()] == policies
    drawn = _drawn_texts(fig)
    assert any(text == "3/5 missed" for text, _ in drawn) and any(text == "5/5 missed" for text, _ in drawn)
    clashes = [(a, b) for i, (a, ea) in enumerate(drawn) for b, eb in drawn[i + 1:] if ea.overlaps(eb)]
    assert clashes == []  # no two labels overlap
    for ax in panels:  # each "missed" label inside its panel, beside its bar, never over one
        box = ax.get_window_extent()
        for label in ax.texts:
            extent = label.get_window_extent()
            assert box.x0 <= extent.x0 and extent.x1 <= box.x1, label.get_text()
            assert not any(extent.overlaps(bar.get_window_extent()) for bar in ax.patches), label.get_text()


def test_reward_curve_legend_sits_below_the_panel(tmp_path):
    progress = pd.DataFrame({"seed": [s for s in range(3) for _ in range(50)], "episode": list(range(50)) * 3,
                             "return": [50.0 + (e % 7) + s for s in range(3) for e in range(50)]})
    teacher = pd.DataFrame({"episode": range(-10, 0), "return": [55.0 + e % 3 for e in range(10)]})
    fig = policy_training.reward_curve(progress, tmp_path / "reward", teacher=teacher)
    (ax,), (legend,) = fig.axes, fig.legends
    fig.canvas.draw()
    panel, box = ax.get_tightbbox(), legend.get_window_extent()
    assert box.y1 <= panel.y0  # beneath the panel and its axis label: it covers no data
    assert box.width <= 1.2 * ax.get_window_extent().width  # and no wider than about the panel
    assert (tmp_path / "reward.png").exists() and (tmp_path / "reward.pdf").exists()
