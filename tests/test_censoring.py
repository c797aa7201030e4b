"""The one censoring rule (dynamix/evaluation/targets.py:censored_time) at every place a time is compared.

The fixture is the trap the rule exists for: at equal epochs a larger batch finishes sooner, so a
policy that misses the target on every seed can end its runs before any other policy reaches it.
Charged its own total time it would look fastest. Under the rule no ratio, verdict, best-static
pick, headroom share, oracle choice, tuned batch or compression verdict calls it faster.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from dynamix import config
from dynamix.evaluation import compare, oracle, sim2real, targets, tuning
from dynamix.experiments import claims, compression

SEEDS = range(5)
# policy -> (time to target or NaN, total time) per seed; "dynamix" misses every seed and stops first
CELL = {
    "dynamix": [(math.nan, 6.0 + 0.1 * s) for s in SEEDS],
    "lbbsp": [(9.0 + 0.1 * s, 18.0) for s in SEEDS],
    "gns": [(9.5 + 0.1 * s, 18.0) for s in SEEDS],
    "oracle": [(8.0 + 0.1 * s, 16.0) for s in SEEDS],
    **{f"static:{b}": [(10.0 + b / 100 + 0.1 * s, 20.0) for s in SEEDS] for b in (32, 64, 128, 256)},
    "static:512": [(math.nan, 5.0 + 0.1 * s) for s in SEEDS],
}


@pytest.fixture(scope="module")
def cfg():
    return config.load(profile="smoke")


def summary(cells: dict[str, dict] | None = None, **extra) -> pd.DataFrame:
    cells = cells or {"c": CELL}
    rows = [{"cluster": c, "optimizer": "sgd", "policy": p, "seed": s, "time_to_target_s": t, "total_time_s": total,
             "final_accuracy": 0.5 if math.isfinite(t) else 0.45, "run_id": f"{c}-{p}-{s}", **extra}
            for c, policies in cells.items() for p, runs in policies.items() for s, (t, total) in enumerate(runs)]
    return pd.DataFrame(rows)


def test_a_missed_run_counts_at_its_cells_longest_run_not_its_own():
    s = summary()
    t = targets.censored_time(s)
    assert (t[s["policy"] == "dynamix"] == 20.0).all()
    assert (t[targets.missed(s)] >= t[~targets.missed(s)].max()).all()
    # the horizon is per cell: another cluster's longer runs do not reach into this one
    two = summary({"c": CELL, "d": {p: [(t, 10 * total) for t, total in runs] for p, runs in CELL.items()}})
    assert targets.horizon(two)[two["cluster"] == "c"].max() == 20.0


def test_the_old_rule_would_have_called_the_missing_policy_fastest():
    """Why the rule: charging a miss its own total time makes the policy that never got there the fastest."""
    s = summary()
    own_total = s["time_to_target_s"].fillna(s["total_time_s"])
    assert s.assign(t=own_total).groupby("policy")["t"].mean().idxmin() == "static:512"


def test_claims_never_call_the_missing_policy_faster(cfg):
    s = summary()
    for ref in ("lbbsp", "gns", "static:128"):
        (cell,) = targets.ratio_cells(s, ["cluster", "optimizer"], "dynamix", ref)
        assert (cell > 1).all(), ref
    per = claims.per_cluster(s, cfg).set_index("reference")
    assert (per["estimate"] > 1).all()
    assert not per["verdict"].isin(["holds", "reproduced", "direction only"]).any()
    assert per.loc["median static", "agent_headroom_share"] < 0
    vs = claims.vs_static(s, cfg).set_index(["metric", "reference"])
    assert vs.loc[("time_reduction_pct", "median static"), "estimate"] < 0
    assert vs.loc[("time_reduction_pct", "best static"), "best_static"] != "static:512"
    (time_row,) = [r for r in claims.up_to_rows(s, cfg) if r["unit"] == "%" and r["kind"] == "paper"]
    assert claims.with_verdict(time_row, cfg)["verdict"] in ("not reproduced",)
    pooled = {r["claim"]: r for r in claims.ours_rows(s, cfg)}
    assert all(r["estimate"] > 1 for r in pooled.values())


def test_claims_say_how_many_runs_of_each_side_missed(cfg):
    s = summary()
    per = claims.per_cluster(s, cfg).set_index("reference")
    assert per.loc["lbbsp", "missed"] == "5/5 vs 0/5"
    assert per.loc["median static", "missed"] == "5/5 vs 5/25"
    pooled = claims.ours_rows(s, cfg)
    assert all("missed 5/5 vs 0/5" in r["where"] for r in pooled)


def test_compare_never_calls_the_missing_policy_faster():
    row = compare.compare(summary(), "dynamix").iloc[0]
    assert row["ratio_vs_median_static"] > 1 and row["ratio_vs_lbbsp"] > 1
    assert row["policy_unreached"] == 5


def test_the_oracle_never_picks_a_batch_that_wins_by_missing():
    # B=1024 reaches the target late on two seeds and ends early on the third; B=256 reaches it on two too
    runs = pd.DataFrame({"cluster": "c", "batch": [256] * 3 + [1024] * 3, "seed": [0, 1, 2] * 2,
                         "time_to_target_s": [10.0, 10.0, math.nan, 12.0, 12.0, math.nan],
                         "total_time_s": [20.0, 20.0, 20.0, 14.0, 14.0, 4.0]})
    grid = oracle.pick_fastest(runs)
    assert int(grid.loc[grid["chosen"], "batch"].iloc[0]) == 256


def test_the_tuned_batch_never_wins_by_missing():
    t = pd.DataFrame({"cluster": "a", "per_worker_batch": [64, 64, 256, 256], "seed": [0, 1, 0, 1],
                      "time_to_target_s": [10.0, 10.0, 8.0, math.nan], "total_time_s": [20.0, 20.0, 16.0, 3.0]})
    t["time_to_target_censored_s"] = targets.censored_time(t)
    assert tuning.choose(t) == 64


def test_compression_never_calls_the_missing_setting_faster():
    rows = []
    for comp, (t, total) in {"none": (10.0, 20.0), "lhc": (math.nan, 6.0)}.items():
        rows += [{"workload": "w", "cluster": "c", "compression": comp, "policy": "static:32", "seed": s, "time_to_target_s": t,
                  "total_time_s": total, "mean_global_batch": 128.0, "compression_ratio": 4.0} for s in SEEDS]
    r = compression.lhc_vs_none(pd.DataFrame(rows), 0.95, 0.03).iloc[0]
    assert r["ratio"] > 1 and r["verdict"] == "does not hold"


def test_sim_to_real_ratios_never_call_the_missing_policy_faster():
    s = summary(backend="sim")
    table = sim2real.ratios(s, "dynamix")
    assert (table["estimate"] > 1).all()


def test_every_time_comparison_reads_the_one_rule():
    """No module fills a missing time to target any other way."""
    from dynamix import paths

    offenders = [p.relative_to(paths.ROOT) for p in (paths.ROOT / "dynamix").rglob("*.py")
                 if 'fillna(summary["total_time_s"]' in p.read_text() or 'fillna(runs["total_time_s"])' in p.read_text()
                 or ".fillna(budget)" in p.read_text()]
    assert offenders == []
    assert np.isfinite(targets.censored_time(summary())).all()


def test_the_per_policy_table_ranks_the_missing_policy_behind_every_policy_that_reached(cfg):
    table = claims.per_policy(summary(), cfg).set_index("policy")
    assert table.loc["dynamix", "missed"] == "5/5" and table.loc["lbbsp", "missed"] == "0/5"
    reached = table[table["missed"].str.startswith("0/")]
    assert (table.loc["dynamix", "time_to_target_s"] > reached["time_to_target_s"]).all()
    assert table.loc["dynamix", "over_oracle"] > 1 and table.loc["dynamix", "headroom_share"] < 0
    assert table.loc["oracle", "headroom_share"] == pytest.approx(1.0)
    assert "| dynamix | 5/5 |" in claims.per_policy_markdown(table.reset_index(), cfg.evaluation.target_fraction)


def test_across_clusters_the_missing_policy_is_behind_and_its_worst_cell_named(cfg):
    """Two cells: lbbsp is 10 % slower than the oracle in both, gns 2 % in one and 30 % in the other;
    dynamix misses everywhere. The summary gives each policy's geometric mean and worst cell, ranks the
    policy that never reached the target behind every one that did, and counts its misses."""
    slower = {**CELL, "gns": [(10.4 + 0.1 * s, 18.0) for s in SEEDS]}  # 1.3x the oracle in cell "d"
    table = claims.per_policy(summary({"c": CELL, "d": slower}), cfg)
    across = claims.across_clusters(table, cfg.evaluation.target_fraction).set_index("policy")
    assert list(across.columns) == claims.ACROSS_COLUMNS[:1] + claims.ACROSS_COLUMNS[2:]
    at = table.set_index(["cluster", "policy"])["over_oracle"]
    assert across.loc["gns", "geomean_over_oracle"] == pytest.approx(math.sqrt(at["c", "gns"] * at["d", "gns"]))
    assert across.loc["gns", "worst_cluster"] == "d" and across.loc["gns", "worst_over_oracle"] == pytest.approx(at["d", "gns"])
    assert across.loc["dynamix", "missed"] == "10/10" and across.loc["lbbsp", "missed"] == "0/10"
    reached = across[across["missed"].str.startswith("0/")]
    assert (across.loc["dynamix", "geomean_over_oracle"] > reached["geomean_over_oracle"]).all()
    md = claims.per_policy_markdown(table, cfg.evaluation.target_fraction)
    assert md.startswith("**Across the held-out clusters**") and "| dynamix | sgd | 2 | 10/10 | ≥ " in md


def test_the_across_table_is_given_at_every_target_level_the_primary_first(cfg):
    """A verdict that holds at one target level only must show it: the summary across the cells comes at
    each level, the other levels' read against the oracle chosen at the primary one."""
    primary = cfg.evaluation.target_fraction
    at = claims.per_policy(summary(), cfg)
    other = round(primary - 0.05, 2)  # there every policy reaches the target, at the oracle's time
    lower = at.assign(level=other, over_oracle=1.0, missed="0/5")
    md = claims.per_policy_markdown(pd.concat([lower, at], ignore_index=True), primary)
    assert [line for line in md.splitlines() if line.startswith("**Across")] == [
        f"**Across the held-out clusters** (level {primary:g}; time to target over the oracle's)",
        f"**Across the held-out clusters** (level {other:g}; time to target over the oracle's, the member chosen at "
        f"level {primary:g})"]
    assert "| dynamix | sgd | 1 | 5/5 | ≥ " in md and "| dynamix | sgd | 1 | 0/5 | 1.00 | 1.00 |" in md


