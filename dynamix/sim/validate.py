"""Simulator against the real engine on this machine: ``dynamix validate-sim``.

    dynamix validate-sim --out results/validation            # 2 and 4 workers, with and without a slow one

For each case (a cluster spec of 2 or 4 workers, a static batch size) the same configuration runs
twice: on the distributed engine (:func:`dynamix.engine.run_local`, real torch.distributed
processes on loopback, the slow worker emulated by time dilation) and on the simulator
(:func:`dynamix.sim.run.simulate`). The table compares the mean iteration time over the windows
after the first (warm-up) one.

The simulator's compute constants come from a calibration measured right before and right after
each engine run, in as many concurrent processes as the engine has workers, in lockstep and with
the engine workers' duty cycle (``calibrate(..., processes=N, idle_ratio=1/s_min - 1)``, all from
the spec): with N single-threaded workers on a 2-core machine each one computes at a fraction of
the lone-process speed, and the machine is shared with other jobs, so a calibration taken at
another time, in a single process or without the engine's idle periods predicts a different
machine. The constants of the two calibrations are averaged, and the host's measured per-iteration
noise (``Calibration.jitter``) is added to the spec's jitter. Nothing is fitted to the engine's
measurements.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from dynamix import cluster as clusters
from dynamix.config import Config, deep_merge, build
from dynamix.models import build_model, gradient_bytes
from dynamix.policies.base import make_policy
from dynamix.sim.calibrate import calibrate
from dynamix.sim.costmodel import CostModel
from dynamix.sim.run import simulate

log = logging.getLogger(__name__)

CALIBRATION_BATCH_SIZES = (32, 64, 128)


@dataclass(frozen=True)
class Case:
    """One comparison: a spec and the static per-worker batch size."""

    name: str
    spec: clusters.ClusterSpec
    batch_size: int


def default_cases(batch_size: int = 64) -> list[Case]:
    """2 and 4 workers, each homogeneous and with one third-speed worker (``clusters/slow-worker-4``)."""
    slow4 = clusters.load("clusters/slow-worker-4.yaml")
    slow2 = clusters.ClusterSpec("slow-worker-2", slow4.seed, slow4.architecture, slow4.workers[2:4])
    return [
        Case("homogeneous-2", clusters.homogeneous(2), batch_size),
        Case("slow-worker-2", slow2, batch_size),
        Case("homogeneous-4", clusters.homogeneous(4), batch_size),
        Case("slow-worker-4", slow4, batch_size),
    ]


def case_config(cfg: Config, case: Case, iters: int, window: int) -> Config:
    """``cfg`` with a fixed-length static run: no evaluation inside it, one torch thread per worker."""
    b = case.batch_size
    override = {
        "train": {"max_iters": iters, "eval_every": 10**9, "eval_samples": 200, "threads": 1,
                  "checkpoint_every": 10**9},
        "batch": {"window": window, "min": min(cfg.batch.min, b), "max": max(cfg.batch.max, b), "initial": b},
    }
    return build(Config, deep_merge(cfg.to_dict(), override))


def engine_idle_ratio(spec: clusters.ClusterSpec) -> float:
    """Idle time per unit of real compute of every engine worker at equal batch sizes, from the spec:
    the emulated slowest worker (speed s_min) computes c and sleeps (1/s_min - 1) c, the others
    compute c and wait for it, so each process is busy for c out of c / s_min."""
    return 1.0 / min(1.0, min(spec.speeds)) - 1.0


def _fresh_cost(cfg: Config, spec: clusters.ClusterSpec) -> tuple[float, float, float]:
    cal = calibrate(cfg.model.name, cfg.model.width, CALIBRATION_BATCH_SIZES, repeats=3, threads=1,
                    write=False, processes=spec.n_workers, idle_ratio=engine_idle_ratio(spec))
    return cal.a_ms, cal.c_ms_per_sample, cal.jitter


def _steady(frame: pd.DataFrame, skip_windows: int) -> pd.DataFrame:
    return frame[frame["window"] >= skip_windows]


def run_case(cfg: Config, case: Case, out_dir: Path, iters: int = 40, window: int = 10,
             skip_windows: int = 1) -> dict:
    """Engine run, simulator run, and the comparison row for one case."""
    from dynamix.engine import run_local

    ccfg = case_config(cfg, case, iters, window)
    n = case.spec.n_workers
    policy = f"static:{case.batch_size}"
    before = _fresh_cost(ccfg, case.spec)
    engine_dir = out_dir / "engine" / case.name
    if engine_dir.exists():
        shutil.rmtree(engine_dir)  # a fresh measurement: no resume from, or append to, an earlier run
    run_local(ccfg, case.spec, policy, engine_dir, nproc=n)
    after = _fresh_cost(ccfg, case.spec)
    a_ms, c_ms, host_jitter = ((x + y) / 2 for x, y in zip(before, after))
    cost = CostModel(a_ms, c_ms, gradient_bytes(build_model(ccfg.model.name, ccfg.model.width)))
    # the host's own iteration-to-iteration noise adds to the spec's: it is what makes the engine's
    # workers wait for each other even on a homogeneous spec (E[max_i t_i] > E[t])
    spec = dataclasses.replace(case.spec, jitter=math.hypot(case.spec.jitter, host_jitter))
    sim = simulate(spec, ccfg, make_policy(policy), ccfg.train.seed, out_dir=out_dir / "sim" / case.name,
                   progress=False, cost=cost)
    eng = _steady(pd.read_csv(engine_dir / "runs.csv"), skip_windows)
    sim = _steady(sim, skip_windows)
    slow = int(np.argmin(case.spec.speeds))
    measured, predicted = float(eng["iter_time_ms"].mean()), float(sim["iter_time_ms"].mean())
    return {
        "case": case.name, "n_workers": n, "slowest_speed": round(min(case.spec.speeds), 4),
        "batch_size": case.batch_size, "measured_iter_ms": measured, "predicted_iter_ms": predicted,
        "error_pct": 100.0 * (predicted - measured) / measured,
        "measured_slowest_compute_ms": float(eng[eng["rank"] == slow]["compute_ms"].mean()),
        "predicted_slowest_compute_ms": float(sim[sim["rank"] == slow]["compute_ms"].mean()),
        "measured_comm_ms": float(eng["comm_ms"].mean()), "predicted_comm_ms": float(sim["comm_ms"].mean()),
        "calibration_a_ms": a_ms, "calibration_c_ms_per_sample": c_ms, "host_jitter": host_jitter,
        "calibration_idle_ratio": engine_idle_ratio(case.spec),
        "calibration_drift_pct": 100.0 * (after[1] - before[1]) / before[1],
    }


def validate(cfg: Config, out_dir: str | Path, cases: list[Case] | None = None, iters: int = 40,
             window: int = 10) -> pd.DataFrame:
    """Every case in turn; writes ``out_dir/validation.csv`` and returns the table."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for case in cases or default_cases():
        log.info("validating %s (%d workers, b=%d)", case.name, case.spec.n_workers, case.batch_size)
        rows.append(run_case(cfg, case, out, iters, window))
        log.info("%s: measured %.1f ms, predicted %.1f ms (%+.1f%%)", case.name, rows[-1]["measured_iter_ms"],
                 rows[-1]["predicted_iter_ms"], rows[-1]["error_pct"])
    table = pd.DataFrame(rows)
    table.to_csv(out / "validation.csv", index=False)
    return table
