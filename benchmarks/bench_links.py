"""LHC against a dense reduction on links with a rate: ranks in network namespaces behind ``tc tbf``.

    sudo .venv/bin/python benchmarks/bench_links.py [--workers 2,4] [--links 0,10,1] [--numel 4194304]
        [--rounds 5] [--engine-iters 30] [--engine-links 1] [--workloads ncf,lstm-lm] [--out FILE]

Root only (``ip netns``, ``tc``); elsewhere it prints one JSON line saying it skipped. For each
``--workers`` N it starts N worker processes and one server process (one torch thread each, gloo),
each in its own network namespace on a veth pair to one bridge (:class:`dynamix.engine.netns.NetnsCluster`,
addresses 10.77.0.x, nothing routed out), and sweeps ``--links`` without restarting them: 0 leaves the
veths unshaped, G puts both ends of every veth behind a ``tc tbf`` of G Gbit/s. On each link speed:

- ring: dense ``all_reduce(SUM)`` (:class:`~dynamix.engine.sync.RingSync`) and LHC
  (:class:`~dynamix.engine.sync.LHCRingSync`) over the N workers;
- parameter server: dense push (``reduce`` to the server) and pull (``broadcast``), as the engine's
  parameter server moves its shard, and LHC with the server as the aggregator that ORs and SUMs
  without decoding (:class:`~dynamix.engine.sync.LHCPSClient`, :class:`~dynamix.engine.sync.LHCAggregator`);

at 0.1, 1 and 10 % density (every worker the same support, its own values, as in benchmarks/bench_lhc.py),
``--numel`` fp32 elements, the slowest worker's median of ``--rounds``. Every result is checked against
the dense sum of the workers' gradients, computed on each rank from the same seeds. Aggregation
throughput is the paper's (gradient bits / reduction time; arXiv 2402.07529: 6.33x at best), so its
ratio over dense is the time ratio ``agg_speedup``. Dense is timed once per link and architecture: its
time does not depend on the values.

The cost model (:mod:`dynamix.cluster.costmodel`) predicts each reduction on the shaped links from the
link rate, the per-collective latency measured on the same links (an all-reduce of 8 floats:
l = t / (2 (N-1)) in a ring, t / 2 through the server) and, for LHC, the measured wire bytes and codec
time; ``model_error_pct`` = 100 (predicted - measured) / measured. Then the engine trains each of
``--workloads`` (4 ring workers of 64 samples, ``engine.net_mode: netns``) on ``--engine-links``
without and with LHC: the per-iteration speed-up (paper: 3.74x), against the model's, which adds the
cost model's communication time to the measured compute.

Four ranks (five processes with the server) on a 2-core host are CPU-bound: the codec's time and each
collective's fixed cost grow with the load, which a link with a rate does not remove. The last line
is one JSON object (``agg_speedup_{1,10}gbps_1pct`` at the largest N, ``iter_speedup_1gbps_ncf``, ...).
``--out FILE`` also writes it to FILE with a ``source`` field (this command and the commit), the form of
the committed record ``docs/expected/links.json`` that the pipeline's compression stage reads beside its
simulated runs (:data:`dynamix.experiments.compression.LINKS_RECORD`); a run that skips writes nothing,
so a record is never replaced by a skip.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
import torch.distributed as dist

from bench_lhc import engine_speedup, gradient
from dynamix import cluster as clusters
from dynamix.cluster.costmodel import CostModel
from dynamix.comm import Codec
from dynamix.engine.netns import MASTER_PORT, NetnsCluster, address, device, ns_name
from dynamix.engine.sync import LHCAggregator, LHCPSClient, LHCRingSync, RingSync, Shard
from dynamix.evaluation.validate_sim import TOLERANCE_PCT
from dynamix.io import write_json
from dynamix.paths import git_sha

DENSITIES = (0.001, 0.01, 0.1)
WORKLOADS = {"ncf": "interactions", "lstm-lm": "tokens"}  # model -> its data set
SEED = 7  # the codec's hashes, the same on every rank


# ---- one rank (runs inside its namespace) ------------------------------------------------------------
def _timed(fn, group) -> float:
    """Seconds ``fn`` takes on the slowest member of ``group`` (the reduction's time)."""
    dist.barrier(group=group)
    t = time.perf_counter()
    fn()
    dt = torch.tensor([time.perf_counter() - t])
    dist.all_reduce(dt, op=dist.ReduceOp.MAX, group=group)
    return float(dt)


def _rel_diff(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x - ref).abs().max()) / max(float(ref.abs().max()), 1e-30)


