"""Calibration of the compute term t(b) = a_m + c_m * b: ``dynamix calibrate``.

    dynamix calibrate --model tiny-cnn                 # -> calibrations/tiny-cnn.json
    dynamix calibrate --model resnet20 --width 0.5 --out /tmp/cal
    dynamix calibrate --model vgg11 --device cuda      # on a GPU: that GPU's a_m and c_m

What is timed is one worker's full compute for one iteration, exactly what the engine's workers do:
build the batch (normalise + augment, :class:`dynamix.data.BatchMaker`), forward, backward
(:meth:`Trainer.weighted_gradient`) and the optimiser step (:meth:`Trainer.apply`). Batch sizes are
visited round-robin, ``repeats`` times each after a warm-up, so slow drift of a shared machine hits
every size alike; the median per size is fitted by least squares,

    min_{a, c} sum_b (median_ms(b) - a - c b)^2,

and the fit's R^2 is stored beside a and c, with the spread of single iterations (``jitter``, the
standard deviation of log t: the same quantity as a cluster spec's ``jitter``). Timing uses
``threads`` torch threads (default 1, the setting of each engine worker when several share this
machine's cores) on ``device`` (``train.device``: ``auto`` is CUDA when available; CUDA timings wait
for the queued kernels with ``torch.cuda.synchronize``); device profiles in
:data:`dynamix.cluster.DEVICE_PROFILES` are speeds relative to this measurement. (To predict engine
runs of N co-located workers on this machine, :mod:`dynamix.evaluation.validate_sim` calibrates with the engine
itself instead.)

The simulator's clock reads the committed reference calibrations, ``calibrations/<model>.json``
(``<model>-w<width>.json`` when width != 1), each recording the machine and the command that measured
it, so every rerun of one commit gives the same virtual times. :func:`load_calibration` never measures:
a missing one is a :class:`CalibrationMissing` telling the user to run ``dynamix calibrate``, the
explicit step that replaces a reference by a measurement of one's own hardware.
"""

from __future__ import annotations

import json
import logging
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from dynamix import io, paths
from dynamix.config import ID_DATASETS, ConfigError, OptimConfig
from dynamix.data import GENERATED, BatchMaker
from dynamix.errors import InputFileError, UserError
from dynamix.models import build_model, gradient_bytes
from dynamix.train.core import Trainer
from dynamix.train.device import check_amp, resolve_device, synchronize

log = logging.getLogger(__name__)

DEFAULT_BATCH_SIZES = (16, 32, 64, 128, 256)


class CalibrationMissing(UserError):
    """No calibration for a (model, width) the simulator needs: ``dynamix calibrate`` makes one."""


@dataclass(frozen=True)
class Calibration:
    """A fitted compute model for one (model, width) on one machine."""

    model: str
    width: float
    a_ms: float  # fixed per-iteration compute (ms)
    c_ms_per_sample: float  # compute per sample (ms)
    r2: float  # coefficient of determination of the linear fit
    threads: int  # torch threads used while timing
    batch_sizes: tuple[int, ...]
    median_ms: tuple[float, ...]  # measured median iteration compute per batch size
    jitter: float  # median over batch sizes of std(log t): the host's iteration-to-iteration noise
    repeats: int
    gradient_bytes: int
    host: str
    torch_version: str
    device: str = "cpu"  # where it was measured (cpu, cuda:N)
    amp: str = "none"  # mixed precision while measuring (train.amp)
    machine: str = ""  # the CPU (or GPU) model it was measured on
    command: str = ""  # the command that measured it

    def predict_ms(self, batch_size: float) -> float:
        return self.a_ms + self.c_ms_per_sample * batch_size


def calibration_path(model_name: str, width: float = 1.0, folder: str | Path | None = None) -> Path:
    """Where the calibration of (model, width) lives in ``folder`` (default: the references)."""
    suffix = "" if width == 1.0 else f"-w{width:g}"
    return Path(paths.CALIBRATION if folder is None else folder) / f"{model_name}{suffix}.json"


