"""DYNAMIX against every baseline (paper Sec. V: accuracy vs time, time to target, final accuracy).

For each held-out cluster (``experiments.inference.clusters``), each optimiser workload
(``optimizers``: SGD at ``optim.lr``, Adam at ``adam_lr``) and each seed, every policy in
``policies`` trains the experiments' workload on the simulator; ``dynamix`` is the policy of the
policy_training stage (``<results>/policies/<name>.zip``).

Time to target and the run budget follow :mod:`dynamix.rl.evaluate` (one definition for the
project): per cluster and workload, target = ``rl.target_fraction`` x the best policy's mean final
accuracy (or ``rl.target_accuracy`` when set); a run's time to target is when its test accuracy first
reaches it, interpolated between window ends (:func:`dynamix.rl.evaluate.time_to_target`; empty when
never reached); with ``rl.eval_budget: time`` every run has the
virtual time the static ``batch.initial`` run needs for ``experiments.epochs`` (:func:`common.budgeted`).

Then one end-to-end run of the real engine (``engine_iters`` iterations, 4 torchrun workers emulating
``engine_cluster``) whose batch sizes come from a gRPC arbitrator on 127.0.0.1 serving
``engine_policy``; ``summary.json`` records whether every window trained with the decided sizes.

Outputs: ``runs.csv``, ``summary.csv`` (per cluster, optimizer, policy, seed), ``summary.json`` (IQM
and bootstrap intervals per policy; DYNAMIX's ratios against the median static, LB-BSP and GNS from
:func:`dynamix.rl.evaluate.compare`), ``engine/`` (the engine run's runs.csv and summary),
``manifest.json``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from dynamix import cluster, plots
from dynamix.config import Config
from dynamix.experiments import common
from dynamix.experiments.policy_training import policy_dir

log = logging.getLogger(__name__)

NAME = "inference"
KEYS = ["cluster", "optimizer", "policy"]


def workload(cfg: Config, optimizer: str) -> Config:
    """The experiments' simulated config for one optimiser workload (Adam at ``adam_lr``)."""
    optim: dict = {"name": optimizer}
    if optimizer == "adam":
        optim["lr"] = cfg.experiments.inference.adam_lr
    return common.sim_config(cfg, optim=optim)


