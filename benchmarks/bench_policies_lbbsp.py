"""LB-BSP vs the equal split at the same global batch, with one worker 3x slower.

    .venv/bin/python benchmarks/bench_policies_lbbsp.py [--backends sim,engine,synthetic] [--iters 200]

For 2 and 4 workers (the last at a third of the others' speed, ``device: third``; 4 workers is
``clusters/slow-worker-4.yaml``) and a global batch of 64 per worker, runs ``static`` (equal split)
and ``lbbsp`` on

* ``sim``: the simulator, :func:`dynamix.sim.run.simulate` (real training, calibrated cost model);
* ``engine``: the distributed engine, :func:`dynamix.engine.run_local` (torchrun, gloo, one thread per
  rank, the slow rank's compute dilated by the spec);
* ``synthetic``: :class:`SyntheticCluster` (``tests/helpers/synthetic.py``) with the calibrated affine cost
  (a policy-only closed loop, no training).

and reports mean iteration time over all windows (the policy's first window is the equal split, so it
counts against LB-BSP) and the ratio lbbsp/static. Acceptance: ratio <= 0.6. Last line: one JSON.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from dynamix import cluster, config, paths
from dynamix.policies import PolicyContext, make_policy

sys.path.insert(0, str(paths.ROOT / "tests"))  # tests/helpers/: shared with the tests, not part of the package
from helpers.synthetic import SyntheticCluster, drive  # noqa: E402

POLICIES = ("static", "lbbsp")


def spec_for(n: int) -> cluster.ClusterSpec:
    if n == 4:
        return cluster.load("clusters/slow-worker-4.yaml")
    return cluster.from_dict({
        "name": f"slow-worker-{n}", "architecture": {"kind": "ring"},
        "workers": [{"count": n - 1, "device": "reference"}, {"count": 1, "device": "third"}],
    })


def window_iter_ms(frame: pd.DataFrame) -> float:
    """Mean iteration time over windows (one value per window: the synchronous iteration time)."""
    return float(frame.groupby("window")["iter_time_ms"].max().mean())


def final_sizes(frame: pd.DataFrame) -> list[int]:
    last = frame[frame["window"] == frame["window"].max()].sort_values("rank")
    return [int(b) for b in last["batch_size"]]


def run_sim(cfg, n: int, seed: int) -> dict:
    from dynamix.sim.run import simulate

    out = {}
    for spec_str in POLICIES:
        frame = simulate(spec_for(n), cfg, make_policy(spec_str), seed, progress=False)
        out[spec_str] = {"iter_ms": window_iter_ms(frame), "final_sizes": final_sizes(frame)}
    return out


def run_engine(cfg, n: int, seed: int) -> dict:
    from dynamix.engine import run_local

    out = {}
    for spec_str in POLICIES:
        with tempfile.TemporaryDirectory() as tmp:
            run_local(cfg, spec_for(n), spec_str, tmp, nproc=n, method="torchrun", timeout_s=1800)
            frame = pd.read_csv(Path(tmp) / "runs.csv")
        out[spec_str] = {"iter_ms": window_iter_ms(frame), "final_sizes": final_sizes(frame)}
    return out


def run_synthetic(cfg, n: int, seed: int) -> dict:
    from dynamix.sim.calibrate import load_calibration

    cal = load_calibration(cfg.model.name, cfg.model.width)
    speeds = np.array(spec_for(n).speeds)
    out = {}
    for spec_str in POLICIES:
        sim = SyntheticCluster(cal.a_ms / speeds, cal.c_ms_per_sample / speeds, comm_ms=1.0, jitter=0.05,
                               window=cfg.batch.window, seed=seed)
        ctx = PolicyContext(n_workers=n, initial_batch_sizes=(cfg.batch.initial,) * n)
        history = drive(make_policy(spec_str), sim, ctx, cfg.train.max_iters // cfg.batch.window)
        out[spec_str] = {"iter_ms": float(np.mean([h[1] for h in history])), "final_sizes": list(history[-1][0])}
    return out


RUNNERS = {"sim": run_sim, "engine": run_engine, "synthetic": run_synthetic}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="sim,engine,synthetic")
    parser.add_argument("--workers", default="2,4")
    parser.add_argument("--iters", type=int, default=200, help="iterations per run (engine: half)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(1)
    results: dict = {}
    for backend in args.backends.split(","):
        iters = args.iters // 2 if backend == "engine" else args.iters
        cfg = config.load(profile="default", overrides=[
            f"train.max_iters={iters}", "train.eval_every=100000", "train.eval_samples=500",
            "train.checkpoint_every=100000", "train.threads=1", "batch.initial=64", "batch.window=10",
            "model.name=tiny-cnn",
        ])
        for n in (int(v) for v in args.workers.split(",")):
            try:
                r = RUNNERS[backend](cfg, n, args.seed)
                r["ratio"] = r["lbbsp"]["iter_ms"] / r["static"]["iter_ms"]
            except (ImportError, RuntimeError, OSError) as err:  # backend not available here
                r = {"error": f"{type(err).__name__}: {err}"}
            results[f"{backend}-{n}"] = r
            print(json.dumps({f"{backend}-{n}": r}), flush=True)
    ratios = {k: round(v["ratio"], 3) for k, v in results.items() if "ratio" in v}
    print(json.dumps({"bench": "policies_lbbsp_slow_worker", "iters": args.iters, "ratios_lbbsp_over_equal": ratios,
                      "max_ratio": max(ratios.values()) if ratios else None, "results": results}))


if __name__ == "__main__":
    main()
