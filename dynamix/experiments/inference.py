"""DYNAMIX against every baseline (paper Sec. V: accuracy vs time, time to target, final accuracy).

For each held-out cluster (``experiments.inference.clusters``), optimiser workload (``optimizers``:
SGD at ``optim.lr``, Adam at ``adam_lr``) and seed, every policy in ``policies`` trains the
experiments' workload on the simulator; ``dynamix`` is the policy_training stage's agent. ``policies``
holds the whole static sweep of the baselines (the claims compare with its median,
:func:`check_static_sweep`) and the agent's teacher rule ``lbbsp:batch=512``. ``lbbsp:tuned`` is LB-BSP
at the per-worker batch (``tune_batches``), ``lbbsp:tuned-global`` at the global batch
(``tune_global_batches``), that a sweep on the validation clusters ``tune_clusters`` finds fastest
(:mod:`dynamix.evaluation.tuning`); held-out clusters play no part in any choice. Budgets, targets,
censoring and intervals: ``docs/protocol.md``. Then one end-to-end run of the real engine through the
gRPC arbitrator (``engine_iters`` iterations on ``engine_cluster``).

Outputs: ``runs.csv`` (the oracle's runs among them), ``summary.csv`` (per cluster, optimizer, policy, seed),
``levels.csv`` (``summary.csv`` at every target level, :func:`~dynamix.evaluation.targets.at_levels`), ``clusters.csv``
(:func:`cluster_table`), ``summary.json``, ``tuning.csv`` and ``tuning_global.csv`` (the sweeps' runs), ``oracle.csv`` (the oracle's hindsight grid, :func:`with_oracle`), ``engine/``,
``manifest.json``.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pandas as pd

from dynamix import cluster, io
from dynamix.config import Config, ConfigError, with_overrides
from dynamix.evaluation import plan, policy_names, stats, tuning
from dynamix.evaluation.compare import compare
from dynamix.evaluation.lockstep import Plan, lockstep
from dynamix.evaluation.runner import SimTask, labelled
from dynamix.evaluation.runs import curves, run_summary
from dynamix.evaluation.oracle import ORACLE, ORACLE_CV, search_plan
from dynamix.evaluation.targets import at_levels, time_to_target, with_targets
from dynamix.pipeline.manifest import read_manifest, write_manifest
from dynamix.plots import inference as plots

log = logging.getLogger(__name__)

NAME = "inference"
KEYS = ["cluster", "optimizer", "policy"]


def workload(cfg: Config, optimizer: str) -> Config:
    """The experiments' simulated config for one optimiser workload (Adam at ``adam_lr``)."""
    return plan.sim_config(cfg, optim=plan.optimizer(cfg, optimizer))


def check_static_sweep(cfg: Config) -> None:
    """The claims' "static" is the median over the baselines' whole sweep: every ``static:B`` of
    ``experiments.baselines.batch_sizes`` must be among ``experiments.inference.policies``."""
    have = set(cfg.experiments.inference.policies)
    missing = [f"static:{b}" for b in cfg.experiments.baselines.batch_sizes if f"static:{b}" not in have]
    if missing:
        raise ValueError(f"experiments.inference.policies lacks {', '.join(missing)}: it must hold static:B for "
                         f"every B in experiments.baselines.batch_sizes {list(cfg.experiments.baselines.batch_sizes)}")


CLUSTER_COLUMNS = ["cluster", "kind", "n_workers", "trade_off_index"]
"""The columns of ``clusters.csv``."""


def cluster_table(per_run: pd.DataFrame, specs: list[cluster.ClusterSpec]) -> pd.DataFrame:
    """Per held-out cluster: its kind, size and measured trade-off index, the mean throughput (samples
    per virtual second) of the static sweep's largest size over its smallest (:mod:`dynamix.cluster.tradeoff`)."""
    static = per_run[per_run["policy"].str.startswith("static:")]
    rows = []
    for spec in specs:
        runs = static[static["cluster"] == spec.name]
        if runs.empty:
            continue
        size = runs["policy"].str.split(":").str[1].astype(int)
        tput = runs.groupby(size)["throughput_samples_per_s"].mean()
        rows.append({"cluster": spec.name, "kind": spec.kind, "n_workers": spec.n_workers,
                     "trade_off_index": float(tput[tput.index.max()] / tput[tput.index.min()])})
    return pd.DataFrame(rows, columns=CLUSTER_COLUMNS)


