"""Policy state that survives an arbitrator restart (``dynamix arbitrator serve --state-file PATH``).

Stateful policies (GNS's running estimates, LB-BSP's time model, the RL policy's references) lose
everything when the arbitrator process dies. With a store, every decision leaves a snapshot of its
run (context, last window, sizes, ``policy.state_dict()``); when workers re-register mid-run with the
same run id, the arbitrator restores the policy from it instead of starting it cold.

The file holds data only: one JSON object, ``{"format": FORMAT, "runs": {run_id: snapshot}}``, read
with :func:`json.loads`, so a crafted file can at worst be refused, never run code. The store writes
only a file it created: an existing path must be a regular file (not a link) whose ``format`` is
:data:`FORMAT`, else it is refused at start (:class:`~dynamix.errors.InputFileError`, one line). Writes
go through :func:`dynamix.io.write_text` (a temporary file beside the target, then ``os.replace``:
nothing is written outside the file's folder) on a background thread that keeps only the latest
snapshots, so the window barrier never waits for the disk.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import stat
import threading
from pathlib import Path
from typing import Any

import numpy as np

from dynamix import io
from dynamix.errors import InputFileError
from dynamix.policies.base import Bounds, PolicyContext
from dynamix.rpc.validate import MAX_RUNS

log = logging.getLogger(__name__)

FORMAT = "dynamix-arbitrator-state-v1"
MAX_BYTES = 64 << 20
"""Largest state file read back (1,024 workers' LB-BSP time models take well under 1 MB)."""


def _plain(value: Any) -> Any:
    """JSON's fallback for numpy scalars and arrays in a policy's state."""
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not plain data")


def _context(data: dict) -> PolicyContext:
    data = dict(data)
    data["bounds"] = Bounds(**data["bounds"])
    data["initial_batch_sizes"] = tuple(data["initial_batch_sizes"])
    data["actions"] = tuple(data["actions"])
    return PolicyContext(**data)


class PolicyStateStore:
    """Latest-snapshot-wins atomic writer of the arbitrator's policy state, one snapshot per run."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._runs: dict[str, dict] = self._read()
        self._dirty = False
        self._closed = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._write_loop, name="policy-state-writer", daemon=True)
        self._thread.start()

    def _read(self) -> dict[str, dict]:
        """The snapshots of an existing state file; refuses a path this store did not write."""
        where = f"--state-file {self.path}"
        try:
            info = self.path.lstat()
        except FileNotFoundError:
            return {}
        if not stat.S_ISREG(info.st_mode):
            raise InputFileError(f"{where}: not a regular file (a link, folder or device): give a new file name")
        if info.st_size > MAX_BYTES:
            raise InputFileError(f"{where}: {info.st_size} bytes, above {MAX_BYTES}: not an arbitrator state file")
        try:
            data = json.loads(self.path.read_bytes())
        except (ValueError, UnicodeDecodeError):
            data = None
        if not (isinstance(data, dict) and data.get("format") == FORMAT and isinstance(data.get("runs"), dict)):
            raise InputFileError(f"{where} exists and is not an arbitrator state file ({FORMAT}): the arbitrator "
                                 "writes only files it created; give a new file name, or delete this one")
        return data["runs"]

    def put(self, run_id: str, snapshot: dict) -> None:
        """Queue ``snapshot`` of run ``run_id`` (replacing any not yet written); returns at once."""
        with self._cond:
            self._runs.pop(run_id, None)
            self._runs[run_id] = {**snapshot, "ctx": dataclasses.asdict(snapshot["ctx"])}
            while len(self._runs) > MAX_RUNS:
                self._runs.pop(next(iter(self._runs)))
            self._dirty = True
            self._cond.notify()

    def forget(self, run_id: str) -> None:
        """Drop run ``run_id``'s snapshot (the run ended)."""
        with self._cond:
            if self._runs.pop(run_id, None) is not None:
                self._dirty = True
                self._cond.notify()

    def load(self, run_id: str) -> dict | None:
        """Run ``run_id``'s last snapshot with its :class:`PolicyContext`, or None (none, or malformed: logged)."""
        with self._cond:
            snapshot = self._runs.get(run_id)
        if snapshot is None:
            return None
        try:
            return {**snapshot, "ctx": _context(snapshot["ctx"]), "window": int(snapshot["window"]),
                    "sizes": [int(b) for b in snapshot["sizes"]]}
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("ignoring the policy state of run %s in %s: malformed (%s)", run_id, self.path, exc)
            return None

    def close(self) -> None:
        """Write the last snapshots and stop the writer."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout=30)

    def _write_loop(self) -> None:
        while True:
            with self._cond:
                while not self._dirty and not self._closed:
                    self._cond.wait()
                if not self._dirty:
                    return
                runs, self._dirty = dict(self._runs), False  # snapshots are never changed once put
            try:
                io.write_text(self.path, json.dumps({"format": FORMAT, "runs": runs}, default=_plain) + "\n")
            except (TypeError, ValueError, OSError):
                log.exception("could not write policy state to %s", self.path)
