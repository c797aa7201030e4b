"""No file a user is handed runs code when a command reads it.

A crafted payload (a pickle whose ``__reduce__`` writes a marker file) is put in every place a policy
artifact, a training checkpoint or an engine checkpoint could carry it; each read is refused with one
line naming the file, and the marker never appears. A policy saved as SB3's pickled archive is refused
with the command that converts a trusted one, and that conversion keeps every decision."""

from __future__ import annotations

import base64
import json
import pickle
import re
import zipfile

import gymnasium as gym
import numpy as np
import pytest
import torch

from dynamix import cli, config
from dynamix.policies.base import Bounds
from dynamix.rl.actions import ActionScheme
from dynamix.rl.learner import build, recipe_for
from dynamix.rl.artifact import (PICKLED, PolicyArtifactError, artifact_paths, load_policy, save_policy,
                                 sha256)
from dynamix.rl.learn import CHECKPOINT_FORMAT, _stale, resume
from dynamix.rl.state import SPECS
from dynamix.train import checkpoint

SMOKE = ["--profile", "smoke", "--set", "model.name=mlp", "--set", "model.width=0.25"]


class Payload:
    """Unpickling it writes ``marker``: the proof that a file's code ran."""

    def __init__(self, marker) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('ran')",)


def run_cli(capsys, argv: list[str]) -> tuple[int, list[str]]:
    capsys.readouterr()
    rc = cli.main(argv)
    lines = capsys.readouterr().err.strip().splitlines()
    return rc, [line for line in lines if not re.match(r"decoding \S+: ", line)]


@pytest.fixture(scope="module")
def cfg():
    return config.load(profile="smoke", overrides=["model.name=mlp", "model.width=0.25"])


def untrained(cfg, path):
    """A valid artifact for ``cfg`` (an untrained network: what it decides does not matter here)."""
    dim = SPECS[cfg.rl.state].obs_dim
    n = len(ActionScheme.of(cfg.rl.action, cfg.batch.actions, Bounds(cfg.batch.min, cfg.batch.max)).choices)
    model = build(recipe_for(cfg.rl, 1, 0), None,
                  (gym.spaces.Box(-np.inf, np.inf, (dim,), np.float32), gym.spaces.Discrete(n)))
    return model, save_policy(model, path, cfg, {"timesteps": 0, "init": None})


def reseal(zip_path, **meta_changes) -> None:
    """Record ``zip_path``'s new sha256 (and ``meta_changes``) in its JSON, as someone who can write both would."""
    json_path = artifact_paths(zip_path)[1]
    meta = json.loads(json_path.read_text())
    json_path.write_text(json.dumps({**meta, **meta_changes, "zip_sha256": sha256(zip_path)}))


def sb3_archive(path, marker) -> None:
    """SB3's archive layout, its ``data`` entry's pickled field and its tensors file both the payload."""
    blob = base64.b64encode(pickle.dumps(Payload(marker))).decode()
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("data", json.dumps({"policy_class": {":type:": "<class 'type'>", ":serialized:": blob}}))
        zf.writestr("policy.pth", pickle.dumps(Payload(marker)))
        zf.writestr("_stable_baselines3_version", "2.9.2")


def commands(zip_path, tmp_path) -> list[list[str]]:
    return [["simulate", "--cluster", "clusters/slow-worker-4.yaml", *SMOKE, "--policy", f"dynamix:{zip_path}",
             "--no-progress", "--out", str(tmp_path / "sim")],
            ["train-policy", *SMOKE, "--name", "ft", "--init", str(zip_path), "--timesteps", "1",
             "--out", str(tmp_path / "pol")]]


