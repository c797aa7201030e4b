"""Calibration of the compute term t(b) = a_m + c_m * b on this machine: ``dynamix calibrate``.

    dynamix calibrate --model tiny-cnn                 # -> results/calibration/tiny-cnn.json
    dynamix calibrate --model resnet20 --width 0.5 --threads 1

What is timed is one worker's full compute for one iteration, exactly what the engine's workers do:
build the batch (normalise + augment, :class:`dynamix.data.BatchMaker`), forward, backward
(:meth:`Trainer.weighted_gradient`) and the optimiser step (:meth:`Trainer.apply`). Batch sizes are
visited round-robin, ``repeats`` times each after a warm-up, so slow drift of a shared machine hits
every size alike; the median per size is fitted by least squares,

    min_{a, c} sum_b (median_ms(b) - a - c b)^2,

and the fit's R^2 is stored beside a and c, with the spread of single iterations (``jitter``, the
standard deviation of log t: the same quantity as a cluster spec's ``jitter``). Timing uses
``threads`` torch threads (default 1, the setting of each engine worker when several share this
machine's cores); device profiles in
:data:`dynamix.cluster.DEVICE_PROFILES` are speeds relative to this measurement.

``processes`` > 1 runs that many timing processes at once and pools their measurements: the compute
time of one worker among N co-located ones (the engine's situation when N workers share this
machine's cores), which :mod:`dynamix.sim.validate` uses to predict local engine runs. Each timing
process starts its own session (``os.setsid``), as torchrun's worker processes do: with Linux
autogroup scheduling a session is the unit that shares the CPU with the rest of the machine, so a
pool inside the caller's session would get one share for all N processes while N engine workers get
N shares (we measured 2-3x slower "calibrated" compute than the engine's before this). For the same
reason ``idle_ratio`` reproduces a worker's duty cycle: the fair scheduler credits a process that
sleeps, so a worker idle for most of each iteration computes faster, while it computes, than a
continuously busy one on a machine shared with other jobs; and the processes start every iteration
together (a barrier), as the engine's workers do, so their compute phases overlap as the engine's do.

The result lives in ``results/calibration/<model>.json`` (``<model>-w<width>.json`` when width != 1).
:func:`load_calibration` reads it, or runs a quick calibration (logged) when none exists.
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from dynamix import paths
from dynamix.config import OptimConfig
from dynamix.data import BatchMaker
from dynamix.models import build_model, gradient_bytes
from dynamix.train.core import Trainer

log = logging.getLogger(__name__)

DEFAULT_BATCH_SIZES = (16, 32, 64, 128, 256)
QUICK_BATCH_SIZES = (16, 64, 128)


@dataclass(frozen=True)
class Calibration:
    """A fitted compute model for one (model, width) on one machine."""

    model: str
    width: float
    a_ms: float  # fixed per-iteration compute (ms)
    c_ms_per_sample: float  # compute per sample (ms)
    r2: float  # coefficient of determination of the linear fit
    threads: int  # torch threads used while timing
    processes: int  # timing processes running at once (1: a lone worker)
    batch_sizes: tuple[int, ...]
    median_ms: tuple[float, ...]  # measured median iteration compute per batch size
    jitter: float  # median over batch sizes of std(log t): the host's iteration-to-iteration noise
    repeats: int
    gradient_bytes: int
    host: str
    torch_version: str

    def predict_ms(self, batch_size: float) -> float:
        return self.a_ms + self.c_ms_per_sample * batch_size


def calibration_path(model_name: str, width: float = 1.0) -> Path:
    suffix = "" if width == 1.0 else f"-w{width:g}"
    return paths.CALIBRATION / f"{model_name}{suffix}.json"


def fit_linear(batch_sizes, times_ms) -> tuple[float, float, float]:
    """Least-squares (a, c, R^2) of times = a + c * b."""
    b = np.asarray(batch_sizes, float)
    t = np.asarray(times_ms, float)
    design = np.stack([np.ones_like(b), b], axis=1)
    (a, c), *_ = np.linalg.lstsq(design, t, rcond=None)
    resid = t - (a + c * b)
    ss_tot = float(((t - t.mean()) ** 2).sum())
    r2 = 1.0 - float((resid**2).sum()) / ss_tot if ss_tot > 0 else 1.0
    return float(a), float(c), r2


def fit_nonnegative(batch_sizes, times_ms) -> tuple[float, float, float]:
    """:func:`fit_linear` constrained to a, c >= 0 (the cost model needs t(b) >= 0, non-decreasing):
    a negative coefficient is timing noise, so it is dropped and the other one refitted alone."""
    a, c, r2 = fit_linear(batch_sizes, times_ms)
    b = np.asarray(batch_sizes, float)
    t = np.asarray(times_ms, float)
    if a < 0:
        a, c = 0.0, float(b.dot(t) / b.dot(b))
    if c < 0:
        log.warning("calibration: time falls with batch size (noise); using c = 0. Use more repeats or "
                    "batch sizes further apart")
        a, c = float(t.mean()), 0.0
    return a, c, r2


def measure(model_name: str, width: float, batch_sizes, repeats: int = 5, warmup: int = 2,
            seed: int = 0, idle_ratio: float = 0.0, barrier=None) -> list[list[float]]:
    """Per batch size, the list of ``repeats`` timed iterations (ms) in the current torch threads;
    after each iteration of t ms the process sleeps ``idle_ratio`` * t ms (a worker's duty cycle),
    and with a ``barrier`` (shared by concurrent timing processes) every iteration starts in lockstep,
    as synchronous data-parallel workers do."""
    torch.manual_seed(seed)
    model = build_model(model_name, width)
    trainer = Trainer(model, OptimConfig(), total_iters=1)
    n_pool = max(batch_sizes)
    gen = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n_pool, 3, 32, 32), dtype=torch.uint8, generator=gen)
    labels = torch.randint(0, 10, (n_pool,), generator=gen)
    maker = BatchMaker(images, labels, augment_train=True, seed=seed)
    times: list[list[float]] = [[] for _ in batch_sizes]
    for r in range(warmup + repeats):
        for j, b in enumerate(batch_sizes):
            idx = torch.arange(b)
            if barrier is not None:
                barrier.wait()
            t0 = time.perf_counter()
            trainer.weighted_gradient([maker(idx)], track_local=False)
            trainer.apply(b)
            dt = (time.perf_counter() - t0) * 1e3
            if r >= warmup:
                times[j].append(dt)
            if idle_ratio > 0:
                time.sleep(idle_ratio * dt / 1e3)
    return times


_BARRIER = None  # set in pool processes: the lockstep barrier shared by concurrent timing processes


def _init_timing_process(barrier) -> None:
    """Pool initializer: a session of its own (see the module docstring) and the shared barrier."""
    global _BARRIER
    os.setsid()
    _BARRIER = barrier


def _measure_in_process(model_name: str, width: float, batch_sizes, repeats: int, threads: int,
                        idle_ratio: float, seed: int) -> list[list[float]]:
    """:func:`measure` at ``threads`` torch threads (restored afterwards); the unit of work of a pool."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return measure(model_name, width, batch_sizes, repeats, seed=seed, idle_ratio=idle_ratio,
                       barrier=_BARRIER)
    finally:
        torch.set_num_threads(before)


