"""Fit the simulator's surrogate of learning to the experiments' workload (``dynamix fit-surrogate``).

:func:`fit` runs the static sweep ``experiments.baselines.batch_sizes`` on
``experiments.baselines.cluster`` with the real model math through the evaluation runner (the
experiments' workload, each run :data:`FIT_EPOCHS` times their epoch budget, a test every window, the
runs kept in a run cache), fits a :class:`~dynamix.sim.progress.ProgressModel` to their windows
(:mod:`dynamix.sim.progress_fit`) and writes it as a JSON artifact with its provenance: the workload,
profile, config hash, the runs used, the fit's residuals and the git sha. With ``sim.learning:
measured`` it also runs the sweep, with the batches of :data:`dynamix.sim.measured.BETWEEN` added, at
the experiments' own epochs, schedule and seeds (the baselines stage's runs come from the profile's run
cache when they are there) and gives the model their mean test accuracy (:mod:`dynamix.sim.measured`).

:func:`on_fitted` gives the policy-training stage and transfer the config that trains on the fitted
surrogate of the policy's workload, fitting it first when needed.

The model and its artifact are the simulator's (:mod:`dynamix.sim.progress`,
:class:`~dynamix.sim.surrogate.SurrogateCluster`); this module sits in the evaluation layer because
its runs go through the evaluation runner and its run cache. Its check against the real-math
simulator: :mod:`dynamix.evaluation.validate_surrogate`.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pandas as pd

from dynamix import cluster as clusters
from dynamix import paths
from dynamix.config import Config, with_overrides
from dynamix.data import load_cifar10
from dynamix.evaluation.plan import run_cache, sim_config
from dynamix.evaluation.runner import evaluate
from dynamix.paths import git_sha
from dynamix.sim import measured, progress
from dynamix.sim.progress_fit import fit_progress

log = logging.getLogger(__name__)


FIT_EPOCHS = 2.0
"""The fitting runs train this many times the experiments' epoch budget: a time-budgeted run at a
larger, more efficient batch gets further than its reference run, and the curves must reach there
(fitted on 1x, the test-accuracy curve saturated early and set a parameter-server cluster's target
7 % low)."""


def fit_config(cfg: Config) -> Config:
    """The config the fitting runs use: the experiments' workload, :data:`FIT_EPOCHS` times their epoch
    budget, a test every window, the real model math."""
    run_cfg = sim_config(cfg)
    return with_overrides(run_cfg, {"train": {"eval_every": cfg.batch.window, "epochs": FIT_EPOCHS * run_cfg.train.epochs}})


def fit(cfg: Config, out_dir: str | Path | None = None, seeds: int = 1, progress_bar: bool = True) -> Path:
    """Fit the surrogate of ``cfg``'s experiments workload; returns the artifact's path
    (:func:`dynamix.sim.progress.default_path` under ``out_dir``, default ``results/surrogate``)."""
    run_cfg = fit_config(cfg)
    base = cfg.experiments.baselines
    spec = clusters.load(base.cluster)
    policies = [f"static:{b}" for b in base.batch_sizes]
    out = Path(out_dir) if out_dir is not None else paths.RESULTS / "surrogate"
    runs, summary = evaluate([spec], policies, run_cfg, seeds, out_dir=None, progress=progress_bar,
                             cache_dir=run_cache(out / "fit"), budget="epochs", jobs=cfg.experiments.jobs)
    n_train = len(load_cifar10(run_cfg.data).train_y)
    model = fit_progress(runs, run_cfg, n_train, b_ref=spec.n_workers * cfg.batch.initial)
    provenance = {
        **model.provenance, "workload": model.workload, "profile": cfg.profile, "config_hash": run_cfg.hash(),
        "git_sha": git_sha(), "cluster": spec.name, "policies": policies, "seeds": seeds,
        "runs": summary[["cluster", "policy", "seed", "final_accuracy", "total_time_s", "iterations"]]
        .to_dict("records"),
    }
    model = dataclasses.replace(model, provenance=provenance)
    if cfg.sim.learning == "measured":
        table_cfg = sim_config(cfg)
        rows = table_rows(cfg)
        sweeps: dict[tuple[str, int], list[str]] = {}  # one sweep per cluster and seed count: the cache keeps the shared seeds
        for cluster, policy, n_seeds in rows.values():
            sweeps.setdefault((cluster, n_seeds), []).append(policy)
        table_runs = []
        for (cluster, n_seeds), table_policies in sweeps.items():
            batch_runs, _ = evaluate([clusters.load(cluster)], table_policies, table_cfg, n_seeds, out_dir=None,
                                     progress=progress_bar, cache_dir=run_cache(out), budget="epochs",
                                     jobs=cfg.experiments.jobs)
            table_runs.append(batch_runs)
        plan = {b: n for b, (_, _, n) in rows.items()}
        model = measured.with_table(model, pd.concat(table_runs, ignore_index=True), table_cfg.train.epochs,
                                    plan, sources(rows))
    path = progress.save(model, progress.default_path(run_cfg, out))
    fit_rms = provenance["fit"]["rms"]
    log.info("surrogate of %s fitted on %d runs (kappa %.3g, B_noise %.0f, test accuracy rms %.4f): %s",
             model.workload["model"], len(summary), model.kappa, model.noise_scale, fit_rms["test_acc"], path)
    return path


def table_plan(cfg: Config) -> dict[int, int]:
    """Seeds per per-worker batch of ``cfg``'s measured table (:func:`dynamix.sim.measured.seed_plan`)."""
    return measured.seed_plan(cfg.experiments.baselines.batch_sizes, cfg.experiments.seeds, cfg.sim.table_seeds,
                              cfg.sim.table_seed_batches)


