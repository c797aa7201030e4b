"""What lossless gradient compression changes for batch-size policies on a communication-bound cluster.

Lossless homomorphic compression (LHC, Li et al., arXiv 2402.07529; :mod:`dynamix.comm`,
``docs/compression.md``) sends a gradient's non-zeros as an OR-merged index plus a count sketch the
ring sums without decoding. What it saves depends on the batch: a batch of b samples touches about
b embedding rows, so the bytes on the wire grow with the batch, while a dense all-reduce costs the
same at any batch. Large batches amortise a dense gradient's fixed communication; with compression
that advantage shrinks, and a policy tuned to amortise communication may no longer pick the fastest
batch.

Each policy of ``experiments.compression.policies`` trains the workload (``model`` on ``dataset``:
the embedding model ``ncf`` on the interaction data, whose gradients are sparse) on each cluster of
``clusters`` and each seed twice: ``engine.compression: none`` and ``lhc``. The simulator runs the
real model math, and with ``lhc`` the real LHC reduction of every iteration's worker gradients, whose
bytes and this machine's measured codec time (encode + decode, the vectorised PyTorch codec on the
CPU) set the iteration's communication time (:mod:`dynamix.sim.cluster`). Budgets follow
``rl.eval_budget`` per cluster and compression (``time``: what the static ``batch.initial`` run
needs for ``epochs`` epochs with that compression). Every run of a cluster, with and without
compression, is read against one target: ``rl.target_fraction`` x the best (compression, policy)'s
mean final accuracy (:func:`dynamix.evaluation.targets.target_accuracy`); the compression is
lossless, so a static policy follows the same accuracy per iteration either way and only its clock
differs.

``dynamix`` is the policy_training stage's agent (``results/policies/<name>.zip``). It is trained on
``rl.model`` (the quarter-width MLP on CIFAR-10 in the default profile), never on this workload: here
it is a transfer to another model, data set and cluster, and this stage trains nothing.

Statistics (:mod:`dynamix.evaluation.stats`, ``docs/protocol.md``): per cluster and policy, the
per-seed ratio t_lhc / t_none of the times to target (paired by seed; a run that never reaches the
target counts at its total time, :func:`~dynamix.evaluation.targets.censored_time`), its geometric
mean and the t interval on the log ratios, and the verdict of "compression shortens the time to
target" with the tie band ``experiments.tie_margin``.

Outputs in ``out_dir``:

- ``runs.csv``: the simulator's rows (:data:`~dynamix.metrics.schema.RUNS_COLUMNS`), plus ``cluster``,
  ``compression``, ``policy``, ``run_id``.
- ``summary.csv``: one row per run, :data:`SUMMARY_COLUMNS`: ``cluster``, ``compression`` (none |
  lhc), ``policy``, ``seed``, ``time_to_target_s`` (virtual s; empty when not reached),
  ``final_accuracy`` (fraction), ``mean_global_batch`` (samples, iteration-weighted), ``total_time_s``,
  ``iterations``, ``epochs``, ``target_accuracy``, ``comm_mb_per_iter`` (MB one worker sends per
  iteration), ``compression_ratio`` (dense gradient bytes / bytes sent; 1 without compression),
  ``codec_ms_per_iter`` (one worker's encode + decode), ``comm_ms_per_iter`` (modelled communication
  time, codec included), ``throughput_samples_per_s``, ``clamped``, ``run_id``.
- ``compression.csv``: one row per cluster and policy, :data:`RATIO_COLUMNS`: ``ratio`` (geometric
  mean over seeds of t_lhc / t_none), ``ci_lo``, ``ci_hi``, ``n_seeds``, ``verdict`` (holds: lhc is
  faster; does not hold: slower; tie; inconclusive), ``time_none_s`` and ``time_lhc_s`` (mean censored
  time to target), ``unreached_none`` and ``unreached_lhc`` (runs that missed the target),
  ``mean_global_batch_none`` and ``mean_global_batch_lhc``, ``compression_ratio_lhc``.
- ``summary.json``: targets, the fastest policy per cluster and compression, means and t intervals per
  (cluster, compression, policy), the ratio rows, the agent's training workload.
- ``manifest.json``. Figure (``figures``): time to target and mean global batch per policy with and
  without compression, and the ratio with its interval.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd

from dynamix import cluster, io, plots
from dynamix.config import Config
from dynamix.evaluation import stats
from dynamix.evaluation.runner import SimTask, run_simulations
from dynamix.evaluation.runs import run_summary, run_totals
from dynamix.evaluation.targets import censored_time, target_accuracy, with_targets
from dynamix.experiments import shared
from dynamix.experiments.manifest import read_manifest, write_manifest

log = logging.getLogger(__name__)

NAME = "compression"
COMPRESSIONS = ("none", "lhc")
KEYS = ["cluster", "compression", "policy"]
VALUES = ["time_to_target_s", "final_accuracy", "mean_global_batch", "total_time_s", "comm_mb_per_iter",
          "compression_ratio", "codec_ms_per_iter"]
SUMMARY_COLUMNS = [*KEYS, "seed", "time_to_target_s", "final_accuracy", "mean_global_batch", "total_time_s",
                   "iterations", "epochs", "target_accuracy", "comm_mb_per_iter", "compression_ratio",
                   "codec_ms_per_iter", "comm_ms_per_iter", "throughput_samples_per_s", "clamped", "run_id"]
"""The columns of ``summary.csv``."""
RATIO_COLUMNS = ["cluster", "policy", "ratio", "ci_lo", "ci_hi", "n_seeds", "verdict", "time_none_s", "time_lhc_s",
                 "unreached_none", "unreached_lhc", "mean_global_batch_none", "mean_global_batch_lhc",
                 "compression_ratio_lhc"]
"""The columns of ``compression.csv``."""


def workload(cfg: Config, compression: str) -> Config:
    """The simulated config of one run: the experiments' settings with this stage's workload and budget,
    and ``engine.compression``. The NHWC layout (``train.channels_last``) is for image batches: an id
    model's batches keep theirs."""
    e = cfg.experiments.compression
    train: dict = {"epochs": e.epochs, "max_iters": 0} if e.epochs else {}
    if e.dataset != "cifar10":
        train["channels_last"] = False
    return shared.sim_config(cfg, model={"name": e.model, "width": e.width}, data={"dataset": e.dataset},
                             engine={"compression": compression}, train=train)


