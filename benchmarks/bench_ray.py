"""Does a sweep lose throughput on Ray? The same runs on the local process pool and on Ray, same processes.

    .venv/bin/python benchmarks/bench_ray.py [--jobs 2] [--seeds 4] [--epochs 1.0] [--rounds 2]

The sweep: static batch sizes 32, 64 and 128 per worker on ``clusters/heldout/hetero-speed-4.yaml``
over ``--seeds`` seeds, the ``mlp`` x0.25 workload for ``--epochs`` epochs, no run cache. One side runs it
in ``--jobs`` spawned processes (``executor.kind: local``), the other as Ray tasks on a Ray started here
on loopback with ``--jobs`` CPUs (``executor.kind: ray``, dashboard off). Rounds alternate the sides so
load drift hits both. Each side's wall time counts its worker processes' start and imports as a
pipeline meets them: the pool's processes start with the first sweep of the process and serve the later
ones (:mod:`dynamix.evaluation.pool`), as Ray's workers stay up between sweeps (so the first round of each
side, ``ray_over_local_first`` for their ratio, pays them once); Ray's own start, which a cluster pays
once, is apart (``ray_start_s``). ``ray_over_local`` is the runs per minute over all
rounds, Ray's over the pool's. The per-task overhead is Ray's round trip of an empty task
(``noop_task_ms``, 200 in flight at once) and the sweep's extra CPU time per run on Ray, first round
(``extra_ms_per_run``, negative when Ray is faster). The last line is one JSON object;
``ray_over_local`` >= 0.9 is the goal.
"""

from __future__ import annotations

import argparse
import json
import time

from dynamix import cluster, config
from dynamix.evaluation import executor
from dynamix.evaluation.runner import SimTask, run_tasks


def noop(x: int) -> int:
    return x


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    base = config.load(overrides={"model": {"name": "mlp", "width": 0.25}, "train": {"epochs": args.epochs},
                                  "experiments": {"jobs": args.jobs}})
    spec = cluster.load("clusters/heldout/hetero-speed-4.yaml")
    sides = {kind: config.with_overrides(base, {"executor": {"kind": kind}}) for kind in ("local", "ray")}
    tasks = {kind: [SimTask(spec, cfg, f"static:{b}", s) for b in (32, 64, 128) for s in range(args.seeds)]
             for kind, cfg in sides.items()}
    t0 = time.perf_counter()
    executor.connect(sides["ray"].executor, args.jobs)
    ray_start_s = time.perf_counter() - t0

    walls: dict[str, list[float]] = {kind: [] for kind in sides}
    for _ in range(args.rounds):
        for kind in sides:
            t0 = time.perf_counter()
            run_tasks(tasks[kind], args.jobs, progress=False)
            walls[kind].append(time.perf_counter() - t0)

    n_noop = 200
    t0 = time.perf_counter()
    sum(r for _, r in executor.ray_map(noop, [(i,) for i in range(n_noop)], [False] * n_noop))
    noop_ms = (time.perf_counter() - t0) * 1e3 / n_noop

    import ray

    ray.shutdown()
    n = len(tasks["local"])
    per_min = {kind: 60.0 * n * args.rounds / sum(w) for kind, w in walls.items()}
    print(json.dumps({
        "ray_over_local": round(per_min["ray"] / per_min["local"], 3),
        "ray_over_local_first": round(walls["local"][0] / walls["ray"][0], 3),
        "local_sims_per_min": round(per_min["local"], 1), "ray_sims_per_min": round(per_min["ray"], 1),
        "noop_task_ms": round(noop_ms, 2),
        "extra_ms_per_run": round((walls["ray"][0] - walls["local"][0]) * 1e3 * args.jobs / n, 1),
        "walls_s": {kind: [round(x, 1) for x in w] for kind, w in walls.items()},
        "runs": n, "jobs": args.jobs, "rounds": args.rounds, "ray_start_s": round(ray_start_s, 1),
    }))


if __name__ == "__main__":
    main()