def test_a_payload_in_the_tensors_file_never_runs(cfg, tmp_path, capsys):
    marker = tmp_path / "ran"
    _, zip_path = untrained(cfg, tmp_path / "p")
    torch.save({"policy": Payload(marker), "policy.optimizer": {}}, zip_path)
    reseal(zip_path)
    with pytest.raises(PolicyArtifactError, match="cannot be loaded"):
        load_policy(zip_path)
    for argv in commands(zip_path, tmp_path):
        rc, err = run_cli(capsys, argv)
        assert rc == 2 and len(err) == 1 and str(zip_path) in err[0] and "cannot be loaded" in err[0], err
    assert not marker.exists()


def test_a_pickled_sb3_artifact_is_refused_with_the_conversion_command(cfg, tmp_path, capsys):
    marker = tmp_path / "ran"
    _, zip_path = untrained(cfg, tmp_path / "p")
    sb3_archive(zip_path, marker)
    reseal(zip_path, format=PICKLED)
    for argv in commands(zip_path, tmp_path):
        rc, err = run_cli(capsys, argv)
        assert rc == 2 and len(err) == 1, err
        assert "SB3 archive" in err[0] and "dynamix convert-policy --trust" in err[0], err
    rc, err = run_cli(capsys, ["convert-policy", str(zip_path), str(tmp_path / "new")])  # no --trust
    assert rc == 2 and len(err) == 1 and "--trust" in err[0], err
    reseal(zip_path, format="dynamix-policy-v2")  # a file claiming the data-only format: its zip is still refused
    for argv in commands(zip_path, tmp_path):
        rc, err = run_cli(capsys, argv)
        assert rc == 2 and len(err) == 1 and "cannot be loaded" in err[0], err
    assert not marker.exists()


def test_a_payload_in_a_training_checkpoint_never_runs(cfg, tmp_path):
    marker = tmp_path / "ran"
    model, zip_path = untrained(cfg, tmp_path / "p")
    ckpt = tmp_path / "checkpoint.zip"
    torch.save({"policy": Payload(marker), "policy.optimizer": {}}, ckpt)
    with pytest.raises(PolicyArtifactError, match="checkpoint .* cannot be loaded"):
        resume({"learner": recipe_for(cfg.rl, 1, 0), "timesteps": 8}, ckpt, venv=None)
    # SB3's pickled checkpoint (no format in its JSON) is never resumed: the run is refused or restarted
    (tmp_path / "checkpoint.json").write_text(json.dumps({"timesteps": 8, "episode": 1}))
    why = _stale(tmp_path / "checkpoint.json", {})
    assert CHECKPOINT_FORMAT in why and "convert-policy --trust" in why
    assert not marker.exists()


def test_a_payload_in_an_engine_checkpoint_never_runs(tmp_path):
    marker, path = tmp_path / "ran", tmp_path / "checkpoint.pt"
    torch.save({"config_hash": "x", "model": Payload(marker)}, path)
    with pytest.raises(checkpoint.CheckpointError, match="unreadable"):
        checkpoint.load(path)
    checkpoint.save(path, {"config_hash": "x", "elapsed_s": np.float64(1.5), "rows": np.int64(3)})
    assert checkpoint.load(path, expect={"config_hash": "x"})["elapsed_s"] == 1.5  # numpy values still load
    assert not marker.exists()


def test_a_trusted_sb3_artifact_converts_and_decides_as_before(cfg, tmp_path, capsys):
    model, zip_path = untrained(cfg, tmp_path / "old")
    model.save(zip_path)  # the pickled format this code wrote before
    reseal(zip_path, format=PICKLED)
    rc, err = run_cli(capsys, ["convert-policy", "--trust", str(zip_path), str(tmp_path / "new")])
    assert rc == 0, err
    new, meta = load_policy(tmp_path / "new.zip")
    obs = np.random.default_rng(1).normal(size=(64, *model.observation_space.shape)).astype(np.float32)
    assert meta["format"] == "dynamix-policy-v2" and meta["learner"]["seed"] == 0
    np.testing.assert_array_equal(new.predict(obs, deterministic=True)[0], model.predict(obs, deterministic=True)[0])
