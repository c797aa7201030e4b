"""Atomic checkpoints: a crash mid-write never leaves a half-written file where a good one was.

``save`` writes to a temporary file in the same directory, flushes it to disk, then ``os.replace``s
it over the target (atomic on POSIX). ``load`` returns None when there is no checkpoint and raises a
clear error when the file exists but cannot be read.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch


class CheckpointError(RuntimeError):
    """A checkpoint file exists but is unreadable or from another run."""


def save(path: str | Path, state: dict[str, Any]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(state, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load(path: str | Path, expect: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The checkpoint at ``path`` or None; ``expect`` keys (e.g. config hash) must match."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        state = torch.load(path, weights_only=False, map_location="cpu")
    except Exception as exc:
        raise CheckpointError(f"checkpoint {path} is unreadable ({exc}); delete it to start over") from exc
    for key, want in (expect or {}).items():
        if state.get(key) != want:
            raise CheckpointError(
                f"checkpoint {path} has {key} = {state.get(key)!r}, this run has {want!r}; "
                "use another output folder or delete the checkpoint"
            )
    return state
