"""Aggregation throughput of lossless homomorphic compression (LHC) against a dense all-reduce.

    .venv/bin/python benchmarks/bench_lhc.py [--workers 4] [--numel 4194304] [--rounds 7]

``--workers`` gloo processes on 127.0.0.1 (one torch thread each) reduce the same sparse fp32
gradients two ways: the dense ``all_reduce(SUM)`` of :class:`~dynamix.engine.sync.RingSync`, and
:class:`~dynamix.engine.sync.LHCRingSync` (bitmap OR all-reduce, plan, count-sketch SUM all-reduce,
peel). ``density`` is the fraction of non-zeros in the summed gradient: every worker has the same
support with its own values (as in the paper's benchmark, where all GPUs reduce the same data);
``--independent`` gives each worker its own support of density/workers instead (merged ~density).
Rounds alternate dense / LHC so load drift hits both alike; each side's time is its median round.
Throughput is the paper's definition, gradient bits / aggregation time (arXiv 2402.07529, Fig. 8;
6.33x over NCCL at their best). LHC's result is checked against the dense one in every round.
The cost model then puts the measured bytes and codec time on real links (``modelled_speedup_at_1pct_*``:
T_ring(S) against T_ring(f S) with two latency terms plus the measured encode + decode,
:mod:`dynamix.cluster.costmodel`). ``--engine-iters N`` also trains the sparse workload (ncf) with 4
engine workers on a communication-bound spec (4 reference workers on 1 Gbit/s links, the network
emulated as a floor on the reduction time, ``engine.net_mode = inject``), with and without LHC, and
reports the per-iteration speed-up (paper anchor: 3.74x).
The last line is one JSON object; ``speedup_at_1pct`` = dense time / LHC time at 1 % density;
``collectives_ms_at_1pct`` times LHC's two collectives alone, the part of its time the codec's speed
does not touch.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import torch
import torch.distributed as dist

from dynamix import cluster as clusters
from dynamix import config
from dynamix.cluster.costmodel import CostModel
from dynamix.comm import Codec
from dynamix.engine.launch import run_local
from dynamix.engine.sync import LHCRingSync, RingSync
from dynamix.engine.world import spawn_world

DENSITIES = (0.001, 0.01, 0.1)


def gradient(n: int, density: float, workers: int, rank: int, independent: bool) -> torch.Tensor:
    support_seed = 1000 + rank if independent else 1000
    keep = torch.rand(n, generator=torch.Generator().manual_seed(support_seed)) < (
        density / workers if independent else density)
    return torch.randn(n, generator=torch.Generator().manual_seed(rank)) * keep


def _rank(rank: int, n: int, rounds: int, independent: bool) -> dict:
    torch.set_num_threads(1)
    workers = dist.get_world_size()
    out = {}
    for density in DENSITIES:
        g = gradient(n, density, workers, rank, independent)
        flat = SimpleNamespace(grad=torch.empty_like(g), nbytes=g.numel() * g.element_size())
        dense, lhc = RingSync(flat), LHCRingSync(flat, Codec(seed=7))
        times = {"dense": [], "lhc": []}
        max_diff = 0.0
        for r in range(rounds + 1):  # round 0 warms up (first gloo buffers, hash table)
            result = {}
            for name, sync in (("dense", dense), ("lhc", lhc)):
                flat.grad.copy_(g)
                dist.barrier()
                t = time.perf_counter()
                sync.reduce(1.0, 0, 1.0, 0)
                dt = torch.tensor([time.perf_counter() - t])
                dist.all_reduce(dt, op=dist.ReduceOp.MAX)  # the slowest rank's time is the aggregation's
                if r:
                    times[name].append(float(dt))
                result[name] = flat.grad.clone()
            scale = float(result["dense"].abs().max())
            max_diff = max(max_diff, float((result["lhc"] - result["dense"]).abs().max()) / max(scale, 1e-30))
        s = lhc.stats.take()
        coll_ms = _collectives_ms(g, rounds)
        dense_s, lhc_s = statistics.median(times["dense"]), statistics.median(times["lhc"])
        out[density] = {
            "density": density, "merged_density": float((result["dense"] != 0).float().mean()),
            "dense_ms": 1e3 * dense_s, "lhc_ms": 1e3 * lhc_s, "speedup": dense_s / lhc_s,
            "dense_gbps": n * 32 / dense_s / 1e9, "lhc_gbps": n * 32 / lhc_s / 1e9,
            "compression_ratio": s.dense_bytes / s.bytes_sent, "fallbacks_per_reduction": s.fallbacks / s.reductions,
            "encode_ms": 1e3 * s.encode_s / s.reductions, "decode_ms": 1e3 * s.decode_s / s.reductions,
            "max_rel_diff_vs_dense": max_diff, "collectives_ms": coll_ms,
        }
    return out


def _collectives_ms(g: torch.Tensor, rounds: int) -> float:
    """LHC's two collectives alone (index BOR, then a message of the plan's length SUM), slowest rank's
    median: the floor under LHC's time that no codec speed-up removes."""
    codec = Codec(seed=7)
    index = codec.index(g)
    dist.all_reduce(index, op=dist.ReduceOp.BOR)
    msg = torch.zeros(codec.plan(index, g.numel()).message_len, dtype=g.dtype)
    times = []
    for r in range(rounds + 1):
        dist.barrier()
        t = time.perf_counter()
        dist.all_reduce(index, op=dist.ReduceOp.BOR)
        dist.all_reduce(msg, op=dist.ReduceOp.SUM)
        dt = torch.tensor([time.perf_counter() - t])
        dist.all_reduce(dt, op=dist.ReduceOp.MAX)
        if r:
            times.append(float(dt))
    return 1e3 * statistics.median(times)