def machine_name(device: str) -> str:
    """The processor a measurement ran on (``/proc/cpuinfo``'s model name, or the CUDA device's)."""
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


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
            seed: int = 0, device: str = "cpu", amp: str = "none") -> list[list[float]]:
    """Per batch size, the list of ``repeats`` timed iterations (ms) in the current torch threads, on
    ``device`` (a resolved device string) with mixed precision ``amp``."""
    torch.manual_seed(seed)
    model = build_model(model_name, width)
    trainer = Trainer(model, OptimConfig(), total_iters=1, device=device, amp=amp)
    n_pool = max(batch_sizes)
    gen = torch.Generator().manual_seed(seed)
    if model_name in ID_DATASETS:  # an id model (ncf, lstm-lm): its synthetic data set's samples
        data = GENERATED[ID_DATASETS[model_name]](seed=seed, train=n_pool, test=0)
        maker = BatchMaker(data.train_x, data.train_y, augment_train=False, seed=seed)
    else:
        images = torch.randint(0, 256, (n_pool, 3, 32, 32), dtype=torch.uint8, generator=gen)
        labels = torch.randint(0, 10, (n_pool,), generator=gen)
        maker = BatchMaker(images, labels, augment_train=True, seed=seed)
    times: list[list[float]] = [[] for _ in batch_sizes]
    for r in range(warmup + repeats):
        for j, b in enumerate(batch_sizes):
            idx = torch.arange(b)
            synchronize(device)
            t0 = time.perf_counter()
            trainer.weighted_gradient([maker(idx)], track_local=False)
            trainer.apply(b)
            synchronize(device)
            dt = (time.perf_counter() - t0) * 1e3
            if r >= warmup:
                times[j].append(dt)
    return times


def calibrate(model_name: str, width: float = 1.0, batch_sizes=DEFAULT_BATCH_SIZES, repeats: int = 5,
              threads: int = 1, out_dir: str | Path | None = None, device: str = "auto", amp: str = "none",
              command: str = "") -> Calibration:
    """Measure and fit a_m, c_m for ``model_name`` at ``threads`` torch threads on ``device`` (a
    ``train.device`` value) with mixed precision ``amp`` (``train.amp``); write the JSON into
    ``out_dir`` when given (``command``: what to record as having measured it)."""
    if len(set(batch_sizes)) < 2:
        raise ConfigError(f"calibrate: batch_sizes = {list(batch_sizes)} needs at least two distinct sizes")
    if threads < 1:
        raise ConfigError(f"calibrate: threads = {threads} is out of range: must be >= 1")
    dev = resolve_device(device)
    check_amp(amp, dev)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        times = measure(model_name, width, tuple(batch_sizes), repeats, device=dev, amp=amp)
    finally:
        torch.set_num_threads(before)
    medians = [float(np.median(t)) for t in times]
    jitter = float(np.median([np.std(np.log(t)) for t in times]))
    a, c, r2 = fit_nonnegative(batch_sizes, medians)
    cal = Calibration(
        model=model_name, width=float(width), a_ms=a, c_ms_per_sample=c, r2=r2, threads=threads,
        batch_sizes=tuple(int(b) for b in batch_sizes), median_ms=tuple(medians), jitter=jitter,
        repeats=repeats,
        gradient_bytes=gradient_bytes(build_model(model_name, width)), host=platform.node(),
        torch_version=torch.__version__, device=dev, amp=amp, machine=machine_name(dev), command=command,
    )
    log.info("calibrated %s (width %g, %s, %d threads): a = %.3f ms, c = %.4f ms/sample, R^2 = %.4f",
             model_name, width, dev, threads, a, c, r2)
    if out_dir is not None:
        io.write_text(calibration_path(model_name, width, out_dir), json.dumps(asdict(cal), indent=2) + "\n")
    return cal


def read_calibration(path: Path) -> Calibration:
    """The calibration stored at ``path``."""
    try:
        d = json.loads(path.read_text())
        d["batch_sizes"], d["median_ms"] = tuple(d["batch_sizes"]), tuple(d["median_ms"])
        d.pop("processes", None)  # written by earlier versions (always 1)
        return Calibration(**d)
    except (UnicodeDecodeError, ValueError, TypeError, KeyError) as exc:
        raise InputFileError(f"{path}: not a calibration ({type(exc).__name__}: {exc})") from None


def load_calibration(model_name: str, width: float = 1.0) -> Calibration:
    """The reference calibration of (model, width); :class:`CalibrationMissing` when there is none."""
    path = calibration_path(model_name, width)
    if not path.exists():
        flag = "" if width == 1.0 else f" --width {width:g}"
        raise CalibrationMissing(f"no calibration of {model_name} (width {width:g}) at {path}: run "
                                 f"`dynamix calibrate --model {model_name}{flag}` to measure one on this machine")
    return read_calibration(path)
