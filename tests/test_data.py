"""CIFAR-10 sources, the tensor cache, the global sampler, augmentation and the synthetic token stream."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from dynamix import paths
from dynamix.config import DataConfig
from dynamix.data import CLASSES, BatchMaker, DataSourceError, GlobalSampler, crop_flip, load_cifar10, normalise, tokens
from dynamix.data.sources import ENV_VAR

SHARED = paths.ROOT.parent / "shared" / "datasets" / "cifar10-jpeg.tar.gz"


def make_imagefolder(root: Path, per_class: dict[str, int]) -> None:
    """A tiny ImageFolder tree of random 32x32 JPEGs: {split: images per class}."""
    rng = np.random.default_rng(0)
    for split, n in per_class.items():
        for cls in CLASSES:
            d = root / split / cls
            d.mkdir(parents=True)
            for i in range(n):
                Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(d / f"{i:04d}.jpg")


@pytest.fixture
def no_env(monkeypatch, tmp_path):
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setattr(paths, "CACHE", tmp_path / "cache")


def test_embedded_subset_is_class_balanced(no_env):
    data = load_cifar10(DataConfig())
    assert data.counts("train") == [1000] * 10
    assert data.counts("test") == [200] * 10
    assert data.train_x.shape == (10000, 3, 32, 32) and data.train_x.dtype == torch.uint8
    assert paths.EMBEDDED_CIFAR10.stat().st_size <= 5 * 2**20


def test_directory_and_tarball_sources_agree_and_cache(no_env, tmp_path):
    root = tmp_path / "set"
    make_imagefolder(root, {"train": 3, "test": 2})
    tgz = tmp_path / "set.tar.gz"
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(root, arcname="cifar10-jpeg")
    a = load_cifar10(DataConfig(source="path", path=str(root)))
    b = load_cifar10(DataConfig(source="path", path=str(tgz)))
    assert a.counts("train") == [3] * 10 and a.counts("test") == [2] * 10
    assert torch.equal(a.train_x, b.train_x) and torch.equal(a.test_y, b.test_y)
    assert len(list((tmp_path / "cache").glob("*.pt"))) == 2
    c = load_cifar10(DataConfig(source="path", path=str(tgz)))  # from the cache
    assert torch.equal(b.train_x, c.train_x)


def test_environment_variable_overrides_the_configured_source(no_env, monkeypatch, tmp_path):
    make_imagefolder(tmp_path / "env", {"train": 1, "test": 1})
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "env"))
    assert len(load_cifar10(DataConfig(source="embedded")).train_y) == 10


@pytest.mark.parametrize("what", ["missing", "not-an-archive", "empty-folder"])
def test_bad_sources_give_one_clear_error(no_env, tmp_path, what):
    target = tmp_path / "src"
    if what == "not-an-archive":
        target = tmp_path / "src.tar.gz"
        target.write_bytes(b"not a tar file")
    elif what == "empty-folder":
        target.mkdir()
    with pytest.raises(DataSourceError, match=r"CIFAR-10 source .*(does not exist|not a readable|found no images).*data\.source"):
        load_cifar10(DataConfig(source="path", path=str(target)))


def test_path_source_without_a_path_says_how_to_give_one(no_env):
    with pytest.raises(DataSourceError, match=r"data\.path is empty and \$DYNAMIX_CIFAR10 is unset"):
        load_cifar10(DataConfig(source="path"))


def test_torchvision_failure_is_wrapped(no_env, monkeypatch, tmp_path):
    import torchvision

    def offline(*a, **k):
        raise OSError("no network")

    monkeypatch.setattr(torchvision.datasets, "CIFAR10", offline)
    with pytest.raises(DataSourceError, match="source 'torchvision' failed to download.*no network"):
        load_cifar10(DataConfig(source="torchvision", download_root=str(tmp_path)))


@pytest.mark.parametrize("seed", [0, 1])
def test_sampler_never_repeats_a_sample_within_an_epoch(seed):
    n = 1000
    s = GlobalSampler(n, seed)
    rng = np.random.default_rng(seed)
    seen: list[int] = []
    while s.epoch == 0:
        sizes = rng.integers(1, 60, size=rng.integers(1, 5)).tolist()
        parts = s.next(sizes)
        assert [len(p) for p in parts] == sizes
        seen += torch.cat(parts).tolist()
    first_epoch = seen[:n]
    assert sorted(first_epoch) == list(range(n))


def test_sampler_is_reproducible_and_resumable():
    a, b = GlobalSampler(100, 3), GlobalSampler(100, 3)
    for sizes in ([10, 20], [5], [40, 40]):
        assert all(torch.equal(x, y) for x, y in zip(a.next(sizes), b.next(sizes)))
    c = GlobalSampler(100, 0)
    c.load_state_dict(a.state_dict())
    assert torch.equal(c.next([30])[0], a.next([30])[0])
    assert not torch.equal(GlobalSampler(100, 4).next([50])[0], GlobalSampler(100, 3).next([50])[0])


def test_augment_is_a_crop_or_flip_of_the_padded_image():
    x = torch.rand(16, 3, 32, 32)
    y, pad = crop_flip(x, torch.Generator().manual_seed(0))
    assert y.shape == x.shape and pad.shape == (16, 1, 32, 32)
    padded = torch.nn.functional.pad(x, (4, 4, 4, 4))
    inside = torch.nn.functional.pad(torch.ones(1, 32, 32, dtype=torch.bool), (4, 4, 4, 4))
    for i in range(16):
        windows = [(padded[i, :, r:r + 32, c:c + 32], inside[:, r:r + 32, c:c + 32])
                   for r in range(9) for c in range(9)]
        assert any((torch.equal(y[i], w) and torch.equal(pad[i], ~m))
                   or (torch.equal(y[i], w.flip(-1)) and torch.equal(pad[i], ~m.flip(-1))) for w, m in windows)
    assert torch.equal(crop_flip(x, torch.Generator().manual_seed(0))[0], y)


def test_training_batches_crop_the_normalised_image():
    """The batch maker crops uint8 images and normalises after: bit for bit the crop of the
    normalised image, zero-padded in normalised units (the mean pixel)."""
    images = torch.randint(0, 256, (64, 3, 32, 32), dtype=torch.uint8)
    idx = torch.randperm(64)[:40]
    x, _ = BatchMaker(images, torch.zeros(64, dtype=torch.int64), augment_train=True, seed=5)(idx)
    reference, _ = crop_flip(normalise(images[idx]), BatchMaker(images, images, True, seed=5).gen)
    assert torch.equal(x, reference)
    assert not x.isnan().any() and (x == 0).any()


@pytest.mark.slow
@pytest.mark.skipif(not SHARED.exists(), reason="full CIFAR-10 tarball not present")
def test_full_cifar10_from_the_shared_tarball(monkeypatch):
    monkeypatch.setenv(ENV_VAR, str(SHARED))
    data = load_cifar10(DataConfig())
    assert (len(data.train_y), len(data.test_y)) == (50000, 10000)
    assert data.counts("train") == [5000] * 10 and data.counts("test") == [1000] * 10


def test_concurrent_first_loads_share_one_cache(tmp_path):
    """Ranks of a fresh run decode the same source at once; every one must succeed (regression)."""
    import subprocess
    import sys

    env = {**os.environ, "DYNAMIX_CACHE": str(tmp_path / "cache")}
    env.pop(ENV_VAR, None)
    code = "from dynamix.data import load_cifar10; print(len(load_cifar10().train_y))"
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [err[-500:] for _, err in outs]
    assert [out.strip() for out, _ in outs] == ["10000"] * 3
    assert len(list((tmp_path / "cache").glob("*.pt"))) == 1
    assert not list((tmp_path / "cache").glob("*.tmp"))


def test_token_windows_are_seeded_end_in_their_label_and_follow_the_topic_walk():
    a, b, c = tokens.generate(train=4000, test=100), tokens.generate(train=4000, test=100), \
        tokens.generate(seed=1, train=4000, test=100)
    assert torch.equal(a.train_x, b.train_x) and torch.equal(a.test_x, b.test_x)
    assert not torch.equal(a.train_x, c.train_x)
    assert a.train_x.shape == (4000, tokens.CONTEXT + 1) and torch.equal(a.train_y, a.train_x[:, -1])
    assert torch.equal(a.train_x[1:, :-1], a.train_x[:-1, 1:])  # windows of one stream, one token apart
    assert 0 <= int(a.train_x.min()) and int(a.train_x.max()) < tokens.VOCAB
    topic = a.train_x[:, 0] % tokens.TOPICS
    follows = float(((topic[1:] - topic[:-1]) % tokens.TOPICS == 1).float().mean())
    assert follows == pytest.approx(tokens.FOLLOW + (1 - tokens.FOLLOW) / tokens.TOPICS, abs=0.03)
