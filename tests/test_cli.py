"""The console script: every subcommand answers --help; bad input fails with a named field."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dynamix.cli import COMMANDS


def dynamix(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dynamix.cli", *args], capture_output=True, text=True)


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


def test_bad_override_names_the_field(tmp_path):
    out = dynamix("train", "--out", str(tmp_path), "--set", "train.batch_size=-1")
    assert out.returncode != 0
    assert "train.batch_size = -1 is out of range" in out.stderr
