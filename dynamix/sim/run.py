"""One simulated training run under a batch-size policy: ``dynamix simulate``.

    dynamix simulate --cluster clusters/mixed-gpu.yaml --policy static:64 --profile smoke \\
        --out results/tmp/sim

The loop is the one every backend runs: ``policy.reset(ctx)``, ``policy.initial(ctx)``, then per
window ``cluster.run_window(sizes, lr_scale)`` and ``policy.decide(workers, glob)`` until the budget
is spent (before ``reset`` the simulator offers the policy its :class:`~dynamix.sim.foresight.ClusterForesight`,
which only simulator-only policies read), each decision checked as the engine checks it (length, ``batch`` bounds, lr_scale > 0).
The result is a tidy frame with columns :data:`dynamix.metrics.schema.RUNS_COLUMNS`, one row
per (window, rank), ``backend = "sim"`` (``"surrogate"`` under ``sim.backend: surrogate``, which runs
the fitted surrogate of :mod:`dynamix.sim.surrogate` instead of the model math). Same seed and spec give a bit-identical ``runs.csv``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd
import torch
from tqdm.auto import tqdm

from dynamix import io
from dynamix.cluster import ClusterSpec
from dynamix.cluster.costmodel import CostModel
from dynamix.config import Config
from dynamix.data import Cifar10
from dynamix.metrics.schema import RUNS_COLUMNS, window_rows
from dynamix.policies.base import BatchSizePolicy, Bounds, PolicyContext, check_decision, check_first_decision
from dynamix.sim import progress
from dynamix.sim.cluster import ClusterClock, VirtualCluster
from dynamix.sim.foresight import ClusterForesight
from dynamix.sim.surrogate import SurrogateCluster

log = logging.getLogger(__name__)


def virtual_cluster(spec: ClusterSpec, cfg: Config, data: Cifar10 | None = None, seed: int | None = None,
                    cost: CostModel | None = None, model: progress.ProgressModel | None = None,
                    seed_spread: bool = False) -> ClusterClock:
    """The run's cluster: the fitted surrogate (:mod:`dynamix.sim.surrogate`, ``seed_spread`` as there) when
    ``sim.backend`` is ``surrogate`` (``model``, else the one ``cfg`` names, read from its file), else the
    real-math simulator."""
    if cfg.sim.backend == "surrogate":
        return SurrogateCluster(spec, cfg, model or progress.for_config(cfg), seed=seed, cost=cost,
                                seed_spread=seed_spread)
    return VirtualCluster(spec, cfg, data=data, seed=seed, cost=cost)


def policy_context(cluster: ClusterClock, cfg: Config, seed: int) -> PolicyContext:
    """What the policy is told before the first window (from ``batch``, ``optim`` and the data)."""
    return PolicyContext(
        n_workers=cluster.n_workers,
        initial_batch_sizes=(cfg.batch.initial,) * cluster.n_workers,
        bounds=Bounds(cfg.batch.min, cfg.batch.max),
        actions=cfg.batch.actions,
        window=cfg.batch.window,
        optimizer=cfg.optim.name,
        dataset_size=cluster.n_train,
        seed=seed,
        lr_scaling=cfg.optim.lr_scaling,
        base_batch=cfg.optim.base_batch,
        epochs=cfg.train.horizon_epochs,
        base_lr=cfg.optim.lr,
    )


def run_id(spec: ClusterSpec, policy: BatchSizePolicy, seed: int) -> str:
    """Deterministic id (no timestamps): reruns overwrite rather than pile up."""
    return run_prefix(spec) + f"{policy.name}-seed{seed}".replace("/", "_").replace(":", "-")


def run_prefix(spec: ClusterSpec) -> str:
    """What the ids of every run on ``spec`` start with (:func:`run_id`)."""
    return f"sim-{spec.name}-".replace("/", "_").replace(":", "-")


def backend_label(cfg: Config) -> str:
    """The ``backend`` column of a simulated run's rows: ``surrogate`` under ``sim.backend: surrogate``, else ``sim``."""
    return "surrogate" if cfg.sim.backend == "surrogate" else "sim"


Decisions = list[tuple[tuple[int, ...], float]]
"""A run's decision trace: per window, the batch sizes and learning-rate scale it ran at (the arguments of
``run_window``, after :func:`~dynamix.policies.base.check_decision`)."""


def simulate(spec: ClusterSpec, cfg: Config, policy: BatchSizePolicy, seed: int,
             out_dir: str | Path | None = None, progress: bool = True, data: Cifar10 | None = None,
             cost: CostModel | None = None, trace: Decisions | None = None) -> pd.DataFrame:
    """Train ``cfg.model`` on the virtual cluster under ``policy``; rows of ``runs.csv``. ``trace``: a list
    that receives the run's decisions (:data:`Decisions`; the run cache keeps them,
    :mod:`dynamix.evaluation.replay`)."""
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    cluster = virtual_cluster(spec, cfg, data=data, seed=seed, cost=cost)
    policy.foresee(ClusterForesight(cluster))
    frame = drive(cluster, spec, cfg, policy, seed, backend_label(cfg), progress=progress, trace=trace)
    if out_dir is not None:
        out = Path(out_dir)
        io.write_csv(frame, out / "runs.csv")
        log.info("wrote %d rows to %s", len(frame), out / "runs.csv")
    return frame


def drive(cluster, spec: ClusterSpec, cfg: Config, policy: BatchSizePolicy, seed: int, backend: str,
          progress: bool = True, trace: Decisions | None = None) -> pd.DataFrame:
    """The run's loop (module docstring) on ``cluster``: a :class:`ClusterClock`, or anything with its
    ``n_workers``, ``n_train``, ``total_iters``, ``iteration``, ``done`` and ``run_window`` (a recorded
    run, :class:`dynamix.evaluation.replay.Recorded`); the rows, labelled ``backend``."""
    ctx = policy_context(cluster, cfg, seed)
    policy.reset(ctx)
    unmet = policy.unmet_request(ctx.n_workers, ctx.bounds)
    if unmet:
        log.warning("%s on %s: %s", policy.name, spec.name, unmet)
    decision = check_first_decision(policy.initial(ctx), ctx.n_workers, ctx.bounds, ctx.dataset_size)
    key = {"run_id": run_id(spec, policy, seed), "backend": backend, "policy": policy.name, "seed": seed}
    rows: list[dict] = []
    bar = tqdm(total=cluster.total_iters, desc=f"sim {spec.name} {policy.name}", unit="it",
               disable=not progress, mininterval=1.0)
    while not cluster.done:
        before = cluster.iteration
        if trace is not None:
            trace.append((decision.batch_sizes, decision.lr_scale))
        workers, glob = cluster.run_window(decision.batch_sizes, decision.lr_scale)
        rows.extend(window_rows(key, glob, workers))
        bar.update(cluster.iteration - before)
        bar.set_postfix(B=glob.global_batch, test_acc=f"{glob.test_acc:.3f}", t=f"{glob.elapsed_s:.0f}s")
        decision = check_decision(policy.decide(workers, glob), ctx.n_workers, ctx.bounds)
    bar.close()
    return pd.DataFrame(rows, columns=RUNS_COLUMNS)
