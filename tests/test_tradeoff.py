"""Clusters where batch size matters: the device's fixed cost per iteration in the cost model, the
trade-off index, and the held-out and validation sets the converged profile compares policies on."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dynamix import cluster, config
from dynamix.cluster.costmodel import CostModel
from dynamix.cluster.tradeoff import nominal_index, nominal_throughput
from dynamix.evaluation.budget import time_budget_config
from dynamix.sim.cluster import calibrated_cost

# tiny-cnn x0.5, the cpu profile's workload, timed by its committed reference calibration
CPU = calibrated_cost(config.load(profile="cpu"))


def test_fixed_cost_is_added_per_iteration_and_not_scaled_by_speed():
    cost = CostModel(a_ms=0.0, c_ms_per_sample=0.42, gradient_bytes=97_384)
    t = cost.compute_ms(np.array([32, 32]), np.array([1.0, 4.0]), np.array([0.0, 2.5]))
    assert t.tolist() == pytest.approx([32 * 0.42, 32 * 0.42 / 4 + 2.5])


def test_index_is_one_without_fixed_cost_or_communication_and_grows_with_either():
    flat = cluster.homogeneous(4, bandwidth_gbps=1e4, latency_ms=0.0)
    assert nominal_index(flat, CPU, 32, 512) == pytest.approx(1.0, rel=1e-3)
    gpu = dataclasses.replace(flat.workers[0].device, fixed_ms=10.0)
    fixed = dataclasses.replace(flat, workers=tuple(dataclasses.replace(w, device=gpu) for w in flat.workers))
    slow = cluster.homogeneous(4, bandwidth_gbps=0.05)
    assert nominal_index(fixed, CPU, 32, 512) > 1.5 and nominal_index(slow, CPU, 32, 512) > 1.5
    assert nominal_throughput(fixed, CPU, 512) > nominal_throughput(fixed, CPU, 32)
    with pytest.raises(ValueError, match="small < large"):
        nominal_index(flat, CPU, 64, 32)


HELD_OUT = [cluster.load(p) for p in config.load(profile="cpu").experiments.inference.clusters]
VALIDATION = [cluster.load(p) for p in config.load(profile="cpu").experiments.inference.tune_clusters]


def test_the_converged_profiles_held_out_set_covers_the_regimes_where_batch_size_matters():
    kinds = [s.kind for s in HELD_OUT]
    assert len(HELD_OUT) >= 5
    assert sum(k in ("comm", "fixed-cost") for k in kinds) >= 2
    assert sum(bool(s.events) for s in HELD_OUT) >= 2  # transient events
    index = [nominal_index(s, CPU, 32, 512) for s in HELD_OUT]
    assert sum(i >= 2 for i in index) >= len(HELD_OUT) / 2, dict(zip([s.name for s in HELD_OUT], index))


def test_validation_clusters_are_apart_from_the_held_out_ones_and_cover_the_same_kinds():
    assert not {s.name for s in VALIDATION} & {s.name for s in HELD_OUT}
    assert {"comm", "fixed-cost", "dynamic"} <= {s.kind for s in VALIDATION}


def test_a_time_budget_stops_a_run_but_keeps_its_schedules_horizon():
    cfg = config.load(profile="smoke", overrides={"train": {"epochs": 3.0}})
    timed = time_budget_config(cfg, 12.5).train
    assert timed.max_time_s == 12.5 and timed.epochs > 3.0 and timed.schedule_epochs == 3.0


def test_an_unknown_cluster_kind_is_refused_naming_the_field():
    with pytest.raises(config.ConfigError, match="kind"):
        cluster.from_dict({"name": "x", "kind": "fast", "workers": [{"count": 2}]})


def test_cluster_table_measures_the_index_from_the_static_sweeps_throughput():
    import pandas as pd

    from dynamix.experiments.inference import CLUSTER_COLUMNS, cluster_table

    spec = cluster.load("clusters/heldout/comm-ring-8.yaml")
    per_run = pd.DataFrame([{"cluster": spec.name, "policy": p, "seed": s, "throughput_samples_per_s": t}
                            for p, t in (("static:32", 100.0), ("static:128", 180.0), ("static:512", 250.0),
                                         ("lbbsp", 999.0)) for s in range(2)])
    table = cluster_table(per_run, [spec, cluster.load("clusters/heldout/ps-incast-6.yaml")])
    assert list(table.columns) == CLUSTER_COLUMNS and len(table) == 1  # a cluster without runs is left out
    assert table.iloc[0].to_dict() == {"cluster": "comm-ring-8", "kind": "comm", "n_workers": 8,
                                       "trade_off_index": 2.5}