def table_rows(cfg: Config) -> dict[int, tuple[str, str, int]]:
    """Per per-worker batch b of ``cfg``'s measured table: (cluster, policy, seeds) of its runs.
    ``static:b`` on ``experiments.baselines.cluster``, or, with ``sim.table_policy: lbbsp`` at the rows of
    ``sim.table_seed_batches`` (every row when empty), ``lbbsp:batch=b x N`` on ``sim.table_cluster`` (N
    its workers); a table cluster the experiments validate or judge on is refused, naming it."""
    sim, base = cfg.sim, cfg.experiments.baselines.cluster
    plan = table_plan(cfg)
    if sim.table_policy == "static":
        return {b: (base, f"static:{b}", n) for b, n in plan.items()}
    cluster = sim.table_cluster or base
    spec = clusters.load(cluster)
    inf = cfg.experiments.inference
    judged = {clusters.load(c).name: c
              for c in (*inf.clusters, *inf.tune_clusters, *cfg.experiments.ablation.heldout)}
    if spec.name in judged:
        raise measured.TableError(f"sim.table_cluster = {cluster}: {spec.name} is a cluster the experiments judge "
                                  f"or validate on ({judged[spec.name]}); the table must come from another")
    decide = set(sim.table_seed_batches) or set(plan)
    base_workers = clusters.load(base).n_workers
    rows = {b: (cluster, f"lbbsp:batch={b * spec.n_workers}", n) if b in decide else (base, f"static:{b}", n)
            for b, n in plan.items()}
    global_batches = [b * (spec.n_workers if b in decide else base_workers) for b in rows]
    if len(set(global_batches)) < len(global_batches):  # a row is one global batch: two sources would pool
        raise measured.TableError(f"sim.table_cluster = {cluster}: its {spec.n_workers} workers give the rows "
                                  f"{sorted(decide & set(plan))} global batches that the static rows on {base} "
                                  f"({base_workers} workers) also have: {sorted(global_batches)}")
    return rows


def sources(rows: dict[int, tuple[str, str, int]]) -> dict[int, str]:
    """Per per-worker batch, what ran its row: ``policy on cluster`` (:func:`table_rows`)."""
    return {b: f"{policy} on {cluster}" for b, (cluster, policy, _) in rows.items()}


def stale_table(model: progress.ProgressModel, cfg: Config) -> str:
    """Why a fitted artifact's measured table is not the one ``cfg`` asks for ("" when it is): another
    memory (:data:`dynamix.sim.measured.MEMORY_EPOCHS` and its clock), no spread between seeds, another
    seed plan or other runs behind a row (an artifact from before these were recorded ran every batch at
    ``experiments.seeds``, statically on ``experiments.baselines.cluster``)."""
    if cfg.sim.learning != "measured":
        return ""
    recorded = model.provenance.get("measured", {})
    memory = (recorded.get("memory_epochs"), recorded.get("memory_clock", "epochs"))
    if memory != (measured.MEMORY_EPOCHS, measured.MEMORY_CLOCK):
        return f"its table's memory {memory[0]} {memory[1]}, not {measured.MEMORY_EPOCHS} {measured.MEMORY_CLOCK}"
    rows = table_rows(cfg)
    if not model.acc_spread and max(n for _, _, n in rows.values()) > 1:
        return "its table has no spread between seeds"
    want = {str(b): n for b, (_, _, n) in sorted(rows.items())}
    have = recorded.get("seed_plan", {b: cfg.experiments.seeds for b in want})
    if have != want:
        return f"its table's seeds per batch {have}, not {want}"
    want_src = {str(b): s for b, s in sorted(sources(rows).items())}
    base = cfg.experiments.baselines.cluster
    have_src = recorded.get("sources", {b: f"static:{b} on {base}" for b in want_src})
    return "" if have_src == want_src else f"its table's rows from {have_src}, not {want_src}"


def on_fitted(cfg: Config, root: str | Path) -> Config:
    """``cfg`` training on the fitted surrogate of the workload its policy trains on when its policy
    trains on the surrogate (``rl.world``, else ``sim.backend``) and ``sim.surrogate`` names none:
    fitted (:func:`fit`, the static sweep with the model math) into ``root/surrogate/``, or reused when a
    valid fit of that workload is there; ``cfg`` unchanged otherwise."""
    from dynamix.rl.env import training_config

    trained_on = training_config(cfg)
    if trained_on.sim.backend != "surrogate" or cfg.sim.surrogate:
        return cfg
    fit_cfg = with_overrides(cfg, {"experiments": {"model": trained_on.model.name, "width": trained_on.model.width},
                                   "optim": dataclasses.asdict(trained_on.optim)})
    path = progress.default_path(fit_config(fit_cfg), Path(root) / "surrogate")
    try:
        fitted = progress.load(path, fit_config(fit_cfg))
        if fitted.measured != (cfg.sim.learning == "measured"):
            raise progress.SurrogateArtifactError(f"{path}: not fitted with sim.learning = "
                                                  f"{cfg.sim.learning}")
        stale = stale_table(fitted, cfg)
        if stale:
            raise progress.SurrogateArtifactError(f"{path}: {stale}")
    except progress.SurrogateArtifactError:
        path = fit(fit_cfg, path.parent)
    log.info("policy training on the surrogate %s", path)
    return with_overrides(cfg, {"sim": {"surrogate": paths.relative(path)}})
