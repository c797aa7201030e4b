"""The gRPC face of :class:`~dynamix.rpc.arbitrator.Arbitrator`: a thin servicer, health, auth.

The server is gRPC's asyncio server on one event loop (a daemon thread shared by every server of
the process), so a report waiting at its window's barrier is a suspended coroutine, not a held
thread: 1,024 workers of one run, or several runs at once, need no setting. The reports of one window
wait on one future, which the barrier's close resolves; the last report of a window calls the
policy once for every worker, on the loop (so a policy's decision time delays other runs' calls by
as much; ``benchmarks/bench_rpc.py`` measures it). Each window's answer is built once and copied per
worker. The port is bound exclusively (``grpc.so_reuseport`` off): a second arbitrator on a port in
use fails to start instead of splitting the workers between two policies.

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

import asyncio
import dataclasses
import functools
import hmac
import ipaddress
import logging
import socket
import threading
import weakref
from typing import Any, Callable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from dynamix.rpc import convert
from dynamix.rpc.arbitrator import Answer, Arbitrator, Pending, PolicyFailure
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
    """Converts and delegates; see the module docstring for the status mapping. Runs on the loop only."""

    def __init__(self, arbitrator: Arbitrator) -> None:
        self.arbitrator = arbitrator
        self._closing: weakref.WeakKeyDictionary[Any, list[asyncio.Future]] = weakref.WeakKeyDictionary()
        # the shared part of a window's answer, encoded once: id(batch_sizes) -> (the sizes, kept alive, its bytes)
        self._answers: dict[int, tuple[tuple[int, ...], bytes]] = {}

    async def Register(self, request: pb.RegisterRequest, context: grpc.aio.ServicerContext) -> pb.RegisterResponse:
        try:
            return convert.welcome_to_pb(self.arbitrator.register(convert.registration_from_pb(_parsed(request))))
        except Exception as exc:
            await _reject(context, exc)

    async def ReportWindow(self, request: pb.ReportWindowRequest, context: grpc.aio.ServicerContext) -> bytes:
        """Every worker's call of every window: one coroutine frame, no closure (its cost is what the
        arbitrator adds to a bare gRPC call, benchmarks/bench_rpc.py)."""
        try:
            request = _parsed(request)
            if not (request.HasField("worker") and request.HasField("global_view")):
                raise InvalidArgument(f"{'global_view' if request.HasField('worker') else 'worker'} is required")
            worker, glob = convert.report_from_pb(request)
            result = self.arbitrator.submit(request.session_id, request.run_id, worker, glob)
            while isinstance(result, Pending):
                barrier = result.barrier
                if barrier.outcome is None and not barrier.abandoned:  # open: wait (the last report closed it)
                    await self._closed(result)
                result = self.arbitrator.collect(result) or result
            return self._answer_bytes(result)
        except Exception as exc:
            await _reject(context, exc)

    async def Leave(self, request: pb.LeaveRequest, context: grpc.aio.ServicerContext) -> pb.LeaveResponse:
        try:
            request = _parsed(request)
            return pb.LeaveResponse(remaining_workers=self.arbitrator.leave(request.session_id, request.run_id,
                                                                            request.rank))
        except Exception as exc:
            await _reject(context, exc)

    async def _closed(self, pending: Pending) -> None:
        """Until ``pending``'s barrier closes: a future per waiting report, all resolved together by
        whichever thread closes the barrier, and one timer per barrier that closes it at its deadline."""
        loop = asyncio.get_running_loop()
        waiters = self._closing.get(pending.barrier)
        if waiters is None:
            waiters = self._closing[pending.barrier] = []
            self.arbitrator.when_closed(pending, lambda: _resolve_soon(loop, waiters))
            loop.call_later(max(pending.deadline - self.arbitrator.clock(), 0), self._expire, pending, waiters)
        future = loop.create_future()  # its own: a caller giving up cancels its wait, not its peers'
        waiters.append(future)
        await future

    def _expire(self, pending: Pending, waiters: list[asyncio.Future]) -> None:
        """The barrier's deadline: close it without the missing ranks (which resolves the waiters)."""
        try:
            if self.arbitrator.collect(pending) is None:  # the clocks differ by a hair: look again soon
                asyncio.get_running_loop().call_later(0.001, self._expire, pending, waiters)
        except Exception:  # abandoned, or the policy failed: the barrier closed all the same
            pass

    def _answer_bytes(self, answer: Answer) -> bytes:
        """The window's answer as wire bytes: the part every rank shares (its vector holds a size per
        worker, so N ranks would otherwise copy and encode N^2 sizes a window) encoded once per decision,
        then this rank's own ``batch_size`` and ``late``. A protobuf parser merges concatenated
        encodings, a later singular field replacing an earlier one, and the shared part leaves both
        unset, so the bytes parse as the one message built whole."""
        held = self._answers.get(id(answer.batch_sizes))
        if held is None or held[0] is not answer.batch_sizes:
            while len(self._answers) >= 16:
                self._answers.pop(next(iter(self._answers)))
            shared = convert.answer_to_pb(dataclasses.replace(answer, batch_size=0, late=False))
            held = self._answers[id(answer.batch_sizes)] = (answer.batch_sizes, shared.SerializeToString())
        return held[1] + _own_part(answer.batch_size, answer.late)


