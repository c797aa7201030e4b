"""Executing a notebook under papermill in a test, as a user's headless run.

The kernel's replies are awaited in short slices (:data:`POLL_SLICE_S`). nbclient awaits each reply
with one ``poll`` of the zmq asyncio socket for the whole cell deadline; on this 2-core host that
poll has been seen never to wake (client and kernel both idle, the playground's run hung in 3 of 7
full test runs). A fresh poll starts with a non-blocking check of the socket, so a message that
arrived unannounced is read at the next slice; when that happens a warning says so.

Each cell still has a deadline (:data:`CELL_TIMEOUT_S`), and a notebook whose cell gets no reply at
all runs again in a fresh kernel, up to :data:`ATTEMPTS` times. A cell that raises fails at once,
never retried.
"""

from __future__ import annotations

import logging
import time
from queue import Empty

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_client.manager import AsyncKernelManager
from nbclient.exceptions import CellTimeoutError
from traitlets import Type

log = logging.getLogger(__name__)

CELL_TIMEOUT_S = 300  # the slowest smoke-profile cell takes about a minute on 2 shared cores
ATTEMPTS = 3
POLL_SLICE_S = 2.0


class SlicedPollChannel(AsyncZMQSocketChannel):
    """A channel whose ``get_msg`` polls in slices of :data:`POLL_SLICE_S` up to its timeout."""

    async def get_msg(self, timeout: float | None = None) -> dict:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = POLL_SLICE_S if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                return await super().get_msg(timeout=min(POLL_SLICE_S, left))
            except Empty:
                if await self.socket.poll(0):
                    log.warning("a kernel message was waiting on a socket whose poll had not woken; read now")
                elif deadline is not None and time.monotonic() >= deadline:
                    raise


class SlicedPollClient(AsyncKernelClient):
    """nbclient's kernel client, with :class:`SlicedPollChannel` for the shell and IOPub replies."""

    shell_channel_class = Type(SlicedPollChannel)
    iopub_channel_class = Type(SlicedPollChannel)


class SlicedPollKernelManager(AsyncKernelManager):
    """The kernel manager papermill starts, handing out :class:`SlicedPollClient`."""

    client_factory = Type(SlicedPollClient)


def execute(notebook: str, output: str, **kwargs) -> None:
    """``papermill.execute_notebook(notebook, output, **kwargs)`` with sliced polls, a per-cell
    deadline and retries."""
    import papermill

    for attempt in range(1, ATTEMPTS + 1):
        try:
            papermill.execute_notebook(notebook, output, execution_timeout=CELL_TIMEOUT_S,
                                       kernel_manager_class=SlicedPollKernelManager, **kwargs)
            return
        except CellTimeoutError:
            if attempt == ATTEMPTS:
                raise
            log.warning("%s: a cell got no reply from the kernel within %d s; running it again", notebook,
                        CELL_TIMEOUT_S)
