"""Training checkpoints: atomic writes (:mod:`dynamix.io`) plus a check that a checkpoint belongs to this run.

``save`` never leaves a half-written file where a good one was. ``load`` returns None when there is
no checkpoint and raises a clear error when the file exists but cannot be read or was written by a
run with another configuration (``expect``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dynamix import io
from dynamix.errors import InputFileError


class CheckpointError(InputFileError, RuntimeError):
    """A checkpoint file exists but is unreadable or from another run."""


def save(path: str | Path, state: dict[str, Any]) -> None:
    io.save_torch(path, state)


def load(path: str | Path, expect: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The checkpoint at ``path`` or None; ``expect`` keys (e.g. config hash) must match."""
    path = Path(path)
    try:
        state = io.load_torch(path, weights_only=True)  # data only: a checkpoint handed over cannot run code
    except io.UnreadableFileError as exc:
        raise CheckpointError(f"checkpoint {exc}") from exc
    if state is None:
        return None
    for key, want in (expect or {}).items():
        if state.get(key) != want:
            raise CheckpointError(
                f"checkpoint {path} has {key} = {state.get(key)!r}, this run has {want!r}; "
                "use another output folder or delete the checkpoint"
            )
    return state
