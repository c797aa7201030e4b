"""Data and calibration: the inputs every later stage relies on.

1. Loads the configured CIFAR-10 source (``data``), which decodes it into the tensor cache on first
   use, and records per-class counts: a silently unbalanced subset would skew every accuracy.
2. Reports the simulator's compute model t(b) = a_m + c_m b (:mod:`dynamix.sim.calibrate`) of every
   model the experiments simulate: the experiments' workload, the RL training workload (``rl.model``),
   both sides of each transfer pair and the compression experiment's workloads. It reads the committed
   reference calibrations (``calibrations/``) and measures nothing, so every rerun of a commit has the
   same virtual clock; a missing one stops the stage with the ``dynamix calibrate`` command that makes it.

Outputs: ``summary.csv`` (one row per model: a_ms, c_ms_per_sample, R^2 and the measured medians),
``summary.json`` (data counts, calibrations), ``manifest.json`` (the full calibration records).
Figure: measured compute time per iteration against batch size with the fit.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import pandas as pd

from dynamix import io
from dynamix.config import CompressionExperiment, Config
from dynamix.data import load_cifar10
from dynamix.evaluation import plan
from dynamix.pipeline.manifest import write_manifest
from dynamix.plots import prepare as plots
from dynamix.sim.calibrate import load_calibration

log = logging.getLogger(__name__)

NAME = "prepare"


def models_used(cfg: Config) -> list[tuple[str, float]]:
    """(name, width) of every model a simulated experiment trains, in first-use order: the
    experiments' workload, the RL training workload, both sides of every transfer pair, the
    compression experiment's workloads."""
    workload = plan.sim_config(cfg).model
    used = [(workload.name, workload.width)]
    if cfg.rl.model:
        used.append((cfg.rl.model, cfg.rl.width or cfg.model.width))
    for pair in cfg.experiments.transfer.pairs:
        for side in plan.parse_pair(pair):
            used.append((side.model, side.width))
    compressed = CompressionExperiment.parse_workloads(cfg.experiments.compression.workloads)
    used.extend((model, width) for model, width, _ in compressed)
    return list(dict.fromkeys(used))


def run(cfg: Config, out_dir: str | Path) -> dict:
    out = Path(out_dir)
    data = load_cifar10(cfg.data)
    counts = {"train": data.counts("train"), "test": data.counts("test")}
    rows, cals = [], [load_calibration(name, width) for name, width in models_used(cfg)]
    for (name, width), cal in zip(models_used(cfg), cals):
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
    write_manifest(out, cfg, NAME, {"calibrations": [dataclasses.asdict(c) for c in cals]})
    return summary


def figures(out_dir: str | Path, fig_dir: str | Path) -> list[Path]:
    table = pd.read_csv(Path(out_dir) / "summary.csv")
    stem = Path(fig_dir) / "calibration"
    plots.calibration(table, stem)
    return [stem.with_suffix(".png")]
