"""Experiments: a real (tiny) run writes the tidy files, deterministically; cluster scaling (claims: test_claims.py)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from dynamix import cluster, config
from dynamix.cli import main as cli_main
from dynamix.evaluation.policy_names import policy_dir
from dynamix.experiments import baselines, policy_training
from dynamix.experiments.scalability import scaled
from dynamix.metrics.schema import RUNS_COLUMNS
from dynamix.pipeline.manifest import read_manifest


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
    # the fastest static (what lbbsp:tuned is set to) is the one with the shortest time to target
    assert per_run["target_accuracy"].nunique() == 1 and "time_to_target_s" in per_run
    fastest = per_run.groupby("batch_size")["time_to_target_censored_s"].mean().idxmin()
    assert summary["fastest_batch_size"] == fastest and summary["n_workers"] == 4
    manifest = read_manifest(out)
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
    one = {"policy_training": {"seeds": 1}}  # the pipeline's policy only: no reward-curve band to train
    first = tiny_cfg(rl={"timesteps": 16}, experiments=one)
    policy_training.run(first, out)
    changed = config.load(profile="smoke", overrides=config.deep_merge(
        {"experiments": {"seeds": 1, "jobs": 1, **one}, "rl": {"timesteps": 16}}, {"reward": {"beta": 0.1}}))
    summary = policy_training.run(changed, out)
    meta = json.loads((policy_dir(out) / "dynamix.json").read_text())
    assert meta["reward"]["beta"] == 0.1 and meta["training"]["timesteps"] >= 16 >= summary["timesteps"]
    assert pd.read_csv(out / "progress.csv")["episode"].iloc[0] == 0  # a new run, not the old one extended


def test_policy_stage_fits_its_surrogate_once_and_trains_on_it(tmp_path):
    """sim.backend surrogate: the stage fits the workload's surrogate beside its folder (the static sweep
    with the model math), trains on it, and a second run reuses the fit instead of redoing it."""
    from dynamix.sim import progress

    cfg = tiny_cfg(rl={"timesteps": 16, "model": "mlp", "width": 0.25}, sim={"backend": "surrogate"},
                   experiments={"model": "mlp", "width": 0.25, "epochs": 0.2}, batch={"window": 2})
    out = tmp_path / "policy_training"
    policy_training.run(cfg, out)
    fitted = list((tmp_path / "surrogate").glob("*.json"))
    assert [p.name for p in fitted] == ["mlp-w0.25-sgd.json"]
    model = progress.load(fitted[0])
    assert model.provenance["policies"] == ["static:32", "static:128"] and model.provenance["profile"] == "smoke"
    meta = json.loads((policy_dir(out) / "dynamix.json").read_text())
    assert meta["training"]["sim"]["backend"] == "surrogate"
    # the reward curve's training seeds (smoke: 2): the pipeline's policy and one more, each its own seed
    zips = sorted(policy_dir(out).glob("*.zip"))
    assert [z.name for z in zips] == ["dynamix-s1.zip", "dynamix.zip"]
    seeds = {json.loads(z.with_suffix(".json").read_text())["training"]["seed"] for z in zips}
    assert len(seeds) == 2
    assert len(json.loads((out / "summary.json").read_text())["return_last_tenth_by_seed"]) == 2
    stamp = fitted[0].stat().st_mtime_ns
    policy_training.run(cfg, out)
    assert fitted[0].stat().st_mtime_ns == stamp


def test_scaled_cluster_keeps_the_worker_mix():
    base = cluster.load("clusters/heldout/hetero-speed-4.yaml")
    big = scaled(base, 10)
    assert big.n_workers == 10 and big.name == "hetero-speed-4-x10"
    assert big.speeds == tuple(base.speeds[j % 4] for j in range(10))
    small = scaled(cluster.load("clusters/heldout/ps-event-4.yaml"), 1)
    assert small.n_workers == 1 and all(all(w < 1 for w in e.workers) for e in small.events)
    with pytest.raises(ValueError, match="experiments.scalability.workers"):
        scaled(base, 0)


def test_inference_engine_run_starts_afresh_over_a_checkpoint_of_other_settings(tmp_path):
    from dynamix.experiments import inference
    from dynamix.train import checkpoint

    cfg = config.load(profile="smoke", overrides=["experiments.inference.engine_policy=lbbsp"])
    out = tmp_path / "engine"
    checkpoint.save(out / "checkpoint.pt", {"config_hash": "another-run", "world_size": 4})
    result = inference.engine_run(cfg, out, tmp_path / "policies")
    assert result["iterations"] == cfg.experiments.inference.engine_iters
    assert result["windows_checked"] > 0 and result["windows_with_decided_sizes"] == result["windows_checked"]
