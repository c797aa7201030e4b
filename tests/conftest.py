"""Shared fixtures. Local distributed worlds: :mod:`dynamix.engine.world`; test helpers: ``tests/helpers/``."""

from __future__ import annotations

import pytest

from dynamix import config


@pytest.fixture
def tiny_cfg() -> config.Config:
    """The smoke profile with a tiny model: seconds per run on 2 cores."""
    return config.load(profile="smoke", overrides={"model": {"name": "tiny-cnn", "width": 0.25}})
