"""The surrogate's measured accuracy: the mean test-accuracy curves of constant-batch runs, by epoch and
global batch (a static sweep; ``sim.table_policy: lbbsp`` takes some rows from LB-BSP's runs,
:mod:`dynamix.evaluation.surrogate_fit`).

``sim.learning: measured`` (:mod:`dynamix.sim.progress`, "Measured accuracy") gives the surrogate's test
accuracy from a table instead of the fitted power law. :func:`accuracy_table` builds it from real-math
runs at constant global batches that train the profile's own epochs and schedule: per run, the tested
windows' accuracy interpolated onto a grid of :data:`GRID_STEP` epochs (held at the first test before
it), then the mean over the runs of each global batch.

:data:`MEMORY_EPOCHS` is the effective batch's relaxation time m, in epochs weighted by the learning-rate
schedule (:mod:`dynamix.sim.progress`). It is chosen on the `cpu-agent` profile's validation runs with
:func:`schedule_errors` (after the first decay, predicted - real), where the agents' moving runs must not be
read more kindly than the constant ones: the difference of the two biases was 0.86 points at m = 4 plain
epochs (the previous clock), and on the weighted clock 0.59 at m = 4, 0.47 at 8, 0.42 at 16, 0.41 at 32,
0.41 at m -> infinity: flat from 16 on, so 16. What is left is not the memory's (the same at any m).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

from dynamix.config import OptimConfig
from dynamix.errors import UserError
from dynamix.sim.progress import ProgressModel
from dynamix.train.optim import schedule_factor

GRID_STEP = 0.25
"""Epochs between the table's columns."""
MEMORY_EPOCHS = 16.0
"""m of the effective batch, in schedule-weighted epochs (module docstring)."""
MEMORY_CLOCK = "schedule-weighted epochs"
"""What m counts: recorded with the table, so a table fitted on another clock is refitted."""
BETWEEN = (96, 160, 192)
"""Per-worker batches the table's sweep adds to ``experiments.baselines.batch_sizes``: where a time to
target is won or lost. On the `cpu` workload the final accuracy is flat up to about 512 samples and
falls past 768 (0.617 at 512, 0.605 at 768, 0.592 at 1024 on the held-out clusters' runs), and the
target sits at 0.605-0.614: interpolated across the octave 512-1024 alone, 640 samples came out at
0.609 where its runs end at 0.612-0.626."""


def sweep(batch_sizes: tuple[int, ...]) -> list[int]:
    """The per-worker batches of the table's static sweep: ``batch_sizes`` and :data:`BETWEEN`."""
    return sorted(set(batch_sizes) | set(BETWEEN))


def seed_plan(batch_sizes: tuple[int, ...], seeds: int, table_seeds: int = 0,
              table_seed_batches: tuple[int, ...] = ()) -> dict[int, int]:
    """Seeds per per-worker batch of the table's sweep (:func:`sweep` of ``batch_sizes``): ``table_seeds``
    (when > 0) at ``table_seed_batches`` (every batch when empty), ``seeds`` elsewhere.

    More seeds where the agent decides: a row's mean over 5 seeds is off by about 0.3 points, and whether
    a batch clears the target after the first learning-rate drop is decided by gaps of that size (on the
    `cpu` workload the 5-seed table had 384 samples 0.55 points above, and 512 and 640 samples 0.4
    points below, the mean of the 170 real runs at those batches on other clusters)."""
    batches = sweep(batch_sizes)
    unknown = sorted(set(table_seed_batches) - set(batches))
    if unknown:
        raise TableError(f"sim.table_seed_batches = {list(table_seed_batches)}: {unknown} not in the table's sweep "
                         f"{batches}")
    extra = table_seeds if table_seeds > 0 else seeds
    return {b: extra if (not table_seed_batches or b in table_seed_batches) else seeds for b in batches}


class TableError(UserError, ValueError):
    """The runs cannot make a table: no run at a constant global batch with a test."""


def _curves(runs: pd.DataFrame, epochs: float) -> tuple[np.ndarray, dict[int, list[np.ndarray]]]:
    """(epochs grid, global batch -> the test-accuracy curves on the grid of its runs) of the runs in
    ``runs`` whose global batch never moves and that have a test."""
    grid = np.round(np.arange(0.0, epochs + GRID_STEP / 2, GRID_STEP), 6)
    curves: dict[int, list[np.ndarray]] = {}
    for _, run in runs.groupby("run_id", sort=False):
        windows = run.drop_duplicates("window").sort_values("window")
        tested = windows.dropna(subset=["test_acc"])
        batches = windows["global_batch"].unique()
        if len(batches) != 1 or tested.empty:
            continue
        curves.setdefault(int(batches[0]), []).append(
            np.interp(grid, tested["epoch"].to_numpy(float), tested["test_acc"].to_numpy(float)))
    if not curves:
        raise TableError("the measured accuracy table needs runs at a constant global batch with a test; none given")
    return grid, curves


