"""The agent's bar (``claims/goal.csv``, ``goal.md``; docs/protocol.md "The agent's bar"): what a user
deciding whether to deploy the agent on a cluster nobody has seen reads first.

Each fixture is a held-out table a reader could be misled by: an agent at the bound everywhere must
pass every criterion, one that looks fast because a missed run was censored must pass none of its
ratios, and a bound chosen on the scored seeds must not be confused with one chosen on the others.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from dynamix import config
from dynamix.experiments import claims

SEEDS = range(5)


@pytest.fixture(scope="module")
def cfg():
    return config.load(profile="smoke")


def runs(times: dict[str, list[float]], cluster: str) -> list[dict]:
    """Per-run rows of an inference summary: NaN = the run missed the target (its total time 30 s)."""
    return [{"cluster": cluster, "optimizer": "sgd", "policy": p, "seed": s, "time_to_target_s": t,
             "total_time_s": 30.0, "final_accuracy": 0.5 if math.isfinite(t) else 0.4, "run_id": f"{cluster}-{p}-{s}"}
            for p, ts in times.items() for s, t in enumerate(ts)]


def cell(oracle: float, **factors: float | list[float]) -> dict[str, list[float]]:
    """A cell whose oracle takes ``oracle`` + 0.1 s per seed, every other policy a factor of that (or
    per-seed times given whole), and a static sweep at 1.5-2x."""
    base = [oracle + 0.1 * s for s in SEEDS]
    out = {"oracle": base, **{f"static:{b}": [(1.5 + b / 1024) * t for t in base] for b in (32, 64, 128, 256, 512)}}
    for name, f in factors.items():
        out[name.replace("_", "-")] = f if isinstance(f, list) else [f * t * (1 + 0.01 * (s % 2)) for s, t in enumerate(base)]
    return out


def bar(cells: dict[str, dict], cfg) -> tuple[pd.DataFrame, str]:
    inference = pd.DataFrame([r for c, times in cells.items() for r in runs(times, c)])
    table = claims.goal(inference, claims.per_policy(inference, cfg), cfg)
    return table, claims.goal_markdown(table, cfg.evaluation.target_fraction)


def test_an_agent_at_the_bound_on_every_cluster_passes_every_criterion(cfg):
    table, md = bar({"a": cell(8.0, dynamix=1.0, lbbsp=1.25, gns=1.3),
                     "b": cell(12.0, dynamix=1.02, lbbsp=1.2, gns=1.4)}, cfg)
    assert list(table.columns) == claims.GOAL_COLUMNS
    assert table["met"].all(), table
    rows = table.set_index(["criterion", "reference"])
    assert rows.loc[("geometric mean over the held-out cells", "oracle"), "measured"] == pytest.approx(
        math.sqrt(1.0 * 1.02), rel=0.01)
    assert rows.loc[("worst held-out cell", "oracle"), "where"] == "b, sgd"
    assert rows.loc[("geometric mean over the best other policy's", "lbbsp"), "measured"] < 1
    assert set(table.loc[table["criterion"] == "pooled paired time ratio", "reference"]) == {"lbbsp", "gns"}
    assert md.startswith("**The agent's bar** (level 0.9") and "met against oracle (6 of 6 criteria)" in md


def test_a_ratio_built_on_a_missed_run_is_a_lower_bound_and_passes_no_bar(cfg):
    """Faster than the oracle on four seeds and missing on the fifth: its geometric mean over the
    oracle, censored at the cell's horizon, sits below the bar, yet it is a lower bound and fails."""
    fast = [5.0, 5.1, 5.2, 5.3, math.nan]
    table, md = bar({"a": cell(8.0, dynamix=fast, lbbsp=1.25, gns=1.3)}, cfg)
    rows = table.set_index(["criterion", "reference"])
    geo = rows.loc[("geometric mean over the held-out cells", "oracle")]
    assert geo["measured"] <= claims.GOAL_GEOMEAN and geo["bound"] == "≥" and not geo["met"]
    assert rows.loc[("runs missing the target", ""), "where"] == "1/5"
    assert not table["met"].any()
    assert "| geometric mean over the held-out cells | oracle | ≤ 1.05 | ≥ " in md and "| yes |" not in md


def test_each_bound_has_its_own_verdict_and_neither_bounds_rows_count_against_the_other(cfg):
    """10 % slower than the oracle picked on the scored seeds, 10 % faster than the oracle picked on
    each cluster's other seeds, and 20 % faster than every rule: not met against the first, met
    against the second."""
    cells = {c: cell(t, dynamix=1.1, oracle_cv=1.22, lbbsp=1.4, gns=1.45) for c, t in (("a", 8.0), ("b", 11.0))}
    table, md = bar(cells, cfg)
    rows = table.set_index(["criterion", "reference"])
    assert rows.loc[("geometric mean over the held-out cells", "oracle-cv"), "measured"] == pytest.approx(1.1 / 1.22, rel=0.01)
    assert not rows.loc[("geometric mean over the held-out cells", "oracle"), "met"]
    assert rows.loc[("geometric mean over the held-out cells", "oracle-cv"), "met"]
    assert "not met against oracle (5 of 6 criteria); met against oracle-cv (6 of 6 criteria)" in md


def test_without_the_agent_there_is_no_bar_to_read(cfg):
    table, md = bar({"a": cell(8.0, lbbsp=1.2)}, cfg)
    assert table.empty and list(table.columns) == claims.GOAL_COLUMNS
    assert md.endswith("no agent in this evaluation\n") and " met" not in md
