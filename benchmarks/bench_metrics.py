"""Metrics-collection overhead as a fraction of iteration time (goal: at most 1%).

Two measurements in one 2-rank gloo world running the engine loop (``Engine.train``):

- ``timed_fraction``: seconds inside the collectors (per-iteration gradient statistics; per-window
  system counters: own-socket TCP_INFO, CPU time, memory) / seconds in the training loop, from the
  engine's own timers over the metrics-on blocks;
- ``ab_fraction``: 1 - throughput(metrics on) / throughput(metrics off), blocks alternating in rounds,
  median over rounds. It also includes the one-element wait probe all-reduce (which only splits the
  synchronisation into wait and comm) but is noisier on a shared machine.

    .venv/bin/python benchmarks/bench_metrics.py [--model tiny-cnn --batch 64 --rounds 6 --steps 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch.distributed as dist

from dynamix import config as config_mod
from dynamix.engine.worker import Engine
from dynamix.engine.world import spawn_world


def _rank(rank: int, cfg_dict: dict, batch: int, rounds: int, steps: int) -> dict:
    cfg = config_mod.build(config_mod.Config, cfg_dict)
    eng = Engine(cfg, None, policy_spec=f"static:{batch}")
    eng.start()
    world = dist.get_world_size()

    def timed(collect: bool) -> float:
        eng.collect = collect
        dist.barrier()
        t0 = time.perf_counter()
        eng.train(steps)
        dist.barrier()
        return batch * world * steps / (time.perf_counter() - t0)

    timed(True)
    eng.metrics_s = eng.loop_s = 0.0
    on, off, loop_on = [], [], 0.0
    for r in range(rounds):
        for collect in ((True, False) if r % 2 == 0 else (False, True)):
            before = eng.loop_s
            thr = timed(collect)
            if collect:
                on.append(thr)
                loop_on += eng.loop_s - before
            else:
                off.append(thr)
    eng.finish()
    return {"on": on, "off": off, "metrics_s": eng.metrics_s, "loop_on_s": loop_on}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny-cnn")
    ap.add_argument("--width", type=float, default=1.0)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--window", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    cfg = config_mod.load(overrides=[f"model.name={args.model}", f"model.width={args.width}", "train.threads=1",
                                     "train.max_iters=1000000", "train.eval_every=1000000",
                                     f"batch.window={args.window}"])
    ranks = spawn_world(_rank, 2, cfg.to_dict(), args.batch, args.rounds, args.steps, timeout_s=1800)
    timed = max(r["metrics_s"] / r["loop_on_s"] for r in ranks)
    ab = statistics.median(1.0 - a / b for a, b in zip(ranks[0]["on"], ranks[0]["off"]))
    print(json.dumps({
        "benchmark": "metrics_overhead", "model": args.model, "width": args.width, "workers": 2,
        "batch_per_worker": args.batch, "window": args.window, "rounds": args.rounds, "steps_per_round": args.steps,
        "timed_fraction": round(timed, 5), "ab_fraction": round(ab, 4), "goal": 0.01, "meets_goal": timed <= 0.01,
    }))


if __name__ == "__main__":
    main()