def with_oracle(cfg: Config, spec: cluster.ClusterSpec, run_cfg: Config, opt: str,
                per_run: pd.DataFrame) -> Plan[tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]]:
    """One group's ``per_run`` (a held-out cluster under one workload) with the oracle bound's runs
    (policy ``oracle``), its hindsight grid, and the oracle runs' windows: a plan of
    :mod:`dynamix.evaluation.lockstep`, so the clusters' searches share their sweeps.

    :func:`~dynamix.evaluation.oracle.search_plan` over ``oracle_batches`` x workers on
    ``oracle_seeds`` seeds picks B*, then ``oracle:batch=B*`` runs on every seed. Its times are read
    against the comparison's target, which the oracle does not move: it bounds the policies' times to
    their own target. With two search seeds or more, ``oracle-cv`` runs too: on each seed the member
    chosen without it (:meth:`~dynamix.evaluation.oracle.OracleSearch.cross_validated`; B* on the seeds
    the search never ran), the bound's share that is choice on the scored runs."""
    e = cfg.experiments.inference
    seeds = plan.seeds(cfg)
    target = float(per_run["target_accuracy"].iloc[0])
    found = yield from search_plan(spec, run_cfg, [m * spec.n_workers for m in e.oracle_batches],
                                   seeds[: e.oracle_seeds], target, e.oracle_refine, e.oracle_phase_epochs)
    tasks = [SimTask(spec, run_cfg, found.policy, s, (("optimizer", opt),), label=ORACLE)
             for s in seeds]
    if min(e.oracle_seeds, len(seeds)) > 1:
        held = found.cross_validated()
        tasks += [SimTask(spec, run_cfg, held.get(s, found.policy), s, (("optimizer", opt),), label=ORACLE_CV)
                  for s in seeds]
    runs = labelled(tasks, (yield tasks))
    oracle = run_summary(runs, KEYS).assign(target_accuracy=target)
    oracle["time_to_target_s"] = [time_to_target(runs[runs["run_id"] == rid], target) for rid in oracle["run_id"]]
    return pd.concat([per_run, oracle], ignore_index=True), found.grid.assign(optimizer=opt), runs


def cluster_plan(cfg: Config, spec: cluster.ClusterSpec, run_cfg: Config, opt: str,
                 tasks: list[SimTask]) -> Plan[tuple[pd.DataFrame, pd.DataFrame | None, pd.DataFrame]]:
    """One held-out cluster under one workload: its policies' ``tasks``, their targets, then its oracle
    (:func:`with_oracle`) when ``oracle_batches`` is set; (per-run summary, oracle grid or None, rows)."""
    runs = labelled(tasks, (yield tasks))
    group = with_targets(run_summary(runs, KEYS), runs, cfg, ["optimizer"])
    if not cfg.experiments.inference.oracle_batches:
        return group, None, runs
    group, grid, oracle_runs = yield from with_oracle(cfg, spec, run_cfg, opt, group)
    return group, grid, pd.concat([runs, oracle_runs], ignore_index=True)


