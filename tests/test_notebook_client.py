"""The notebook tests' kernel channel (tests/helpers/notebooks.py): polling in slices keeps get_msg's
meaning (a message that comes late is still read; no message by the deadline raises Empty)."""

from __future__ import annotations

import asyncio
import time
from queue import Empty

import pytest
import zmq
import zmq.asyncio
from jupyter_client.session import Session

from helpers import notebooks


def _pair():
    ctx = zmq.asyncio.Context()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    a.bind("inproc://sliced")
    b.connect("inproc://sliced")
    return ctx, a, b


def test_a_late_message_is_read_across_slices_and_none_raises_at_the_deadline(monkeypatch):
    monkeypatch.setattr(notebooks, "POLL_SLICE_S", 0.05)
    session = Session()

    async def scenario():
        ctx, a, b = _pair()
        channel = notebooks.SlicedPollChannel(a, session)
        try:
            async def send_late():
                await asyncio.sleep(0.3)  # six slices later
                session.send(b, "execute_reply", {"status": "ok"})

            sender = asyncio.ensure_future(send_late())
            msg = await channel.get_msg(timeout=5)
            await sender
            assert msg["msg_type"] == "execute_reply" and msg["content"] == {"status": "ok"}
            t = time.monotonic()
            with pytest.raises(Empty):
                await channel.get_msg(timeout=0.2)
            assert 0.2 <= time.monotonic() - t < 2
        finally:
            a.close(linger=0)
            b.close(linger=0)
            ctx.term()

    asyncio.run(scenario())


def test_papermill_runs_get_the_sliced_channels():
    km = notebooks.SlicedPollKernelManager(kernel_name="python3")
    client = km.client()
    assert client.shell_channel_class is notebooks.SlicedPollChannel
    assert client.iopub_channel_class is notebooks.SlicedPollChannel
