"""The console script: every subcommand answers --help; a user's mistake is one line naming the field or
file, exit status 2, and -v shows the traceback."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import zipfile

import pytest

from dynamix import paths
from dynamix.cli import COMMANDS
from dynamix.rl.artifact import FORMAT

CLUSTER = "clusters/heldout/hetero-speed-4.yaml"


def dynamix(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dynamix.cli", *args], capture_output=True, text=True,
                          cwd=paths.ROOT, timeout=300)


def user_error(out: subprocess.CompletedProcess, command: str) -> str:
    """The one stderr line of a user's mistake (exit 2, no traceback); returns the message."""
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and len(lines) == 1, out.stderr
    prefix = f"dynamix {command}: error: "
    assert lines[0].startswith(prefix), lines[0]
    return lines[0][len(prefix):]


def test_top_level_help_lists_every_command():
    out = dynamix("--help")
    assert out.returncode == 0
    for name in COMMANDS:
        assert name in out.stdout


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_subcommand_has_help(name):
    out = dynamix(name, "--help")
    assert out.returncode == 0, out.stderr
    assert f"dynamix {name}" in out.stdout


def test_unknown_command_is_rejected():
    out = dynamix("fly")
    assert out.returncode == 2 and "invalid choice: 'fly'" in out.stderr


def test_bad_config_value_is_one_line_naming_the_field_and_range(tmp_path):
    out = dynamix("train", "--out", str(tmp_path), "--set", "train.batch_size=-1")
    assert user_error(out, "train") == "train.batch_size = -1 is out of range: must be in [1, 65536]"


def test_verbose_shows_the_traceback_instead(tmp_path):
    out = dynamix("train", "-v", "--out", str(tmp_path), "--set", "train.batch_size=-1")
    assert out.returncode == 2
    assert "Traceback (most recent call last)" in out.stderr
    assert "ConfigError: train.batch_size = -1 is out of range" in out.stderr


def _simulate(tmp_path, *args: str) -> str:
    return user_error(dynamix("simulate", "--profile", "smoke", "--out", str(tmp_path / "sim"), *args), "simulate")


def test_cluster_spec_with_a_yaml_syntax_error_names_file_and_line(tmp_path):
    spec = tmp_path / "broken.yaml"
    spec.write_text("name: broken\nworkers:\n  - device: a100\n    count: [2\n")
    message = _simulate(tmp_path, "--cluster", str(spec), "--policy", "static:64")
    assert message.startswith(f"cluster spec {spec}, line ") and "not valid YAML" in message


def test_cluster_spec_with_an_unknown_device_names_the_field_and_the_choices(tmp_path):
    spec = tmp_path / "tpu.yaml"
    spec.write_text("name: tpu\nworkers:\n  - device: tpu-v9\n    count: 2\n")
    message = _simulate(tmp_path, "--cluster", str(spec), "--policy", "static:64")
    assert message.startswith("tpu.yaml: workers[0].device = 'tpu-v9' is not a known profile: must be one of ")
    assert "reference" in message


def test_static_batch_size_out_of_range_says_so_with_the_range(tmp_path):
    message = _simulate(tmp_path, "--cluster", CLUSTER, "--policy", "static:-5")
    assert message == "policy spec 'static:-5': batch size -5 is out of range: must be an integer >= 1"
    message = _simulate(tmp_path, "--cluster", CLUSTER, "--policy", "static:big")
    assert "'static:big'" in message and "must be an integer batch size >= 1" in message


def test_unknown_policy_kind_lists_the_known_ones(tmp_path):
    message = _simulate(tmp_path, "--cluster", CLUSTER, "--policy", "turbo:3")
    assert message.startswith("policy spec 'turbo:3': unknown policy 'turbo': must be one of ")
    assert "lbbsp" in message and "static" in message


@pytest.mark.parametrize("args, missing", [
    (("--cluster", "does/not/exist.yaml"), "does/not/exist.yaml"),
    (("--cluster", CLUSTER, "--params", "does/not/params.yaml"), "does/not/params.yaml"),
])
def test_missing_input_file_names_the_file(tmp_path, args, missing):
    message = _simulate(tmp_path, *args)
    assert missing in message and ("does not exist" in message or "no such file" in message)


def test_corrupt_policy_artifact_is_refused_naming_the_file(tmp_path):
    """A policy whose zip was truncated after saving: its sha256 no longer matches its metadata."""
    zip_path = tmp_path / "x" / "corrupt.zip"
    zip_path.parent.mkdir()
    with zipfile.ZipFile(zip_path, "w") as zf:
        zf.writestr("policy.pth", bytes(range(256)) * 64)
    whole = zip_path.read_bytes()
    meta = {"format": FORMAT, "zip": zip_path.name, "zip_sha256": hashlib.sha256(whole).hexdigest()}
    zip_path.with_suffix(".json").write_text(json.dumps(meta))
    zip_path.write_bytes(whole[: len(whole) // 2])
    out = dynamix("evaluate", "--profile", "smoke", "--cluster", CLUSTER, "--policy",
                  f"dynamix:{zip_path.with_suffix('')}", "--seeds", "1", "--out", str(tmp_path / "eval"))
    message = user_error(out, "evaluate")
    assert message.startswith(f"policy {zip_path} is corrupt or was replaced: sha256 ")
