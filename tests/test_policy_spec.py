"""Policy spec strings: parsed once into a PolicySpec that gives back the text as written, a bad one
refused naming the spec and the allowed forms, and a trained policy's artifact read once per evaluation
however many runs follow it."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from dynamix import cli, config, io
from dynamix.cluster import ClusterSpec, DeviceProfile, WorkerSpec
from dynamix.config import ConfigError
from dynamix.evaluation.runner import SimTask, evaluate
from dynamix.policies import Bounds, PolicySpec, known_policies, make_policy
from dynamix.rl import policy as rl_policy
from dynamix.rl.actions import ActionScheme
from dynamix.rl.learner import build, recipe_for
from dynamix.rl.artifact import save_policy
from dynamix.rl.state import SPECS
from helpers.rl import rl_cfg, tiny_cost

FORMS = [
    ("static", "static", ""),
    ("static:64", "static", "64"),
    ("lbbsp", "lbbsp", ""),
    ("lbbsp:batch=512", "lbbsp", "batch=512"),
    ("lbbsp:deadband=0.05,history=8,decay=0.7", "lbbsp", "deadband=0.05,history=8,decay=0.7"),
    ("gns", "gns", ""),
    ("gns:refit=50,gain=0.05,smoothing=0.98", "gns", "refit=50,gain=0.05,smoothing=0.98"),
    ("ramp:factor=2,every=200", "ramp", "factor=2,every=200"),
    ("oracle:batch=512,then=1024,at=15", "oracle", "batch=512,then=1024,at=15"),
    ("dynamix:path/to/policy.zip", "dynamix", "path/to/policy.zip"),
    ("dynamix:/abs/dir/NAME", "dynamix", "/abs/dir/NAME"),
]


@pytest.mark.parametrize("text, kind, arg", FORMS)
def test_every_form_parses_and_gives_its_text_back(text, kind, arg):
    spec = PolicySpec.parse(text)
    assert (spec.kind, spec.arg) == (kind, arg)
    assert str(spec) == text  # run ids, cache keys and labels read this text
    assert PolicySpec.parse(spec) is spec and PolicySpec.parse(str(spec)) == spec
    assert spec.path == (arg if kind == "dynamix" else None)
    assert spec.label == ("dynamix" if kind == "dynamix" else text)


def test_a_trained_policy_spec_names_its_artifact_and_a_task_keeps_the_text():
    spec = PolicySpec.trained(Path("results/policies/p.zip"))
    assert spec == PolicySpec.parse("dynamix:results/policies/p.zip")
    task = SimTask(ClusterSpec(name="c", workers=(WorkerSpec(DeviceProfile("a", 1.0)),)), rl_cfg(),
                   "lbbsp:batch=512", 3)
    assert task.policy == PolicySpec("lbbsp", "batch=512")
    assert task.run_id == io.run_id("c", "lbbsp:batch=512", 3)  # the id the text gives


@pytest.mark.parametrize("text, message", [
    ("turbo:3", "policy spec 'turbo:3': unknown policy 'turbo': must be one of "),
    ("static:", "policy spec 'static:': the argument after ':' is empty: write 'static' or static:ARG"),
    ("dynamix: ", "policy spec 'dynamix: ': the argument after ':' is empty: write 'dynamix' or dynamix:ARG"),
])
def test_a_bad_spec_is_refused_naming_it_and_the_allowed_forms(text, message):
    for refuse in (PolicySpec.parse, make_policy):
        with pytest.raises(ConfigError) as err:
            refuse(text)
        assert str(err.value).startswith(message)
    if "unknown" in message:
        assert str(err.value).endswith(", ".join(known_policies()))
    with pytest.raises(ConfigError, match="policy spec"):  # before any run starts
        SimTask(ClusterSpec(name="c", workers=(WorkerSpec(DeviceProfile("a", 1.0)),)), rl_cfg(), text, 0)


def tiny_policy(cfg, path: Path) -> Path:
    """An untrained artifact for ``cfg`` (what it decides does not matter here): no training needed."""
    dim = SPECS[cfg.rl.state].obs_dim
    n = len(ActionScheme.of(cfg.rl.action, cfg.batch.actions, Bounds(cfg.batch.min, cfg.batch.max)).choices)
    model = build(recipe_for(cfg.rl, 1, 0), None,
                  (gym.spaces.Box(-np.inf, np.inf, (dim,), np.float32), gym.spaces.Discrete(n)))
    return save_policy(model, path, cfg, {"timesteps": 0, "init": None})


@pytest.fixture
def loads(monkeypatch) -> list[str]:
    """The artifacts a trained policy reads, one entry per read."""
    calls: list[str] = []
    real = rl_policy.load_policy
    monkeypatch.setattr(rl_policy, "load_policy", lambda path: calls.append(path) or real(path))
    return calls


def test_evaluating_a_trained_policy_over_several_seeds_reads_its_artifact_once(tmp_path, loads):
    cfg = rl_cfg()
    zip_path = tiny_policy(cfg, tmp_path / "policies" / "tiny.zip")
    spec = ClusterSpec(name="two-speed", workers=(WorkerSpec(DeviceProfile("a", 1.0)),
                                                  WorkerSpec(DeviceProfile("b", 0.25))))
    _, summary = evaluate([spec], [f"dynamix:{zip_path}", "static:16"], cfg, seeds=3, progress=False,
                          cost=tiny_cost(), budget="epochs")
    assert loads == [str(zip_path)]
    assert summary["policy"].tolist() == ["dynamix:tiny"] * 3 + ["static:16"] * 3


def test_dynamix_evaluate_reads_the_artifact_once_for_its_runs_and_compare(tmp_path, loads, capsys):
    """The command checks the policy against the bounds, runs it over seeds and compares it: one read."""
    sets = ["model.name=mlp", "model.width=0.25", "train.max_iters=4", "train.eval_every=2",
            "train.eval_samples=100", "batch.window=2"]
    cfg = config.load(profile="smoke", overrides=sets)
    policy = f"dynamix:{tiny_policy(cfg, tmp_path / 'policies' / 'tiny.zip')}"
    argv = ["evaluate", "--profile", "smoke", *[a for s in sets for a in ("--set", s)],
            "--cluster", "clusters/slow-worker-4.yaml", "--policy", policy, "--policy", "static:32",
            "--policy", "static:64", "--policy", "lbbsp", "--policy", "gns", "--seeds", "2", "--budget", "epochs",
            "--compare", policy, "--out", str(tmp_path / "eval"), "--no-progress"]
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert len(loads) == 1
    assert (tmp_path / "eval" / "compare.csv").exists()
