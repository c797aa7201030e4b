"""What the held-out stage's sweeps lose to their tails and process starts, and what lockstep wins back.

    .venv/bin/python benchmarks/bench_lockstep.py [--jobs 2] [--seeds 3] [--epochs 1.0] [--rounds 1]

The work: on each of the five held-out clusters of the ``converged`` profile, the oracle's search as the
stage runs it (constant global batches of 64 and 128 per worker, the refined grid around the winner,
two-phase members at a quarter and a half of the run; :func:`dynamix.evaluation.oracle.search_plan`),
``--seeds`` seeds, the profile's workload (tiny-cnn x0.25, its schedule) for ``--epochs`` epochs instead
of 20, no run cache. Two sides, in
alternating rounds so load drift hits both:

- ``by_cluster``: cluster after cluster, every step its own sweep in a pool made for it, every run
  simulated whole (how the stage ran before :mod:`dynamix.evaluation.lockstep`,
  :mod:`dynamix.evaluation.pool` and :mod:`dynamix.sim.fork`);
- ``lockstep``: every cluster's step in one sweep, one pool for all sweeps, and one seed's two-phase
  members as one run forked where they part.

Both sides' searches give the same runs and choose the same members (checked). ``lockstep_over_by_cluster`` is the
wall time over all rounds, lockstep's over the other's; ``saved_s_per_round`` the difference per round.
The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

from dynamix import cluster, config
from dynamix.evaluation import lockstep as lockstep_module
from dynamix.evaluation import plan
from dynamix.evaluation import pool
from dynamix.evaluation.lockstep import lockstep
from dynamix.evaluation.oracle import search_plan
from dynamix.evaluation.runner import run_tasks

CLUSTERS = ["gpu-overlap-4", "comm-ring-8", "ps-incast-6", "dyn-bandwidth-4", "dyn-interference-6"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    cfg = plan.sim_config(config.load(profile="converged"), train={"epochs": args.epochs})
    specs = [cluster.load(f"clusters/heldout/{name}.yaml") for name in CLUSTERS]
    seeds = list(range(args.seeds))
    side = ""

    def pool_per_sweep(tasks, *a, **kw):
        if side == "by_cluster":  # every run whole, as before
            tasks = [dataclasses.replace(t, shares_start=False) for t in tasks]
        frames = run_tasks(tasks, *a, **kw)
        if side == "by_cluster":  # a pool per sweep, as before
            pool.discard(args.jobs, terminate=False)
        return frames

    def plans():
        # target 0: every run "reaches" it at its first test, so the search's choices depend on time alone
        return [search_plan(s, cfg, [64 * s.n_workers, 128 * s.n_workers], seeds, 0.0, refine=True,
                            phase_epochs=[args.epochs / 4, args.epochs / 2]) for s in specs]

    lockstep_module.run_tasks = pool_per_sweep
    walls: dict[str, list[float]] = {"by_cluster": [], "lockstep": []}
    chosen: dict[str, list] = {}
    n_runs = 0
    for _ in range(args.rounds):
        for side in walls:
            pool.discard(args.jobs, terminate=False)
            t0 = time.perf_counter()
            if side == "by_cluster":
                found = [lockstep([p], args.jobs, progress=False)[0] for p in plans()]
            else:
                found = lockstep(plans(), args.jobs, progress=False)
            walls[side].append(time.perf_counter() - t0)
            chosen[side] = found
            n_runs = sum(len(f.runs) for f in found)
    pool.discard(args.jobs, terminate=False)
    for a, b in zip(chosen["by_cluster"], chosen["lockstep"]):
        if a.policy != b.policy or not a.runs.equals(b.runs):
            raise SystemExit(f"the two sides' searches differ on {a.runs['cluster'].iloc[0]}")
    total = {side: sum(w) for side, w in walls.items()}
    result = {"bench": "lockstep", "jobs": args.jobs, "seeds": args.seeds, "epochs": args.epochs,
              "rounds": args.rounds, "runs_per_round": n_runs,
              "wall_s": {side: [round(w, 1) for w in ws] for side, ws in walls.items()},
              "lockstep_over_by_cluster": round(total["lockstep"] / total["by_cluster"], 3),
              "saved_s_per_round": round((total["by_cluster"] - total["lockstep"]) / args.rounds, 1)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