def comm_totals(runs: pd.DataFrame) -> pd.DataFrame:
    """Per run (``run_id``): its mean global batch (:func:`~dynamix.evaluation.runs.run_totals`) and its
    reductions, each window weighted by its iterations: ``comm_mb_per_iter``, ``compression_ratio``
    (dense bytes / bytes sent over the run), ``codec_ms_per_iter``, ``comm_ms_per_iter``. The reduction
    is the same on every worker, so rank 0's rows are read."""
    rows = []
    for rid, run in runs.groupby("run_id", sort=False):
        w = run[run["rank"] == 0].sort_values("window")
        iters = w["iteration"].diff().fillna(w["iteration"]).to_numpy(float)
        sent = np.average(w["comm_bytes"], weights=iters)
        dense = np.average(w["comm_bytes"] * w["compression_ratio"], weights=iters)
        rows.append({"run_id": rid, "mean_global_batch": run_totals(run)["mean_global_batch"],
                     "comm_mb_per_iter": sent / 1e6, "compression_ratio": dense / sent,
                     "codec_ms_per_iter": np.average(w["encode_ms"] + w["decode_ms"], weights=iters),
                     "comm_ms_per_iter": np.average(w["comm_ms"], weights=iters)})
    return pd.DataFrame(rows)


def with_shared_targets(per_run: pd.DataFrame, runs: pd.DataFrame, cfg: Config) -> pd.DataFrame:
    """``per_run`` with one target per cluster for both compressions: ``rl.target_fraction`` x the best
    (compression, policy)'s mean final accuracy (or ``rl.target_accuracy``), and each run's time to it."""
    parts = []
    for name, rows in per_run.groupby("cluster", sort=False):
        target = target_accuracy(rows, cfg.rl.target_fraction, cfg.rl.target_accuracy, ["compression", "policy"])
        parts.append(with_targets(rows, runs[runs["cluster"] == name], cfg, ["compression"], fixed=target))
    return pd.concat(parts).sort_index()


