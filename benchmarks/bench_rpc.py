"""Decision round trip through the gRPC arbitrator with 1, 8 and 32 concurrent workers.

The arbitrator runs as its own process (``dynamix arbitrator serve``, policy ``static:64``), as in a
real deployment; the workers are threads of this process, one channel each. Every round, all workers
are released together (a thread barrier, like lock-step training reaching the end of a window) and
each times its ReportWindow call, from send to the decision's arrival. That time includes waiting at
the server's window barrier for the slowest peer, i.e. what a worker actually waits.

Run: .venv/bin/python benchmarks/bench_rpc.py [--rounds 300]
Last output line: one JSON object with p50/p99 per worker count (arbitrator and floor), the goal
check (p50 <= 1 ms and p99 <= 5 ms at 32 workers), the 32-vs-1 p50 ratio and the arbitrator/floor ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from typing import Callable

import grpc
import numpy as np
from grpc_health.v1 import health_pb2, health_pb2_grpc

from dynamix import paths
from dynamix.rpc.client import ArbitratorClient, ClientSettings

sys.path.insert(0, str(paths.ROOT / "tests"))  # tests/helpers/: shared with the tests, not part of the package
from helpers.rpc import registration, sample_report  # noqa: E402


def lockstep_latencies(n: int, rounds: int, warmup: int, call: Callable[[int, int], None]) -> list[float]:
    """``n`` threads release together each round (a barrier) and time ``call(rank, round)`` in ms."""
    start = threading.Barrier(n)
    latencies_ms: list[float] = []
    lock = threading.Lock()

    def worker(r: int) -> None:
        mine = []
        for t in range(rounds + warmup):
            start.wait()
            t0 = time.perf_counter()
            call(r, t)
            if t >= warmup:
                mine.append((time.perf_counter() - t0) * 1e3)
        with lock:
            latencies_ms.extend(mine)

    threads = [threading.Thread(target=worker, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies_ms


def measure(target: str, n: int, rounds: int, warmup: int, run_id: str) -> list[float]:
    """Decision round trips: every worker reports its window and waits for its batch size."""
    clients = [ArbitratorClient(target, registration(r, n, run_id=run_id), ClientSettings(deadline_s=10.0))
               for r in range(n)]
    for c in clients:
        assert c.register() is not None, "arbitrator unreachable"
    reports = [[sample_report(r, t, 64, n) for t in range(rounds + warmup)] for r in range(n)]

    def call(r: int, t: int) -> None:
        answer = clients[r].report(*reports[r][t])
        assert answer is not None and answer.batch_size == 64 and not answer.dropped_ranks

    latencies_ms = lockstep_latencies(n, rounds, warmup, call)
    for c in clients:
        c.leave()
        c.close()
    return latencies_ms


def measure_floor(target: str, n: int, rounds: int, warmup: int) -> list[float]:
    """The same synchronized rounds, each worker calling grpc.health.v1.Health/Check instead."""
    channels = [grpc.insecure_channel(target) for _ in range(n)]
    stubs = [health_pb2_grpc.HealthStub(ch) for ch in channels]
    request = health_pb2.HealthCheckRequest()
    latencies_ms = lockstep_latencies(n, rounds, warmup, lambda r, t: stubs[r].Check(request, timeout=10))
    for ch in channels:
        ch.close()
    return latencies_ms


def summary(lat_ms: list[float]) -> dict:
    lat = np.array(lat_ms)
    return {
        "p50_ms": round(float(np.percentile(lat, 50)), 3),
        "p99_ms": round(float(np.percentile(lat, 99)), 3),
        "mean_ms": round(float(statistics.fmean(lat)), 3),
        "calls": int(lat.size),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--chunks", type=int, default=5, help="interleaved arbitrator/floor blocks")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 8, 32])
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    server = subprocess.Popen(
        [sys.executable, "-m", "dynamix.cli", "arbitrator", "serve", "--port", "0", "--policy", "static:64",
         "--set", "arbitrator.barrier_timeout_s=5.0", "--set", "arbitrator.idle_run_timeout_s=0"],
        cwd=paths.ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        target = server.stdout.readline().split()[-1]
        results, floor = {}, {}
        for n in args.workers:
            # interleave arbitrator and floor in chunks so that load drifts hit both alike
            arb_ms, floor_ms = [], []
            chunk = max(1, args.rounds // args.chunks)
            for c in range(args.chunks):
                arb_ms += measure(target, n, chunk, args.warmup, run_id=f"bench-{n}-{c}")
                floor_ms += measure_floor(target, n, chunk, args.warmup)
            results[str(n)], floor[str(n)] = summary(arb_ms), summary(floor_ms)
            print(f"{n:>3} workers: arbitrator p50 {results[str(n)]['p50_ms']:.3f} ms p99 "
                  f"{results[str(n)]['p99_ms']:.3f} ms | health-check floor p50 {floor[str(n)]['p50_ms']:.3f} ms "
                  f"p99 {floor[str(n)]['p99_ms']:.3f} ms", file=sys.stderr)
    finally:
        server.terminate()
        server.wait(timeout=30)
    big = results.get("32")
    out = {
        "bench": "rpc_decision_round_trip",
        "rounds": args.rounds,
        "note": "workers are threads of one client process; the arbitrator is a separate process",
        "workers": results,
        "goal_p50_le_1ms_p99_le_5ms_at_32": None if big is None else bool(big["p50_ms"] <= 1 and big["p99_ms"] <= 5),
        "p50_ratio_32_vs_1": None if big is None or "1" not in results
        else round(big["p50_ms"] / results["1"]["p50_ms"], 2),
        "floor_health_check": floor,
        "p50_ratio_vs_floor": {n: round(results[n]["p50_ms"] / floor[n]["p50_ms"], 2) for n in results},
        "loadavg_1min": round(load_before, 2),
        "cpus": os.cpu_count(),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
