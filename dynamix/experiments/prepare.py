"""Data and calibration: the inputs every later stage relies on.

1. Loads the configured CIFAR-10 source (``data``), which decodes it into the tensor cache on first
   use, and records per-class counts: a silently unbalanced subset would skew every accuracy.
2. Calibrates the simulator's compute model t(b) = a_m + c_m b (:mod:`dynamix.sim.calibrate`) for
   every model the experiments simulate: the experiments' workload, the RL training workload (``rl.model``), and both
   sides of each transfer pair. A model that already has a calibration file is reused (DVC removes
   ``results/calibration`` before rerunning this stage, so ``dvc repro`` always measures afresh).

Outputs: ``summary.csv`` (one row per calibrated model: a_ms, c_ms_per_sample, R^2 and the measured
medians), ``summary.json`` (data counts, calibrations), ``manifest.json``; calibration JSONs in
``results/calibration/``. Figure: measured compute time per iteration against batch size with the fit.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import pandas as pd

from dynamix import io, plots
from dynamix.config import Config
from dynamix.data import load_cifar10
from dynamix.experiments import shared
from dynamix.experiments.manifest import write_manifest
from dynamix.sim.calibrate import calibrate, calibration_path, load_calibration

log = logging.getLogger(__name__)

NAME = "prepare"


def models_used(cfg: Config) -> list[tuple[str, float]]:
    """(name, width) of every model a simulated experiment trains, in first-use order: the
    experiments' workload, the RL training workload, both sides of every transfer pair."""
    workload = shared.sim_config(cfg).model
    used = [(workload.name, workload.width)]
    if cfg.rl.model:
        used.append((cfg.rl.model, cfg.rl.width or cfg.model.width))
    for pair in cfg.experiments.transfer.pairs:
        for side in shared.parse_pair(pair):
            used.append((side.model, side.width))
    return list(dict.fromkeys(used))


def run(cfg: Config, out_dir: str | Path) -> dict:
    out = Path(out_dir)
    data = load_cifar10(cfg.data)
    counts = {"train": data.counts("train"), "test": data.counts("test")}
    rows = []
    for name, width in models_used(cfg):
        cal = (load_calibration(name, width) if calibration_path(name, width).exists()
               else calibrate(name, width, device=cfg.train.device, amp=cfg.train.amp))
        rows.append({
            "model": name, "width": width, "a_ms": cal.a_ms, "c_ms_per_sample": cal.c_ms_per_sample,
            "r2": cal.r2, "threads": cal.threads, "gradient_bytes": cal.gradient_bytes,
            "batch_sizes": json.dumps(list(cal.batch_sizes)), "median_ms": json.dumps(list(cal.median_ms)),
        })  # fmt: skip
    table = pd.DataFrame(rows)
    io.write_csv(table, out / "summary.csv")
    summary = {
        "data_source": data.source,
        "n_train": int(len(data.train_y)),
        "n_test": int(len(data.test_y)),
        "class_counts": counts,
        "calibration": {f"{r['model']}-w{r['width']:g}": {k: r[k] for k in ("a_ms", "c_ms_per_sample", "r2")} for r in rows},
    }
    io.write_json(out / "summary.json", summary)
    write_manifest(out, cfg, NAME, {"calibrations": [dataclasses.asdict(load_calibration(n, w)) for n, w in models_used(cfg)]})
    return summary


def figures(out_dir: str | Path, fig_dir: str | Path) -> list[Path]:
    table = pd.read_csv(Path(out_dir) / "summary.csv")
    stem = Path(fig_dir) / "calibration"
    plots.calibration(table, stem)
    return [stem.with_suffix(".png")]
