"""What experiments share: run ids, manifests, strict JSON, config overrides, transfer pairs, policy
names; and the package of the stages holds the stages only, one per notebook."""

from __future__ import annotations

import ast
import json
import re

import numpy as np
import pandas as pd
import pytest
import torch

from dynamix import config, io, paths
from dynamix.config import ConfigError
from dynamix.evaluation.plan import Workload, parse_pair
from dynamix.experiments import EXPERIMENTS
from dynamix.experiments.transfer import policy_name
from dynamix.pipeline.manifest import write_manifest


def test_run_ids_are_deterministic_and_filesystem_safe():
    rid = io.run_id("clusters/mixed-4.yaml", "static:64", "adam", 3)
    assert rid == "mixed-4__static-64__adam__s3"
    assert rid == io.run_id("clusters/mixed-4.yaml", "static:64", "adam", 3)
    assert "/" not in io.run_id("dynamix:/tmp/x/policy.zip") and ":" not in io.run_id("dynamix:x")


def test_manifest_records_config_hash_versions_and_sha(tmp_path):
    cfg = config.load(profile="smoke")
    write_manifest(tmp_path, cfg, "unit")
    m = json.loads((tmp_path / "manifest.json").read_text())
    assert m["config_hash"] == cfg.hash()
    assert m["profile"] == "smoke" and m["experiment"] == "unit"
    assert m["versions"]["torch"] and m["git_sha"]
    assert m["cpu"]["kernels"] == "avx2" and set(m["cpu"]) == {"vendor", "family", "model", "name", "kernels"}
    with open("/proc/cpuinfo") as f:
        assert f"vendor_id\t: {m['cpu']['vendor']}" in f.read()
    assert m["config"]["experiments"]["seeds"] == cfg.experiments.seeds


def test_json_writer_turns_nan_into_null(tmp_path):
    io.write_json(tmp_path / "s.json", {"a": float("nan"), "b": np.float64(1.5), "c": (1, 2)})
    assert json.loads((tmp_path / "s.json").read_text()) == {"a": None, "b": 1.5, "c": [1, 2]}


def test_with_overrides_revalidates():
    cfg = config.load(profile="smoke")
    adam = config.with_overrides(cfg, {"optim": {"name": "adam"}})
    assert adam.optim.name == "adam" and cfg.optim.name == "sgd"
    with pytest.raises(config.ConfigError, match="optim.name"):
        config.with_overrides(cfg, {"optim": {"name": "lamb"}})


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
    names = {policy_name(w) for pair in ("mlp@0.25/sgd->mlp@0.25/adam", "mlp@0.25/sgd->mlp@0.5/sgd") for w in parse_pair(pair)}
    assert names == {"mlp-0p25-sgd", "mlp-0p5-sgd", "mlp-0p25-adam"}


