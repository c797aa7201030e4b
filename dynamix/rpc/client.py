"""The worker's side of the arbitrator: every call bounded by a deadline, and fail-open.

Training must never depend on the arbitrator being up: a report returns the next batch
size, or ``None`` meaning "keep your current size and carry on". Rules:

- Budget: one report (including re-registration, retries and backoff sleeps) never takes longer than
  ``deadline_s``; each attempt's gRPC deadline is the remaining budget.
- Retries: UNAVAILABLE (server down or restarting) is retried up to ``retries`` times with
  exponential backoff from ``backoff_ms``; FAILED_PRECONDITION whose reason says registering helps
  (the arbitrator restarted and lost this worker's session id, or never saw it) triggers one re-registration and
  one retry; other codes and reasons (a stale window, another run in progress) fail at once.
- Fail-open and reconnect: after the n-th consecutive failure the next ``min(2**(n-1), reconnect_max_skip)``
  reports are skipped without a call, so a dead or hung arbitrator costs O(log) deadlines, not one per
  window. Skipping counts windows, not seconds, so ranks in lock-step stay in step. The first failure
  of an outage logs one WARNING; the reconnection logs INFO.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from dataclasses import dataclass

import grpc

from dynamix.config import Config
from dynamix.metrics.schema import GlobalWindow, WorkerWindow
from dynamix.policies.base import Bounds
from dynamix.rpc import convert
from dynamix.rpc.arbitrator import Answer, RunSettings, Welcome
from dynamix.rpc.server import AUTH_METADATA_KEY, REASON_METADATA_KEY, TOKEN_ENV
from dynamix.rpc.v1 import arbitrator_pb2 as pb
from dynamix.rpc.v1 import arbitrator_pb2_grpc as pb_grpc
from dynamix.rpc.validate import FailedPrecondition, Registration

log = logging.getLogger(__name__)

CHANNEL_OPTIONS = [
    # Retry a refused connection quickly so a restarted arbitrator is found within a window or two
    # (gRPC's default backoff grows to 120 s).
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.enable_retries", 0),  # retries are ours, within the deadline
]


@dataclass(frozen=True)
class ClientSettings:
    """Timing of the fail-open client (``arbitrator`` section of params.yaml)."""

    deadline_s: float = 2.0
    retries: int = 2
    backoff_ms: float = 50.0
    reconnect_max_skip: int = 8

    @classmethod
    def from_config(cls, cfg: Config) -> "ClientSettings":
        a = cfg.arbitrator
        return cls(a.deadline_s, a.retries, a.backoff_ms, a.reconnect_max_skip)


class _Failed(Exception):
    def __init__(self, code: grpc.StatusCode, details: str, reason: str = "") -> None:
        super().__init__(f"{code.name}: {details}" + (f" [{reason}]" if reason else ""))
        self.code = code
        self.reason = reason  # FailedPrecondition.REASONS entry, for FAILED_PRECONDITION


def _reason(exc: grpc.RpcError) -> str:
    for key, value in exc.trailing_metadata() or ():
        if key == REASON_METADATA_KEY:
            return str(value).removeprefix("REJECT_REASON_")
    return ""


class ArbitratorClient:
    """One worker's connection. Not thread-safe: one client per worker process (or thread)."""

    def __init__(
        self,
        target: str,
        registration: Registration,
        settings: ClientSettings = ClientSettings(),
        token: str | None = None,
        tls_root_certs: bytes | None = None,
    ) -> None:
        self.target = target
        self.registration = registration
        self.settings = settings
        token = token if token is not None else os.environ.get(TOKEN_ENV) or None
        self._metadata = ((AUTH_METADATA_KEY, f"Bearer {token}"),) if token else None
        if tls_root_certs is not None:
            creds = grpc.ssl_channel_credentials(root_certificates=tls_root_certs)
            self.channel = grpc.secure_channel(target, creds, options=CHANNEL_OPTIONS)
        else:
            self.channel = grpc.insecure_channel(target, options=CHANNEL_OPTIONS)
        self.stub = pb_grpc.ArbitratorStub(self.channel)
        self.session_id: str | None = None
        self.welcome: Welcome | None = None
        self.failures = 0  # consecutive failed calls
        self.skip = 0  # reports to skip before the next attempt
        self.outages = 0  # number of times the client went offline (one warning each)

    # ----------------------------------------------------------------------------------------

    def register(self, next_window: int = 0, current_batch_size: int | None = None) -> Welcome | None:
        """Join the run; ``None`` if the arbitrator could not be reached within the deadline."""
        end = time.monotonic() + self.settings.deadline_s
        try:
            welcome = self._with_retries(end, lambda: self._register(end, next_window, current_batch_size))
        except _Failed as exc:
            self._failed(exc, "register")
            return None
        self._succeeded()
        return welcome

    def report(self, worker: WorkerWindow, glob: GlobalWindow) -> Answer | None:
        """Report ``worker``'s window; the next size, or ``None``: keep the current size (fail-open)."""
        if self.skip > 0:
            self.skip -= 1
            log.debug("arbitrator offline: skipping window %d (%d more to skip)", glob.window, self.skip)
            return None
        end = time.monotonic() + self.settings.deadline_s
        request = convert.report_to_pb("", self.registration.run_id, worker, glob)
        reregistered = False

        def attempt() -> Answer:
            nonlocal reregistered
            if self.session_id is None:
                self._register(end, glob.window, worker.batch_size)
            request.session_id = self.session_id
            try:
                msg = self._call(self.stub.ReportWindow, request, end)
            except _Failed as exc:
                if exc.reason not in FailedPrecondition.REREGISTER or reregistered:
                    raise
                log.info("arbitrator refused window %d (%s): registering again", glob.window, exc)
                reregistered = True
                self._register(end, glob.window, worker.batch_size)
                request.session_id = self.session_id
                msg = self._call(self.stub.ReportWindow, request, end)
            return Answer(msg.window, msg.batch_size, msg.lr_scale, tuple(msg.batch_sizes),
                          tuple(msg.dropped_ranks), msg.late)

        try:
            answer = self._with_retries(end, attempt)
        except _Failed as exc:
            self._failed(exc, f"window {glob.window}", worker.batch_size)
            return None
        self._succeeded()
        return answer

    def leave(self) -> None:
        """Tell the arbitrator this worker is done (best effort, within the deadline)."""
        if self.session_id is None:
            return
        end = time.monotonic() + self.settings.deadline_s
        request = pb.LeaveRequest(session_id=self.session_id, run_id=self.registration.run_id,
                                  rank=self.registration.rank)
        try:
            self._call(self.stub.Leave, request, end)
        except _Failed as exc:
            log.info("arbitrator: leave not acknowledged (%s)", exc)

    def close(self) -> None:
        self.channel.close()

    # ----------------------------------------------------------------------------------------

    def _register(self, end: float, next_window: int, current_batch_size: int | None) -> Welcome:
        reg = self.registration
        if current_batch_size is None:
            current_batch_size = reg.initial_batch_sizes[reg.rank]
        reg = dataclasses.replace(reg, next_window=next_window, current_batch_size=current_batch_size)
        self.session_id = None
        msg = self._call(self.stub.Register, convert.registration_to_pb(reg), end)
        self.session_id = msg.session_id
        self.welcome = Welcome(
            session_id=msg.session_id,
            settings=RunSettings(
                bounds=Bounds(msg.min_batch_size, msg.max_batch_size),
                actions=tuple(msg.actions),
                window_iters=msg.window_iters,
                barrier_timeout_s=msg.barrier_timeout_s,
            ),
            policy=msg.policy,
            batch_size=msg.batch_size,
            lr_scale=msg.lr_scale,
        )
        return self.welcome

    def _call(self, method, request, end: float):
        remaining = end - time.monotonic()
        if remaining <= 0:
            raise _Failed(grpc.StatusCode.DEADLINE_EXCEEDED, "client deadline spent")
        try:
            return method(request, timeout=remaining, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise _Failed(exc.code(), exc.details() or "", _reason(exc)) from None

    def _with_retries(self, end: float, fn):
        backoff_s = self.settings.backoff_ms / 1000
        for attempt in range(self.settings.retries + 1):
            try:
                return fn()
            except _Failed as exc:
                last_try = attempt == self.settings.retries
                if exc.code != grpc.StatusCode.UNAVAILABLE or last_try or time.monotonic() + backoff_s >= end:
                    raise
                time.sleep(backoff_s)
                backoff_s *= 2

    def _failed(self, exc: _Failed, what: str, keep: int | None = None) -> None:
        self.failures += 1
        self.skip = min(2 ** (self.failures - 1), self.settings.reconnect_max_skip)
        if self.failures == 1:
            self.outages += 1
            keeping = f"keeping batch size {keep}" if keep is not None else "keeping the configured sizes"
            log.warning("arbitrator %s failed on %s (%s): %s and training on; will reconnect",
                        self.target, what, exc, keeping)
        else:
            log.debug("arbitrator %s still failing on %s (%s); skipping %d report(s)",
                      self.target, what, exc, self.skip)

    def _succeeded(self) -> None:
        if self.failures:
            log.info("arbitrator %s reachable again after %d failed call(s)", self.target, self.failures)
        self.failures = 0
        self.skip = 0