def calibrate(model_name: str, width: float = 1.0, batch_sizes=DEFAULT_BATCH_SIZES, repeats: int = 5,
              threads: int = 1, write: bool = True, processes: int = 1,
              idle_ratio: float = 0.0) -> Calibration:
    """Measure and fit a_m, c_m for ``model_name`` at ``threads`` torch threads in each of
    ``processes`` concurrent timing processes, each idle ``idle_ratio`` x its compute time between
    iterations; write the JSON when ``write``."""
    if len(set(batch_sizes)) < 2:
        raise ValueError(f"calibrate: batch_sizes = {list(batch_sizes)} needs at least two distinct sizes")
    if threads < 1:
        raise ValueError(f"calibrate: threads = {threads} is out of range: must be >= 1")
    if processes < 1:
        raise ValueError(f"calibrate: processes = {processes} is out of range: must be >= 1")
    if idle_ratio < 0:
        raise ValueError(f"calibrate: idle_ratio = {idle_ratio} is out of range: must be >= 0")
    job = (model_name, width, tuple(batch_sizes), repeats, threads, idle_ratio)
    if processes == 1:
        times = _measure_in_process(*job, seed=0)
    else:
        ctx = mp.get_context("spawn")
        barrier = ctx.Barrier(processes)
        with ctx.Pool(processes, initializer=_init_timing_process, initargs=(barrier,)) as pool:
            per_proc = pool.starmap(_measure_in_process, [(*job, p) for p in range(processes)])
        times = [sum((t[j] for t in per_proc), []) for j in range(len(batch_sizes))]
    medians = [float(np.median(t)) for t in times]
    jitter = float(np.median([np.std(np.log(t)) for t in times]))
    a, c, r2 = fit_nonnegative(batch_sizes, medians)
    cal = Calibration(
        model=model_name, width=float(width), a_ms=a, c_ms_per_sample=c, r2=r2, threads=threads,
        processes=processes,
        batch_sizes=tuple(int(b) for b in batch_sizes), median_ms=tuple(medians), jitter=jitter,
        repeats=repeats,
        gradient_bytes=gradient_bytes(build_model(model_name, width)), host=platform.node(),
        torch_version=torch.__version__,
    )
    log.info("calibrated %s (width %g, %d threads x %d processes): a = %.3f ms, c = %.4f ms/sample, "
             "R^2 = %.4f", model_name, width, threads, processes, a, c, r2)
    if write:
        path = calibration_path(model_name, width)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(asdict(cal), indent=2) + "\n")
        tmp.replace(path)
    return cal


def load_calibration(model_name: str, width: float = 1.0) -> Calibration:
    """The stored calibration for (model, width); without one, a quick calibration (logged, written)."""
    path = calibration_path(model_name, width)
    if path.exists():
        d = json.loads(path.read_text())
        d["batch_sizes"], d["median_ms"] = tuple(d["batch_sizes"]), tuple(d["median_ms"])
        d.setdefault("processes", 1)
        d.setdefault("jitter", 0.0)
        return Calibration(**d)
    log.warning("no calibration at %s: running a quick one (run `dynamix calibrate --model %s` for a "
                "careful fit)", path, model_name)
    return calibrate(model_name, width, QUICK_BATCH_SIZES, repeats=3)
