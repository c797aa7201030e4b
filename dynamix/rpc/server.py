"""The gRPC face of :class:`~dynamix.rpc.arbitrator.Arbitrator`: a thin servicer, health, auth.

The servicer converts messages (:mod:`dynamix.rpc.convert`), delegates, and maps rejections to status
codes: :class:`~dynamix.rpc.validate.InvalidArgument` -> INVALID_ARGUMENT,
:class:`~dynamix.rpc.validate.FailedPrecondition` -> FAILED_PRECONDITION (its reason in the trailing
metadata ``dynamix-reason``),
:class:`~dynamix.rpc.arbitrator.PolicyFailure` and anything unexpected -> INTERNAL (logged). No input
can stop the server: every handler ends in a response or a status.

Security: the server binds 127.0.0.1 unless told otherwise. Binding any other address requires a
shared token (checked on every call, health included, from the ``authorization: Bearer <token>``
metadata, compared in constant time) or TLS (``tls=(private_key_pem, cert_chain_pem)``, gRPC's order), otherwise
:func:`build_server` refuses to start. Calls without the right token get UNAUTHENTICATED.

The standard health service (``grpc.health.v1``) reports SERVING for ``""`` and
``dynamix.rpc.v1.Arbitrator`` while up and NOT_SERVING during shutdown.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from concurrent import futures
from typing import Callable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from dynamix.rpc import convert
from dynamix.rpc.arbitrator import Arbitrator, PolicyFailure
from dynamix.rpc.v1 import arbitrator_pb2 as pb
from dynamix.rpc.v1 import arbitrator_pb2_grpc as pb_grpc
from dynamix.rpc.validate import FailedPrecondition, InvalidArgument

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Arbitrator"].full_name
AUTH_METADATA_KEY = "authorization"
REASON_METADATA_KEY = "dynamix-reason"
"""Trailing metadata naming the ``RejectReason`` of a FAILED_PRECONDITION."""
TOKEN_ENV = "DYNAMIX_ARBITRATOR_TOKEN"
"""Environment variable holding the shared token for both ``serve`` and workers (kept off argv)."""


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IPs (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class ArbitratorServicer(pb_grpc.ArbitratorServicer):
    """Converts and delegates; see the module docstring for the status mapping."""

    def __init__(self, arbitrator: Arbitrator, max_threads: int) -> None:
        self.arbitrator = arbitrator
        self.max_threads = max_threads

    def Register(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.RegisterResponse:
        if request.world_size >= self.max_threads:
            # every report of a window holds a handler thread at the barrier: with too few threads the
            # last reports could never be served and every window would end in a timeout
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"world_size = {request.world_size} needs more than arbitrator.max_threads = "
                          f"{self.max_threads} server threads: restart the arbitrator with "
                          f"--set arbitrator.max_threads={request.world_size + 8}")
        return _handle(context, lambda: convert.welcome_to_pb(
            self.arbitrator.register(convert.registration_from_pb(request))))

    def ReportWindow(self, request: pb.ReportWindowRequest, context: grpc.ServicerContext) -> pb.ReportWindowResponse:
        def run() -> pb.ReportWindowResponse:
            for part in ("worker", "global_view"):
                if not request.HasField(part):
                    raise InvalidArgument(f"{part} is required")
            worker, glob = convert.report_from_pb(request)
            return convert.answer_to_pb(self.arbitrator.report(request.session_id, request.run_id, worker, glob))

        return _handle(context, run)

    def Leave(self, request: pb.LeaveRequest, context: grpc.ServicerContext) -> pb.LeaveResponse:
        return _handle(context, lambda: pb.LeaveResponse(
            remaining_workers=self.arbitrator.leave(request.session_id, request.run_id, request.rank)))


def _handle(context: grpc.ServicerContext, fn: Callable[[], object]) -> object:
    """Run ``fn``; turn rejections into status codes (``context.abort`` raises, so it runs last)."""
    try:
        return fn()
    except InvalidArgument as exc:
        code, message = grpc.StatusCode.INVALID_ARGUMENT, str(exc)
    except FailedPrecondition as exc:
        code, message = grpc.StatusCode.FAILED_PRECONDITION, str(exc)
        context.set_trailing_metadata(((REASON_METADATA_KEY, f"REJECT_REASON_{exc.reason}"),))
    except PolicyFailure as exc:
        code, message = grpc.StatusCode.INTERNAL, str(exc)
    except Exception as exc:  # a bug here must cost one call, not the service
        log.exception("arbitrator: unexpected error")
        code, message = grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}"
    log.debug("rejected: %s %s", code.name, message)
    context.abort(code, message)


class TokenInterceptor(grpc.ServerInterceptor):
    """Refuses (UNAUTHENTICATED) every call without ``authorization: Bearer <token>``."""

    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("token must be a non-empty string")
        self._expected = f"Bearer {token}".encode()

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        presented = dict(handler_call_details.invocation_metadata or ()).get(AUTH_METADATA_KEY, "")
        if handler is None or hmac.compare_digest(str(presented).encode(), self._expected):
            return handler

        def deny(request, context):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong arbitrator token")

        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                deny, handler.request_deserializer, handler.response_serializer)
        return grpc.unary_stream_rpc_method_handler(
            deny, handler.request_deserializer, handler.response_serializer)


class ArbitratorServer:
    """A started gRPC server around an :class:`Arbitrator`; ``port`` is the bound port."""

    def __init__(
        self,
        arbitrator: Arbitrator,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        tls: tuple[bytes, bytes] | None = None,
        max_threads: int = 64,
    ) -> None:
        if not is_loopback(host) and not token and tls is None:
            raise ValueError(
                f"host = {host!r} is not a loopback address, and no token and no TLS were given: binding it "
                f"requires a shared token (${TOKEN_ENV} or --token-file) or TLS (--tls-cert and --tls-key)"
            )
        if not is_loopback(host) and tls is None:
            log.warning("binding %s with a token but without TLS: the token travels in clear text", host)
        self.arbitrator = arbitrator
        interceptors = [TokenInterceptor(token)] if token else []
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=max_threads, thread_name_prefix="arbitrator"),
            interceptors=interceptors,
        )
        pb_grpc.add_ArbitratorServicer_to_server(ArbitratorServicer(arbitrator, max_threads), self.server)
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if tls is None:
            self.port = self.server.add_insecure_port(address)
        else:
            self.port = self.server.add_secure_port(address, grpc.ssl_server_credentials([tls]))
        if self.port == 0:
            raise OSError(f"could not bind {address}")
        self.host = host
        self.server.start()
        for name in ("", SERVICE_NAME):
            self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("arbitrator listening on %s:%d%s (policy %s, session %s)", host, self.port,
                 " with TLS" if tls else "", arbitrator.policy.name, arbitrator.session_id)

    @property
    def target(self) -> str:
        return f"{self.host}:{self.port}"

    def stop(self, grace_s: float | None = 1.0) -> None:
        """Report NOT_SERVING, then stop (in-flight calls get ``grace_s`` to finish)."""
        self.health.enter_graceful_shutdown()
        self.server.stop(grace_s).wait()

    def wait(self) -> None:
        self.server.wait_for_termination()
