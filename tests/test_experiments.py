"""Experiments: a real (tiny) run writes the tidy files, deterministically; claims arithmetic; cluster scaling."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from dynamix import cluster, config
from dynamix.cli import main as cli_main
from dynamix.experiments import baselines, claims, common, policy_training
from dynamix.experiments.scalability import scaled
from dynamix.metrics.schema import RUNS_COLUMNS


def tiny_cfg(**over) -> config.Config:
    base = {"experiments": {"seeds": 1, "jobs": 1, "epochs": 0.05, "eval_every": 2, "eval_samples": 200,
                            "baselines": {"batch_sizes": [32, 128]}}}  # fmt: skip
    return config.load(profile="smoke", overrides=config.deep_merge(base, over))


def test_baselines_run_writes_tidy_files_and_is_deterministic(tmp_path):
    cfg = tiny_cfg()
    summary = baselines.run(cfg, tmp_path / "a" / "baselines")
    out = tmp_path / "a" / "baselines"
    runs = pd.read_csv(out / "runs.csv")
    assert set(RUNS_COLUMNS) <= set(runs.columns) and {"batch_size", "cluster"} <= set(runs.columns)
    assert sorted(runs["policy"].unique()) == ["static:128", "static:32"]
    assert (runs.loc[runs["policy"] == "static:32", "global_batch"] == 32 * 4).all()
    per_run = pd.read_csv(out / "summary.csv")
    assert len(per_run) == 2 and per_run["final_accuracy"].between(0, 1).all()
    # larger batches: fewer iterations for the same epochs
    iters = runs.groupby("policy")["iteration"].max()
    assert iters["static:32"] > iters["static:128"]
    assert json.loads((out / "summary.json").read_text())["best_batch_size"] == summary["best_batch_size"]
    manifest = common.read_manifest(out)
    assert manifest["config_hash"] == cfg.hash() and manifest["experiment"] == "baselines"
    figs = baselines.figures(out, tmp_path / "a" / "figures" / "baselines")
    assert all(f.exists() and f.with_suffix(".pdf").exists() for f in figs)
    baselines.run(cfg, tmp_path / "b" / "baselines")  # same config, same seed: identical rows
    assert (tmp_path / "b" / "baselines" / "runs.csv").read_text() == (out / "runs.csv").read_text()


def test_dynamix_run_command_runs_an_experiment(tmp_path, capsys):
    rc = cli_main(["run", "baselines", "--profile", "smoke", "--out", str(tmp_path / "baselines"), "--no-figures",
                   "--set", "experiments.seeds=1", "--set", "experiments.epochs=0.02",
                   "--set", "experiments.baselines.batch_sizes=[64]"])  # fmt: skip
    assert rc == 0
    assert json.loads(capsys.readouterr().out)["best_batch_size"] == 64
    with pytest.raises(SystemExit):
        cli_main(["run", "nonsense"])


def test_policy_stage_starts_over_when_params_change_under_its_checkpoint(tmp_path):
    """results/policies persists (an interrupted stage resumes); after a params change the stage
    must train the new config's policy, not fail on, or resume, the old config's checkpoint."""
    out = tmp_path / "policy_training"
    first = tiny_cfg(rl={"timesteps": 16})
    policy_training.run(first, out)
    changed = config.load(profile="smoke", overrides=config.deep_merge(
        {"experiments": {"seeds": 1, "jobs": 1}, "rl": {"timesteps": 16}}, {"reward": {"beta": 0.1}}))
    summary = policy_training.run(changed, out)
    meta = json.loads((policy_training.policy_dir(out) / "dynamix.json").read_text())
    assert meta["reward"]["beta"] == 0.1 and meta["training"]["timesteps"] >= 16 >= summary["timesteps"]
    assert pd.read_csv(out / "progress.csv")["episode"].iloc[0] == 0  # a new run, not the old one extended


def _per_run(policy_times: dict[str, list[float]], accs: dict[str, list[float]]) -> pd.DataFrame:
    rows = []
    for p, ts in policy_times.items():
        for seed, (t, a) in enumerate(zip(ts, accs[p])):
            rows.append({"cluster": "c", "optimizer": "sgd", "policy": p, "seed": seed, "time_to_target_s": t,
                         "total_time_s": 100.0, "final_accuracy": a})  # fmt: skip
    return pd.DataFrame(rows)


def test_claims_pair_by_seed_against_the_median_static_and_censor_unreached_runs():
    cfg = config.load(profile="smoke", overrides={"experiments": {"aggregate": "mean", "n_boot": 200}})
    per_run = _per_run(
        {"dynamix": [5.0, 6.0, np.nan], "static:64": [10.0, 12.0, 50.0], "static:128": [20.0, 6.0, 50.0],
         "static:256": [30.0, 30.0, 50.0]},
        {"dynamix": [0.5, 0.6, 0.4], "static:64": [0.4, 0.5, 0.4], "static:128": [0.45, 0.55, 0.4],
         "static:256": [0.3, 0.3, 0.3]},
    )  # fmt: skip
    table = claims.vs_static(per_run, cfg).set_index("metric")
    # seed 0: 1 - 5/20; seed 1: 1 - 6/12; seed 2: dynamix censored at 100 -> 1 - 100/50
    assert table.loc["time_reduction_pct", "estimate"] == pytest.approx(100 * np.mean([0.75, 0.5, -1.0]))
    assert table.loc["accuracy_gain_pts", "estimate"] == pytest.approx(100 * np.mean([0.1, 0.1, 0.0]))
    assert table.loc["time_reduction_pct", "n_seeds"] == 3
    est = {"estimate": 40.0, "ci_lo": 30.0, "ci_hi": 50.0}
    assert claims._verdict(est, 46.0, up_to=True) == "reproduced"
    assert claims._verdict({**est, "ci_hi": 45.0}, 46.0, up_to=True) == "direction only"
    assert claims._verdict({"estimate": -1.0, "ci_lo": -2.0, "ci_hi": 0.5}, 46.0, up_to=True) == "not reproduced"


def test_scaled_cluster_keeps_the_worker_mix():
    base = cluster.load("clusters/heldout/hetero-speed-4.yaml")
    big = scaled(base, 10)
    assert big.n_workers == 10 and big.name == "hetero-speed-4-x10"
    assert big.speeds == tuple(base.speeds[j % 4] for j in range(10))
    small = scaled(cluster.load("clusters/heldout/ps-event-4.yaml"), 1)
    assert small.n_workers == 1 and all(all(w < 1 for w in e.workers) for e in small.events)
    with pytest.raises(ValueError, match="experiments.scalability.workers"):
        scaled(base, 0)