def with_targets(per_run: pd.DataFrame, runs: pd.DataFrame, cfg: Config, by: list[str]) -> pd.DataFrame:
    """``per_run`` with ``target_accuracy`` and ``time_to_target_s`` set by
    :func:`dynamix.rl.evaluate.set_targets` separately within each group of ``by`` (e.g. optimiser)."""
    from dynamix.rl.evaluate import set_targets

    parts = []
    for key, rows in per_run.groupby(by, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        mask = pd.Series(True, index=runs.index)
        for col, val in zip(by, key):
            mask &= runs[col] == val
        parts.append(set_targets(rows.assign(time_to_target_s=float("nan"), target_accuracy=float("nan")),
                                 runs[mask], cfg.rl.target_fraction, cfg.rl.target_accuracy))  # fmt: skip
    return pd.concat(parts).sort_index()


def run(cfg: Config, out_dir: str | Path) -> dict:
    from dynamix.rl.evaluate import compare

    out = Path(out_dir)
    e = cfg.experiments.inference
    pdir = policy_dir(out)
    specs = [cluster.load(c) for c in e.clusters]
    groups = [(spec, workload(cfg, opt), opt) for spec in specs for opt in e.optimizers]
    run_cfgs = common.budgeted(cfg, [(spec, wcfg) for spec, wcfg, _ in groups])
    tasks = [
        common.SimTask(spec, run_cfg, common.resolve_policy(p, pdir, cfg.experiments.policy_training.name),
                       seed, (("optimizer", opt),))
        for (spec, _, opt), run_cfg in zip(groups, run_cfgs) for p in e.policies for seed in common.seeds(cfg)
    ]  # fmt: skip
    runs = common.run_simulations(tasks, cfg.experiments.jobs, desc="inference")
    per_run = with_targets(common.run_summary(runs, KEYS), runs, cfg, ["optimizer"])
    common.write_csv(runs, out / "runs.csv")
    common.write_csv(per_run, out / "summary.csv")
    agg = common.aggregate_cfg(per_run, KEYS, ["time_to_target_s", "final_accuracy", "total_time_s"], cfg)
    ratios = pd.concat(
        [compare(rows, "dynamix").assign(optimizer=opt) for opt, rows in per_run.groupby("optimizer", sort=False)]
    ) if "dynamix" in set(per_run["policy"]) else pd.DataFrame()  # fmt: skip
    summary = {
        "policies": list(dict.fromkeys(per_run["policy"])),
        "n_runs": len(tasks),
        "by_policy": agg.to_dict(orient="records"),
        "dynamix_vs_baselines": ratios.to_dict(orient="records"),
    }
    if e.engine_iters > 0:
        summary["engine"] = engine_run(cfg, out / "engine", pdir)
    common.write_json(out / "summary.json", summary)
    common.write_manifest(out, cfg, NAME, {"clusters": list(e.clusters)})
    return summary


def engine_run(cfg: Config, out_dir: Path, pdir: Path) -> dict:
    """4 torchrun workers of the real engine, batch sizes decided by a gRPC arbitrator on loopback."""
    from dynamix.engine import run_local
    from dynamix.policies import make_policy
    from dynamix.rpc.arbitrator import RunSettings
    from dynamix.rpc.testing import local_server

    e = cfg.experiments.inference
    spec = cluster.load(e.engine_cluster)
    ecfg = common.with_overrides(common.sim_config(cfg), {
        "train": {"max_iters": e.engine_iters, "eval_every": max(1, e.engine_iters // 4),
                  "checkpoint_every": 10 * e.engine_iters},
    })  # fmt: skip
    policy = make_policy(common.resolve_policy(e.engine_policy, pdir, cfg.experiments.policy_training.name))
    decided: dict[int, tuple[int, ...]] = {}
    with local_server(policy, RunSettings.from_config(ecfg),
                      on_decision=lambda w, g, d: decided.__setitem__(g.window, tuple(d.batch_sizes))) as server:
        result = run_local(ecfg, spec, None, out_dir, spec.n_workers, method="torchrun", arbitrator=server.target,
                           timeout_s=1800)  # fmt: skip
    runs = pd.read_csv(out_dir / "runs.csv")
    used = {w: tuple(g.sort_values("rank")["batch_size"]) for w, g in runs.groupby("window")}
    applied = [used[w] == decided[w - 1] for w in sorted(used) if w > 0 and (w - 1) in decided]
    return {
        "cluster": spec.name,
        "policy": policy.name,
        "iterations": result["iterations"],
        "windows": len(used),
        "decisions": len(decided),
        "windows_with_decided_sizes": int(sum(applied)),
        "windows_checked": len(applied),
        "distinct_size_vectors": len(set(used.values())),
        "final_test_acc": result["final_test_acc"],
        "train_time_s": result["train_time_s"],
        "throughput_samples_per_s": result["throughput_samples_per_s"],
    }


def figures(out_dir: str | Path, fig_dir: str | Path) -> list[Path]:
    out, fig = Path(out_dir), Path(fig_dir)
    runs = pd.read_csv(out / "runs.csv")
    per_run = pd.read_csv(out / "summary.csv")
    e = common.read_manifest(out)["config"]["experiments"]
    first = per_run["cluster"].iloc[0]  # accuracy-vs-time on the first held-out cluster
    plots.inference_accuracy_vs_time(common.curves(runs[runs["cluster"] == first], ["policy", "optimizer", "seed"]),
                                     fig / "accuracy_vs_time", cluster=first)  # fmt: skip
    agg = common.aggregate(per_run, ["optimizer", "cluster", "policy"], ["time_to_target_s", "final_accuracy"],
                           e["aggregate"], e["n_boot"], e["ci"])  # fmt: skip
    plots.inference_time_to_target(agg, fig / "time_to_target")
    plots.inference_final_accuracy(agg, fig / "final_accuracy")
    written = [fig / "accuracy_vs_time.png", fig / "time_to_target.png", fig / "final_accuracy.png"]
    if (out / "engine" / "runs.csv").exists():
        plots.engine_batch_sizes(pd.read_csv(out / "engine" / "runs.csv"), fig / "engine_batch_sizes")
        written.append(fig / "engine_batch_sizes.png")
    return written
