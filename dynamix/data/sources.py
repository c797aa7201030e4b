"""CIFAR-10 from three sources behind one function, prepared once into a cached uint8 tensor file.

Sources (``data.source`` in params.yaml):

1. ``torchvision``: ``torchvision.datasets.CIFAR10(download=True)`` into ``data.download_root``; the
   real loading path for users with internet.
2. ``path``: a directory or ``.tar.gz`` in ImageFolder layout, ``<root>/{train,test}/<class>/*.jpg``
   (one extra top-level folder inside the archive is allowed). ``$DYNAMIX_CIFAR10`` overrides
   ``data.path``. On the project's machines the full set is ``../shared/datasets/cifar10-jpeg.tar.gz``.
3. ``embedded``: the class-balanced subset committed as ``data/cifar10-mini.tar.gz`` (1,000 train and
   200 test images per class; provenance in ``data/README.md``).

Decoding 60,000 JPEGs takes about a minute; the decoded arrays are cached under ``data/cache/``
keyed by source identity (path, size, mtime), so later loads take well under a second.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Iterator

import numpy as np
import torch
from PIL import Image
from tqdm.auto import tqdm

from dynamix import paths
from dynamix.config import DataConfig
from dynamix.errors import InputFileError
from dynamix.io import save_torch

log = logging.getLogger(__name__)

CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
ENV_VAR = "DYNAMIX_CIFAR10"
CACHE_VERSION = 1


class DataSourceError(InputFileError, RuntimeError):
    """A CIFAR-10 source is missing or malformed; the message names the source and the options."""


@dataclass(frozen=True)
class Cifar10:
    """Decoded CIFAR-10: images uint8 [N, 3, 32, 32], labels int64 [N], classes in torchvision order."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    source: str
    augmentable: ClassVar[bool] = True  # images: random crop and flip apply

    def counts(self, split: str = "train") -> list[int]:
        y = self.train_y if split == "train" else self.test_y
        return torch.bincount(y, minlength=len(CLASSES)).tolist()


_OPTIONS = (
    "set data.source to 'embedded' (the committed subset), 'path' (data.path or $DYNAMIX_CIFAR10 -> "
    "a directory or .tar.gz in ImageFolder layout <root>/{train,test}/<class>/*.jpg), or "
    "'torchvision' (downloads; needs internet)"
)


def resolve_source(cfg: DataConfig) -> tuple[str, Path | None]:
    """(source kind, path) after applying ``$DYNAMIX_CIFAR10``; the env var implies ``path``."""
    env = os.environ.get(ENV_VAR)
    if env:
        return "path", paths.resolve(env)
    if cfg.source == "embedded":
        return "embedded", paths.EMBEDDED_CIFAR10
    if cfg.source == "path":
        if not cfg.path:
            raise DataSourceError(f"data.source = 'path' but data.path is empty and ${ENV_VAR} is unset; {_OPTIONS}")
        return "path", paths.resolve(cfg.path)
    return "torchvision", paths.resolve(cfg.download_root)


def _cache_file(kind: str, path: Path) -> Path:
    ident = f"v{CACHE_VERSION}:{kind}:{path.resolve()}"
    if path.exists():
        st = path.stat()
        ident += f":{st.st_size}:{int(st.st_mtime)}"
    return paths.CACHE / f"cifar10-{kind}-{hashlib.sha256(ident.encode()).hexdigest()[:16]}.pt"


