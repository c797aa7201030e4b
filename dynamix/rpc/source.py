"""``RemoteDecisionSource``: the engine's batch sizes from the gRPC arbitrator (``dynamix launch --arbitrator``).

Implements :class:`dynamix.engine.decisions.DecisionSource`. At the end of each window every rank
reports its own :class:`WorkerWindow` (and its view of the :class:`GlobalWindow`) and receives its own
next size; fail-open keeps its current size when the arbitrator is slow or gone. The per-rank results
are then all-gathered over ``self.group`` so every rank holds the same vector, which the shared
:class:`~dynamix.data.GlobalSampler` requires, even when only some ranks reached the arbitrator.
The learning-rate scale is taken from the lowest rank that got an answer (all answers of one window
carry the same scale); if none did, the previous scale stays.

Constructed by ``dynamix.engine.decisions.make_source(spec, "HOST:PORT", rank, group, **kwargs)``; the
keyword arguments below are optional. A resumed engine (restored from a checkpoint) calls
:meth:`decide` without :meth:`initial`: the source then registers on its first report, saying which
window comes next, so the arbitrator rewinds the run to it (or starts it, after its own restart).
The engine calls :meth:`close` when training ends: the rank leaves the run, so the arbitrator accepts
the next run at once instead of after ``arbitrator.idle_run_timeout_s`` of silence.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

import torch
import torch.distributed as dist

from dynamix.config import Config
from dynamix.metrics.schema import GlobalWindow, WorkerWindow
from dynamix.policies.base import Bounds, Decision, PolicyContext
from dynamix.rpc.client import ArbitratorClient, ClientSettings
from dynamix.rpc.validate import Registration

log = logging.getLogger(__name__)


class RemoteDecisionSource:
    """One per worker rank; ``target`` is the arbitrator's ``HOST:PORT``."""

    def __init__(
        self,
        target: str,
        rank: int,
        run_id: str | None = None,
        cfg: Config | None = None,
        ctx: PolicyContext | None = None,
        token: str | None = None,
        tls_root_certs: bytes | None = None,
    ) -> None:
        """``run_id`` names the run on the arbitrator (default: torchrun's ``$TORCHELASTIC_RUN_ID``,
        the same on every rank of one launch and across its ``--max-restarts``); ``cfg`` supplies the client's deadline and retries
        (``arbitrator`` section); ``ctx`` the run context when :meth:`initial` is skipped (resume);
        ``token``: the shared token (default ``$DYNAMIX_ARBITRATOR_TOKEN``); ``tls_root_certs``: PEM
        roots to verify a TLS arbitrator."""
        self.target = target
        self.rank = rank
        self.run_id = run_id or os.environ.get("TORCHELASTIC_RUN_ID") or "dynamix"
        self.cfg = cfg
        self.ctx = ctx
        self.settings = ClientSettings.from_config(cfg) if cfg is not None else ClientSettings()
        self.token = token
        self.tls_root_certs = tls_root_certs
        self.group: Any = None  # set by the engine before initial()
        self.client: ArbitratorClient | None = None
        self.lr_scale = 1.0

    def initial(self, ctx: PolicyContext) -> Decision:
        """Register; the arbitrator's first-window sizes, or the context's when it is unreachable."""
        self.ctx = ctx
        self.client = self._client(ctx)
        welcome = self.client.register()
        if welcome is not None:
            _check_settings(welcome.settings, ctx)
        mine = welcome.batch_size if welcome is not None else ctx.bounds.clamp(ctx.initial_batch_sizes[self.rank])
        return self._gather(mine, welcome.lr_scale if welcome is not None else None)

    def decide(self, rank: int, windows: list[WorkerWindow], glob: GlobalWindow,
               current: tuple[int, ...]) -> Decision:
        """Report this rank's window; everyone's next sizes (a rank that got no answer keeps its own)."""
        if self.client is None:  # resumed from a checkpoint: register with the first report
            self.client = self._client(self.ctx or self._resumed_context(current))
        own = next(w for w in windows if w.rank == rank)
        answer = self.client.report(own, glob)
        mine = answer.batch_size if answer is not None else current[rank]
        return self._gather(mine, answer.lr_scale if answer is not None else None)

    @property
    def policy_name(self) -> str | None:
        """The policy the arbitrator reported at this rank's registration (None before, or unreached)."""
        welcome = self.client.welcome if self.client is not None else None
        return welcome.policy if welcome is not None else None

    def close(self) -> None:
        """Leave the run and close the channel (after the last window); idempotent."""
        if self.client is not None:
            self.client.leave()
            self.client.close()
            self.client = None

    def _resumed_context(self, current: tuple[int, ...]) -> PolicyContext:
        """Best knowledge of the run without ``initial(ctx)``: only world size must match on rejoin."""
        if self.cfg is None:
            return PolicyContext(n_workers=len(current), initial_batch_sizes=tuple(current))
        b = self.cfg.batch
        return PolicyContext(n_workers=len(current), initial_batch_sizes=tuple(current), bounds=Bounds(b.min, b.max),
                             actions=tuple(b.actions), window=b.window, optimizer=self.cfg.optim.name,
                             seed=self.cfg.train.seed, lr_scaling=self.cfg.optim.lr_scaling,
                             base_batch=self.cfg.optim.base_batch, epochs=self.cfg.train.horizon_epochs,
                             base_lr=self.cfg.optim.lr)

    def _client(self, ctx: PolicyContext) -> ArbitratorClient:
        reg = Registration(
            run_id=self.run_id,
            rank=self.rank,
            world_size=ctx.n_workers,
            initial_batch_sizes=tuple(ctx.initial_batch_sizes),
            current_batch_size=ctx.initial_batch_sizes[self.rank],
            optimizer=ctx.optimizer,
            dataset_size=ctx.dataset_size,
            seed=ctx.seed,
            device={
                "hostname": socket.gethostname(),
                "pid": os.getpid(),
                "device_type": "cpu",
                "num_threads": torch.get_num_threads(),
                "speed": 1.0,
            },
        )
        return ArbitratorClient(self.target, reg, self.settings, self.token, self.tls_root_certs)

    def _gather(self, batch_size: int, lr_scale: float | None) -> Decision:
        mine = torch.tensor([float(batch_size), lr_scale or 0.0, float(lr_scale is not None)], dtype=torch.float64)
        parts = [torch.empty_like(mine) for _ in range(dist.get_world_size(self.group))]
        dist.all_gather(parts, mine, group=self.group)
        sizes = tuple(int(p[0]) for p in parts)
        answered = [float(p[1]) for p in parts if p[2] > 0]
        if answered:
            self.lr_scale = answered[0]
        return Decision(sizes, self.lr_scale)


def _check_settings(got, ctx: PolicyContext) -> None:
    """The arbitrator's settings must match the engine's: a mismatch is a configuration error."""
    pairs = {
        "batch.window": (got.window_iters, ctx.window),
        "batch.min": (got.bounds.min, ctx.bounds.min),
        "batch.max": (got.bounds.max, ctx.bounds.max),
        "batch.actions": (tuple(got.actions), tuple(ctx.actions)),
    }
    bad = [f"{k}: arbitrator {a!r}, engine {b!r}" for k, (a, b) in pairs.items() if a != b]
    if bad:
        raise ValueError("the arbitrator's run settings differ from this run's config (" + "; ".join(bad) +
                         "): start both from the same params.yaml profile and overrides")