class _Rank:
    """Worker ranks 0..N-1 and the server rank N; every method is called on every rank."""

    def __init__(self, workers: int, numel: int, rounds: int) -> None:
        self.rank, self.workers, self.numel, self.rounds = dist.get_rank(), workers, numel, rounds
        self.server = workers
        self.ring = dist.new_group(list(range(workers)))
        self.grads, self.refs = {}, {}
        for d in DENSITIES if self.rank < workers else ():  # each worker knows every worker's gradient
            all_g = [gradient(numel, d, workers, r, False) for r in range(workers)]
            self.refs[d] = torch.stack(all_g).double().sum(0).float()
            self.grads[d] = all_g[self.rank]
        self.flat = SimpleNamespace(grad=torch.empty(numel), nbytes=4 * numel, shards=[Shard(0, numel)],
                                    zero_grad=lambda: self.flat.grad.zero_())

    def _rounds(self, fn, d: float, stats=None) -> tuple[float, float]:
        """Median seconds of ``fn`` over the workers after a warm-up round (``stats`` restart after it)
        and the largest relative difference of its result from the dense sum."""
        times, diff = [], 0.0
        for r in range(self.rounds + 1):
            self.flat.grad.copy_(self.grads[d])
            dt = _timed(fn, self.ring)
            diff = max(diff, _rel_diff(self.flat.grad, self.refs[d]))
            if r:
                times.append(dt)
            elif stats is not None:
                stats.take()
        return statistics.median(times), diff

    def _lhc(self, sync, d: float) -> dict:
        t, diff = self._rounds(lambda: sync.reduce(1.0, 0, 1.0, 0), d, sync.stats)
        s = sync.stats.take()
        return {"ms": 1e3 * t, "max_rel_diff": diff, "compression_ratio": s.dense_bytes / s.bytes_sent,
                "wire_bytes": s.bytes_sent / s.reductions, "codec_ms": 1e3 * (s.encode_s + s.decode_s) / s.reductions,
                "fallbacks": s.fallbacks / s.reductions}

    def ring_phase(self) -> dict | None:
        if self.rank >= self.workers:
            return None
        small = torch.zeros(8)
        lat = statistics.median(_timed(lambda: dist.all_reduce(small, group=self.ring), self.ring)
                                for _ in range(self.rounds + 1))
        dense = RingSync(self.flat, self.ring)
        dense_t, dense_diff = self._rounds(lambda: dense.reduce(1.0, 0, 1.0, 0), 0.01)
        lhc = LHCRingSync(self.flat, Codec(seed=SEED), self.ring)
        return {"small_ms": 1e3 * lat, "dense_ms": 1e3 * dense_t, "dense_max_rel_diff": dense_diff,
                "lhc": {str(d): self._lhc(lhc, d) for d in DENSITIES}}

    def _push_pull(self, x: torch.Tensor) -> None:
        dist.reduce(x, dst=self.server)
        dist.broadcast(x, src=self.server)

    def ps_phase(self) -> dict | None:
        n = self.rounds + 1
        if self.rank == self.server:  # the other side of every worker round below
            small, buf = torch.zeros(8), torch.zeros(self.numel)
            for _ in range(n):
                self._push_pull(small)
            for _ in range(n):
                buf.zero_()
                self._push_pull(buf)
            for _ in DENSITIES:
                LHCAggregator(self.numel, self.server, None, Codec(seed=SEED)).serve()
            return None
        small = torch.zeros(8)
        lat = statistics.median(_timed(lambda: self._push_pull(small), self.ring) for _ in range(n))
        dense_t, dense_diff = self._rounds(lambda: self._push_pull(self.flat.grad), 0.01)
        out = {"small_ms": 1e3 * lat, "dense_ms": 1e3 * dense_t, "dense_max_rel_diff": dense_diff, "lhc": {}}
        for d in DENSITIES:
            client = LHCPSClient(self.flat, Codec(seed=SEED), [self.server], [None], self.rank)
            out["lhc"][str(d)] = self._lhc(client, d)
            client.stop()
        return out