def _table(grid: np.ndarray,
           curves: dict[int, list[np.ndarray]]) -> tuple[tuple[float, ...], tuple[float, ...], np.ndarray]:
    """(epochs grid, log2 global batches, the mean of each batch's curves [batch][epoch])."""
    batches = sorted(curves)
    table = np.array([np.mean(curves[b], axis=0) for b in batches])
    return tuple(float(e) for e in grid), tuple(math.log2(b) for b in batches), table


def _spread(curves: dict[int, list[np.ndarray]]) -> np.ndarray:
    """The between-run standard deviation of each batch's curves [batch][epoch] (ddof 1; 0 for one run)."""
    return np.array([np.std(curves[b], axis=0, ddof=1) if len(curves[b]) > 1 else np.zeros_like(curves[b][0])
                     for b in sorted(curves)])


def accuracy_table(runs: pd.DataFrame, epochs: float) -> tuple[tuple[float, ...], tuple[float, ...], np.ndarray]:
    """(epochs grid, log2 global batches, mean test accuracy [batch][epoch]) of the runs in ``runs``
    (``runs.csv`` rows, one per worker and window) whose global batch never moves, over 0..``epochs``."""
    return _table(*_curves(runs, epochs))


def schedule_errors(model: ProgressModel, runs: pd.DataFrame, optim: OptimConfig,
                    memories: tuple[float, ...] = (0, 4, 8, 16, 32), after_epoch: float = 0.0) -> pd.DataFrame:
    """How well the table reads real runs whose batch moves, at each memory m in ``memories``.

    Per run of ``runs`` (``runs.csv`` rows) and m: the table's accuracy at every tested window's end,
    the effective batch relaxed window by window as the surrogate does (:meth:`ProgressModel.effective_log2b`,
    its clock the window's epochs times the schedule factor of its ``lr`` under ``optim``),
    against the run's test accuracy. Columns: ``run_id``, ``moving`` (its global batch changes),
    ``memory_epochs``, ``bias`` (mean predicted - real over the tests after ``after_epoch``), ``mae``
    and ``final_error`` (predicted - real at the last test). Read on a profile's validation runs: which m
    the schedules a policy takes would have the surrogate charge right."""
    rows = []
    for run_id, run in runs.groupby("run_id", sort=False):
        windows = run.drop_duplicates("window").sort_values("window")
        batch, epoch = windows["global_batch"].to_numpy(float), windows["epoch"].to_numpy(float)
        acc = windows["test_acc"].to_numpy(float)
        factor = schedule_factor(optim, windows["lr"].to_numpy(float), batch)
        tested = ~np.isnan(acc)
        if not tested.any():
            continue
        late, last = tested & (epoch >= after_epoch), np.flatnonzero(tested)[-1]
        for m in memories:
            at = dataclasses.replace(model, memory_epochs=float(m))
            eff, before, predicted = math.nan, 0.0, []
            for b, e, f in zip(batch, epoch, factor):
                eff, before = at.effective_log2b(eff, math.log2(b), (e - before) * f), e
                predicted.append(at.table_accuracy(e, eff))
            error = np.asarray(predicted) - acc
            rows.append({"run_id": run_id, "moving": len(set(batch)) > 1, "memory_epochs": float(m),
                         "bias": float(error[late].mean()) if late.any() else math.nan,
                         "mae": float(np.abs(error[late]).mean()) if late.any() else math.nan,
                         "final_error": float(error[last])})
    return pd.DataFrame(rows, columns=["run_id", "moving", "memory_epochs", "bias", "mae", "final_error"])


def with_table(model: ProgressModel, runs: pd.DataFrame, epochs: float,
               plan: dict[int, int] | None = None, sources: dict[int, str] | None = None) -> ProgressModel:
    """``model`` with the measured accuracy of ``runs`` over ``epochs`` epochs (:func:`accuracy_table`), its
    between-run spread, and :data:`MEMORY_EPOCHS` (on :data:`MEMORY_CLOCK`); the batches, the runs per
    batch, the seed ``plan`` (:func:`seed_plan`) and what ran each per-worker batch's row (``sources``) go
    into its provenance."""
    grid, curves = _curves(runs, epochs)
    grid, log2b, table = _table(grid, curves)
    provenance = {**model.provenance, "measured": {
        "global_batches": [round(2 ** v) for v in log2b], "epochs": epochs,
        "memory_epochs": MEMORY_EPOCHS, "memory_clock": MEMORY_CLOCK,
        "final_accuracy": [round(float(v), 4) for v in table[:, -1]],
        "runs": [len(curves[b]) for b in sorted(curves)]}}
    if plan is not None:
        provenance["measured"]["seed_plan"] = {str(b): n for b, n in sorted(plan.items())}
    if sources is not None:
        provenance["measured"]["sources"] = {str(b): s for b, s in sorted(sources.items())}
    return dataclasses.replace(model, acc_epochs=grid, acc_log2b=log2b, memory_epochs=MEMORY_EPOCHS,
                               acc_table=tuple(tuple(round(float(v), 6) for v in row) for row in table),
                               acc_spread=tuple(tuple(round(float(v), 6) for v in row) for row in _spread(curves)),
                               provenance=provenance)
