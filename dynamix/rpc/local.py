"""An arbitrator on loopback for one process's lifetime: experiments that drive the engine through
gRPC (and the tests of that path) serve a policy here and hand ``server.target`` to the workers."""

from __future__ import annotations

import contextlib
from typing import Iterator

from dynamix.policies.base import BatchSizePolicy
from dynamix.rpc.arbitrator import Arbitrator, OnDecision, RunSettings
from dynamix.rpc.server import ArbitratorServer


@contextlib.contextmanager
def local_server(policy: BatchSizePolicy, settings: RunSettings = RunSettings(), port: int = 0,
                 on_decision: OnDecision | None = None, token: str | None = None) -> Iterator[ArbitratorServer]:
    """An arbitrator serving ``policy`` on 127.0.0.1 (port 0: a free one), stopped on exit."""
    server = ArbitratorServer(Arbitrator(policy, settings, on_decision), "127.0.0.1", port, token=token)
    try:
        yield server
    finally:
        server.stop(grace_s=0)
