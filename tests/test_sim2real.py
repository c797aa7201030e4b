"""Sim-to-real end to end: the same policies on torchrun workers (through the gRPC arbitrator) and on
the simulator calibrated by those workers, and the agent's ratios per backend.

The run is tiny (a fraction of an epoch on 4 workers), so the ratios themselves mean nothing here;
what a user checks is that both backends ran every (policy, seed), that the engine trained with the
batch sizes the arbitrator served, and that the ratios are computed from the summary it wrote.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from dynamix import config
from dynamix.evaluation import sim2real


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    cfg = config.load(profile="smoke", overrides={
        "model": {"name": "mlp", "width": 0.25},
        "experiments": {"seeds": 1, "sim2real": {"policies": ["dynamix", "static:32", "lbbsp"],
                                                  "epochs": 0.4}}})
    out = tmp_path_factory.mktemp("s2r")
    # the agent's label served by a fixed rule: the plumbing is the same for a trained policy
    policies = {"dynamix": "lbbsp:batch=256", "static:32": "static:32", "lbbsp": "lbbsp"}
    summary = sim2real.run(cfg, out, policies, progress=False)
    return cfg, out, summary


def test_both_backends_run_every_policy_and_seed(small_run):
    cfg, out, summary = small_run
    table = pd.read_csv(out / "summary.csv")
    pairs = set(zip(table["backend"], table["policy"]))
    assert pairs == {(b, p) for b in sim2real.BACKENDS for p in cfg.experiments.sim2real.policies}
    assert (table["final_accuracy"].between(0.0, 1.0)).all() and (table["total_time_s"] > 0).all()
    assert summary["workload"] == "mlp@0.25/sgd" and summary["cluster"] == "hetero-speed-4"
    cal = json.loads((out / "calibration.json").read_text())
    assert cal["a_ms"] >= 0 and cal["c_ms_per_sample"] > 0 and cal["n_workers"] == 4


def test_the_engine_trains_with_the_sizes_the_arbitrator_served(small_run):
    _, out, _ = small_run
    runs = pd.read_csv(out / "runs.csv")
    static = runs[(runs["backend"] == "engine") & (runs["policy"] == "static:32")]
    assert not static.empty and (static["batch_size"] == 32).all()
    agent = runs[(runs["backend"] == "engine") & (runs["policy"] == "dynamix") & (runs["window"] > 0)]
    # lbbsp:batch=256 splits a global batch of 256 over the 4 workers by speed: unequal, summing to 256
    per_window = agent.groupby("window")["batch_size"]
    assert not agent.empty and (per_window.sum() == 256).all() and (per_window.nunique() > 1).any()


def test_ratios_are_written_per_backend_from_the_summary(small_run):
    cfg, out, summary = small_run
    table = pd.read_csv(out / "ratios.csv")
    assert set(table["backend"]) == set(sim2real.BACKENDS)
    assert set(table["reference"]) == {"median static", "lbbsp"}
    again = sim2real.ratios(pd.read_csv(out / "summary.csv"), "dynamix", cfg.experiments.ci)
    merged = table.merge(again, on=["backend", "reference"], suffixes=("", "_again"))
    assert merged["estimate"].tolist() == pytest.approx(merged["estimate_again"].tolist())
    assert len(summary["ratios"]) == len(table)
