"""Simulator overhead at 32 workers: wall time of VirtualCluster.run_window / the bare model math.

    .venv/bin/python benchmarks/bench_sim.py [--workers 32] [--batch 32] [--iters 1] [--rounds 11]

Both sides run the same global batches (same seed: same sampler order, same augmentation draws)
on the same model from the same initial weights:

- ``bare``: per iteration, GlobalSampler.next -> BatchMaker per worker -> Trainer.weighted_gradient
  (no per-worker gradient tracking) -> Trainer.apply: what any trainer computing this global
  gradient must do;
- ``math_only``: the same forward/backward/step on batches built beforehand (the floor);
- ``sim``: VirtualCluster.run_window (per-worker gradient statistics, cost model, dynamics, counters).

Rounds alternate bare / sim / math_only so machine-load drift hits each alike; each side's time is
the median over rounds. Wall time on a shared machine swings by tens of percent between rounds, so
the process CPU time of the same rounds (one torch thread: CPU time is the work done) is reported
beside it. The last line is one JSON object; ``ratio_vs_bare_wall`` is the goal metric (<= 1.10).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from dynamix import cluster as clusters
from dynamix import config
from dynamix.cluster.costmodel import CostModel
from dynamix.data import BatchMaker, GlobalSampler, load_cifar10
from dynamix.models import build_model, gradient_bytes
from dynamix.seeding import seed_everything
from dynamix.sim.cluster import VirtualCluster
from dynamix.train.core import Trainer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=32)
    ap.add_argument("--batch", type=int, default=32, help="per-worker batch size")
    ap.add_argument("--iters", type=int, default=1, help="iterations per timed round")
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--model", default="tiny-cnn")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    cfg = config.load(overrides={"model": {"name": args.model}, "batch": {"window": args.iters},
                                 "train": {"max_iters": 10**6, "eval_every": 10**6}})
    base = clusters.load("clusters/scale-32.yaml")
    spec = clusters.ClusterSpec(base.name, base.seed, base.architecture,
                                tuple(base.workers[i % base.n_workers] for i in range(args.workers)),
                                (), base.stragglers, base.jitter)
    data = load_cifar10(cfg.data)
    cost = CostModel(1.0, 1.0, gradient_bytes(build_model(args.model)))  # constants do not affect wall time
    sizes = [args.batch] * args.workers
    big_b = sum(sizes)

    def bare() -> tuple[float, float]:
        seed_everything(0)
        trainer = Trainer(build_model(args.model), cfg.optim, 10**6)
        sampler = GlobalSampler(len(data.train_y), 0)
        maker = BatchMaker(data.train_x, data.train_y, cfg.data.augment, 0)
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(args.iters):
            batches = [maker(idx) for idx in sampler.next(sizes)]
            trainer.weighted_gradient(batches, track_local=False)
            trainer.apply(big_b)
        return time.perf_counter() - t0, time.process_time() - c0

    def math_only() -> tuple[float, float]:
        seed_everything(0)
        trainer = Trainer(build_model(args.model), cfg.optim, 10**6)
        sampler = GlobalSampler(len(data.train_y), 0)
        maker = BatchMaker(data.train_x, data.train_y, cfg.data.augment, 0)
        prepared = [[maker(idx) for idx in sampler.next(sizes)] for _ in range(args.iters)]
        t0, c0 = time.perf_counter(), time.process_time()
        for batches in prepared:
            trainer.weighted_gradient(batches, track_local=False)
            trainer.apply(big_b)
        return time.perf_counter() - t0, time.process_time() - c0

    def sim() -> tuple[float, float]:
        vc = VirtualCluster(spec, cfg, data=data, seed=0, cost=cost)
        t0, c0 = time.perf_counter(), time.process_time()
        vc.run_window(sizes)
        return time.perf_counter() - t0, time.process_time() - c0

    wall: dict[str, list[float]] = {"bare": [], "sim": [], "math_only": []}
    cpu: dict[str, list[float]] = {"bare": [], "sim": [], "math_only": []}
    sim(), bare()  # warm-up (allocator, thread pools)
    for _ in range(args.rounds):
        for name, fn in (("bare", bare), ("sim", sim), ("math_only", math_only)):
            w, c = fn()
            wall[name].append(w)
            cpu[name].append(c)
    med_w = {k: statistics.median(v) for k, v in wall.items()}
    med_c = {k: statistics.median(v) for k, v in cpu.items()}
    print(json.dumps({
        "benchmark": "sim_overhead", "model": args.model, "workers": args.workers,
        "batch_per_worker": args.batch,
        "iters_per_round": args.iters, "rounds": args.rounds, "threads": args.threads,
        "median_round_wall_s": {k: round(v, 3) for k, v in med_w.items()},
        "median_round_cpu_s": {k: round(v, 3) for k, v in med_c.items()},
        "ratio_vs_bare_wall": round(med_w["sim"] / med_w["bare"], 4),
        "ratio_vs_bare_cpu": round(med_c["sim"] / med_c["bare"], 4),
        "ratio_vs_math_only_cpu": round(med_c["sim"] / med_c["math_only"], 4),
        "goal_ratio": 1.10,
    }))


if __name__ == "__main__":
    main()