def _experiment_imports(source: str) -> set[str]:
    """Sub-modules of dynamix.experiments that ``source`` imports."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == "dynamix.experiments":
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dynamix.experiments."):
            found.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[2] for a in node.names if a.name.startswith("dynamix.experiments.")}
    return found


def test_experiments_holds_the_stages_only_one_per_notebook():
    """dynamix.experiments holds one module per stage notebook (``notebooks/NN_<stage>.ipynb``; the
    playground, explore.ipynb, is no stage) and nothing else: what stages share sits in the layers
    below them (dynamix.evaluation.plan, .policy_names), the surrogate's fit beside the work it does
    (dynamix.evaluation.surrogate_fit).
    No stage imports another (import-linter's stages-independent contract, too), and the pipeline
    (dynamix.pipeline) runs their notebooks, reads their manifests' provenance, and imports no stage."""
    folder = paths.ROOT / "dynamix" / "experiments"
    for module in sorted((paths.ROOT / "dynamix" / "pipeline").glob("*.py")):
        assert _experiment_imports(module.read_text()) == set(), module.name
    modules = {p.stem for p in folder.glob("*.py")} - {"__init__"}
    notebooks = {p.stem: re.fullmatch(r"\d\d_(\w+)", p.stem) for p in paths.NOTEBOOKS.glob("*.ipynb")}
    assert {name for name, stage in notebooks.items() if stage is None} == {"explore"}
    assert modules == {stage.group(1) for stage in notebooks.values() if stage} == set(EXPERIMENTS)
    assert [p.name for p in folder.iterdir() if p.is_dir() and p.name != "__pycache__"] == []
    for name in modules:
        assert _experiment_imports((folder / f"{name}.py").read_text()) == set(), name
    assert _experiment_imports("from dynamix.experiments.inference import workload") == {"inference"}  # control


def test_resolve_policy_names_the_trained_policy_and_refuses_the_tuned_lbbsp_outside_inference(tmp_path):
    from dynamix.evaluation.policy_names import TUNED_LBBSP, resolve_policy

    pdir = tmp_path / "policies"
    with pytest.raises(ConfigError, match="experiments.inference.policies"):  # never a guess: the sweep must run
        resolve_policy(TUNED_LBBSP, pdir, "dynamix")
    assert resolve_policy("dynamix", pdir, "p") == f"dynamix:{pdir / 'p.zip'}"
    assert resolve_policy("lbbsp", pdir, "p") == "lbbsp"


def test_transfer_trains_its_missing_policies_side_by_side_each_on_its_workload(tmp_path):
    """Two workloads' policies in two processes: each artifact is complete and records its own
    workload and the same PPO budget (the pairing the transfer claims rely on)."""
    from dynamix.experiments.transfer import policy_name, ppo_timesteps, train_policies

    cfg = config.load(profile="smoke", overrides={"experiments": {"jobs": 2},
                                                  "rl": {"timesteps": 16, "warm_start_timesteps": 8}})
    a, b = Workload("mlp", "adam", 0.25), Workload("mlp", "sgd", 0.5)
    trained = train_policies(cfg, [a, b, a], tmp_path)
    assert set(trained) == {a, b} and trained[a].name == f"{policy_name(a)}.zip"
    metas = {w: json.loads(p.with_suffix(".json").read_text())["training"] for w, p in trained.items()}
    assert metas[a]["workload"] != metas[b]["workload"]
    assert ppo_timesteps(f"dynamix:{trained[a]}") == ppo_timesteps(f"dynamix:{trained[b]}") > 0


def test_policy_stage_trains_its_seeds_side_by_side_into_the_same_policies(tmp_path):
    """Training seeds in two processes (experiments.jobs 2) gives the policies one process gives:
    the same episodes, returns and weights, seed by seed."""
    from dynamix.experiments import policy_training
    from dynamix.rl.artifact import load_tensors

    def train(jobs: int, out):
        cfg = config.load(profile="smoke", overrides={"experiments": {"jobs": jobs, "policy_training": {"seeds": 2}},
                                                      "rl": {"timesteps": 16, "warm_start_timesteps": 8}})
        policy_training.run(cfg, out / "policy_training")
        return pd.read_csv(out / "policy_training" / "progress.csv"), out / "policies"

    (alone, one), (paired, two) = train(1, tmp_path / "one"), train(2, tmp_path / "two")
    assert sorted(alone["seed"].unique()) == [0, 1]
    pd.testing.assert_frame_equal(alone, paired)
    for name in ("dynamix.zip", "dynamix-s1.zip"):
        a, b = (load_tensors(d / name)["policy"] for d in (one, two))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_transferred_workloads_policy_is_chosen_as_the_shipped_one_is_on_its_own_model_math(tmp_path, monkeypatch):
    """With experiments.policy_training.select, the transfer stage ships another workload's policy as the
    pipeline ships the main one: the validation clusters' choice among its final policy and its
    snapshots, scored with that workload's own model (not the profile's)."""
    from dynamix.evaluation import selection
    from dynamix.experiments import transfer

    cfg = config.load(profile="smoke", overrides={"experiments": {"policy_training": {"select": True}},
                                                  "rl": {"timesteps": 16, "warm_start_timesteps": 8, "snapshots": [0]}})
    w = Workload("mlp", "sgd", 0.5)
    assert (cfg.model.name, cfg.model.width) != (w.model, w.width)
    final = transfer.policy_for(cfg, w, tmp_path / "transfer")
    seen = []
    real = selection.run_and_score

    def spy(groups, candidates, *args, **kw):
        seen.append(([run_cfg.model for _, run_cfg in groups], dict(candidates)))
        return real(groups, candidates, *args, **kw)

    monkeypatch.setattr(selection, "run_and_score", spy)
    path, record, table = transfer.chosen(cfg, w, final, tmp_path / "transfer")
    (models, candidates), = seen
    assert {(m.name, m.width) for m in models} == {("mlp", 0.5)}
    assert list(candidates) == [final.stem, f"{final.stem}-at0"]
    scored = {k: v for k, v in record["scores"].items() if k in candidates}
    assert record["chosen"] == f"{min(scored, key=scored.get)}.zip" == path.name and path.exists()
    assert set(table["workload"]) == {str(w)}
    assert set(table.loc[table["candidate"], "policy"]) == set(candidates)
