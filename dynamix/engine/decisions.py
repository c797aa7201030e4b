"""Where the engine's batch sizes come from: the :class:`DecisionSource` protocol.

At the end of every window each worker rank calls ``source.decide(rank, windows, glob, current)``
with the all-gathered :class:`WorkerWindow` list (rank order) and the :class:`GlobalWindow`; every
rank must get back the SAME full batch-size vector, because every rank draws its data slice from
the same :class:`~dynamix.data.GlobalSampler` call. Implementations:

- :class:`LocalPolicySource`: rank 0 runs a :class:`BatchSizePolicy` in-process and broadcasts.
- ``dynamix.rpc.source.RemoteDecisionSource``: each rank asks the gRPC arbitrator for its own size
  (fail-open: keeps the current size) and the sizes are all-gathered.

Collectives inside a source must run over ``source.group``, which the engine sets before calling
:meth:`initial` (the worker ranks' process group; ``None`` = the default group, which is all ranks in
ring mode; in parameter-server mode the servers are excluded).
"""

from __future__ import annotations

import logging
from typing import Any, Protocol, runtime_checkable

import torch.distributed as dist

from dynamix.metrics.schema import GlobalWindow, WorkerWindow
from dynamix.policies.base import BatchSizePolicy, Decision, PolicyContext, make_live_policy

log = logging.getLogger(__name__)


@runtime_checkable
class DecisionSource(Protocol):
    group: Any  # worker ranks' process group, set by the engine (None: default group)

    def initial(self, ctx: PolicyContext) -> Decision:
        """Batch sizes for the first window; the same on every worker rank."""

    def decide(self, rank: int, windows: list[WorkerWindow], glob: GlobalWindow,
               current: tuple[int, ...]) -> Decision:
        """Batch sizes for the next window; the same on every worker rank."""


def broadcast_decision(decision: Decision | None, src: int = 0, group: Any = None) -> Decision:
    """Rank ``src``'s decision on every rank of ``group`` (others pass None)."""
    box = [decision]
    dist.broadcast_object_list(box, src=src, group=group)
    return box[0]


class LocalPolicySource:
    """Rank 0 runs ``policy`` (other ranks pass None) and broadcasts its decision."""

    def __init__(self, policy: BatchSizePolicy | None, group: Any = None) -> None:
        self.policy = policy
        self.group = group

    def _src_rank(self) -> int:
        return 0  # global rank 0 is worker 0 in both architectures

    def initial(self, ctx: PolicyContext) -> Decision:
        d = None
        if dist.get_rank() == self._src_rank():
            self.policy.reset(ctx)
            unmet = self.policy.unmet_request(ctx.n_workers, ctx.bounds)
            if unmet:
                log.warning("%s", unmet)
            d = self.policy.initial(ctx)
        return broadcast_decision(d, self._src_rank(), self.group)

    def decide(self, rank: int, windows: list[WorkerWindow], glob: GlobalWindow,
               current: tuple[int, ...]) -> Decision:
        d = self.policy.decide(windows, glob) if rank == self._src_rank() else None
        return broadcast_decision(d, self._src_rank(), self.group)


def make_source(policy_spec: str, arbitrator: str | None, rank: int, group: Any = None,
                **remote_kwargs: Any) -> DecisionSource:
    """A LocalPolicySource for ``policy_spec``, or the gRPC source when ``arbitrator`` is HOST:PORT."""
    if arbitrator:
        from dynamix.rpc.source import RemoteDecisionSource  # lazy: grpc only when used

        source = RemoteDecisionSource(arbitrator, rank, **remote_kwargs)
        source.group = group
        return source
    return LocalPolicySource(make_live_policy(policy_spec) if rank == 0 else None, group)
