"""Policy state that survives an arbitrator restart (``dynamix arbitrator serve --state-file PATH``).

Stateful policies (GNS's running estimates, LB-BSP's time model, the RL policy's references) lose
everything when the arbitrator process dies. With a store, every decision leaves a snapshot
(run id, context, last window, sizes, ``policy.state_dict()``); when workers re-register mid-run
with the same run id, the arbitrator restores the policy from it instead of starting it cold.

Writes go through :func:`dynamix.io.save_torch` (atomic) on a background thread that keeps
only the latest snapshot, so the window barrier never waits for the disk.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from dynamix import io

log = logging.getLogger(__name__)


class PolicyStateStore:
    """Latest-snapshot-wins atomic writer of the arbitrator's policy state."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._pending: dict | None = None
        self._closed = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._write_loop, name="policy-state-writer", daemon=True)
        self._thread.start()

    def put(self, snapshot: dict) -> None:
        """Queue ``snapshot`` (replacing any not yet written); returns at once."""
        with self._cond:
            self._pending = snapshot
            self._cond.notify()

    def load(self) -> dict | None:
        """The last written snapshot, or None (missing or unreadable: logged, not raised)."""
        try:
            return io.load_torch(self.path)
        except io.UnreadableFileError as exc:
            log.warning("ignoring policy state: %s", exc)
            return None

    def close(self) -> None:
        """Write the last snapshot and stop the writer."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout=30)

    def _write_loop(self) -> None:
        while True:
            with self._cond:
                while self._pending is None and not self._closed:
                    self._cond.wait()
                snapshot, self._pending = self._pending, None
                if snapshot is None:
                    return
            try:
                io.save_torch(self.path, snapshot)
            except Exception:
                log.exception("could not write policy state to %s", self.path)
