"""Build the embedded class-balanced subset (``data/cifar10-mini.tar.gz``) from a full ImageFolder set.

The JPEG bytes are copied unchanged (no re-encoding), the first ``train_per_class`` /
``test_per_class`` files of each class in sorted file-name order, into a tar.gz with fixed metadata
(mtime 0, uid 0, sorted), so the same input gives a byte-identical archive. Command::

    dynamix make-mini --source ../shared/datasets/cifar10-jpeg.tar.gz --out data/cifar10-mini.tar.gz
"""

from __future__ import annotations

import gzip
import io
import tarfile
from collections import defaultdict
from pathlib import Path

from dynamix.data.sources import _iter_members, _split_class


def make_mini(source: Path, out: Path, train_per_class: int = 1000, test_per_class: int = 200) -> dict:
    """Write the subset archive; returns {split: {class: count}}."""
    limit = {"train": train_per_class, "test": test_per_class}
    picked: dict[tuple[str, str], list[tuple[str, bytes]]] = defaultdict(list)
    for name, blob in _iter_members(source):
        where = _split_class(name)
        if where is not None:
            picked[where].append((name.rsplit("/", 1)[-1], blob))
    counts: dict[str, dict[str, int]] = defaultdict(dict)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for (split, cls) in sorted(picked):
            files = sorted(picked[(split, cls)])[: limit[split]]
            counts[split][cls] = len(files)
            for fname, blob in files:
                info = tarfile.TarInfo(f"cifar10-mini/{split}/{cls}/{fname}")
                info.size, info.mtime, info.mode = len(blob), 0, 0o644
                tar.addfile(info, io.BytesIO(blob))
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as fh, gzip.GzipFile(fileobj=fh, mode="wb", mtime=0, filename="") as gz:
        gz.write(buf.getvalue())
    return {k: dict(v) for k, v in counts.items()}
