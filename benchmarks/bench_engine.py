"""Engine throughput / plain PyTorch DDP throughput at equal fixed batch (goal: at least 0.97).

Both run in the same 2-rank gloo world on 127.0.0.1 with the same model, initial weights, per-worker
batch and data pipeline (GlobalSampler slice + BatchMaker). They alternate in rounds (engine block,
DDP block, ...) separated by barriers, so machine noise hits both alike; a block's throughput is
global samples / wall time, and the reported ratio is the median over rounds of engine / DDP.
The engine block is the real loop (``Engine.train``): weighted all-reduce, wait probe, gradient
statistics, window all-gather and policy decision every k iterations, system counters.

    .venv/bin/python benchmarks/bench_engine.py [--model tiny-cnn --batch 64 --rounds 6 --steps 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch.distributed as dist
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel

from dynamix import config as config_mod
from dynamix.data import BatchMaker, GlobalSampler, load_cifar10
from dynamix.engine.worker import Engine
from dynamix.engine.world import spawn_world
from dynamix.models import build_model
from dynamix.seeding import derive_seed, seed_everything
from dynamix.train.optim import build_optimizer


def _rank(rank: int, cfg_dict: dict, batch: int, rounds: int, steps: int) -> dict:
    cfg = config_mod.build(config_mod.Config, cfg_dict)
    eng = Engine(cfg, None, policy_spec=f"static:{batch}")
    eng.start()
    world = dist.get_world_size()
    seed_everything(cfg.train.seed)
    ddp = DistributedDataParallel(build_model(cfg.model.name, cfg.model.width))
    opt = build_optimizer(ddp.parameters(), cfg.optim)
    data = load_cifar10(cfg.data)
    sampler = GlobalSampler(len(data.train_y), cfg.train.seed)
    maker = BatchMaker(data.train_x, data.train_y, cfg.data.augment, derive_seed(cfg.train.seed, "worker", rank))

    def ddp_block(n: int) -> None:
        ddp.train()
        for _ in range(n):
            x, y = maker(sampler.next([batch] * world)[rank])
            opt.zero_grad()
            F.cross_entropy(ddp(x), y).backward()
            opt.step()

    def timed(fn) -> float:
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        dist.barrier()
        return batch * world * steps / (time.perf_counter() - t0)

    eng.train(steps)  # warm-up both paths (allocator, gloo buffers)
    ddp_block(steps)
    engine_thr, ddp_thr = [], []
    for r in range(rounds):
        pair = [("engine", lambda: eng.train(steps)), ("ddp", lambda: ddp_block(steps))]
        for name, fn in pair if r % 2 == 0 else pair[::-1]:
            (engine_thr if name == "engine" else ddp_thr).append(timed(fn))
    eng.finish()
    return {"engine": engine_thr, "ddp": ddp_thr, "metrics_overhead_fraction": eng.metrics_s / eng.loop_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny-cnn")
    ap.add_argument("--width", type=float, default=1.0)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    cfg = config_mod.load(overrides=[f"model.name={args.model}", f"model.width={args.width}", "train.threads=1",
                                     "train.max_iters=1000000", "train.eval_every=1000000", "batch.window=10"])
    out = spawn_world(_rank, 2, cfg.to_dict(), args.batch, args.rounds, args.steps, timeout_s=1800)[0]
    ratios = [e / d for e, d in zip(out["engine"], out["ddp"])]
    ratio = statistics.median(ratios)
    print(json.dumps({
        "benchmark": "engine_vs_ddp", "model": args.model, "width": args.width, "workers": 2,
        "batch_per_worker": args.batch, "rounds": args.rounds, "steps_per_round": args.steps,
        "engine_samples_per_s": statistics.median(out["engine"]), "ddp_samples_per_s": statistics.median(out["ddp"]),
        "ratios": [round(r, 4) for r in ratios], "ratio_median": round(ratio, 4), "goal": 0.97,
        "meets_goal": ratio >= 0.97,
    }))


if __name__ == "__main__":
    main()