def load_cifar10(cfg: DataConfig | None = None, use_cache: bool = True) -> Cifar10:
    """Load CIFAR-10 from the configured source, through the decoded-tensor cache."""
    cfg = cfg or DataConfig()
    kind, path = resolve_source(cfg)
    cache = _cache_file(kind, path)
    if use_cache and cache.exists():
        blob = torch.load(cache, weights_only=True)
        return Cifar10(blob["train_x"], blob["train_y"], blob["test_x"], blob["test_y"], f"{kind}:{path}")
    if kind == "torchvision":
        data = _from_torchvision(path)
    else:
        if not path.exists():
            hint = " (run `git lfs`-free checkout again: it is committed)" if kind == "embedded" else ""
            raise DataSourceError(f"CIFAR-10 source {kind!r}: {path} does not exist{hint}; {_OPTIONS}")
        data = _from_imagefolder(path)
    out = Cifar10(*data, source=f"{kind}:{path}")
    if use_cache:
        # Atomic, with a per-process temporary file: several ranks may decode a fresh source at once.
        save_torch(cache, {"train_x": out.train_x, "train_y": out.train_y,
                           "test_x": out.test_x, "test_y": out.test_y})
        log.info("cached decoded CIFAR-10 at %s", cache)
    return out


def _from_torchvision(root: Path):
    import torchvision

    try:
        tr = torchvision.datasets.CIFAR10(str(root), train=True, download=True)
        te = torchvision.datasets.CIFAR10(str(root), train=False, download=True)
    except Exception as exc:  # network errors, corrupt archives: surface one clear message
        raise DataSourceError(
            f"CIFAR-10 source 'torchvision' failed to download or read into {root}: {exc}; {_OPTIONS}"
        ) from exc

    def conv(ds):
        x = torch.from_numpy(np.ascontiguousarray(ds.data.transpose(0, 3, 1, 2)))
        return x, torch.tensor(ds.targets, dtype=torch.int64)

    return (*conv(tr), *conv(te))


def _iter_members(path: Path) -> Iterator[tuple[str, bytes]]:
    """(relative posix path, bytes) of every file under a directory or inside a tar archive."""
    if path.is_dir():
        for p in sorted(path.rglob("*")):
            if p.is_file():
                yield p.relative_to(path).as_posix(), p.read_bytes()
        return
    try:
        with tarfile.open(path, "r:*") as tar:
            for m in tar:
                if m.isfile():
                    f = tar.extractfile(m)
                    if f is not None:
                        yield m.name, f.read()
    except (tarfile.TarError, OSError, EOFError) as exc:
        reason = " ".join(str(exc).split())  # tarfile lists every method tried, one per line
        raise DataSourceError(f"CIFAR-10 source {path}: not a readable directory or tar archive ({reason}); {_OPTIONS}")


def _split_class(name: str) -> tuple[str, str] | None:
    """Find ``.../{train,test}/<class>/<file>`` in a member path; None for anything else."""
    parts = name.split("/")
    for i in range(len(parts) - 2):
        if parts[i] in ("train", "test") and parts[i + 1] in CLASSES and i + 2 == len(parts) - 1:
            return parts[i], parts[i + 1]
    return None


def _from_imagefolder(path: Path):
    buckets: dict[str, list[tuple[str, int, np.ndarray]]] = {"train": [], "test": []}
    for name, blob in tqdm(_iter_members(path), desc=f"decoding {path.name}", unit="img", mininterval=2):
        where = _split_class(name)
        if where is None:
            continue
        split, cls = where
        try:
            img = Image.open(io.BytesIO(blob)).convert("RGB")
        except Exception as exc:
            raise DataSourceError(f"CIFAR-10 source {path}: cannot decode image {name} ({exc})")
        if img.size != (32, 32):
            raise DataSourceError(f"CIFAR-10 source {path}: image {name} is {img.size}, expected 32x32")
        buckets[split].append((name, CLASSES.index(cls), np.asarray(img, dtype=np.uint8)))
    for split in ("train", "test"):
        if not buckets[split]:
            raise DataSourceError(
                f"CIFAR-10 source {path}: found no images under {split}/<class>/ "
                f"(classes: {', '.join(CLASSES)}); {_OPTIONS}"
            )
    out = []
    for split in ("train", "test"):
        items = sorted(buckets[split], key=lambda t: (t[1], t[0]))  # deterministic order
        x = torch.from_numpy(np.stack([t[2] for t in items]).transpose(0, 3, 1, 2).copy())
        y = torch.tensor([t[1] for t in items], dtype=torch.int64)
        out += [x, y]
    return tuple(out)
