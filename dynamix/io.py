"""Atomic file writes: a crash mid-write never leaves a half-written file where a good one was.

Every writer goes through :func:`atomic_open`: it writes a temporary file in the target's directory,
flushes and fsyncs it, then ``os.replace``s it over the target (atomic on POSIX). The temporary name
is unique per call, so several processes (e.g. ranks decoding the same dataset) may write the same
target at once; the last complete file wins. A base module: it imports only :mod:`dynamix.errors`.

Result tables go through it too: :func:`write_json` (strict JSON, NaN as ``null``) and
:func:`write_csv` (tidy, no index), named by deterministic run ids (:func:`run_id`).
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator, Mapping

import numpy as np
import torch

from dynamix.errors import InputFileError


class UnreadableFileError(InputFileError, RuntimeError):
    """A file exists but cannot be read back (truncated, corrupt, or another format)."""


@contextmanager
def atomic_open(path: str | Path, mode: str = "wb") -> Iterator[IO[Any]]:
    """Open a temporary file for writing; on a clean exit it replaces ``path``, on an error it is removed."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open mode must be 'w' or 'wb', got {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically; returns the path."""
    with atomic_open(path, "w") as fh:
        fh.write(text)
    return Path(path)


def save_torch(path: str | Path, obj: Any) -> Path:
    """``torch.save(obj)`` to ``path`` atomically; returns the path."""
    with atomic_open(path, "wb") as fh:
        torch.save(obj, fh)
    return Path(path)


NUMPY_DATA = [np._core.multiarray.scalar, np._core.multiarray._reconstruct, np.ndarray, np.dtype,
              *{type(np.dtype(t)) for t in (np.float64, np.float32, np.int64, np.int32, np.uint8, np.bool_)}]
"""What rebuilds numpy scalars and arrays, the only globals beside torch's own that a data-only load
(``weights_only=True``) accepts: each builds a value, none calls anything the file names."""


def load_torch(path: str | Path, weights_only: bool = False) -> Any | None:
    """The object ``torch.save``d at ``path`` (on CPU), or None when there is no file. ``weights_only``:
    tensors, numpy values and plain containers only, so a file that pickles anything else is refused
    before any of it runs.

    Raises :class:`UnreadableFileError` when the file exists but cannot be loaded.
    """
    path = Path(path)
    if not path.exists():
        return None
    try:
        with torch.serialization.safe_globals(NUMPY_DATA):
            return torch.load(path, weights_only=weights_only, map_location="cpu")
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise UnreadableFileError(f"{path} is unreadable ({type(exc).__name__}: {first}); delete it to start "
                                  "over") from exc


# --------------------------------------------------------------------------------------------
# Result tables and run ids
# --------------------------------------------------------------------------------------------


def jsonable(value: Any) -> Any:
    """``value`` with mappings, sequences, numpy scalars and paths made JSON-native; NaN/inf -> None."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return None if not math.isfinite(float(value)) else float(value)
    if isinstance(value, Path):
        return str(value)
    return value


def write_json(path: str | Path, data: Mapping[str, Any]) -> Path:
    """JSON with NaN/inf as ``null`` (strict JSON, which DVC's metrics parser requires), keys sorted."""
    return write_text(path, json.dumps(jsonable(data), indent=2, sort_keys=True) + "\n")


def write_csv(frame: Any, path: str | Path) -> Path:
    """A tidy CSV of a pandas DataFrame (no index); missing values are empty cells."""
    return write_text(path, frame.to_csv(index=False))


def slug(text: str) -> str:
    """A filesystem-safe token: ``static:64`` -> ``static-64``, ``resnet8/sgd`` -> ``resnet8-sgd``."""
    return re.sub(r"[^A-Za-z0-9_.]+", "-", str(text)).strip("-")


def run_id(*parts: Any) -> str:
    """Deterministic id of one run from what it is, never from when it ran (a rerun overwrites):
    ``run_id("mixed-4", "static:64", "sgd", 0)`` -> ``mixed-4__static-64__sgd__s0`` (integers are seeds
    and get an ``s`` prefix; a spec or policy file contributes its stem)."""
    return "__".join(_token(p) for p in parts)


def _token(part: Any) -> str:
    if isinstance(part, int) and not isinstance(part, bool):
        return f"s{part}"
    text = str(part)
    if text.endswith((".yaml", ".yml", ".zip")):
        text = Path(text).stem
    return slug(text)