def tuned_rules(cfg: Config, out: Path) -> dict[str, tuple[dict[str, pd.Series], pd.DataFrame]]:
    """The tuned rules listed in ``policies`` (:data:`~dynamix.evaluation.policy_names.TUNED`), keyed by
    the policy's name: per optimiser the scores of its candidates (:mod:`dynamix.evaluation.tuning`;
    the lowest is the choice) on the validation clusters ``experiments.inference.tune_clusters``, and
    its sweep's runs. Both sweeps (``tune_batches`` per worker, ``tune_global_batches``) run whenever
    one rule is listed: together they set each validation cluster's target."""
    e = cfg.experiments.inference
    listed = [name for name in policy_names.TUNED if name in e.policies]
    if not listed:
        return {}
    specs = [cluster.load(c) for c in e.tune_clusters]
    candidates = {"per_worker_batch": e.tune_batches, "global_batch": e.tune_global_batches}
    for name in listed:
        if not candidates[policy_names.TUNED[name]]:
            field = "tune_batches" if policy_names.TUNED[name] == "per_worker_batch" else "tune_global_batches"
            raise ConfigError(f"experiments.inference.{field} is empty: {name} is listed in policies and needs "
                              f"at least one batch size to tune")
    rules: dict[str, tuple[dict[str, pd.Series], list[pd.DataFrame]]] = {name: ({}, []) for name in listed}
    for opt in e.optimizers:
        run_cfgs = plan.budgeted(cfg, [(spec, workload(cfg, opt)) for spec in specs], out)
        tables = tuning.sweeps(list(zip(specs, run_cfgs)), candidates, plan.seeds(cfg)[: e.tune_seeds],
                               cfg.experiments.jobs, cache=plan.run_cache(out))  # fmt: skip
        for name in listed:
            key = policy_names.TUNED[name]
            scores = tuning.scores(tables[key], key)
            rules[name][0][opt] = scores
            rules[name][1].append(tables[key].assign(optimizer=opt))
            log.info("LB-BSP tuned by %s (%s): %d; scores %s", key, opt, scores.idxmin(), scores.round(3).to_dict())
    return {name: (scores, pd.concat(tables, ignore_index=True)) for name, (scores, tables) in rules.items()}


OUTPUTS = {policy_names.TUNED_LBBSP: ("tuning.csv", "tuned"),
           policy_names.TUNED_GLOBAL_LBBSP: ("tuning_global.csv", "tuned_global")}
"""Each tuned rule's sweep file and its key in ``summary.json``."""


def run(cfg: Config, out_dir: str | Path) -> dict:
    out = Path(out_dir)
    e = cfg.experiments.inference
    check_static_sweep(cfg)
    pdir = policy_names.policy_dir(out)
    rules = tuned_rules(cfg, out)
    # tuning.choose, on the scores at hand: per rule and optimiser, the candidate with the lowest score
    tuned = {name: {opt: int(s.idxmin()) for opt, s in scores.items()} for name, (scores, _) in rules.items()}
    specs = [cluster.load(c) for c in e.clusters]
    groups = [(spec, workload(cfg, opt), opt) for spec in specs for opt in e.optimizers]
    run_cfgs = plan.budgeted(cfg, [(spec, wcfg) for spec, wcfg, _ in groups], out)

    def policy_spec(p: str, spec: cluster.ClusterSpec, opt: str) -> str:
        if p in policy_names.TUNED:
            return tuning.lbbsp_spec(tuned[p][opt], spec.n_workers, policy_names.TUNED[p])
        return policy_names.resolve_policy(p, pdir, cfg.experiments.policy_training.name)

    # Every held-out cluster and workload as a plan (its policies, then its oracle, which needs their
    # target), the clusters' steps run side by side: one sweep per step, not per cluster and step
    plans, n_runs = [], 0
    for (spec, _, opt), run_cfg in zip(groups, run_cfgs):
        tasks = [SimTask(spec, run_cfg, policy_spec(p, spec, opt), seed, (("optimizer", opt),),
                         label=p if p in policy_names.TUNED else "")
                 for p in e.policies for seed in plan.seeds(cfg)]  # fmt: skip
        n_runs += len(tasks)
        plans.append(cluster_plan(cfg, spec, run_cfg, opt, tasks))
    done = lockstep(plans, cfg.experiments.jobs, "inference", cache=plan.run_cache(out))
    parts, all_runs = [group for group, _, _ in done], [runs for _, _, runs in done]
    grids = [grid for _, grid, _ in done if grid is not None]
    per_run, runs = pd.concat(parts, ignore_index=True), pd.concat(all_runs, ignore_index=True)
    grids = pd.concat(grids, ignore_index=True) if grids else pd.DataFrame()
    io.write_csv(runs, out / "runs.csv")
    io.write_csv(per_run, out / "summary.csv")
    io.write_csv(at_levels(per_run, runs, cfg.experiments.target_levels, cfg.evaluation.target_fraction),
                 out / "levels.csv")
    io.write_csv(cluster_table(per_run, specs), out / "clusters.csv")
    io.write_csv(grids, out / "oracle.csv")
    for name, (file, _) in OUTPUTS.items():
        columns = [policy_names.TUNED[name] if c == "per_worker_batch" else c for c in tuning.TABLE_COLUMNS]
        sweep = rules[name][1] if name in rules else pd.DataFrame()
        io.write_csv(sweep.reindex(columns=[*columns, "optimizer"]), out / file)
    agg = stats.aggregate(per_run, KEYS, ["time_to_target_s", "final_accuracy", "total_time_s"], cfg.experiments.ci)
    adaptive = [p for p in dict.fromkeys(per_run["policy"]) if p != "dynamix" and not p.startswith("static")]
    ratios = pd.concat(
        [compare(rows, "dynamix", adaptive).assign(optimizer=opt)
         for opt, rows in per_run.groupby("optimizer", sort=False)]
    ) if "dynamix" in set(per_run["policy"]) else pd.DataFrame()  # fmt: skip
    summary = {
        "policies": list(dict.fromkeys(per_run["policy"])),
        **{OUTPUTS[name][1]: {opt: {
            policy_names.TUNED[name]: m,
            "scores": {str(k): float(v) for k, v in rules[name][0][opt].items()},
            "validation_clusters": list(dict.fromkeys(rules[name][1]["cluster"])),
            "held_out": {spec.name: tuning.lbbsp_spec(m, spec.n_workers, policy_names.TUNED[name])
                         for spec in specs},
        } for opt, m in chosen.items()} for name, chosen in tuned.items()},
        "n_runs": n_runs,
        "by_policy": agg.to_dict(orient="records"),
        "dynamix_vs_baselines": ratios.to_dict(orient="records"),
    }
    if e.engine_iters > 0:
        summary["engine"] = engine_run(cfg, out / "engine", pdir)
    io.write_json(out / "summary.json", summary)
    write_manifest(out, cfg, NAME, {"clusters": list(e.clusters)})
    return summary