def lhc_vs_none(per_run: pd.DataFrame, ci: float, tie_margin: float) -> pd.DataFrame:
    """Per cluster and policy: the time to target with compression over without, paired by seed
    (:data:`RATIO_COLUMNS`); unreached runs count at their total time."""
    s = per_run.assign(t=censored_time(per_run), unreached=per_run["time_to_target_s"].isna())
    tie_lo, tie_hi = stats.tie_band(1.0, "ratio", tie_margin, 0.0)
    rows = []
    for (name, policy), g in s.groupby(["cluster", "policy"], sort=False):
        t = stats.paired(g, g["t"], [], across="compression")
        est = stats.ratio_interval((t["lhc"] / t["none"]).to_numpy(), ci)
        by = g.groupby("compression")
        mean_t, batch, missed = by["t"].mean(), by["mean_global_batch"].mean(), by["unreached"].sum()
        rows.append({
            "cluster": name, "policy": policy, "ratio": est["estimate"], "ci_lo": est["ci_lo"], "ci_hi": est["ci_hi"],
            "n_seeds": est["n_seeds"],
            "verdict": stats.verdict(est["ci_lo"], est["ci_hi"], 1.0, "below", kind="ours", tie_lo=tie_lo, tie_hi=tie_hi),
            "time_none_s": mean_t["none"], "time_lhc_s": mean_t["lhc"],
            "unreached_none": int(missed["none"]), "unreached_lhc": int(missed["lhc"]),
            "mean_global_batch_none": batch["none"], "mean_global_batch_lhc": batch["lhc"],
            "compression_ratio_lhc": by["compression_ratio"].mean()["lhc"],
        })  # fmt: skip
    return pd.DataFrame(rows, columns=RATIO_COLUMNS)


def fastest(per_run: pd.DataFrame) -> dict[str, dict[str, str]]:
    """Per cluster and compression: the policy with the shortest mean time to target over seeds
    (unreached runs at their total time)."""
    t = per_run.assign(t=censored_time(per_run)).groupby(KEYS, sort=False)["t"].mean()
    out: dict[str, dict[str, str]] = {}
    for (name, comp), (_, _, policy) in t.groupby(level=["cluster", "compression"], sort=False).idxmin().items():
        out.setdefault(name, {})[comp] = policy
    return out


def run(cfg: Config, out_dir: str | Path) -> dict:
    out = Path(out_dir)
    e = cfg.experiments.compression
    specs = [cluster.load(c) for c in e.clusters]
    groups = [(spec, comp) for spec in specs for comp in COMPRESSIONS]
    run_cfgs = shared.budgeted(cfg, [(spec, workload(cfg, comp)) for spec, comp in groups], out)
    pdir, name = shared.policy_dir(out), cfg.experiments.policy_training.name
    tasks = [
        SimTask(spec, run_cfg, shared.resolve_policy(p, pdir, name), seed, (("compression", comp),))
        for (spec, comp), run_cfg in zip(groups, run_cfgs) for p in e.policies for seed in shared.seeds(cfg)
    ]  # fmt: skip
    runs = run_simulations(tasks, cfg.experiments.jobs, desc="compression", cache=shared.run_cache(out))
    per_run = run_summary(runs, KEYS).merge(comm_totals(runs), on="run_id")
    per_run = with_shared_targets(per_run, runs, cfg)[SUMMARY_COLUMNS]
    ratios = lhc_vs_none(per_run, cfg.experiments.ci, cfg.experiments.tie_margin)
    io.write_csv(runs, out / "runs.csv")
    io.write_csv(per_run, out / "summary.csv")
    io.write_csv(ratios, out / "compression.csv")
    agg = stats.aggregate(per_run, KEYS, VALUES, cfg.experiments.ci)
    agent = None
    if "dynamix" in e.policies:
        trained = f"{cfg.rl.model or cfg.model.name}@{cfg.rl.width or cfg.model.width:g}"
        agent = {"spec": shared.resolve_policy("dynamix", pdir, name), "trained_on": trained,
                 "transfer": trained != f"{e.model}@{e.width:g}"}
    summary = {
        "workload": f"{e.model}@{e.width:g} on {e.dataset}",
        "clusters": [spec.name for spec in specs],
        "policies": list(e.policies),
        "agent": agent,
        "n_runs": len(tasks),
        "target_accuracy": {n: float(r["target_accuracy"].iloc[0]) for n, r in per_run.groupby("cluster", sort=False)},
        "fastest_policy": fastest(per_run),
        "by_compression_and_policy": agg.to_dict(orient="records"),
        "lhc_vs_none": ratios.to_dict(orient="records"),
    }
    io.write_json(out / "summary.json", summary)
    write_manifest(out, cfg, NAME, {"clusters": list(e.clusters)})
    return summary


def figures(out_dir: str | Path, fig_dir: str | Path) -> list[Path]:
    out, fig = Path(out_dir), Path(fig_dir)
    per_run = pd.read_csv(out / "summary.csv")
    ratios = pd.read_csv(out / "compression.csv")
    e = read_manifest(out)["config"]["experiments"]
    agg = stats.aggregate(per_run, KEYS, ["time_to_target_s", "mean_global_batch", "total_time_s"], e["ci"])
    plots.compression(agg, ratios, fig / "compression", stats.tie_band(1.0, "ratio", e["tie_margin"], 0.0))
    return [fig / "compression.png"]
