"""A window of arbitration through the gRPC arbitrator at 32, 128, 256 and 1,024 workers, against the
floor of a bare gRPC call at the same load.

The arbitrator runs as its own process (``dynamix arbitrator serve``, policy ``static:64``, default
settings but a long barrier timeout), as in a real deployment. The workers are coroutines of one
asyncio client process (grpc.aio, ``--channels`` connections shared round-robin), so the load
generator holds no thread per worker. Every round releases all N workers together (lock-step
training reaching the end of a window): each sends its ReportWindow and waits for its batch size.
The floor is the same round with every worker calling ``grpc.health.v1.Health/Check`` on the same
server instead. A second floor, the *barrier floor*, is a bare grpc.aio server in its own process whose
one method answers a round's calls when all N have arrived: what lock-step answering costs on this stack
with no messages, validation or policy, so ``rtt_over_barrier_floor`` is the arbitrator's own cost. The
three kinds of round alternate one by one (the order reversed every round), so load drifts and the
client's own pauses hit them alike; ``--chunks`` blocks each register a fresh run.

What is measured, per worker count:

- ``window_ms``: a round's makespan, from the release to the last worker's answer: what a window of
  arbitration costs lock-step training (the next iteration waits for the slowest worker anyway);
  ``rtt_over_floor`` is the median arbitrator round over the median floor round,
  ``rtt_over_barrier_floor`` over the median barrier-floor round.
- ``call_ms``: each worker's own time from the release to its answer (p50/p99). Under the barrier every
  answer waits for the last report, where a health call returns at once, so its ratio to the floor
  reads about 2 whenever one core serialises the N calls; it is printed beside, not the acceptance.
- ``decide_ms``: the policy's decision alone, one ``decide`` for all N workers (no network), for the
  served policy and the stateful heuristics (``--decide``; a ``dynamix:PATH`` spec adds the RL
  policy's single forward pass).

Run: .venv/bin/python benchmarks/bench_rpc.py [--workers 32 128 256 1024] [--rounds 40]
Loopback only; every call has a deadline and the whole run a budget (``--budget-s``). Last output line:
one JSON object with ``rtt_over_floor``, ``rtt_over_barrier_floor``, ``window_ms``, ``call_ms`` and ``decide_ms`` per worker count.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time

import grpc
import numpy as np
from grpc_health.v1 import health_pb2, health_pb2_grpc

from dynamix import paths
from dynamix.policies import make_policy
from dynamix.policies.base import PolicyContext
from dynamix.rpc import convert
from dynamix.rpc.v1 import arbitrator_pb2 as pb
from dynamix.rpc.v1 import arbitrator_pb2_grpc as pb_grpc

sys.path.insert(0, str(paths.ROOT / "tests"))  # tests/helpers/: shared with the tests, not part of the package
from helpers.rpc import registration, sample_report  # noqa: E402

DEADLINE_S = 60.0


def pcts(values: list[float]) -> dict:
    v = np.asarray(values)
    return {"p50": round(float(np.percentile(v, 50)), 3), "p99": round(float(np.percentile(v, 99)), 3),
            "n": int(v.size)}


async def rounds(n: int, t: int, call) -> tuple[float, list[float]]:
    """Round ``t``: ``n`` concurrent ``call(rank, t)``; (its makespan, each call's time), ms."""
    done = [0.0] * n

    async def one(r: int) -> None:
        await call(r, t)
        done[r] = time.perf_counter()

    start = time.perf_counter()
    await asyncio.gather(*(one(r) for r in range(n)))
    return (max(done) - start) * 1e3, [(d - start) * 1e3 for d in done]


async def measure(target: str, barrier_target: str, n: int, chunks: int, per_chunk: int, warmup: int,
                  channels: int) -> dict:
    chans = [grpc.aio.insecure_channel(target) for _ in range(min(channels, n))]
    bchans = [grpc.aio.insecure_channel(barrier_target) for _ in range(min(channels, n))]
    try:
        wait = [bchans[r % len(bchans)].unary_unary(BARRIER_METHOD) for r in range(n)]
        arb = [pb_grpc.ArbitratorStub(chans[r % len(chans)]) for r in range(n)]
        hc = [health_pb2_grpc.HealthStub(chans[r % len(chans)]) for r in range(n)]
        check = health_pb2.HealthCheckRequest()
        windows, floor_windows, barrier_windows, calls, floor_calls = [], [], [], [], []
        for c in range(chunks):
            run_id = f"bench-{n}-{c}"
            welcomes = await asyncio.gather(*(arb[r].Register(
                convert.registration_to_pb(registration(r, n, run_id=run_id)), timeout=DEADLINE_S) for r in range(n)))
            total = warmup + per_chunk
            requests = [[convert.report_to_pb(welcomes[r].session_id, run_id, *sample_report(r, t, 64, n))
                         for t in range(total)] for r in range(n)]

            async def report(r: int, t: int) -> None:
                answer = await arb[r].ReportWindow(requests[r][t], timeout=DEADLINE_S)
                assert answer.batch_size == 64 and not answer.dropped_ranks and not answer.late, answer

            async def health(r: int, t: int) -> None:
                await hc[r].Check(check, timeout=DEADLINE_S)

            async def barrier(r: int, t: int) -> None:
                await wait[r](f"{c} {t} {n}".encode(), timeout=DEADLINE_S)

            for t in range(total):  # one round of each, in turn, the order reversed every round
                kinds = ((report, windows, calls), (health, floor_windows, floor_calls), (barrier, barrier_windows, []))
                for fn, spans, per_call in kinds[::1 if t % 2 else -1]:
                    m, k = await rounds(n, t, fn)
                    if t >= warmup:
                        spans.append(m)
                        per_call += k
            await asyncio.gather(*(arb[r].Leave(
                pb.LeaveRequest(session_id=welcomes[r].session_id, run_id=run_id, rank=r),
                timeout=DEADLINE_S) for r in range(n)))
    finally:
        for ch in chans + bchans:
            await ch.close()
    return {"rtt_over_floor": round(float(np.median(windows) / np.median(floor_windows)), 3),
            "rtt_over_barrier_floor": round(float(np.median(windows) / np.median(barrier_windows)), 3),
            "window_ms": pcts(windows), "floor_window_ms": pcts(floor_windows),
            "barrier_floor_window_ms": pcts(barrier_windows),
            "call_ms": pcts(calls), "floor_call_ms": pcts(floor_calls),
            "call_p50_over_floor": round(float(np.median(calls) / np.median(floor_calls)), 3)}


BARRIER_METHOD = "/bench.Barrier/Wait"


async def serve_barrier() -> None:
    """The barrier floor's server: a bare grpc.aio server whose one method answers a round's calls
    when all ``n`` of them have arrived (the request is ``"<block> <round> <n>"``), with no message
    types, validation or policy: what lock-step answering costs by itself on this stack."""
    arrived: dict[bytes, list] = {}

    async def wait(request: bytes, context) -> bytes:
        n = int(request.rsplit(b" ", 1)[1])
        entry = arrived.setdefault(request, [0, asyncio.get_running_loop().create_future()])
        entry[0] += 1
        if entry[0] == n:
            entry[1].set_result(None)
            del arrived[request]
        await entry[1]
        return b""

    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "bench.Barrier", {"Wait": grpc.unary_unary_rpc_method_handler(wait)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(f"barrier floor listening on 127.0.0.1:{port}", flush=True)
    await server.wait_for_termination()


def decide_times(spec: str, n: int, repeats: int) -> dict:
    """One ``decide`` for ``n`` workers, ``repeats`` windows (ms): the decision alone."""
    policy = make_policy(spec)
    policy.reset(PolicyContext(n_workers=n, initial_batch_sizes=(64,) * n))
    times = []
    for t in range(repeats):
        reports = [sample_report(r, t, 64 + 32 * (r % 4), n, global_batch=64 * n + 32 * sum(r % 4 for r in range(n)))
                   for r in range(n)]
        workers = [w for w, _ in reports]
        t0 = time.perf_counter()
        policy.decide(workers, reports[0][1])
        times.append((time.perf_counter() - t0) * 1e3)
    return pcts(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[32, 128, 256, 1024])
    parser.add_argument("--rounds", type=int, default=40, help="measured rounds per worker count and kind")
    parser.add_argument("--chunks", type=int, default=4, help="alternating arbitrator/floor blocks")
    parser.add_argument("--warmup", type=int, default=2, help="unmeasured rounds per block")
    parser.add_argument("--channels", type=int, default=64, help="client connections (workers share them)")
    parser.add_argument("--decide", nargs="*", default=["static:64", "lbbsp", "gns"],
                        help="policies whose decision alone is timed (a dynamix:PATH spec may be added)")
    parser.add_argument("--budget-s", type=float, default=900.0, help="stop the whole run after this long")
    parser.add_argument("--serve-barrier", action="store_true", help=argparse.SUPPRESS)  # the floor's own process
    args = parser.parse_args()
    if args.serve_barrier:
        asyncio.run(serve_barrier())
        return
    if not all(1 <= n <= 4096 for n in args.workers) or args.rounds < 1 or args.chunks < 1:
        parser.error("--workers in [1, 4096], --rounds and --chunks >= 1")
    load_before = os.getloadavg()[0]
    server = subprocess.Popen(
        [sys.executable, "-m", "dynamix.cli", "arbitrator", "serve", "--host", "127.0.0.1", "--port", "0",
         "--policy", "static:64", "--set", "arbitrator.barrier_timeout_s=30.0"],
        cwd=paths.ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    floor_server = subprocess.Popen([sys.executable, __file__, "--serve-barrier"], stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, text=True)
    results: dict[str, dict] = {}
    try:
        target = server.stdout.readline().split()[-1]
        barrier_target = floor_server.stdout.readline().split()[-1]
        per_chunk = max(1, args.rounds // args.chunks)
        cpu0, wall0 = time.process_time(), time.perf_counter()

        async def all_counts() -> None:
            for n in args.workers:
                results[str(n)] = await measure(target, barrier_target, n, args.chunks, per_chunk, args.warmup, args.channels)
                r = results[str(n)]
                print(f"{n:>5} workers: window {r['window_ms']['p50']:.2f} ms (p99 {r['window_ms']['p99']:.2f}) | "
                      f"floor {r['floor_window_ms']['p50']:.2f} ms (p99 {r['floor_window_ms']['p99']:.2f}) | "
                      f"barrier floor {r['barrier_floor_window_ms']['p50']:.2f} ms | "
                      f"rtt_over_floor {r['rtt_over_floor']:.3f}, over barrier floor {r['rtt_over_barrier_floor']:.3f} | per call p50 {r['call_ms']['p50']:.2f} ms, "
                      f"floor {r['floor_call_ms']['p50']:.2f} ms", file=sys.stderr)

        asyncio.run(asyncio.wait_for(all_counts(), args.budget_s))
        client_cpu_share = (time.process_time() - cpu0) / (time.perf_counter() - wall0)
    finally:
        for proc in (server, floor_server):
            proc.terminate()
            proc.wait(timeout=30)
    decide = {spec: {str(n): decide_times(spec, n, 20) for n in args.workers} for spec in args.decide}
    for spec, by_n in decide.items():
        print(f"decide {spec}: " + ", ".join(f"{n}: p50 {v['p50']:.3f} ms p99 {v['p99']:.3f} ms"
                                             for n, v in by_n.items()), file=sys.stderr)
    print(json.dumps({
        "bench": "rpc_window_round_trip",
        "note": "arbitrator process static:64; workers are coroutines of one asyncio client process; "
                "rtt_over_floor = median round makespan (release -> last answer) over the health-call floor's",
        "rounds": per_chunk * args.chunks,
        "rtt_over_floor": {n: r["rtt_over_floor"] for n, r in results.items()},
        "rtt_over_barrier_floor": {n: r["rtt_over_barrier_floor"] for n, r in results.items()},
        "workers": results,
        "decide_ms": decide,
        "client_cpu_share": round(client_cpu_share, 3),
        "loadavg_1min": round(load_before, 2),
        "cpus": os.cpu_count(),
    }))


if __name__ == "__main__":
    main()
