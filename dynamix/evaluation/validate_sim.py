"""Simulator against the real engine on this machine: ``dynamix validate-sim``.

    dynamix validate-sim --out results/validation            # 2 and 4 workers, with and without a slow one

For each case (a cluster spec of 2 or 4 workers, a static batch size b) the same configuration runs
twice: on the distributed engine (:func:`dynamix.engine.run_local`, real torch.distributed
processes on loopback, the slow worker emulated by time dilation) and on the simulator
(:func:`dynamix.sim.run.simulate`). The table compares the mean iteration time over the windows
after the first (warm-up) one.

**Calibration by the engine.** The simulator's compute constants a_m, c_m are measured by the engine
itself, right before and right after each case's run: N homogeneous reference workers (the case's N,
speed 1, same launcher, processes, threads and code path) at the batch sizes b/2 and 2b, never b,
fitted by least squares on their per-worker compute time (:func:`engine_calibration`); the two
calibrations are averaged. So the cost model is calibrated on other batch sizes and, for the
slow-worker cases, on another cluster than the one it predicts; what is validated is how it composes
compute, speeds, the barrier, host noise and communication. Why not :func:`dynamix.sim.calibrate.calibrate`:
with N single-threaded workers on a 2-core machine each computes at a fraction of the lone-process
speed, and a separate timing rig of N concurrent processes (its own launcher and environment)
measured 20-30 % slower compute than the engine's workers (docs/clusters.md): a difference between
rigs, not of the model under test. The host's per-iteration noise
(the spread of the calibration runs' per-window compute, scaled to one iteration) is added to the
spec's jitter. Nothing is fitted to the validated runs.

Each row reports ``error_pct`` = 100 (predicted - measured) / measured and whether it is within
:data:`TOLERANCE_PCT` (``within_tolerance``). A timing measurement, so never a test assertion:
``benchmarks/bench_sim_validate.py`` runs the default cases and prints each error and the largest.
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
from dynamix.cluster.costmodel import CostModel
from dynamix.config import Config, with_overrides
from dynamix.models import build_model, gradient_bytes
from dynamix.policies.base import make_policy
from dynamix.sim.calibrate import fit_nonnegative
from dynamix.sim.run import simulate

log = logging.getLogger(__name__)


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
    return with_overrides(cfg, override)


def calibration_sizes(batch_size: int) -> tuple[int, int]:
    """The batch sizes the engine calibrates at for a case at ``batch_size``: b/2 and 2b, never b."""
    return max(1, batch_size // 2), 2 * batch_size


def _fresh_engine_run(cfg: Config, spec: clusters.ClusterSpec, batch_size: int, out_dir: Path) -> None:
    """A static-``batch_size`` engine run into an emptied ``out_dir``: a fresh measurement, with no
    resume from, or append to, an earlier run there."""
    from dynamix.engine import run_local

    if out_dir.exists():
        shutil.rmtree(out_dir)
    run_local(cfg, spec, f"static:{batch_size}", out_dir, nproc=spec.n_workers)


def engine_calibration(cfg: Config, n_workers: int, batch_size: int, out_dir: Path, iters: int,
                       window: int, skip_windows: int = 1) -> tuple[float, float, float]:
    """(a_ms, c_ms_per_sample, jitter) measured by ``n_workers`` homogeneous engine workers at
    b/2 and 2b (module docstring). ``jitter`` is the std of log per-window compute times times
    sqrt(window): the per-iteration spread of k-iteration means, back at one iteration."""
    spec = clusters.homogeneous(n_workers)
    sizes = calibration_sizes(batch_size)
    means, logs = [], []
    for b in sizes:
        run_dir = out_dir / f"b{b}"
        _fresh_engine_run(case_config(cfg, Case("calibration", spec, b), iters, window), spec, b, run_dir)
        frame = _steady(pd.read_csv(run_dir / "runs.csv"), skip_windows)
        means.append(float(frame["compute_ms"].mean()))
        logs.append(np.log(frame["compute_ms"].to_numpy()) - np.log(means[-1]))
    a, c, _ = fit_nonnegative(sizes, means)
    jitter = float(np.std(np.concatenate(logs)) * math.sqrt(window))
    return a, c, jitter


def _steady(frame: pd.DataFrame, skip_windows: int) -> pd.DataFrame:
    return frame[frame["window"] >= skip_windows]


TOLERANCE_PCT = 15.0
"""The acceptance bar: |predicted - measured| / measured mean iteration time, in percent."""


@dataclass(frozen=True)
class Measurement:
    """The engine's side of one case: its run folder and the engine calibrations (a_ms,
    c_ms_per_sample, jitter) right before and right after it."""

    engine_dir: Path
    before: tuple[float, float, float]
    after: tuple[float, float, float]


def measure_case(cfg: Config, case: Case, out_dir: Path, iters: int = 40, window: int = 10,
                 skip_windows: int = 1) -> Measurement:
    """Engine calibration, engine run, engine calibration (module docstring)."""
    n = case.spec.n_workers
    cal_dir = out_dir / "calibration" / case.name
    before = engine_calibration(cfg, n, case.batch_size, cal_dir / "before", iters, window, skip_windows)
    engine_dir = out_dir / "engine" / case.name
    _fresh_engine_run(case_config(cfg, case, iters, window), case.spec, case.batch_size, engine_dir)
    after = engine_calibration(cfg, n, case.batch_size, cal_dir / "after", iters, window, skip_windows)
    return Measurement(engine_dir, before, after)


def compare_case(cfg: Config, case: Case, out_dir: Path, measured: Measurement, iters: int = 40,
                 window: int = 10, skip_windows: int = 1, cost: CostModel | None = None,
                 tolerance_pct: float = TOLERANCE_PCT) -> dict:
    """The simulator's run of ``case`` (into ``out_dir/sim/<case>``) against the engine's
    ``measured`` one: the comparison row. ``cost`` replaces the cost model the engine calibrations
    give (the mean of before and after): a what-if, e.g. how far a mis-calibrated model is off."""
    ccfg = case_config(cfg, case, iters, window)
    a_ms, c_ms, host_jitter = ((x + y) / 2 for x, y in zip(measured.before, measured.after))
    if cost is None:
        cost = CostModel(a_ms, c_ms, gradient_bytes(build_model(ccfg.model.name, ccfg.model.width)))
    # the host's own iteration-to-iteration noise adds to the spec's: it is what makes the engine's
    # workers wait for each other even on a homogeneous spec (E[max_i t_i] > E[t])
    spec = dataclasses.replace(case.spec, jitter=math.hypot(case.spec.jitter, host_jitter))
    sim = simulate(spec, ccfg, make_policy(f"static:{case.batch_size}"), ccfg.train.seed,
                   out_dir=out_dir / "sim" / case.name, progress=False, cost=cost)
    eng = _steady(pd.read_csv(measured.engine_dir / "runs.csv"), skip_windows)
    sim = _steady(sim, skip_windows)
    slow = int(np.argmin(case.spec.speeds))
    measured_ms, predicted_ms = float(eng["iter_time_ms"].mean()), float(sim["iter_time_ms"].mean())
    error_pct = 100.0 * (predicted_ms - measured_ms) / measured_ms
    b = case.batch_size
    before, after = measured.before, measured.after
    return {
        "case": case.name, "n_workers": case.spec.n_workers, "slowest_speed": round(min(case.spec.speeds), 4),
        "batch_size": b, "measured_iter_ms": measured_ms, "predicted_iter_ms": predicted_ms,
        "error_pct": error_pct, "tolerance_pct": tolerance_pct, "within_tolerance": abs(error_pct) <= tolerance_pct,
        "measured_slowest_compute_ms": float(eng[eng["rank"] == slow]["compute_ms"].mean()),
        "predicted_slowest_compute_ms": float(sim[sim["rank"] == slow]["compute_ms"].mean()),
        "measured_comm_ms": float(eng["comm_ms"].mean()), "predicted_comm_ms": float(sim["comm_ms"].mean()),
        "calibration_a_ms": cost.a_ms, "calibration_c_ms_per_sample": cost.c_ms_per_sample,
        "host_jitter": host_jitter,
        "calibration_batch_sizes": ",".join(map(str, calibration_sizes(b))),
        "calibration_drift_pct": 100.0 * ((after[0] + after[1] * b) / (before[0] + before[1] * b) - 1),
    }


def run_case(cfg: Config, case: Case, out_dir: Path, iters: int = 40, window: int = 10,
             skip_windows: int = 1) -> dict:
    """Engine calibration, engine run, engine calibration, simulator run, and the comparison row."""
    measured = measure_case(cfg, case, out_dir, iters, window, skip_windows)
    return compare_case(cfg, case, out_dir, measured, iters, window, skip_windows)


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