@functools.lru_cache(maxsize=4096)
def _own_part(batch_size: int, late: bool) -> bytes:
    """The encoding of one rank's fields of an answer (a few bytes; a handful of distinct values)."""
    return pb.ReportWindowResponse(batch_size=batch_size, late=late).SerializeToString()


def _serialize(message: Any) -> bytes:
    """A response's wire bytes: a message encoded, bytes already encoded passed through."""
    return message if isinstance(message, bytes) else message.SerializeToString()


def _resolve_soon(loop: asyncio.AbstractEventLoop, waiters: list[asyncio.Future]) -> None:
    def resolve() -> None:
        for future in waiters:
            if not future.done():
                future.set_result(None)
        waiters.clear()

    if threading.get_ident() == _LOOP.thread_id:
        resolve()  # on the loop already (the usual case): set_result only schedules the waiters
    else:
        loop.call_soon_threadsafe(resolve)


class _Unparseable:
    """A request whose bytes are not its message (answered INVALID_ARGUMENT, not gRPC's UNKNOWN)."""

    def __init__(self, error: Exception) -> None:
        self.error = error


def _lenient(parse: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def deserialize(data: bytes) -> Any:
        try:
            return parse(data)
        except Exception as exc:  # protobuf's DecodeError, or anything else the bytes provoke
            return _Unparseable(exc)

    return deserialize


def add_servicer(servicer: ArbitratorServicer, server: grpc.aio.Server) -> None:
    """``add_ArbitratorServicer_to_server`` with deserializers that never raise (see :class:`_Unparseable`)."""
    handlers = {}
    for method in pb.DESCRIPTOR.services_by_name["Arbitrator"].methods:
        request = getattr(pb, method.input_type.name)
        handlers[method.name] = grpc.unary_unary_rpc_method_handler(
            getattr(servicer, method.name), request_deserializer=_lenient(request.FromString),
            response_serializer=_serialize)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))


def _parsed(request: Any) -> Any:
    """``request``, or INVALID_ARGUMENT when its bytes did not parse (:func:`_lenient`)."""
    if isinstance(request, _Unparseable):
        raise InvalidArgument(f"the request's bytes are not this method's message ({request.error})")
    return request


async def _reject(context: grpc.aio.ServicerContext, exc: Exception) -> None:
    """End the call with the status ``exc`` maps to (``context.abort`` raises, so it runs last)."""
    if isinstance(exc, InvalidArgument):
        code, message = grpc.StatusCode.INVALID_ARGUMENT, str(exc)
    elif isinstance(exc, FailedPrecondition):
        code, message = grpc.StatusCode.FAILED_PRECONDITION, str(exc)
        context.set_trailing_metadata(((REASON_METADATA_KEY, f"REJECT_REASON_{exc.reason}"),))
    elif isinstance(exc, PolicyFailure):
        code, message = grpc.StatusCode.INTERNAL, str(exc)
    else:  # a bug here must cost one call, not the service
        log.error("arbitrator: unexpected error", exc_info=exc)
        code, message = grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}"
    log.debug("rejected: %s %s", code.name, message)
    await context.abort(code, message)


