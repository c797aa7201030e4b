"""GNS/Pollux on the embedded CIFAR-10 subset: does the global batch grow as training progresses?

    .venv/bin/python benchmarks/bench_policies_gns.py [--epochs 4] [--spec clusters/X.yaml]

Runs real training of ``tiny-cnn`` on the simulator (:class:`dynamix.sim.cluster.VirtualCluster`:
real gradients on the embedded subset, virtual time from the calibrated cost model) under
``gns:refit=50``, and records every goodput re-optimisation: iteration, epoch, the estimated noise
scale B_simple, the chosen global batch and the AdaScale LR gain. The default cluster is four workers
twice as fast as the calibrated CPU on 100 Mbit/s links, so that synchronisation is a large share of
an iteration at small batches, as on the GPU clusters Pollux targets. Goodput only rewards a larger
batch when it amortises per-iteration costs: with the CPU's own speed (1.6 ms/sample here) on
10 Gbit/s links the optimum stays at the initial batch, and on 100 Mbit/s links it stayed there
through 10 epochs (B_simple grew 114 -> ~300, the best larger batch gained < 5%).

The compute cost is fixed (``--c-ms``, default 1.6 ms per sample on the reference device, a = 0:
tiny-cnn at one thread on this machine) rather than read from ``calibrations/``, whose value
depends on how loaded the machine was when it was measured (it moved from 1.6 to 6.8 ms/sample
between two calibrations during development, which changes where the goodput optimum lies);
``--calibrated`` uses the stored calibration instead.
The last output line is one JSON object: the trajectory and the ratio final/initial global batch.
"""

from __future__ import annotations

import argparse
import json
import logging

import torch

from dynamix import cluster, config
from dynamix.cluster.costmodel import CostModel
from dynamix.policies import make_policy
from dynamix.models import build_model, gradient_bytes
from dynamix.sim.cluster import VirtualCluster
from dynamix.sim.run import policy_context

SPEC = {
    "name": "fast-workers-slow-links-4",
    "architecture": {"kind": "ring"},
    "workers": [{"count": 4, "device": "double", "bandwidth_gbps": 0.1, "latency_ms": 0.5}],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=float, default=8.0)
    parser.add_argument("--spec", default="", help="cluster spec YAML (default: 4 workers at 2x, 100 Mbit/s)")
    parser.add_argument("--policy", default="gns:refit=50")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--c-ms", type=float, default=1.6, help="compute ms per sample, reference device")
    parser.add_argument("--calibrated", action="store_true", help="use calibrations/ instead of --c-ms")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(1)
    cfg = config.load(profile="default", overrides=[
        f"train.epochs={args.epochs}", "train.eval_every=100000", "train.eval_samples=1000",
        "batch.initial=32", "batch.window=10", "model.name=tiny-cnn",
    ])
    spec = cluster.load(args.spec) if args.spec else cluster.from_dict(SPEC)
    cost = None if args.calibrated else CostModel(0.0, args.c_ms, gradient_bytes(build_model(cfg.model.name)))
    sim = VirtualCluster(spec, cfg, seed=args.seed, cost=cost)
    policy = make_policy(args.policy)
    ctx = policy_context(sim, cfg, args.seed)
    policy.reset(ctx)
    decision = policy.initial(ctx)
    trajectory, seen = [], None
    while not sim.done:
        workers, glob = sim.run_window(decision.batch_sizes, decision.lr_scale)
        decision = policy.decide(workers, glob)
        d = getattr(policy, "diagnostics", {})
        if d and d.get("iteration") != seen:
            seen = d["iteration"]
            trajectory.append({
                "iteration": glob.iteration, "epoch": round(glob.epoch, 3), "b_simple": round(d["b_simple"], 1),
                "global_batch": sum(decision.batch_sizes), "lr_scale": round(decision.lr_scale, 3),
                "train_loss": round(glob.train_loss, 4),
            })
            print(json.dumps(trajectory[-1]), flush=True)
    test_loss, test_acc = sim.evaluate()
    first, last = trajectory[0]["global_batch"], trajectory[-1]["global_batch"]
    print(json.dumps({
        "bench": "policies_gns_cifar", "policy": args.policy, "cluster": spec.name, "epochs": args.epochs,
        "c_ms_per_sample": "calibrated" if args.calibrated else args.c_ms,
        "initial_global_batch": sum(ctx.initial_batch_sizes), "first_refit_batch": first,
        "final_global_batch": last, "final_over_initial": last / sum(ctx.initial_batch_sizes),
        "b_simple_first": trajectory[0]["b_simple"], "b_simple_last": trajectory[-1]["b_simple"],
        "test_acc": round(test_acc, 4), "virtual_time_s": round(sim.elapsed_s, 1),
        "trajectory": [(t["epoch"], t["global_batch"], t["b_simple"]) for t in trajectory],
    }))


if __name__ == "__main__":
    main()
