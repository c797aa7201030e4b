"""Shared experiment helpers: aggregation over seeds, run ids, per-run summaries, manifests."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from dynamix import config
from dynamix.experiments import common
from dynamix.experiments.transfer import Workload, parse_pair, policy_name


def test_iqm_trims_a_quarter_each_side_and_is_the_mean_below_four():
    assert common.iqm([1.0, 2.0, 3.0]) == pytest.approx(2.0)
    # n = 8: drop 2 lowest and 2 highest
    assert common.iqm([100.0, 1, 2, 3, 4, 5, 6, -100.0]) == pytest.approx(np.mean([2, 3, 4, 5]))
    assert math.isnan(common.iqm([]))
    assert common.iqm([1.0, float("nan"), 3.0]) == pytest.approx(2.0)


def test_bootstrap_interval_covers_the_estimate_and_narrows_with_more_seeds():
    rng = np.random.default_rng(0)
    few = rng.normal(10, 1, 5)
    many = rng.normal(10, 1, 200)
    lo5, hi5 = common.bootstrap_ci(few, "mean", 2000, 0.95, seed=1)
    lo200, hi200 = common.bootstrap_ci(many, "mean", 2000, 0.95, seed=1)
    assert lo5 <= np.mean(few) <= hi5
    assert lo200 <= 10 <= hi200
    assert hi200 - lo200 < hi5 - lo5
    # deterministic for a seed, and a different seed is a control
    assert common.bootstrap_ci(few, "iqm", 500, 0.95, seed=1) == common.bootstrap_ci(few, "iqm", 500, 0.95, seed=1)
    assert common.bootstrap_ci(few, "iqm", 500, 0.95, seed=1) != common.bootstrap_ci(few, "iqm", 500, 0.95, seed=2)
    assert common.bootstrap_ci([3.0], "iqm") == (3.0, 3.0)
    assert all(math.isnan(v) for v in common.bootstrap_ci([]))


def test_aggregate_groups_and_counts_missing_values_as_not_reached():
    df = pd.DataFrame({
        "policy": ["a"] * 4 + ["b"] * 4,
        "t": [1.0, 2.0, 3.0, np.nan, 10.0, 10.0, 10.0, 10.0],
    })  # fmt: skip
    agg = common.aggregate(df, ["policy"], ["t"], "mean", 500, 0.95).set_index("policy")
    assert agg.loc["a", "t"] == pytest.approx(2.0)
    assert agg.loc["a", "t_reached"] == pytest.approx(0.75)
    assert agg.loc["b", "t_lo"] == agg.loc["b", "t_hi"] == pytest.approx(10.0)
    assert list(agg["n_seeds"]) == [4, 4]
    with pytest.raises(ValueError, match="experiments.aggregate"):
        common.point_estimate([1.0], "median")


def test_run_ids_are_deterministic_and_filesystem_safe():
    rid = common.run_id("clusters/mixed-4.yaml", "static:64", "adam", 3)
    assert rid == "mixed-4__static-64__adam__s3"
    assert rid == common.run_id("clusters/mixed-4.yaml", "static:64", "adam", 3)
    assert "/" not in common.run_id("dynamix:/tmp/x/policy.zip") and ":" not in common.run_id("dynamix:x")


def _runs(accs, times, batch=128, seed=0, rid="r"):
    rows = []
    for w, (a, t) in enumerate(zip(accs, times)):
        for rank in range(2):
            rows.append({"run_id": rid, "policy": "p", "seed": seed, "window": w, "iteration": 10 * (w + 1),
                         "elapsed_s": t, "test_acc": a, "global_batch": batch, "throughput_samples_per_s": 1.0,
                         "epoch": 0.1 * w, "iter_time_ms": 1.0, "rank": rank})  # fmt: skip
    return pd.DataFrame(rows)


def test_run_summary_final_accuracy_time_and_throughput():
    runs = pd.concat([_runs([np.nan, 0.3, 0.5, 0.45], [1, 2, 3, 4], rid="x"),
                      _runs([0.1, 0.2, 0.2, np.nan], [2, 4, 6, 8], seed=1, rid="y")])  # fmt: skip
    s = common.run_summary(runs, ["policy"]).set_index("run_id")
    assert s.loc["x", "final_accuracy"] == pytest.approx(0.45)
    assert s.loc["y", "final_accuracy"] == pytest.approx(0.2)  # the last test evaluated
    assert s.loc["x", "total_time_s"] == 4 and s.loc["y", "seed"] == 1
    # 4 windows x 10 iterations x 128 samples over 4 s
    assert s.loc["x", "throughput_samples_per_s"] == pytest.approx(4 * 10 * 128 / 4)


def test_manifest_records_config_hash_versions_and_sha(tmp_path):
    cfg = config.load(profile="smoke")
    common.write_manifest(tmp_path, cfg, "unit")
    m = json.loads((tmp_path / "manifest.json").read_text())
    assert m["config_hash"] == cfg.hash()
    assert m["profile"] == "smoke" and m["experiment"] == "unit"
    assert m["versions"]["torch"] and m["git_sha"]
    assert m["config"]["experiments"]["seeds"] == cfg.experiments.seeds


def test_json_writer_turns_nan_into_null(tmp_path):
    common.write_json(tmp_path / "s.json", {"a": float("nan"), "b": np.float64(1.5), "c": (1, 2)})
    assert json.loads((tmp_path / "s.json").read_text()) == {"a": None, "b": 1.5, "c": [1, 2]}


def test_with_overrides_revalidates():
    cfg = config.load(profile="smoke")
    adam = common.with_overrides(cfg, {"optim": {"name": "adam"}})
    assert adam.optim.name == "adam" and cfg.optim.name == "sgd"
    with pytest.raises(config.ConfigError, match="optim.name"):
        common.with_overrides(cfg, {"optim": {"name": "lamb"}})


def test_transfer_pairs_parse_and_bad_ones_name_the_field():
    src, dst = parse_pair("resnet8/sgd->resnet20@0.5/adam")
    assert src == Workload("resnet8", "sgd") and dst == Workload("resnet20", "adam", 0.5)
    assert str(dst) == "resnet20@0.5/adam"
    for bad in ("resnet8/sgd", "resnet8/lamb->x/sgd", "a@-1/sgd->b/sgd"):
        with pytest.raises(ValueError, match="experiments.transfer.pairs"):
            parse_pair(bad)


def test_every_profile_builds_with_an_experiments_section():
    for profile in ("smoke", "default", "paper"):
        cfg = config.load(profile=profile)
        assert cfg.experiments.seeds >= 1
        for pair in cfg.experiments.transfer.pairs:
            parse_pair(pair)
    assert config.load(profile="default").experiments.seeds >= 3


def test_transfer_policy_names_are_distinct_per_workload_and_dot_free():
    names = {policy_name(w) for pair in ("mlp@0.25/sgd->mlp@0.5/sgd", "mlp@0.25/sgd->mlp@0.25/adam") for w in parse_pair(pair)}
    assert names == {"mlp-0p25-sgd", "mlp-0p5-sgd", "mlp-0p25-adam"}