class TokenInterceptor(grpc.aio.ServerInterceptor):
    """Refuses (UNAUTHENTICATED) every call without ``authorization: Bearer <token>``."""

    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("token must be a non-empty string")
        self._expected = f"Bearer {token}".encode()

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        presented = dict(handler_call_details.invocation_metadata or ()).get(AUTH_METADATA_KEY, "")
        if handler is None or hmac.compare_digest(str(presented).encode(), self._expected):
            return handler

        async def deny(request, context):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong arbitrator token")

        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                deny, handler.request_deserializer, handler.response_serializer)
        return grpc.unary_stream_rpc_method_handler(
            deny, handler.request_deserializer, handler.response_serializer)


class _Loop:
    """The process's arbitrator event loop: one daemon thread, started on first use, shared by servers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread_id: int | None = None

    def run(self, coro) -> Any:
        """Run ``coro`` on the loop and return its result (raising its exception) in the caller's thread."""
        with self._lock:
            if self.loop is None:
                ready = threading.Event()
                self.loop = asyncio.new_event_loop()
                threading.Thread(target=self._forever, args=(ready,), name="arbitrator-loop", daemon=True).start()
                ready.wait()
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def _forever(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.thread_id = threading.get_ident()
        self.loop.call_soon(ready.set)
        self.loop.run_forever()


_LOOP = _Loop()


def _check_free(host: str, port: int, address: str) -> None:
    """Refuse a port another process listens on before gRPC tries it (gRPC's own refusal, kept as the
    check of record, also logs a line of its own to stderr)."""
    if port == 0:
        return
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a closed server's TIME_WAIT is no owner
        try:
            probe.bind((host.strip("[]"), port))
        except OSError as exc:
            raise OSError(f"could not bind {address}: {exc.strerror} (another arbitrator?)") from None


class ArbitratorServer:
    """A started gRPC server around an :class:`Arbitrator`; ``port`` is the bound port. The server runs
    on the process's arbitrator event loop; the constructor and :meth:`stop` block until it is up or down."""

    def __init__(
        self,
        arbitrator: Arbitrator,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        tls: tuple[bytes, bytes] | None = None,
    ) -> None:
        if not is_loopback(host) and not token and tls is None:
            raise ValueError(
                f"host = {host!r} is not a loopback address, and no token and no TLS were given: binding it "
                f"requires a shared token (${TOKEN_ENV} or --token-file) or TLS (--tls-cert and --tls-key)"
            )
        if not is_loopback(host) and tls is None:
            log.warning("binding %s with a token but without TLS: the token travels in clear text", host)
        self.arbitrator = arbitrator
        self.host = host
        self._stopped = threading.Event()
        self.port = _LOOP.run(self._start(port, token, tls))
        log.info("arbitrator listening on %s:%d%s (policy %s, session %s)", host, self.port,
                 " with TLS" if tls else "", arbitrator.policy.name, arbitrator.session_id)

    async def _start(self, port: int, token: str | None, tls: tuple[bytes, bytes] | None) -> int:
        self.server = grpc.aio.server(interceptors=[TokenInterceptor(token)] if token else [],
                                      options=[("grpc.so_reuseport", 0)])
        add_servicer(ArbitratorServicer(self.arbitrator), self.server)
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        address = f"[{self.host}]:{port}" if ":" in self.host else f"{self.host}:{port}"
        _check_free(self.host, port, address)
        try:
            if tls is None:
                bound = self.server.add_insecure_port(address)
            else:
                bound = self.server.add_secure_port(address, grpc.ssl_server_credentials([tls]))
        except RuntimeError:  # grpc's word for a failed bind
            bound = 0
        if bound == 0 or (port and bound != port):
            raise OSError(f"could not bind {address}: the port is in use (another arbitrator?) or not allowed")
        await self.server.start()
        for name in ("", SERVICE_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        return bound

    @property
    def target(self) -> str:
        return f"{self.host}:{self.port}"

    def stop(self, grace_s: float | None = 1.0) -> None:
        """Report NOT_SERVING, then stop (in-flight calls get ``grace_s`` to finish)."""
        async def stop() -> None:
            await self.health.enter_graceful_shutdown()
            await self.server.stop(grace_s)

        if not self._stopped.is_set():
            _LOOP.run(stop())
            self._stopped.set()

    def wait(self) -> None:
        self._stopped.wait()
