"""Sim-to-real for the agent's advantage: the same policies on the real engine and on the simulator.

Every policy comparison of the experiments runs on the simulator. This module checks that the
*ranking and ratios* hold on the real distributed engine: each policy of
``experiments.sim2real.policies`` (the static sweep, LB-BSP and the agent) trains the experiments'
workload on ``experiments.sim2real.cluster`` for ``experiments.sim2real.epochs`` epochs, for every
seed, twice:

- on the engine (:func:`dynamix.engine.run_local`: one torchrun process per worker on this machine,
  speeds emulated by time dilation, communication by the cost model's floor), batch sizes served by a
  gRPC arbitrator on loopback (:func:`dynamix.rpc.local.local_server`), time = wall clock;
- on the simulator (:func:`dynamix.sim.run.simulate`), its compute constants measured by the engine's
  own workers (:func:`dynamix.evaluation.validate_sim.engine_calibration`, at b/2 and 2b around ``batch.initial``)
  and the host's noise added to the spec's jitter, as ``dynamix validate-sim`` does.

Per backend the target is ``evaluation.target_fraction`` x the best policy's mean final accuracy
(:func:`dynamix.evaluation.targets.set_targets`) and each run's time to target is interpolated
between tests, censored at the backend's longest run when never reached
(:func:`~dynamix.evaluation.targets.censored_time`). The ratios are per seed:
T_agent / median over the static sweep of T_static, and T_agent / T_other for every adaptive policy;
geometric mean and t interval over seeds per backend (:mod:`dynamix.evaluation.stats`).

Wall-clock times need quiet cores: run it alone on the machine (``dynamix sim2real``).

Outputs in ``out_dir``: ``runs.csv`` (both backends, one row per window and rank, ``backend`` column),
``summary.csv`` (one row per backend, policy and seed: final_accuracy, total_time_s, iterations,
target_accuracy, time_to_target_s), ``ratios.csv`` (backend, reference, estimate, ci_lo, ci_hi,
n_seeds, per-seed values), ``calibration.json`` (the engine-measured cost constants).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import shutil
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

from dynamix import cluster as clusters
from dynamix import io
from dynamix.cluster.costmodel import CostModel
from dynamix.config import Config, with_overrides
from dynamix.evaluation import stats
from dynamix.evaluation.runs import run_summary
from dynamix.evaluation.targets import censored_time, set_targets
from dynamix.models import build_model, gradient_bytes
from dynamix.policies.base import make_live_policy, make_policy
from dynamix.sim.run import simulate
from dynamix.evaluation.validate_sim import engine_calibration

log = logging.getLogger(__name__)

BACKENDS = ("engine", "sim")


def run_config(cfg: Config, seed: int, epochs: float) -> Config:
    """``cfg`` for one compared run: ``epochs`` of the training set, a test every window on the whole
    test split, one torch thread per worker, no mid-run checkpoints."""
    return with_overrides(cfg, {"train": {
        "seed": seed, "epochs": epochs, "max_iters": 0, "max_time_s": 0.0, "eval_every": cfg.batch.window,
        "eval_samples": cfg.experiments.eval_samples, "threads": 1, "checkpoint_every": 10**9}})


def engine_run(cfg: Config, spec: clusters.ClusterSpec, policy_spec: str, out_dir: Path) -> pd.DataFrame:
    """One fresh engine run whose batch sizes come from an arbitrator serving ``policy_spec``."""
    from dynamix.engine import run_local
    from dynamix.rpc.arbitrator import RunSettings
    from dynamix.rpc.local import local_server

    if out_dir.exists():
        shutil.rmtree(out_dir)  # a measurement: never resume or append to an earlier run
    with local_server(make_live_policy(policy_spec), RunSettings.from_config(cfg)) as server:
        run_local(cfg, spec, None, out_dir, spec.n_workers, method="torchrun", arbitrator=server.target,
                  timeout_s=3600)
    return pd.read_csv(out_dir / "runs.csv")


def ratios(summary: pd.DataFrame, agent: str, ci: float = 0.95) -> pd.DataFrame:
    """Per backend: the agent's per-seed time-to-target ratio to the median static and to every other
    adaptive policy, geometric mean and t interval over seeds (lower is better for the agent)."""
    rows = []
    for backend, g in summary.groupby("backend", sort=False):
        t = stats.paired(g, censored_time(g), ["backend"])
        static = [p for p in t.columns if str(p).startswith("static:")]
        refs = {"median static": t[static].median(axis=1)} if static else {}
        refs.update({p: t[p] for p in t.columns if p != agent and not str(p).startswith("static:")})
        for ref, den in refs.items():
            r = (t[agent] / den).to_numpy(dtype=float)
            est = stats.ratio_interval(r, ci)
            rows.append({"backend": backend, "reference": ref, **est,
                         "per_seed": ";".join(f"{v:.4f}" for v in r)})
    return pd.DataFrame(rows)


def run(cfg: Config, out_dir: str | Path, policies: dict[str, str], progress: bool = True) -> dict:
    """Engine calibration, then every (policy, seed) on the engine and the simulator; writes the
    module's outputs and returns the summary (ratios per backend). ``policies`` maps each label of
    ``experiments.sim2real.policies`` to its spec (``dynamix`` -> ``dynamix:<zip>``)."""
    e = cfg.experiments.sim2real
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    spec = clusters.load(e.cluster)
    seeds = [cfg.train.seed + i for i in range(cfg.experiments.seeds)]
    base = run_config(cfg, seeds[0], e.epochs)
    b0 = cfg.batch.initial
    a_ms, c_ms, host_jitter = engine_calibration(base, spec.n_workers, b0, out / "calibration", iters=40,
                                                 window=cfg.batch.window)
    cost = CostModel(a_ms, c_ms, gradient_bytes(build_model(base.model.name, base.model.width)))
    io.write_json(out / "calibration.json", {"a_ms": a_ms, "c_ms_per_sample": c_ms, "host_jitter": host_jitter,
                                             "n_workers": spec.n_workers, "batch_sizes": [b0 // 2, 2 * b0]})
    sim_spec = dataclasses.replace(spec, jitter=math.hypot(spec.jitter, host_jitter))
    frames = []
    todo = [(label, policies[label], s) for label in e.policies for s in seeds]
    for label, p, seed in tqdm(todo, desc="sim2real", unit="pair", disable=not progress):
        rcfg = run_config(cfg, seed, e.epochs)
        eng = engine_run(rcfg, spec, p, out / "engine" / io.slug(label) / f"seed{seed}")
        sim = simulate(sim_spec, rcfg, make_policy(p), seed, progress=False, cost=cost)
        for backend, f in zip(BACKENDS, (eng, sim)):
            frames.append(f.assign(backend=backend, policy=label, seed=seed, cluster=f"{spec.name}/{backend}",
                                   run_id=f"{backend}__{io.slug(label)}__s{seed}"))
    runs = pd.concat(frames, ignore_index=True)
    per_run = run_summary(runs, ["backend", "cluster", "policy"])
    per_run = set_targets(per_run, runs, cfg.evaluation.target_fraction, cfg.evaluation.target_accuracy)
    table = ratios(per_run, "dynamix", cfg.experiments.ci)
    io.write_csv(runs, out / "runs.csv")
    io.write_csv(per_run, out / "summary.csv")
    io.write_csv(table, out / "ratios.csv")
    summary = {"cluster": spec.name, "workload": f"{base.model.name}@{base.model.width:g}/{base.optim.name}", "epochs": e.epochs, "seeds": seeds, "policies": list(e.policies),
               "ratios": table.drop(columns="per_seed").to_dict(orient="records")}
    io.write_json(out / "summary.json", summary)
    return summary
