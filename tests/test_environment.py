"""The pinned environment: one lock, mirrored by environment.yml, torch pinned exactly."""

from __future__ import annotations

import importlib.metadata as md

from dynamix import paths
from tools.lockfile import canonical, direct_names, environment_yml, read_pins


def test_environment_yml_mirrors_the_lock():
    lock = read_pins(paths.ROOT / "requirements.lock")
    env = read_pins(paths.ROOT / "environment.yml")
    assert set(direct_names()) == set(env), "environment.yml must list exactly requirements.in"
    assert {k: lock[k] for k in env} == env
    assert (paths.ROOT / "environment.yml").read_text() == environment_yml()


def test_torch_is_pinned_exactly_and_installed_at_the_pin():
    lock = read_pins(paths.ROOT / "requirements.lock")
    assert lock["torch"] == "2.14.1" and lock["torchvision"] == "0.29.1"
    assert md.version("torch").split("+")[0] == "2.14.1"


def test_installed_packages_match_the_lock():
    lock = read_pins(paths.ROOT / "requirements.lock")
    installed = {canonical(d.metadata["Name"]): d.version for d in md.distributions()}
    wrong = {k: (v, installed.get(k)) for k, v in lock.items() if installed.get(k, "").split("+")[0] != v}
    assert not wrong, f"venv differs from requirements.lock (pinned, installed): {wrong}"