def engine_run(cfg: Config, out_dir: Path, pdir: Path) -> dict:
    """4 torchrun workers of the real engine, batch sizes decided by a gRPC arbitrator on loopback.

    The run starts afresh in an emptied ``out_dir`` each time the stage runs: it is about a minute
    long, and the checkpoint of an earlier run under other settings would stop the engine (it
    refuses a checkpoint of another configuration)."""
    from dynamix.engine import run_local
    from dynamix.policies import make_live_policy
    from dynamix.rpc.arbitrator import RunSettings
    from dynamix.rpc.local import local_server

    e = cfg.experiments.inference
    spec = cluster.load(e.engine_cluster)
    ecfg = with_overrides(plan.sim_config(cfg), {
        "train": {"max_iters": e.engine_iters, "eval_every": max(1, e.engine_iters // 4),
                  "checkpoint_every": 10 * e.engine_iters},
    })  # fmt: skip
    policy = make_live_policy(policy_names.resolve_policy(e.engine_policy, pdir,
                                                          cfg.experiments.policy_training.name))
    shutil.rmtree(out_dir, ignore_errors=True)
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
    e = read_manifest(out)["config"]["experiments"]
    first = per_run["cluster"].iloc[0]  # accuracy-vs-time on the first held-out cluster
    plots.inference_accuracy_vs_time(curves(runs[runs["cluster"] == first], ["policy", "optimizer", "seed"]),
                                     fig / "accuracy_vs_time", cluster=first)  # fmt: skip
    values = ["time_to_target_s", "final_accuracy", "total_time_s"]
    values += ["target_accuracy"] if "target_accuracy" in per_run else []  # the time figure's panel titles
    agg = stats.aggregate(per_run, ["optimizer", "cluster", "policy"], values, e["ci"])
    plots.inference_time_to_target(agg, fig / "time_to_target")
    plots.inference_final_accuracy(agg, fig / "final_accuracy")
    written = [fig / "accuracy_vs_time.png", fig / "time_to_target.png", fig / "final_accuracy.png"]
    if (out / "engine" / "runs.csv").exists():
        plots.engine_batch_sizes(pd.read_csv(out / "engine" / "runs.csv"), fig / "engine_batch_sizes")
        written.append(fig / "engine_batch_sizes.png")
    return written
