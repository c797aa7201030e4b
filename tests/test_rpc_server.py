"""The arbitrator over gRPC on loopback: status codes, fuzzed reports, health, auth, fail-open client,
restart and reconnection, and the serve command."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dynamix import paths
from dynamix.policies import make_policy
from dynamix.rpc import convert
from dynamix.rpc.arbitrator import Arbitrator, RunSettings
from dynamix.rpc.client import ArbitratorClient, ClientSettings
from dynamix.rpc.local import local_server
from dynamix.rpc.server import ArbitratorServer, SERVICE_NAME
from dynamix.rpc.v1 import arbitrator_pb2 as pb
from dynamix.rpc.v1 import arbitrator_pb2_grpc as pb_grpc
from dynamix.rpc.validate import GLOBAL_RANGES, NAN_ALLOWED, WORKER_RANGES, FailedPrecondition

from helpers.rpc import registration, sample_report

RUN = "test-run"


def health_status(target: str, metadata=None, service: str = SERVICE_NAME) -> int:
    with grpc.insecure_channel(target) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5, metadata=metadata).status


def rounds(clients: list[ArbitratorClient], window: int, sizes: list[int]) -> list:
    """Every client reports ``window`` concurrently (lock-step workers); answers in rank order."""
    out: list = [None] * len(clients)

    def one(r: int) -> None:
        w, g = sample_report(r, window, sizes[r], len(clients), global_batch=sum(sizes))
        out[r] = clients[r].report(w, g)

    threads = [threading.Thread(target=one, args=(r,)) for r in range(len(clients))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def fast(**kw) -> ClientSettings:
    return ClientSettings(**{"deadline_s": 2.0, "retries": 2, "backoff_ms": 10.0, "reconnect_max_skip": 2, **kw})


# ----------------------------------------------------------------------------------------------
# A shared server with a registered 2-worker run that already decided windows 0 and 1
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def live():
    with local_server(make_policy("static:128"), RunSettings(barrier_timeout_s=5.0)) as server:
        stub = pb_grpc.ArbitratorStub(grpc.insecure_channel(server.target))
        session = ""
        for r in range(2):
            session = stub.Register(convert.registration_to_pb(registration(r, 2, run_id=RUN)), timeout=5).session_id
        clients = [ArbitratorClient(server.target, registration(r, 2, run_id=RUN), fast()) for r in range(2)]
        assert [a.batch_sizes for a in rounds(clients, 0, [64, 64])] == [(128, 128)] * 2
        assert [a.batch_sizes for a in rounds(clients, 1, [128, 128])] == [(128, 128)] * 2
        yield server, stub, clients[0].session_id, clients


def valid_request(session: str, rank: int = 0, window: int = 2) -> pb.ReportWindowRequest:
    w, g = sample_report(rank, window, 128, 2, global_batch=256)
    return convert.report_to_pb(session, RUN, w, g)


def _bad_float(lo: float, hi: float, nan_ok: bool):
    options = [-math.inf, math.inf, hi * 2 + 1, lo - 1e-3 - abs(lo)] + ([] if nan_ok else [math.nan])
    return st.sampled_from(options)


@st.composite
def malformed(draw):
    """A ReportWindowRequest with at least one definitely-invalid part (or raw garbage bytes)."""
    kind = draw(st.sampled_from(["worker", "global", "rank", "batch", "session", "run", "stale",
                                 "missing", "n_workers", "iteration", "global_batch", "bytes"]))
    if kind == "bytes":
        return draw(st.binary(min_size=1, max_size=200))
    req = pb.ReportWindowRequest()
    req.CopyFrom(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(1, 3))):  # one or more corruptions of the chosen kind
        if kind == "worker":
            name = draw(st.sampled_from(sorted(WORKER_RANGES)))
            lo, hi = WORKER_RANGES[name]["range"]
            setattr(req.worker, name, draw(_bad_float(lo, hi, False)))
        elif kind == "global":
            name = draw(st.sampled_from([n for n, m in GLOBAL_RANGES.items() if isinstance(m["range"][0], float)]))
            lo, hi = GLOBAL_RANGES[name]["range"]
            setattr(req.global_view, name, draw(_bad_float(lo, hi, name in NAN_ALLOWED)))
        elif kind == "rank":
            req.rank = draw(st.one_of(st.integers(-2**31, -1), st.integers(2, 2**31 - 1)))
        elif kind == "batch":
            req.worker.batch_size = draw(st.one_of(st.integers(-2**31, 31), st.integers(1025, 2**31 - 1)))
        elif kind == "session":
            req.session_id = draw(st.text(max_size=40).filter(lambda s: s != SESSION[0]))
        elif kind == "run":
            req.run_id = draw(st.text(max_size=40).filter(lambda s: s != RUN))
        elif kind == "stale":
            req.global_view.window = 0
        elif kind == "missing":
            req.ClearField(draw(st.sampled_from(["worker", "global_view"])))
        elif kind == "n_workers":
            req.global_view.n_workers = draw(st.integers(-2**31, 2**31 - 1).filter(lambda n: n != 2))
        elif kind == "iteration":
            req.global_view.iteration = draw(st.integers(-2**63, req.global_view.window))
        elif kind == "global_batch":
            req.global_view.global_batch = draw(st.integers(-2**63, req.worker.batch_size - 1))
    return req


BASES: list[pb.ReportWindowRequest] = []
SESSION: list[str] = []


def fuzz_server(live, n: int) -> None:
    server, stub, session, clients = live
    BASES[:] = [valid_request(session, rank=r) for r in range(2)]
    SESSION[:] = [session]
    raw = grpc.insecure_channel(server.target).unary_unary(
        f"/{SERVICE_NAME}/ReportWindow", request_serializer=None, response_deserializer=None)
    codes: list[grpc.StatusCode] = []

    @settings(max_examples=n, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(req=malformed())
    def check(req):
        try:
            if isinstance(req, bytes):
                raw(req, timeout=5)
            else:
                stub.ReportWindow(req, timeout=5)
        except grpc.RpcError as exc:
            codes.append(exc.code())
            assert exc.code() != grpc.StatusCode.DEADLINE_EXCEEDED, "a malformed report reached the barrier"
            return
        pytest.fail(f"malformed report accepted: {req!r}")

    check()
    assert len(codes) >= n
    structured = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION}
    assert set(codes) - structured <= {grpc.StatusCode.INTERNAL}  # INTERNAL: unparseable bytes only
    assert health_status(server.target) == health_pb2.HealthCheckResponse.SERVING
    # the run is intact: the next window is decided normally
    assert [a.batch_sizes for a in rounds(clients, 2, [128, 128])] == [(128, 128)] * 2


def test_fuzzed_malformed_reports_all_get_error_statuses_and_server_stays_up(live):
    fuzz_server(live, 1000)


@pytest.mark.slow
def test_fuzzed_malformed_reports_10k(live):
    fuzz_server(live, 10_000)


def test_status_codes_name_the_problem(live):
    server, stub, session, _ = live
    req = valid_request(session)
    req.worker.loss = math.nan
    with pytest.raises(grpc.RpcError) as err:
        stub.ReportWindow(req, timeout=5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "worker.loss is NaN" in err.value.details()
    req = valid_request("not-a-session")
    with pytest.raises(grpc.RpcError) as err:
        stub.ReportWindow(req, timeout=5)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "register again" in err.value.details()
    assert ("dynamix-reason", "REJECT_REASON_SESSION_UNKNOWN") in err.value.trailing_metadata()
    with pytest.raises(grpc.RpcError) as err:
        stub.Register(pb.RegisterRequest(run_id=RUN, rank=0, world_size=0), timeout=5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "world_size = 0" in err.value.details()


def test_200_workers_of_one_run_wait_at_the_barrier_on_default_settings_without_holding_threads():
    """More workers than the 64 threads the threaded server had: the 199 early reports wait while a
    health check is answered, and the last report releases all 200 with one decision."""
    n = 200

    async def window(target: str) -> tuple[list, int]:
        async with grpc.aio.insecure_channel(target) as channel:
            stub = pb_grpc.ArbitratorStub(channel)
            welcomes = await asyncio.gather(*(
                stub.Register(convert.registration_to_pb(registration(r, n)), timeout=30) for r in range(n)))
            requests = [convert.report_to_pb(welcomes[r].session_id, RUN, *sample_report(r, 0, 64, n))
                        for r in range(n)]
            early = [asyncio.ensure_future(stub.ReportWindow(requests[r], timeout=30)) for r in range(n - 1)]
            await asyncio.sleep(1.0)
            health = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert not any(f.done() for f in early)  # still waiting for rank n - 1
            last = await stub.ReportWindow(requests[n - 1], timeout=30)
            return [*(await asyncio.gather(*early)), last], health.status

    with local_server(make_policy("static:96"), RunSettings(barrier_timeout_s=30.0)) as server:
        answers, status = asyncio.run(window(server.target))
        assert server.arbitrator.decisions == 1
    assert status == health_pb2.HealthCheckResponse.SERVING
    assert all(list(a.batch_sizes) == [96] * n and a.batch_size == 96 and not a.late for a in answers)


def test_an_answer_sent_as_shared_bytes_plus_its_rank_part_parses_as_the_whole_message():
    """The servicer encodes a window's shared answer once and appends each rank's own fields: every
    rank, late or not, must read exactly the message built whole for it."""
    from dynamix.rpc.arbitrator import Answer
    from dynamix.rpc.server import ArbitratorServicer

    servicer = ArbitratorServicer(Arbitrator(make_policy("static:64")))
    sizes = (32, 1024, 96, 512)
    for rank, late in ((0, False), (1, True), (3, False)):
        answer = Answer(7, sizes[rank], 1.25, sizes, (2,), late)
        got = pb.ReportWindowResponse.FromString(servicer._answer_bytes(answer))
        assert got == convert.answer_to_pb(answer)
        assert (got.batch_size, got.late, list(got.batch_sizes)) == (sizes[rank], late, list(sizes))


def test_a_second_arbitrator_on_a_port_in_use_refuses_to_start():
    with local_server(make_policy("static:64")) as first:
        with pytest.raises(OSError, match="in use"):
            ArbitratorServer(Arbitrator(make_policy("static:128")), port=first.port)
        proc = subprocess.run([sys.executable, "-m", "dynamix.cli", "arbitrator", "serve", "--port", str(first.port),
                               "--policy", "static:128"], cwd=paths.ROOT, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
        assert proc.stderr.count("\n") == 1 and f"cannot serve on 127.0.0.1:{first.port}" in proc.stderr
        welcome = ArbitratorClient(first.target, registration(0, 1), fast()).register()
        assert welcome.batch_size == 64  # every worker still reaches the first one


def test_every_rejection_reason_is_in_the_proto():
    assert [f"REJECT_REASON_{r}" for r in FailedPrecondition.REASONS] == pb.RejectReason.keys()[1:]


# ----------------------------------------------------------------------------------------------
# Fail-open client, restart, reconnection
# ----------------------------------------------------------------------------------------------


def test_a_stale_report_fails_open_without_re_registering_or_rewinding_the_run(caplog):
    with local_server(make_policy("static:128"), RunSettings(barrier_timeout_s=5.0)) as server:
        client = ArbitratorClient(server.target, registration(0, 1), fast())
        for t in range(4):
            assert client.report(*sample_report(0, t, 128, 1)).batch_size == 128
        decided = server.arbitrator.decisions
        with caplog.at_level(logging.INFO, logger="dynamix.rpc.client"):
            assert client.report(*sample_report(0, 1, 128, 1)) is None  # stale: keep the current size
        assert "WINDOW_STALE" in caplog.text and "registering again" not in caplog.text
        client.skip = 0
        assert client.report(*sample_report(0, 3, 128, 1)).window == 3  # a replay: not rewound to window 1
        assert server.arbitrator.decisions == decided


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_client_fails_open_with_one_warning_when_nobody_listens(caplog):
    client = ArbitratorClient(f"127.0.0.1:{free_port()}", registration(0, 1), fast())
    with caplog.at_level(logging.DEBUG, logger="dynamix.rpc.client"):
        assert client.register() is None
        answers = [client.report(*sample_report(0, t, 64, 1)) for t in range(6)]
    assert answers == [None] * 6
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "keeping the configured sizes" in warnings[0].getMessage()
    assert client.outages == 1


def test_client_never_waits_past_its_deadline_on_a_stuck_arbitrator():
    # rank 1 never reports, so the server would hold rank 0's call for its 3 s barrier timeout
    with local_server(make_policy("static:128"), RunSettings(barrier_timeout_s=3.0)) as server:
        client = ArbitratorClient(server.target, registration(0, 2), fast(deadline_s=0.3))
        assert client.register() is not None
        start = time.monotonic()
        assert client.report(*sample_report(0, 0, 64, 2)) is None
        assert time.monotonic() - start < 2.0  # cut by the 0.3 s deadline, far below the 3 s hold


def test_arbitrator_restart_workers_fail_open_then_reconnect_and_decisions_resume(caplog):
    port = free_port()
    # a barrier shorter than the client's 2 s deadline: a rank that reconnects first is answered without
    # the lagging one (dropped for that window) instead of timing out into a second outage
    settings = RunSettings(barrier_timeout_s=1.0)
    first = ArbitratorServer(Arbitrator(make_policy("static:128"), settings), port=port)
    clients = [ArbitratorClient(f"127.0.0.1:{port}", registration(r, 2), fast()) for r in range(2)]
    assert [c.register().batch_size for c in clients] == [128, 128]
    assert [a.batch_size for a in rounds(clients, 0, [128, 128])] == [128, 128]
    first.stop(grace_s=0)
    with caplog.at_level(logging.INFO, logger="dynamix.rpc.client"):
        down = [rounds(clients, t, [128, 128]) for t in (1, 2, 3)]
        assert down == [[None, None]] * 3  # fail-open: callers keep their sizes
        with local_server(make_policy("static:256"), settings, port=port) as second:
            # each rank reconnects on its own back-off (gRPC's channel back-off has jitter), so one may be
            # answered windows before the other: run until one window answers both
            answers = []
            for t in range(4, 40):
                answers.append(rounds(clients, t, [128, 128]))
                if None not in answers[-1]:
                    break
            assert answers[-1][0] is not None and answers[-1][0].batch_sizes == (256, 256), answers
            assert answers[-1][1].batch_sizes == (256, 256) and answers[-1][0].window == answers[-1][1].window
            assert second.arbitrator.decisions >= 1
    # the client's own warnings (the arbitrator warns too when a rank lags behind the other)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and r.name == "dynamix.rpc.client"]
    assert len(warnings) == 2  # one per worker for the whole outage
    assert sum("reachable again" in r.getMessage() for r in caplog.records) == 2


# ----------------------------------------------------------------------------------------------
# Security
# ----------------------------------------------------------------------------------------------


def test_non_loopback_bind_requires_token_or_tls():
    with pytest.raises(ValueError, match="requires a shared token"):
        ArbitratorServer(Arbitrator(make_policy("static")), host="0.0.0.0")


def test_token_is_required_on_every_call_when_set():
    with local_server(make_policy("static:64"), token="s3cret") as server:
        stub = pb_grpc.ArbitratorStub(grpc.insecure_channel(server.target))
        req = convert.registration_to_pb(registration(0, 1))
        for metadata in (None, (("authorization", "Bearer wrong"),)):
            with pytest.raises(grpc.RpcError) as err:
                stub.Register(req, timeout=5, metadata=metadata)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
            with pytest.raises(grpc.RpcError) as err:
                health_status(server.target, metadata)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert stub.Register(req, timeout=5, metadata=(("authorization", "Bearer s3cret"),)).batch_size == 64
        assert ArbitratorClient(server.target, registration(0, 1), fast(), token="s3cret").register() is not None


def test_tls_server_and_client(tmp_path):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    server = ArbitratorServer(Arbitrator(make_policy("static:64")), "127.0.0.1", 0,
                              tls=(key.read_bytes(), cert.read_bytes()))
    try:
        client = ArbitratorClient(f"localhost:{server.port}", registration(0, 1), fast(),
                                  tls_root_certs=cert.read_bytes())
        assert client.register().batch_size == 64
        plain = ArbitratorClient(f"127.0.0.1:{server.port}", registration(0, 1), fast(deadline_s=0.5))
        assert plain.register() is None  # no TLS, no service
    finally:
        server.stop(grace_s=0)


# ----------------------------------------------------------------------------------------------
# The serve command
# ----------------------------------------------------------------------------------------------


def test_serve_command_prints_its_port_serves_and_stops_on_sigterm():
    proc = subprocess.Popen(
        [sys.executable, "-m", "dynamix.cli", "arbitrator", "serve", "--port", "0", "--policy", "static:96",
         "--set", "arbitrator.barrier_timeout_s=0.5"],
        cwd=paths.ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("arbitrator listening on 127.0.0.1:"), line + proc.stderr.read()
        target = line.split()[-1]
        assert health_status(target, service="") == health_pb2.HealthCheckResponse.SERVING
        welcome = ArbitratorClient(target, registration(0, 1), fast()).register()
        assert welcome.batch_size == 96 and welcome.settings.barrier_timeout_s == 0.5
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0


def test_serve_command_refuses_a_public_address_without_credentials():
    env = {k: v for k, v in os.environ.items() if k != "DYNAMIX_ARBITRATOR_TOKEN"}
    proc = subprocess.run([sys.executable, "-m", "dynamix.cli", "arbitrator", "serve", "--host", "0.0.0.0",
                           "--port", "0"], cwd=paths.ROOT, capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode != 0 and "requires a shared token" in proc.stderr


def serve_refused(*args: str) -> str:
    """Run ``dynamix arbitrator serve ARGS``, which must refuse to start: its one stderr line."""
    proc = subprocess.run([sys.executable, "-m", "dynamix.cli", "arbitrator", "serve", "--port", "0", *args],
                          cwd=paths.ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("dynamix arbitrator: error: "), proc.stderr
    return proc.stderr


def test_serve_refuses_an_artifact_it_cannot_run_at_start(tmp_path):
    from dynamix.rl.learn import train_policy
    from helpers.rl import rl_cfg, tiny_cost

    artifact = train_policy(rl_cfg(), "tiny", timesteps=8, out_dir=tmp_path, cost=tiny_cost(), progress=False)
    line = serve_refused("--policy", f"dynamix:{artifact}")  # trained for other steps and bounds than the profile's
    assert "dynamix:tiny: trained for actions [-8, -2, 0, 2, 8], this run has batch.actions" in line


def test_serve_refuses_a_state_file_it_did_not_write_and_leaves_it_alone(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    assert "not an arbitrator state file" in serve_refused("--policy", "lbbsp", "--state-file", str(notes))
    assert notes.read_text() == "my notes\n"
    link = tmp_path / "link.json"
    link.symlink_to(notes)
    assert "not a regular file" in serve_refused("--policy", "lbbsp", "--state-file", str(link))
