"""Heterogeneity: 4 workers, one 3x slower (clusters/slow-worker-4.yaml, emulated by time dilation).

Batch sizes proportional to speed vs an equal split, at the same global batch B. Both run in one
4-rank gloo world, alternating in blocks of one window (sizes are set at window boundaries, as a
policy would), so machine noise hits both alike. Reported: mean iteration time of each and the ratio
proportional / equal (below 1: proportional sizes are faster), median over rounds.

Expected on an idle machine: about (1 + c) / 3 for compute-bound iterations, where c is the
fixed-cost share; noisy neighbours on a shared 2-core machine move it.

    .venv/bin/python benchmarks/bench_engine_hetero.py [--global-batch 512 --rounds 4 --steps 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch.distributed as dist

from dynamix import cluster as cluster_mod
from dynamix import config as config_mod
from dynamix.engine.worker import Engine
from dynamix.engine.world import spawn_world
from dynamix.policies.allocation import round_to_total

SPEC = "clusters/slow-worker-4.yaml"


def _rank(rank: int, cfg_dict: dict, spec, plans: dict, rounds: int) -> dict:
    cfg = config_mod.build(config_mod.Config, cfg_dict)
    eng = Engine(cfg, None, spec, policy_spec="static", initial_sizes=plans["equal"])
    eng.start()
    k = cfg.batch.window

    def block(sizes: tuple[int, ...]) -> float:
        eng.sizes = sizes  # at a window boundary, as a policy decision would
        dist.barrier()
        t0 = time.perf_counter()
        eng.train(k)
        dist.barrier()
        return (time.perf_counter() - t0) / k

    block(plans["equal"])
    times: dict[str, list[float]] = {"equal": [], "proportional": []}
    for r in range(rounds):
        for name in ("equal", "proportional") if r % 2 == 0 else ("proportional", "equal"):
            times[name].append(block(plans[name]))
    eng.finish()
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny-cnn")
    ap.add_argument("--width", type=float, default=0.5)
    ap.add_argument("--global-batch", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=10, help="iterations per block (= the window)")
    args = ap.parse_args()
    spec = cluster_mod.load(SPEC)
    n, B = spec.n_workers, args.global_batch
    speeds = spec.speeds
    plans = {"equal": round_to_total([B / n] * n, B, 1, B),
             "proportional": round_to_total([B * s / sum(speeds) for s in speeds], B, 1, B)}
    cfg = config_mod.load(overrides=[f"model.name={args.model}", f"model.width={args.width}", "train.threads=1",
                                     "train.max_iters=1000000", "train.eval_every=1000000", "batch.min=1",
                                     f"batch.max={B}", f"batch.window={args.steps}"])
    times = spawn_world(_rank, n, cfg.to_dict(), spec, plans, args.rounds, timeout_s=1800)[0]
    ratios = [p / e for p, e in zip(times["proportional"], times["equal"])]
    print(json.dumps({
        "benchmark": "engine_hetero_proportional_vs_equal", "cluster": SPEC, "model": args.model,
        "width": args.width, "global_batch": B, "speeds": speeds, "sizes": plans,
        "equal_iter_ms": 1e3 * statistics.mean(times["equal"]),
        "proportional_iter_ms": 1e3 * statistics.mean(times["proportional"]),
        "ratios": [round(r, 4) for r in ratios], "ratio_median": round(statistics.median(ratios), 4),
    }))


if __name__ == "__main__":
    main()
