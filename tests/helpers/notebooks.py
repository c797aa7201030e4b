"""Executing a notebook under papermill in a test, as a user's headless run.

Each cell has a deadline (:data:`CELL_TIMEOUT_S`): a reply from the kernel that never arrives (seen on
this 2-core host: client and kernel both idle, waiting on each other's socket) then fails the
execution instead of hanging the test run, and the notebook runs again in a fresh kernel, up to
:data:`ATTEMPTS` times. A cell that raises fails at once, never retried.
"""

from __future__ import annotations

import logging

from nbclient.exceptions import CellTimeoutError

log = logging.getLogger(__name__)

CELL_TIMEOUT_S = 300  # the slowest smoke-profile cell takes about a minute on 2 shared cores
ATTEMPTS = 3


def execute(notebook: str, output: str, **kwargs) -> None:
    """``papermill.execute_notebook(notebook, output, **kwargs)`` with a per-cell deadline and retries."""
    import papermill

    for attempt in range(1, ATTEMPTS + 1):
        try:
            papermill.execute_notebook(notebook, output, execution_timeout=CELL_TIMEOUT_S, **kwargs)
            return
        except CellTimeoutError:
            if attempt == ATTEMPTS:
                raise
            log.warning("%s: a cell got no reply from the kernel within %d s; running it again", notebook,
                        CELL_TIMEOUT_S)