def modelled_speedup(r: dict, numel: int, workers: int, gbps: float, latency_ms: float = 0.05) -> float:
    """Dense over LHC reduction time on ``workers`` links of ``gbps``, from the measured ratio and codec."""
    arch = clusters.Architecture(kind="ring")
    dense = CostModel(a_ms=0.0, c_ms_per_sample=1.0, gradient_bytes=4 * numel)
    lhc = dataclasses.replace(dense, wire_fraction=1 / r["compression_ratio"], collectives=2,
                              codec_ms=r["encode_ms"] + r["decode_ms"])
    bw, lat = np.full(workers, gbps), np.full(workers, latency_ms)
    return dense.comm_ms(bw, lat, arch) / lhc.comm_ms(bw, lat, arch)


def engine_speedup(iters: int, bandwidth_gbps: float = 1.0, latency_ms: float = 0.5, net_mode: str = "inject",
                   model: str = "ncf", dataset: str = "interactions") -> dict:
    """A sparse workload (ncf), 4 ring workers of 64 samples on ``bandwidth_gbps`` links (``inject``: the
    emulated floor; ``netns``: shaped veths, root only): per-iteration means without / with LHC."""
    spec = clusters.homogeneous(4, bandwidth_gbps=bandwidth_gbps, latency_ms=latency_ms)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for comp in ("none", "lhc"):
            cfg = config.load(profile="smoke", overrides=[
                f"model.name={model}", f"data.dataset={dataset}", "data.augment=false", "train.threads=1",
                f"train.max_iters={iters}", f"train.eval_every={iters}", "train.eval_samples=600",
                "batch.window=5", f"engine.compression={comp}", f"engine.net_mode={net_mode}"])
            run_local(cfg, spec, "static:64", Path(tmp) / comp, 4, method="torchrun", timeout_s=1200)
            runs = pd.read_csv(Path(tmp) / comp / "runs.csv")
            later = runs[runs["window"] > 0]  # the first window warms up
            out[comp] = {k: float(later[c].mean()) for k, c in (
                ("iter_ms", "iter_time_ms"), ("compute_ms", "compute_ms"), ("comm_ms", "comm_ms"),
                ("comm_bytes", "comm_bytes"), ("compression_ratio", "compression_ratio"),
                ("encode_ms", "encode_ms"), ("decode_ms", "decode_ms"))}
    out["iteration_speedup"] = out["none"]["iter_ms"] / out["lhc"]["iter_ms"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--numel", type=int, default=1 << 22)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--independent", action="store_true", help="each worker its own support")
    ap.add_argument("--engine-iters", type=int, default=0, help="also time ncf engine iterations (0: skip)")
    args = ap.parse_args()
    res = spawn_world(_rank, args.workers, args.numel, args.rounds, args.independent, timeout_s=1800)[0]
    print(f"{'density':>8} {'merged':>7} {'dense ms':>9} {'lhc ms':>8} {'speedup':>8} {'dense Gb/s':>10} "
          f"{'lhc Gb/s':>9} {'ratio':>6} {'enc ms':>7} {'dec ms':>7} {'coll ms':>8} {'rel diff':>9}")
    for r in res.values():
        print(f"{r['density']:>8.3%} {r['merged_density']:>7.3%} {r['dense_ms']:>9.1f} {r['lhc_ms']:>8.1f} "
              f"{r['speedup']:>8.2f} {r['dense_gbps']:>10.2f} {r['lhc_gbps']:>9.2f} {r['compression_ratio']:>6.1f} "
              f"{r['encode_ms']:>7.1f} {r['decode_ms']:>7.1f} {r['collectives_ms']:>8.1f} {r['max_rel_diff_vs_dense']:>9.1e}")
    summary = {"workers": args.workers, "numel": args.numel, "rounds": args.rounds,
               "support": "independent" if args.independent else "shared",
               **{f"speedup_at_{k}pct": round(res[d]["speedup"], 3) for k, d in zip(("0.1", "1", "10"), DENSITIES)},
               **{f"compression_ratio_at_{k}pct": round(res[d]["compression_ratio"], 2)
                  for k, d in zip(("0.1", "1", "10"), DENSITIES)},
               "max_rel_diff_vs_dense": max(r["max_rel_diff_vs_dense"] for r in res.values()),
               "dense_ms_at_1pct": round(res[0.01]["dense_ms"], 2),
               "collectives_ms_at_1pct": round(res[0.01]["collectives_ms"], 2),
               **{f"modelled_speedup_at_1pct_{g}gbps": round(modelled_speedup(res[0.01], args.numel, args.workers, g), 3)
                  for g in (1, 10, 100)},
               "paper_anchor_speedup": 6.33}
    if args.engine_iters:
        eng = engine_speedup(args.engine_iters)
        print(f"ncf engine, 4 workers on 1 Gbit/s: iteration {eng['none']['iter_ms']:.1f} ms dense, "
              f"{eng['lhc']['iter_ms']:.1f} ms lhc (compression {eng['lhc']['compression_ratio']:.1f}x)")
        summary.update(ncf_iteration_speedup_1gbps=round(eng["iteration_speedup"], 3),
                       ncf_iter_ms_dense=round(eng["none"]["iter_ms"], 1), ncf_iter_ms_lhc=round(eng["lhc"]["iter_ms"], 1),
                       paper_anchor_iteration_speedup=3.74)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
