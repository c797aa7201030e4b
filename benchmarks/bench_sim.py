"""Simulator vs bare model math: samples/s of VirtualCluster.run_window against a bare training loop.

    .venv/bin/python benchmarks/bench_sim.py [--models tiny-cnn resnet8] [--workers 32] [--batch 32]
                                             [--iters 1] [--rounds 7] [--threads 1] [--device cpu]
    .venv/bin/python benchmarks/bench_sim.py --profile cpu --workers 4 --batch 64   # a profile's model and layout

For each model, all sides run the same global batches (same seed: same sampler order, same
augmentation draws) on the same model from the same initial weights, on ``--device``:

- ``bare``: per iteration, GlobalSampler.next -> BatchMaker per worker -> Trainer.weighted_gradient
  (no per-worker gradient tracking) -> Trainer.apply: what any trainer computing this global
  gradient must do;
- ``math_only``: the same forward/backward/step on batches built beforehand (the floor);
- ``sim``: VirtualCluster.run_window (per-worker gradient statistics, cost model, dynamics, counters).

Test evaluation is off on every side (``train.eval_every`` beyond the run), so the ratio is the
simulator's own overhead. Rounds alternate bare / sim / math_only so machine-load drift hits each
alike; each side's time is the median over rounds. Wall time on a shared machine swings by tens of
percent between rounds, so the process CPU time of the same rounds (one torch thread: CPU time is the
work done) is reported beside it. The last line is one JSON object; per model,
``sim_vs_bare_samples_per_s`` (sim samples/s over bare samples/s, wall) is the goal metric (>= 0.9).
"""

from __future__ import annotations

import argparse
import json
import sys
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
from dynamix.train.device import compute_settings, synchronize


def bench_model(model: str, args: argparse.Namespace, data) -> dict:
    """``model`` is NAME or NAME@WIDTH; the layout (``train.channels_last``) is ``--profile``'s."""
    name, _, width = model.partition("@")
    cfg = config.load(profile=args.profile, overrides={
        "model": {"name": name, "width": float(width or 1.0)}, "batch": {"window": args.iters},
        "train": {"max_iters": 10**6, "eval_every": 10**6, "device": args.device}})
    model = name
    compute = compute_settings(cfg.train)
    base = clusters.load("clusters/scale-32.yaml")
    spec = clusters.ClusterSpec(base.name, base.seed, base.architecture,
                                tuple(base.workers[i % base.n_workers] for i in range(args.workers)),
                                (), base.stragglers, base.jitter)
    cost = CostModel(1.0, 1.0, gradient_bytes(build_model(model, cfg.model.width)))  # constants do not affect wall time
    sizes = [args.batch] * args.workers
    big_b = sum(sizes)
    dev = compute["device"]

    def fresh() -> tuple[Trainer, GlobalSampler, BatchMaker]:
        seed_everything(0)
        trainer = Trainer(build_model(model, cfg.model.width), cfg.optim, 10**6, **compute)
        return trainer, GlobalSampler(len(data.train_y), 0), BatchMaker(data.train_x, data.train_y, cfg.data.augment, 0)

    def bare() -> tuple[float, float]:
        trainer, sampler, maker = fresh()
        synchronize(dev)
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(args.iters):
            batches = [maker(idx) for idx in sampler.next(sizes)]
            trainer.weighted_gradient(batches, track_local=False)
            trainer.apply(big_b)
        synchronize(dev)
        return time.perf_counter() - t0, time.process_time() - c0

    def math_only() -> tuple[float, float]:
        trainer, sampler, maker = fresh()
        prepared = [[maker(idx) for idx in sampler.next(sizes)] for _ in range(args.iters)]
        synchronize(dev)
        t0, c0 = time.perf_counter(), time.process_time()
        for batches in prepared:
            trainer.weighted_gradient(batches, track_local=False)
            trainer.apply(big_b)
        synchronize(dev)
        return time.perf_counter() - t0, time.process_time() - c0

    def sim() -> tuple[float, float]:
        vc = VirtualCluster(spec, cfg, data=data, seed=0, cost=cost)
        synchronize(dev)
        t0, c0 = time.perf_counter(), time.process_time()
        vc.run_window(sizes)
        synchronize(dev)
        return time.perf_counter() - t0, time.process_time() - c0

    sides = (("bare", bare), ("sim", sim), ("math_only", math_only))
    wall: dict[str, list[float]] = {k: [] for k, _ in sides}
    cpu: dict[str, list[float]] = {k: [] for k, _ in sides}
    sim(), bare()  # warm-up (allocator, thread pools)
    for _ in range(args.rounds):
        for name, fn in sides:
            w, c = fn()
            wall[name].append(w)
            cpu[name].append(c)
    med_w = {k: statistics.median(v) for k, v in wall.items()}
    med_c = {k: statistics.median(v) for k, v in cpu.items()}
    samples = big_b * args.iters
    return {
        "samples_per_s_wall": {k: round(samples / v, 1) for k, v in med_w.items()},
        "median_round_wall_s": {k: round(v, 3) for k, v in med_w.items()},
        "median_round_cpu_s": {k: round(v, 3) for k, v in med_c.items()},
        "sim_vs_bare_samples_per_s": round(med_w["bare"] / med_w["sim"], 4),
        "sim_vs_bare_samples_per_s_cpu": round(med_c["bare"] / med_c["sim"], 4),
        "sim_vs_math_only_samples_per_s_cpu": round(med_c["math_only"] / med_c["sim"], 4),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=["tiny-cnn", "resnet8"])
    ap.add_argument("--workers", type=int, default=32)
    ap.add_argument("--batch", type=int, default=32, help="per-worker batch size")
    ap.add_argument("--iters", type=int, default=1, help="iterations per timed round")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="train.device: auto | cpu | cuda | cuda:N")
    ap.add_argument("--profile", default=None, help="params.yaml profile: its model (unless --models) and layout")
    args = ap.parse_args()
    if args.profile and "--models" not in sys.argv:
        m = config.load(profile=args.profile).model
        args.models = [f"{m.name}@{m.width:g}"]
    torch.set_num_threads(args.threads)
    data = load_cifar10(config.load().data)
    results = {}
    for model in args.models:
        results[model] = bench_model(model, args, data)
        print(json.dumps({"model": model, **results[model]}), flush=True)
    print(json.dumps({
        "benchmark": "sim_vs_bare", "profile": args.profile, "workers": args.workers, "batch_per_worker": args.batch,
        "iters_per_round": args.iters, "rounds": args.rounds, "threads": args.threads, "device": args.device,
        "models": results,
        "sim_vs_bare_samples_per_s": {m: r["sim_vs_bare_samples_per_s"] for m, r in results.items()},
        "goal_ratio": 0.9,
    }))


if __name__ == "__main__":
    main()
