"""Shared fixtures. Local distributed worlds: :mod:`dynamix.engine.world`; test helpers: ``tests/helpers/``."""

from __future__ import annotations

import dynamix  # noqa: F401  first: pins the CPU kernels' instruction set before torch loads (dynamix.isa)

import pytest
import torch

from dynamix import config
from dynamix.data import load_cifar10


@pytest.fixture
def tiny_cfg() -> config.Config:
    """The smoke profile with a tiny model: seconds per run on 2 cores."""
    return config.load(profile="smoke", overrides={"model": {"name": "tiny-cnn", "width": 0.25}})


@pytest.fixture(scope="module")
def one_torch_thread():
    """Small per-worker batches on shared cores: one torch thread is ~10x faster than two here.
    Use with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def data():
    """The configured CIFAR-10 source (the embedded subset by default), decoded once per module."""
    return load_cifar10()