def test_times_at_other_target_levels_come_from_the_same_windows():
    """at_levels: the primary level gives the summary's own times; a higher level is crossed no sooner."""
    windows = pd.DataFrame({"run_id": ["r0"] * 4 + ["r1"] * 4, "window": [0, 1, 2, 3] * 2,
                            "elapsed_s": [1.0, 2.0, 3.0, 4.0] * 2,
                            "test_acc": [0.30, 0.50, 0.58, 0.60, 0.20, 0.40, 0.55, 0.555]})
    per_run = pd.DataFrame({"run_id": ["r0", "r1"], "cluster": "c", "policy": ["a", "b"], "seed": 0,
                            "total_time_s": 4.0, "target_accuracy": 0.57 * 0.95})
    per_run["time_to_target_s"] = [targets.time_to_target(windows[windows["run_id"] == r], 0.57 * 0.95)
                                   for r in per_run["run_id"]]
    table = targets.at_levels(per_run, windows, (0.98, 0.9), 0.95)
    assert sorted(set(table["level"])) == [0.9, 0.95, 0.98]
    prim = table[table["level"] == 0.95].reset_index(drop=True)
    pd.testing.assert_series_equal(prim["time_to_target_s"], per_run["time_to_target_s"], check_names=False)
    t = table.pivot(index="run_id", columns="level", values="time_to_target_s")
    assert t.loc["r0", 0.9] <= t.loc["r0", 0.95] <= t.loc["r0", 0.98]
    assert math.isnan(t.loc["r1", 0.98]) and table.loc[table["level"] == 0.98, "target_accuracy"].iloc[0] == pytest.approx(0.57 * 0.98)


def test_transfer_ratios_never_call_the_missing_policy_faster():
    """A transferred policy that misses every seed stays in the table, slower than each reference."""
    from dynamix.experiments import transfer

    cell = {"transferred": CELL["dynamix"], "target-trained": CELL["lbbsp"], "static:64": CELL["static:64"]}
    s = summary({"c": cell}).assign(pair="a->b").drop(columns="cluster")
    r = transfer.ratios(s, 0.95)["a->b"]
    assert set(r) == {"time_ratio_transferred_vs_target-trained", "time_ratio_transferred_vs_static:64"}
    assert all(v["estimate"] > 1 for v in r.values())
    assert r["time_ratio_transferred_vs_static:64"]["missed"] == {"transferred": 5, "static:64": 0}
