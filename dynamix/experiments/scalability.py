"""Scalability (paper: "DYNAMIX maintains the best performance as cluster size increases to 32 nodes").

The worker mix of ``experiments.scalability.cluster`` is repeated to each size in ``workers``
(:func:`scaled`), so a 32-worker cluster has the same proportions of fast and slow workers as the
4-worker one. Every policy in ``policies`` trains the experiments' workload under the same budget at
each size (``evaluation.budget``: the static ``batch.initial`` run's time for ``experiments.epochs`` on that
size, or those epochs; a larger cluster takes fewer, larger iterations). With
``experiments.scalability.iterations`` set, the budget is that run's time for that many iterations
instead, so every size trains long enough for a time to target to mean something (an epoch budget
leaves a 32-worker cluster a handful of iterations). Time to target as in
:mod:`dynamix.evaluation.targets`, with the target set per cluster size.

With the arbitrator's cost modelled (``arbitrator.overhead_ms``, ``arbitrator.overhead_ms_per_worker``:
:class:`~dynamix.cluster.costmodel.CostModel`'s A(N), added to every window), ``summary.json`` also
reports per size what a window of arbitration costs beside the window's iterations
(``arbitration_by_workers``); without it the outputs are as before.

Outputs: ``runs.csv``, ``summary.csv`` (n_workers, policy, seed, time to target, final accuracy,
throughput), ``summary.json`` (means and t intervals per size and policy; the best policy per size),
``clusters/`` (the generated specs), ``manifest.json``. Figure: time to target and throughput
against workers.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pandas as pd
import yaml

from dynamix import cluster, io
from dynamix.cluster import ClusterSpec
from dynamix.cluster.costmodel import CostModel
from dynamix.config import Config, ConfigError
from dynamix.evaluation import plan, policy_names, stats
from dynamix.evaluation.runner import SimTask, run_simulations
from dynamix.evaluation.runs import run_summary
from dynamix.evaluation.targets import with_targets
from dynamix.pipeline.manifest import read_manifest, write_manifest
from dynamix.plots import scalability as plots
from dynamix.sim.cluster import calibrated_cost

log = logging.getLogger(__name__)

NAME = "scalability"
KEYS = ["cluster", "n_workers", "policy"]
VALUES = ["time_to_target_s", "final_accuracy", "throughput_samples_per_s", "total_time_s", "iterations"]


def scaled(spec: ClusterSpec, n: int) -> ClusterSpec:
    """``spec`` with its workers cycled to ``n`` (worker j is worker j mod N of the original); events
    keep their worker indices (those beyond ``n`` are dropped); named ``<name>-x<n>``."""
    if n < 1:
        raise ConfigError(f"experiments.scalability.workers entry {n} is out of range: must be >= 1")
    workers = tuple(spec.workers[j % spec.n_workers] for j in range(n))
    events = tuple(e for e in spec.events if all(w < n for w in e.workers))
    return dataclasses.replace(spec, name=f"{spec.name}-x{n}", workers=workers, events=events)


def run(cfg: Config, out_dir: str | Path) -> dict:
    out = Path(out_dir)
    e = cfg.experiments.scalability
    base = cluster.load(e.cluster)
    specs = [scaled(base, n) for n in e.workers]
    for spec in specs:  # provenance: the exact clusters simulated
        path = out / "clusters" / f"{spec.name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(cluster.to_yaml_dict(spec), sort_keys=False))
    sim_cfg = plan.sim_config(cfg, **({"train": {"max_iters": e.iterations}} if e.iterations else {}))
    run_cfgs = plan.budgeted(cfg, [(spec, sim_cfg) for spec in specs], out)
    pdir = policy_names.policy_dir(out)
    tasks = [
        SimTask(spec, run_cfg, policy_names.resolve_policy(p, pdir, cfg.experiments.policy_training.name),
                seed, (("n_workers", spec.n_workers),))
        for spec, run_cfg in zip(specs, run_cfgs) for p in e.policies for seed in plan.seeds(cfg)
    ]  # fmt: skip
    runs = run_simulations(tasks, cfg.experiments.jobs, desc="scalability", cache=plan.run_cache(out))
    per_run = with_targets(run_summary(runs, KEYS), runs, cfg, ["n_workers"])
    io.write_csv(runs, out / "runs.csv")
    io.write_csv(per_run, out / "summary.csv")
    agg = stats.aggregate(per_run, KEYS, VALUES, cfg.experiments.ci)
    best = {
        int(n): rows.loc[rows["time_to_target_s"].fillna(float("inf")).idxmin(), "policy"]
        for n, rows in agg.groupby("n_workers")
    }
    summary = {"base_cluster": base.name, "workers": list(e.workers), "best_policy_by_workers": best,
               "by_workers_and_policy": agg.to_dict(orient="records")}  # fmt: skip
    if cfg.arbitrator.overhead_ms or cfg.arbitrator.overhead_ms_per_worker:
        summary["arbitration_by_workers"] = arbitration(per_run, calibrated_cost(sim_cfg), cfg.batch.window)
    io.write_json(out / "summary.json", summary)
    write_manifest(out, cfg, NAME, {"cluster_spec": e.cluster})
    return summary


def arbitration(per_run: pd.DataFrame, cost: CostModel, k: int) -> dict[int, dict[str, float]]:
    """Per cluster size: one window's arbitration A(N) (ms), the window's k iterations (ms, the mean over
    runs with A(N) taken out) and A(N)'s share of the window."""
    out = {}
    for n, rows in per_run.groupby("n_workers"):
        a_ms = cost.arbitration_window_ms(int(n))
        windows = -(-rows["iterations"] // k)  # the last window may be short
        iters_ms = float(((rows["total_time_s"] * 1e3 - windows * a_ms) / windows).mean())
        out[int(n)] = {"arbitration_ms": round(a_ms, 3), "iterations_ms": round(iters_ms, 3),
                       "arbitration_share": round(a_ms / (a_ms + iters_ms), 4)}
    return out


def figures(out_dir: str | Path, fig_dir: str | Path) -> list[Path]:
    out, fig = Path(out_dir), Path(fig_dir)
    per_run = pd.read_csv(out / "summary.csv")
    e = read_manifest(out)["config"]["experiments"]
    agg = stats.aggregate(per_run, ["n_workers", "policy"], VALUES, e["ci"])
    plots.scalability(agg, fig / "scalability")
    return [fig / "scalability.png"]
