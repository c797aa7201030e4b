"""What the AVX2 pin (dynamix/isa.py) costs: simulated runs with the pin and without, in alternating pairs.

Each measurement is a fresh process (the kernel libraries read their ISA variables once, at start):
one simulated run of the default profile's workload (mlp x0.25, 4 homogeneous workers, one thread)
for ``--iters`` iterations, after a short warm-up run in the same process. Pairs alternate pinned and
native so that drift of a shared machine falls on both. The last line is JSON: per mode the wall
times, and ``pinned_over_native``, the ratio of the medians.

    python benchmarks/bench_isa.py [--pairs 3] [--iters 200] [--model mlp --width 0.25]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = """
import json, sys, time
import dynamix  # applies the pin unless DYNAMIX_CPU_ISA=native
import torch
from dynamix import config
from dynamix.cluster import homogeneous
from dynamix.config import with_overrides
from dynamix.policies import make_policy
from dynamix.sim.run import simulate
torch.set_num_threads(1)
iters, model, width = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
cfg = with_overrides(config.load(), {"model": {"name": model, "width": width},
                                     "train": {"max_iters": iters, "epochs": 1000, "threads": 1, "eval_every": 10**9}})
simulate(homogeneous(4), with_overrides(cfg, {"train": {"max_iters": 10}}), make_policy("static:64"), 0, progress=False)
t0 = time.perf_counter()
simulate(homogeneous(4), cfg, make_policy("static:64"), 0, progress=False)
print(json.dumps({"wall_s": time.perf_counter() - t0}))
"""

PINNED_KEYS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR")


def measure(mode: str, iters: int, model: str, width: float) -> float:
    """One fresh process's wall time for the run, under ``mode`` (avx2: pinned; native: unpinned)."""
    env = {k: v for k, v in os.environ.items() if k not in PINNED_KEYS}  # what the Makefile exported
    env["DYNAMIX_CPU_ISA"] = mode
    out = subprocess.run([sys.executable, "-c", CHILD, str(iters), model, str(width)], env=env, check=True,
                         capture_output=True, text=True, timeout=600).stdout
    return float(json.loads(out.strip().splitlines()[-1])["wall_s"])


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3, choices=range(1, 21), metavar="[1-20]")
    ap.add_argument("--iters", type=int, default=200, choices=range(10, 5001), metavar="[10-5000]")
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--width", type=float, default=0.25)
    a = ap.parse_args(argv)
    times: dict[str, list[float]] = {"avx2": [], "native": []}
    for i in range(a.pairs):
        for mode in (("avx2", "native") if i % 2 == 0 else ("native", "avx2")):
            times[mode].append(round(measure(mode, a.iters, a.model, a.width), 3))
            print(f"pair {i + 1} {mode}: {times[mode][-1]:.2f} s", flush=True)
    result = {"model": a.model, "width": a.width, "iters": a.iters, "wall_s": times,
              "pinned_over_native": round(statistics.median(times["avx2"]) / statistics.median(times["native"]), 3)}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