def _await(path: Path, timeout_s: float = 600.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear")
        time.sleep(0.02)


def rank_main(run_dir: Path, workers: int, numel: int, rounds: int, phases: int) -> None:
    """One process in its namespace: for each link speed the parent sets (file ``go<k>``), measure."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(minutes=10))
    me = _Rank(workers, numel, rounds)
    for k in range(phases):
        _await(run_dir / f"go{k}")
        res = {"ring": me.ring_phase(), "ps": me.ps_phase()}
        if me.rank == 0:
            (run_dir / f"res{k}.tmp").write_text(json.dumps(res))
            (run_dir / f"res{k}.tmp").rename(run_dir / f"res{k}.json")
    dist.destroy_process_group()


# ---- the parent: namespaces, link speeds, the model -------------------------------------------------------
def sweep(workers: int, links: list[float], numel: int, rounds: int, timeout_s: float = 900.0) -> list[dict]:
    """Start N + 1 ranks in shaped namespaces, set each link speed in turn, collect rank 0's results."""
    world = workers + 1
    with tempfile.TemporaryDirectory(prefix="bench-links-") as tmp, NetnsCluster([math.inf] * world) as nc:
        run = Path(tmp)
        procs = []
        try:
            for i in range(world):
                env = {**os.environ, "MASTER_ADDR": address(0), "MASTER_PORT": str(MASTER_PORT), "RANK": str(i),
                       "WORLD_SIZE": str(world), "GLOO_SOCKET_IFNAME": device(i), "OMP_NUM_THREADS": "1",
                       "TORCH_CPP_LOG_LEVEL": os.environ.get("TORCH_CPP_LOG_LEVEL", "ERROR")}
                procs.append(subprocess.Popen(
                    ["ip", "netns", "exec", ns_name(i), sys.executable, __file__, "--rank-of", str(run),
                     str(workers), str(numel), str(rounds), str(len(links))], env=env))
            out = []
            for k, gbps in enumerate(links):
                nc.shape([gbps or math.inf] * world)
                (run / f"go{k}").touch()
                deadline = time.monotonic() + timeout_s
                while not (run / f"res{k}.json").exists():
                    if any(p.poll() not in (None, 0) for p in procs) or time.monotonic() > deadline:
                        raise RuntimeError(f"{workers} workers at {gbps or 'unshaped'} Gbit/s: a rank failed "
                                           "or timed out")
                    time.sleep(0.05)
                out.append({"workers": workers, "gbps": gbps, **json.loads((run / f"res{k}.json").read_text())})
            for p in procs:
                p.wait(timeout=60)
            return out
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()


def predicted_ms(workers: int, gbps: float, arch: str, latency_ms: float, numel: int,
                 lhc: dict | None = None) -> float:
    """The cost model's reduction time (T_ring or T_ps; LHC: f S, two latency terms, plus the codec)."""
    a = clusters.Architecture(kind=arch, num_servers=1, server_bandwidth_gbps=gbps)
    cost = CostModel(a_ms=0.0, c_ms_per_sample=1.0, gradient_bytes=4 * numel)
    if lhc is not None:
        cost = dataclasses.replace(cost, wire_fraction=lhc["wire_bytes"] / (4 * numel), collectives=2,
                                   codec_ms=lhc["codec_ms"])
    return cost.comm_ms(np.full(workers, gbps), np.full(workers, latency_ms), a)


def reduction_rows(phases: list[dict], numel: int) -> list[dict]:
    """One row per (workers, link, architecture, density): measured and modelled times."""
    rows = []
    for ph in phases:
        n, gbps = ph["workers"], ph["gbps"]
        for arch in ("ring", "ps"):
            r = ph[arch]
            lat = r["small_ms"] / (2 * (n - 1) if arch == "ring" else 2)
            dense_pred = predicted_ms(n, gbps, arch, lat, numel) if gbps else math.nan
            for d, x in r["lhc"].items():
                lhc_pred = predicted_ms(n, gbps, arch, lat, numel, x) if gbps else math.nan
                rows.append({
                    "workers": n, "gbps": gbps, "arch": arch, "density": float(d), "dense_ms": r["dense_ms"],
                    "lhc_ms": x["ms"], "agg_speedup": r["dense_ms"] / x["ms"],
                    "compression_ratio": x["compression_ratio"], "codec_ms": x["codec_ms"],
                    "max_rel_diff": max(x["max_rel_diff"], r["dense_max_rel_diff"]),
                    "dense_pred_ms": dense_pred, "lhc_pred_ms": lhc_pred,
                    "dense_err_pct": 100 * (dense_pred - r["dense_ms"]) / r["dense_ms"],
                    "lhc_err_pct": 100 * (lhc_pred - x["ms"]) / x["ms"],
                    "speedup_err_pct": 100 * (dense_pred / lhc_pred / (r["dense_ms"] / x["ms"]) - 1)})
    return rows


def engine_rows(workloads: list[str], links: list[float], iters: int, latency_ms: dict[float, float]) -> list[dict]:
    """Each workload in the engine, 4 ring workers on shaped links, without and with LHC. The model's
    iteration is the measured one with the cost model's communication time (``latency_ms`` per link
    speed, measured by :func:`sweep`) in place of the measured ``comm_ms``."""
    rows = []
    ring = clusters.Architecture(kind="ring")
    for model in workloads:
        for gbps in links:
            e = engine_speedup(iters, gbps, latency_ms=0.0, net_mode="netns", model=model, dataset=WORKLOADS[model])
            none, lhc = e["none"], e["lhc"]
            base = CostModel(a_ms=0.0, c_ms_per_sample=1.0, gradient_bytes=int(none["comm_bytes"]))
            lhc_cost = dataclasses.replace(base, wire_fraction=1 / lhc["compression_ratio"], collectives=2,
                                           codec_ms=lhc["encode_ms"] + lhc["decode_ms"])
            bw, lat = np.full(4, gbps), np.full(4, latency_ms.get(gbps, 0.0))
            pred = ((none["iter_ms"] - none["comm_ms"] + base.comm_ms(bw, lat, ring))
                    / (lhc["iter_ms"] - lhc["comm_ms"] + lhc_cost.comm_ms(bw, lat, ring)))
            rows.append({"workload": model, "gbps": gbps, "iter_ms_dense": none["iter_ms"], "iter_ms_lhc": lhc["iter_ms"],
                         "iter_speedup": e["iteration_speedup"], "compression_ratio": lhc["compression_ratio"],
                         "dense_mb": none["comm_bytes"] / 1e6, "lhc_mb": lhc["comm_bytes"] / 1e6,
                         "codec_ms": lhc["encode_ms"] + lhc["decode_ms"], "pred_iter_speedup": pred,
                         "iter_speedup_err_pct": 100 * (pred / e["iteration_speedup"] - 1)})
    return rows


def _link(g: float) -> str:
    return f"{g:g}gbps" if g else "unshaped"


def _pct(d: float) -> str:
    return f"{100 * d:g}pct"


def _namespaces_refused() -> str | None:
    """Why network namespaces cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "network namespaces and tc need root"
    try:
        with NetnsCluster([1.0]):
            return None
    except (OSError, subprocess.CalledProcessError) as e:
        return f"network namespaces are not permitted here ({e})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", default="2,4", help="worker counts (each adds one server process)")
    ap.add_argument("--links", default="0,10,1", help="link speeds in Gbit/s; 0: unshaped")
    ap.add_argument("--numel", type=int, default=1 << 22)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--engine-iters", type=int, default=30, help="engine iterations per run (0: skip)")
    ap.add_argument("--engine-links", default="1", help="link speeds of the engine runs (Gbit/s, > 0)")
    ap.add_argument("--workloads", default="ncf,lstm-lm", help=f"engine workloads, of {', '.join(WORKLOADS)}")
    ap.add_argument("--out", help="also write the JSON object, with its source, to this file")
    ap.add_argument("--rank-of", nargs=5, help=argparse.SUPPRESS)  # internal: one rank in its namespace
    args = ap.parse_args()
    if args.rank_of:
        run, *nums = args.rank_of
        rank_main(Path(run), *map(int, nums))
        return
    refused = _namespaces_refused()
    if refused:
        print(json.dumps({"skipped": refused}))
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind: the namespaces go with the finally
    t0 = time.perf_counter()
    links = [float(g) for g in args.links.split(",")]
    phases = [ph for n in map(int, args.workers.split(",")) for ph in sweep(n, links, args.numel, args.rounds)]
    rows = reduction_rows(phases, args.numel)
    print(f"{'N':>2} {'link':>9} {'arch':>4} {'density':>7} {'dense ms':>9} {'lhc ms':>8} {'speedup':>7} "
          f"{'ratio':>6} {'codec':>6} {'model dense':>11} {'model lhc':>9} {'err lhc %':>9} {'rel diff':>8}")
    for r in rows:
        print(f"{r['workers']:>2} {_link(r['gbps']):>9} {r['arch']:>4} {r['density']:>7.1%} {r['dense_ms']:>9.1f} "
              f"{r['lhc_ms']:>8.1f} {r['agg_speedup']:>7.2f} {r['compression_ratio']:>6.1f} {r['codec_ms']:>6.1f} "
              f"{r['dense_pred_ms']:>11.1f} {r['lhc_pred_ms']:>9.1f} {r['lhc_err_pct']:>9.0f} {r['max_rel_diff']:>8.1e}")
    n_max = max(r["workers"] for r in rows)
    summary = {"workers": n_max, "numel": args.numel, "rounds": args.rounds, "host_cpus": os.cpu_count()}
    for r in rows:
        if r["workers"] == n_max:
            key = f"{_link(r['gbps'])}_{_pct(r['density'])}" + ("" if r["arch"] == "ring" else "_ps")
            summary[f"agg_speedup_{key}"] = round(r["agg_speedup"], 3)
            if r["gbps"]:
                summary[f"model_agg_speedup_{key}"] = round(r["dense_pred_ms"] / r["lhc_pred_ms"], 3)
    shaped = [r for r in rows if r["gbps"]]
    summary.update(
        agg_speedup_2workers_1gbps_1pct=next((round(r["agg_speedup"], 3) for r in rows if r["workers"] == 2
                                              and r["gbps"] == 1 and r["density"] == 0.01 and r["arch"] == "ring"), None),
        max_rel_diff_vs_dense_sum=max(r["max_rel_diff"] for r in rows),
        model_max_abs_err_pct_dense=round(max(abs(r["dense_err_pct"]) for r in shaped), 1) if shaped else None,
        model_max_abs_err_pct_lhc=round(max(abs(r["lhc_err_pct"]) for r in shaped), 1) if shaped else None,
        model_max_abs_err_pct_speedup=round(max(abs(r["speedup_err_pct"]) for r in shaped), 1) if shaped else None,
        model_median_abs_err_pct_speedup=(round(statistics.median(abs(r["speedup_err_pct"]) for r in shaped), 1)
                                          if shaped else None),
        tolerance_pct=TOLERANCE_PCT, paper_anchor_agg_speedup=6.33)
    if args.engine_iters:
        ring4 = {ph["gbps"]: ph["ring"]["small_ms"] / 6 for ph in phases if ph["workers"] == 4}  # l = t / (2 (N-1))
        eng = engine_rows(args.workloads.split(","), [float(g) for g in args.engine_links.split(",")],
                          args.engine_iters, ring4)
        for e in eng:
            print(f"engine {e['workload']} on {_link(e['gbps'])}: {e['iter_ms_dense']:.1f} ms dense, "
                  f"{e['iter_ms_lhc']:.1f} ms lhc ({e['iter_speedup']:.2f}x; model {e['pred_iter_speedup']:.2f}x), "
                  f"{e['dense_mb']:.2f} MB -> {e['lhc_mb']:.3f} MB per iteration, codec {e['codec_ms']:.1f} ms")
            key = f"{_link(e['gbps'])}_{e['workload'].replace('-', '_')}"
            summary.update({f"iter_speedup_{key}": round(e["iter_speedup"], 3),
                            f"model_iter_speedup_{key}": round(e["pred_iter_speedup"], 3),
                            f"iter_compression_ratio_{key}": round(e["compression_ratio"], 2)})
        summary["paper_anchor_iteration_speedup"] = 3.74
    summary["wall_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(summary))
    if args.out:
        source = f"benchmarks/bench_links.py {' '.join(sys.argv[1:])} at commit {git_sha()}"
        write_json(args.out, {**summary, "source": source})


if __name__ == "__main__":
    main()
