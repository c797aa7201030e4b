"""What lossless gradient compression changes for batch-size policies on a communication-bound cluster.

Lossless homomorphic compression (LHC, Li et al., arXiv 2402.07529; :mod:`dynamix.comm`,
``docs/compression.md``) sends a gradient's non-zeros as an OR-merged index plus a count sketch the
ring sums without decoding. What it saves depends on the batch: a batch of b samples touches about
b embedding rows, so the bytes on the wire grow with the batch, while a dense all-reduce costs the
same at any batch. Large batches amortise a dense gradient's fixed communication; with compression
that advantage shrinks, and a policy tuned to amortise communication may no longer pick the fastest
batch.

Each workload of ``experiments.compression.workloads`` (``MODEL[@WIDTH]`` on its data set: the
embedding models ``ncf`` on the interaction data and ``lstm-lm`` on the token stream have sparse
gradients) trains with each policy of ``policies`` on each cluster of ``clusters`` and each seed, and
with the static policies (``static:B``) alone on each cluster of ``static_clusters`` (the links
benchmark's rings at 1 and 10 Gbit/s) and ``static_seeds`` seeds; every run twice,
``engine.compression: none`` and ``lhc``. The simulator runs the real model math, and with ``lhc``
the real LHC reduction of every iteration's worker gradients, whose bytes and this machine's measured
codec time (encode + decode) set the iteration's communication time (:mod:`dynamix.sim.cluster`).
Budgets follow ``evaluation.budget`` per workload, cluster and compression (``time``: what the static
``batch.initial`` run needs for ``epochs`` epochs with that compression). Every run of a workload on a
cluster, with and without compression, is read against one target: ``evaluation.target_fraction`` x
the best (compression, policy)'s mean final accuracy (:func:`dynamix.evaluation.targets.target_accuracy`);
the compression is lossless, so a static policy follows the same accuracy per iteration either way and
only its clock differs.

``dynamix`` is the policy_training stage's agent (``results/policies/<name>.zip``). It is trained on
``rl.model`` (the quarter-width MLP on CIFAR-10 in the default profile), never on these workloads: here
it is a transfer to another model, data set and cluster, and this stage trains nothing.

Statistics (:mod:`dynamix.evaluation.stats`, ``docs/protocol.md``): per workload, cluster and policy,
the per-seed ratio t_lhc / t_none of the times to target (paired by seed; a run that never reaches the
target counts at its cell's horizon, the longest run of that workload on that cluster,
:func:`~dynamix.evaluation.targets.censored_time`), its geometric mean and the t interval on the log
ratios, and the verdict of "compression shortens the time to target" with the tie band
``experiments.tie_margin``.

Outputs in ``out_dir``:

- ``runs.csv``: the simulator's rows (:data:`~dynamix.metrics.schema.RUNS_COLUMNS`), plus ``workload``,
  ``cluster``, ``compression``, ``policy``, ``run_id``.
- ``summary.csv``: one row per run, :data:`SUMMARY_COLUMNS`: ``workload`` (``MODEL[@WIDTH]``),
  ``cluster``, ``compression`` (none | lhc), ``policy``, ``seed``, ``time_to_target_s`` (virtual s;
  empty when not reached), ``final_accuracy`` (fraction), ``mean_global_batch`` (samples,
  iteration-weighted), ``total_time_s``, ``iterations``, ``epochs``, ``target_accuracy``,
  ``comm_mb_per_iter`` (MB one worker sends per iteration), ``compression_ratio`` (dense gradient bytes
  / bytes sent; 1 without compression), ``codec_ms_per_iter`` (one worker's encode + decode),
  ``comm_ms_per_iter`` (modelled communication time, codec included), ``throughput_samples_per_s``,
  ``clamped``, ``run_id``.
- ``compression.csv``: one row per workload, cluster and policy, :data:`RATIO_COLUMNS`: ``ratio``
  (geometric mean over seeds of t_lhc / t_none), ``ci_lo``, ``ci_hi``, ``n_seeds``, ``verdict`` (holds:
  lhc is faster; does not hold: slower; tie; inconclusive, always with one seed, whose interval is
  empty), ``time_none_s`` and
  ``time_lhc_s`` (mean censored time to target), ``unreached_none`` and ``unreached_lhc`` (runs that
  missed the target), ``mean_global_batch_none`` and ``mean_global_batch_lhc``,
  ``compression_ratio_lhc``.
- ``density.csv``: one row per workload, batch size per worker (``batch_per_worker``: the static
  policies' sizes, ``batch.initial`` without one) and worker count of the clusters (``workers``),
  :data:`DENSITY_COLUMNS`: ``density_worker`` (fraction of one worker's gradient that is non-zero,
  mean over workers and :data:`DENSITY_DRAWS` draws) and ``density_merged`` (of the workers' merged
  support: what LHC's index marks and its sketch carries), measured here (:func:`gradient_density`),
  the same with and without compression; then the static runs at that batch on clusters of that many
  workers, without and with LHC: ``comm_mb_per_iter_none`` and ``comm_mb_per_iter_lhc`` (MB one worker
  sends per iteration), ``compression_ratio_lhc``, ``codec_ms_per_iter_lhc``, ``n_runs`` (runs per
  compression; 0: none ran, the run columns empty).
- ``links.csv``: the measured links beside the simulated ones, :data:`LINK_COLUMNS`, per ``workload``
  one row per architecture (``arch``: ring | ps), link speed (``gbps``, Gbit/s) and ``density``
  (fraction of the gradient non-zero in the measured aggregation) that :data:`LINKS_RECORD` measured on
  a link with a rate, and per simulated ``cluster`` at that architecture and link speed (its slowest
  link on the reduction's path, :func:`cluster_link`); a simulated cluster at a link speed the record
  does not hold has one row, its ``density`` empty. ``coverage``: measured and simulated | measured
  only | simulated only. Measured (empty where not measured): ``workers_measured`` (ranks),
  ``agg_speedup`` (dense reduction time / LHC's), ``model_agg_speedup`` (the cost model's prediction
  from the link rate, the measured latency, wire bytes and codec time), ``agg_model_error_pct`` (100
  (model - measured) / measured), ``iter_speedup`` and ``model_iter_speedup`` (the row's workload per
  iteration in the engine, measured on rings only, at width 1). Simulated (empty without a simulated
  cluster): ``best_batch_none`` and ``best_batch_lhc`` (the static batch size per worker with the
  shortest mean time to target, unreached runs censored as in ``fastest_policy``), ``margin_none`` and
  ``margin_lhc`` (the runner-up static batch's mean time over the best's: near 1, a near tie),
  ``unreached_none`` and ``unreached_lhc`` (the best's runs that missed the target), ``best_changes``
  (whether compression changes the best static batch; empty with fewer than two static batch sizes),
  ``merged_density_none`` and ``merged_density_lhc`` (the workload's merged density at each best batch,
  ``density.csv``, beside the measured ``density``). The record is measured, never run here (root,
  network namespaces, minutes); without it the table holds the simulated clusters alone and the log
  says so.
- ``summary.json``: the workloads, clusters and static clusters, targets and the fastest policy per
  workload, cluster and compression, means and t intervals per (workload, cluster, compression,
  policy), the ratio rows, the agent's training workload, the density rows, the link record read
  (``links_record``, null without one) and per workload and cluster its link and best static batch
  with and without compression (``best_static_batch``).
- ``manifest.json``. Figures (``figures``): ``compression``, time to target and mean global batch per
  policy with and without compression and the ratio with its interval, one row per workload and
  cluster; ``density``, each workload's gradient density and bytes per iteration by batch size.
"""

from __future__ import annotations

import json
import logging
import math
import re
from pathlib import Path
from typing import Any, Mapping, NamedTuple

import numpy as np
import pandas as pd
import torch

from dynamix import cluster, io, paths
from dynamix.config import STATIC_POLICY, CompressionExperiment, Config
from dynamix.data import BatchMaker, load_dataset
from dynamix.errors import InputFileError
from dynamix.evaluation import plan, policy_names, stats
from dynamix.evaluation.runner import SimTask, run_simulations
from dynamix.evaluation.runs import run_summary, run_totals
from dynamix.evaluation.targets import censored_time, missed, target_accuracy, with_targets
from dynamix.metrics.gradstats import flat_grad
from dynamix.models import build_model
from dynamix.pipeline.manifest import read_manifest, write_manifest
from dynamix.plots import compression as plots
from dynamix.seeding import derive_seed
from dynamix.train.core import Trainer

log = logging.getLogger(__name__)

NAME = "compression"
COMPRESSIONS = ("none", "lhc")
KEYS = ["workload", "cluster", "compression", "policy"]
VALUES = ["time_to_target_s", "final_accuracy", "mean_global_batch", "total_time_s", "comm_mb_per_iter",
          "compression_ratio", "codec_ms_per_iter"]
SUMMARY_COLUMNS = [*KEYS, "seed", "time_to_target_s", "final_accuracy", "mean_global_batch", "total_time_s",
                   "iterations", "epochs", "target_accuracy", "comm_mb_per_iter", "compression_ratio",
                   "codec_ms_per_iter", "comm_ms_per_iter", "throughput_samples_per_s", "clamped", "run_id"]
"""The columns of ``summary.csv``."""
RATIO_COLUMNS = ["workload", "cluster", "policy", "ratio", "ci_lo", "ci_hi", "n_seeds", "verdict",
                 "time_none_s", "time_lhc_s", "unreached_none", "unreached_lhc", "mean_global_batch_none",
                 "mean_global_batch_lhc", "compression_ratio_lhc"]
"""The columns of ``compression.csv``."""
DENSITY_COLUMNS = ["workload", "batch_per_worker", "workers", "density_worker", "density_merged",
                   "comm_mb_per_iter_none", "comm_mb_per_iter_lhc", "compression_ratio_lhc",
                   "codec_ms_per_iter_lhc", "n_runs"]
"""The columns of ``density.csv``."""
LINK_COLUMNS = ["workload", "arch", "gbps", "density", "coverage", "workers_measured", "agg_speedup",
                "model_agg_speedup", "agg_model_error_pct", "iter_speedup", "model_iter_speedup", "cluster",
                "best_batch_none", "best_batch_lhc", "margin_none", "margin_lhc", "unreached_none",
                "unreached_lhc", "best_changes", "merged_density_none", "merged_density_lhc"]
"""The columns of ``links.csv``."""
_MEASURED = ["arch", "gbps", "density", "workers_measured", "agg_speedup", "model_agg_speedup",
             "agg_model_error_pct", "iter_speedup", "model_iter_speedup"]
"""The columns of ``links.csv`` read from the measured record."""
_BEST = ["best_batch_none", "best_batch_lhc", "margin_none", "margin_lhc", "unreached_none", "unreached_lhc",
         "best_changes"]
"""The columns of ``links.csv`` read from the simulated runs."""
DENSITY_DRAWS = 5
"""Random batches per worker over which ``density.csv`` averages a gradient's density."""
LINKS_RECORD = paths.ROOT / "docs" / "expected" / "links.json"
"""The measured link results the stage reads beside its simulated runs: the JSON object
``benchmarks/bench_links.py --out`` writes (its last stdout line plus ``source``, the command and
commit). Measuring needs root, network namespaces and minutes, so the stage reads this committed record
and never runs the benchmark. A module constant: the path is part of the stage, not of an experiment's
settings (DVC lists it among the stage's dependencies)."""
_AGG = re.compile(r"(model_)?agg_speedup_(?P<gbps>\d+(?:\.\d+)?)gbps_(?P<pct>\d+(?:\.\d+)?)pct(?P<ps>_ps)?")
"""A record's aggregation speed-up (``model_``: the cost model's) at a link rate and density, through
the server with ``_ps``; unshaped links and the 2-worker anchor do not match."""
_ITER = re.compile(r"(model_)?iter_speedup_(?P<gbps>\d+(?:\.\d+)?)gbps_(?P<workload>\w+)")
"""A record's per-iteration speed-up of a workload in the engine (``lstm-lm`` written ``lstm_lm``)."""


class Workload(NamedTuple):
    """One workload of ``experiments.compression.workloads``: a model at a width on its data set."""

    model: str
    width: float
    dataset: str

    @property
    def label(self) -> str:
        """``MODEL[@WIDTH]``, the ``workload`` column (width 1 left out)."""
        return self.model if self.width == 1.0 else f"{self.model}@{self.width:g}"


class ClusterLink(NamedTuple):
    """What a simulated cluster is matched on in ``links.csv`` (:func:`cluster_link`)."""

    arch: str
    gbps: float
    workers: int


def workloads(cfg: Config) -> list[Workload]:
    """``experiments.compression.workloads``, parsed, in order."""
    return [Workload(*w) for w in CompressionExperiment.parse_workloads(cfg.experiments.compression.workloads)]


def static_policies(policies: Any) -> list[str]:
    """The ``static:B`` specs of ``policies``, in order: what runs on ``static_clusters``."""
    return [p for p in policies if STATIC_POLICY.fullmatch(p)]


def run_config(cfg: Config, w: Workload, compression: str) -> Config:
    """The simulated config of one run: the experiments' settings with workload ``w``, this stage's
    budget and ``engine.compression``. The NHWC layout (``train.channels_last``) is for image batches:
    an id model's batches keep theirs."""
    e = cfg.experiments.compression
    train: dict = {"epochs": e.epochs, "max_iters": 0} if e.epochs else {}
    if w.dataset != "cifar10":
        train["channels_last"] = False
    return plan.sim_config(cfg, model={"name": w.model, "width": w.width}, data={"dataset": w.dataset},
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
    """``per_run`` with one target per workload and cluster for both compressions:
    ``evaluation.target_fraction`` x the best (compression, policy)'s mean final accuracy (or
    ``evaluation.target_accuracy``), and each run's time to it."""
    parts = []
    for (name, where), rows in per_run.groupby(["workload", "cluster"], sort=False):
        target = target_accuracy(rows, cfg.evaluation.target_fraction, cfg.evaluation.target_accuracy,
                                 ["compression", "policy"])
        cell = runs[(runs["workload"] == name) & (runs["cluster"] == where)]
        parts.append(with_targets(rows, cell, cfg, ["compression"], fixed=target))
    return pd.concat(parts).sort_index()


def lhc_vs_none(per_run: pd.DataFrame, ci: float, tie_margin: float) -> pd.DataFrame:
    """Per workload, cluster and policy: the time to target with compression over without, paired by
    seed (:data:`RATIO_COLUMNS`); unreached runs count at their cell's horizon (:func:`censored_time`)."""
    s = per_run.assign(t=censored_time(per_run), unreached=per_run["time_to_target_s"].isna())
    tie_lo, tie_hi = stats.tie_band(1.0, "ratio", tie_margin, 0.0)
    rows = []
    for (name, where, policy), g in s.groupby(["workload", "cluster", "policy"], sort=False):
        t = stats.paired(g, g["t"], [], across="compression")
        est = stats.ratio_interval((t["lhc"] / t["none"]).to_numpy(), ci)
        if est["n_seeds"] < 2:  # one seed has no interval, and no verdict follows from it
            est |= {"ci_lo": math.nan, "ci_hi": math.nan}
        verdict = (stats.verdict(est["ci_lo"], est["ci_hi"], 1.0, "below", kind="ours", tie_lo=tie_lo, tie_hi=tie_hi)
                   if est["n_seeds"] >= 2 else "inconclusive")
        by = g.groupby("compression")
        mean_t, batch, missed = by["t"].mean(), by["mean_global_batch"].mean(), by["unreached"].sum()
        rows.append({
            "workload": name, "cluster": where, "policy": policy, "ratio": est["estimate"], "ci_lo": est["ci_lo"],
            "ci_hi": est["ci_hi"], "n_seeds": est["n_seeds"], "verdict": verdict,
            "time_none_s": mean_t["none"], "time_lhc_s": mean_t["lhc"],
            "unreached_none": int(missed["none"]), "unreached_lhc": int(missed["lhc"]),
            "mean_global_batch_none": batch["none"], "mean_global_batch_lhc": batch["lhc"],
            "compression_ratio_lhc": by["compression_ratio"].mean()["lhc"],
        })  # fmt: skip
    return pd.DataFrame(rows, columns=RATIO_COLUMNS)


def fastest(per_run: pd.DataFrame) -> dict[str, dict[str, dict[str, str]]]:
    """Per workload, cluster and compression: the policy with the shortest mean time to target over
    seeds (unreached runs at their cell's horizon)."""
    t = per_run.assign(t=censored_time(per_run)).groupby(KEYS, sort=False)["t"].mean()
    out: dict[str, dict[str, dict[str, str]]] = {}
    for (name, where, comp), (*_, policy) in t.groupby(level=KEYS[:3], sort=False).idxmin().items():
        out.setdefault(name, {}).setdefault(where, {})[comp] = policy
    return out


# ---- gradient density per batch size (density.csv) --------------------------------------------------------
def gradient_density(run_cfg: Config, batch: int, workers: int, draws: int = DENSITY_DRAWS,
                     seed: int = 0) -> tuple[float, float]:
    """The fraction of ``run_cfg``'s model's gradient that is non-zero: one worker's (mean over workers
    and draws) and that of ``workers`` workers' merged support (mean over draws), what LHC's index marks.
    Each worker's gradient is the training loss's on ``batch`` random training samples (the trainer's
    loss, so lstm-lm's sampled softmax), at the model's initialisation under ``seed``: which embedding
    and softmax rows a batch touches does not depend on how far training has gone."""
    data = load_dataset(run_cfg.data)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(seed, "density-init"))
        model = build_model(run_cfg.model.name, run_cfg.model.width)
    trainer = Trainer(model, run_cfg.optim, 1)
    maker = BatchMaker(data.train_x, data.train_y, False, seed)
    gen = torch.Generator().manual_seed(derive_seed(seed, "density", batch, workers))
    n = len(data.train_y)
    one, merged = [], []
    for _ in range(draws):
        support = None
        for _ in range(workers):
            trainer.zero_grad()
            trainer.local_gradient(*maker(torch.randperm(n, generator=gen)[:batch]))
            nz = flat_grad(model) != 0
            one.append(float(nz.float().mean()))
            support = nz if support is None else support | nz
        merged.append(float(support.float().mean()))
    return float(np.mean(one)), float(np.mean(merged))


def density_table(cfg: Config, per_run: pd.DataFrame, cluster_workers: Mapping[str, int]) -> pd.DataFrame:
    """``density.csv`` (:data:`DENSITY_COLUMNS`): each workload's gradient density at each static batch
    size of ``experiments.compression.policies`` (``batch.initial`` without one) and each worker count of
    ``cluster_workers`` (cluster -> workers), beside what the static runs at that batch on those clusters
    sent without and with LHC."""
    e = cfg.experiments.compression
    sizes = sorted({int(STATIC_POLICY.fullmatch(p)[1]) for p in static_policies(e.policies)})
    sizes = sizes or [cfg.batch.initial]
    rows = []
    for w in workloads(cfg):
        run_cfg = run_config(cfg, w, "none")
        for n in sorted(set(cluster_workers.values())):
            on = [c for c, k in cluster_workers.items() if k == n]
            for b in sizes:
                worker, merged = gradient_density(run_cfg, b, n, seed=cfg.train.seed)
                ran = per_run[(per_run["workload"] == w.label) & per_run["cluster"].isin(on)
                              & (per_run["policy"] == f"static:{b}")]
                none, lhc = (ran[ran["compression"] == c] for c in COMPRESSIONS)
                rows.append({"workload": w.label, "batch_per_worker": b, "workers": n, "density_worker": worker,
                             "density_merged": merged, "comm_mb_per_iter_none": none["comm_mb_per_iter"].mean(),
                             "comm_mb_per_iter_lhc": lhc["comm_mb_per_iter"].mean(),
                             "compression_ratio_lhc": lhc["compression_ratio"].mean(),
                             "codec_ms_per_iter_lhc": lhc["codec_ms_per_iter"].mean(),
                             "n_runs": min(len(none), len(lhc))})
    return pd.DataFrame(rows, columns=DENSITY_COLUMNS)


# ---- the measured links beside the simulated ones (links.csv) ---------------------------------------------
def read_links(path: Path = LINKS_RECORD) -> dict | None:
    """The measured link record at ``path``, checked (:func:`check_links`); None when there is none, said
    in one log line, so the stage still reports its simulated clusters."""
    if not path.exists():
        log.warning("no measured link record at %s: links.csv holds the simulated clusters only",
                    paths.relative(path))
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputFileError(f"{path}: not a measured link record ({type(exc).__name__}: {exc})") from None
    return check_links(record, str(path))


def check_links(record: Any, where: str) -> dict:
    """``record`` if it is a measured link record, else an :class:`~dynamix.errors.InputFileError` naming
    the field: a numbers-only table put beside simulated results must say where it came from
    (``source``), for how many ranks (``workers``), and hold positive, finite speed-ups."""
    if not isinstance(record, dict):
        raise InputFileError(f"{where}: a measured link record is a JSON object, got {type(record).__name__}")
    if "skipped" in record:
        raise InputFileError(f"{where}: field 'skipped': the benchmark measured nothing ({record['skipped']})")
    if not isinstance(record.get("source"), str) or not record["source"].strip():
        raise InputFileError(f"{where}: field 'source' must name the command and commit that measured it")
    workers = record.get("workers")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 2:
        raise InputFileError(f"{where}: field 'workers' must be an integer >= 2 (the ranks measured), "
                             f"got {workers!r}")
    for key, value in record.items():
        if (_AGG.fullmatch(key) or _ITER.fullmatch(key)) and not _positive(value):
            raise InputFileError(f"{where}: field {key!r} must be a positive finite number, got {value!r}")
    if not any((m := _AGG.fullmatch(k)) and not m.group(1) for k in record):
        raise InputFileError(f"{where}: no field 'agg_speedup_<G>gbps_<P>pct': no link with a rate measured")
    return record


def _positive(value: Any) -> bool:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return number and math.isfinite(value) and value > 0


def measured_links(record: Mapping[str, Any], workload: str) -> pd.DataFrame:
    """One row per architecture, link rate and density the record measured: LHC's aggregation speed-up
    over dense and the cost model's, and on rings (the engine runs a ring) ``workload``'s per-iteration
    speed-up at that rate. Unshaped links have neither a rate to match nor a prediction: left out."""
    iters = {(float(m["gbps"]), bool(m.group(1))): v for k, v in record.items()
             if (m := _ITER.fullmatch(k)) and m["workload"] == workload.replace("-", "_")}
    rows = []
    for key, value in record.items():
        m = _AGG.fullmatch(key)
        if m is None or m.group(1):
            continue
        gbps, ring = float(m["gbps"]), not m["ps"]
        model = record.get(f"model_{key}", math.nan)
        rows.append({"arch": "ring" if ring else "ps", "gbps": gbps, "density": float(m["pct"]) / 100,
                     "workers_measured": record["workers"], "agg_speedup": value, "model_agg_speedup": model,
                     "agg_model_error_pct": 100 * (model - value) / value,
                     "iter_speedup": iters.get((gbps, False), math.nan) if ring else math.nan,
                     "model_iter_speedup": iters.get((gbps, True), math.nan) if ring else math.nan})
    dtypes = {"arch": object, **{c: float for c in _MEASURED[1:]}, "workers_measured": "Int64"}
    return pd.DataFrame(rows, columns=_MEASURED).astype(dtypes)


def cluster_link(spec: cluster.ClusterSpec) -> ClusterLink:
    """A cluster's architecture, the link speed (Gbit/s) its reduction runs at and its workers, to match
    a measured link: the slowest link on the reduction's path, the workers' and through a parameter
    server the server's (what T_ring and T_ps divide by, :mod:`dynamix.cluster.costmodel`), as specified
    (events aside)."""
    gbps = min(w.bandwidth_gbps for w in spec.workers)
    if spec.architecture.kind == "ps":
        gbps = min(gbps, spec.architecture.server_bandwidth_gbps)
    return ClusterLink(spec.architecture.kind, float(gbps), spec.n_workers)


def best_static(per_run: pd.DataFrame) -> pd.DataFrame:
    """Per workload and cluster: the static batch size (per worker) with the shortest mean time to
    target without and with compression, ranked as :func:`fastest` ranks policies (unreached runs
    censored), the runner-up's time over the best's, the best's missed runs, and whether compression
    changes the best (empty with fewer than two static batch sizes: nothing to change)."""
    s = per_run.assign(t=censored_time(per_run), missed=missed(per_run),
                       batch=per_run["policy"].str.extract(r"^static:(\d+)$", expand=False).astype(float))
    rows = []
    for (name, where), g in s.groupby(["workload", "cluster"], sort=False):
        row: dict[str, Any] = {"workload": name, "cluster": where}
        for comp in COMPRESSIONS:
            r = _ranked_static(g[g["compression"] == comp])
            row |= {f"best_batch_{comp}": r["batch"].iloc[0] if len(r) else pd.NA,
                    f"margin_{comp}": r["t"].iloc[1] / r["t"].iloc[0] if len(r) > 1 else math.nan,
                    f"unreached_{comp}": r["unreached"].iloc[0] if len(r) else pd.NA}
        ranked = not (math.isnan(row["margin_none"]) or math.isnan(row["margin_lhc"]))
        row["best_changes"] = row["best_batch_none"] != row["best_batch_lhc"] if ranked else pd.NA
        rows.append(row)
    out = pd.DataFrame(rows, columns=["workload", "cluster", *_BEST])
    ints = {c: "Int64" for c in ("best_batch_none", "best_batch_lhc", "unreached_none", "unreached_lhc")}
    return out.astype({**ints, "best_changes": "boolean"})


def _ranked_static(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs``' static batch sizes, fastest first: mean censored time ``t`` and missed runs per batch."""
    return (runs.dropna(subset=["batch"]).groupby("batch").agg(t=("t", "mean"), unreached=("missed", "sum"))
            .reset_index().sort_values(["t", "batch"], ignore_index=True))


def links_table(record: Mapping[str, Any] | None, per_run: pd.DataFrame,
                cluster_links: Mapping[str, ClusterLink], density: pd.DataFrame | None = None) -> pd.DataFrame:
    """``links.csv`` (:data:`LINK_COLUMNS`): per workload of ``per_run``, the record's measured links
    (none: ``record`` is None) beside each simulated cluster's best static batch, joined on architecture
    and link speed (``cluster_links``: cluster -> :func:`cluster_link`), and the workload's merged
    density at each best batch (``density``: :func:`density_table`; None: empty); what only one side
    covers is said in ``coverage``, never filled in."""
    best = best_static(per_run)
    best.insert(2, "arch", [cluster_links[n].arch for n in best["cluster"]])
    best.insert(3, "gbps", [float(cluster_links[n].gbps) for n in best["cluster"]])
    for comp in COMPRESSIONS:
        best[f"merged_density_{comp}"] = [_merged_density(density, r["workload"], r[f"best_batch_{comp}"],
                                                          cluster_links[r["cluster"]].workers)
                                          for _, r in best.iterrows()]
    parts = []
    for name in dict.fromkeys(per_run["workload"]):
        measured = measured_links(record or {}, name)
        table = measured.merge(best[best["workload"] == name].drop(columns="workload"), on=["arch", "gbps"],
                               how="outer", indicator="coverage")
        table["coverage"] = table["coverage"].map({"both": "measured and simulated", "left_only": "measured only",
                                                   "right_only": "simulated only"}).astype(str)
        parts.append(table.assign(workload=name).sort_values(["arch", "gbps", "density", "cluster"]))
    return pd.concat(parts, ignore_index=True)[LINK_COLUMNS]


def _merged_density(density: pd.DataFrame | None, name: str, batch: Any, workers: int) -> float:
    """``density.csv``'s merged density of workload ``name`` at ``batch`` per worker and ``workers``."""
    if density is None or pd.isna(batch):
        return math.nan
    hit = density[(density["workload"] == name) & (density["batch_per_worker"] == batch)
                  & (density["workers"] == workers)]
    return float(hit["density_merged"].iloc[0]) if len(hit) else math.nan


def write_links(per_run: pd.DataFrame, specs: list[cluster.ClusterSpec], out: Path,
                density: pd.DataFrame | None = None, record_path: Path = LINKS_RECORD) -> pd.DataFrame:
    """Build and write ``out/links.csv``, and say in one log line per workload, at each simulated link
    speed, whether compression changes the best static batch size."""
    table = links_table(read_links(record_path), per_run, {s.name: cluster_link(s) for s in specs}, density)
    io.write_csv(table, out / "links.csv")
    simulated = table.dropna(subset=["cluster"]).drop_duplicates(["workload", "cluster"])
    for name, rows in simulated.groupby("workload", sort=False):
        log.info("best static batch per worker without -> with compression, %s: %s", name, "; ".join(
            f"{r.cluster} ({r.arch}, {r.gbps:g} Gbit/s): {r.best_batch_none} -> {r.best_batch_lhc}"
            f"{'' if pd.isna(r.best_changes) else ', changed' if r.best_changes else ', unchanged'}"
            for r in rows.itertuples()))
    return table


def best_batches(links: pd.DataFrame) -> dict[str, dict[str, dict[str, Any]]]:
    """Per workload and simulated cluster of ``links.csv``: its link, its best static batch without and
    with compression and whether compression changes it (None: not ranked), as plain values for
    ``summary.json``."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for _, r in links.dropna(subset=["cluster"]).drop_duplicates(["workload", "cluster"]).iterrows():
        out.setdefault(r["workload"], {})[r["cluster"]] = {
            "arch": r["arch"], "gbps": _plain(r["gbps"]), "none": _plain(r["best_batch_none"]),
            "lhc": _plain(r["best_batch_lhc"]), "changes": _plain(r["best_changes"])}
    return out


def _plain(value: Any) -> Any:
    """A table cell as a JSON value: missing -> None, numpy scalars -> Python's."""
    return None if pd.isna(value) else value.item() if hasattr(value, "item") else value


def run(cfg: Config, out_dir: str | Path) -> dict:
    out = Path(out_dir)
    e = cfg.experiments.compression
    loads = workloads(cfg)
    specs = [cluster.load(c) for c in e.clusters]
    static_specs = [cluster.load(c) for c in e.static_clusters]
    every = [(spec, list(e.policies), plan.seeds(cfg)) for spec in specs]
    static_seeds = [cfg.train.seed + i for i in range(e.static_seeds or cfg.experiments.seeds)]
    every += [(spec, static_policies(e.policies), static_seeds) for spec in static_specs]
    groups = [(w, spec, comp, pols, seeds)
              for w in loads for spec, pols, seeds in every for comp in COMPRESSIONS]
    run_cfgs = plan.budgeted(cfg, [(spec, run_config(cfg, w, comp)) for w, spec, comp, _, _ in groups], out)
    pdir, name = policy_names.policy_dir(out), cfg.experiments.policy_training.name
    tasks = [
        SimTask(spec, run_cfg, policy_names.resolve_policy(p, pdir, name), seed,
                (("workload", w.label), ("compression", comp)))
        for (w, spec, comp, pols, seeds), run_cfg in zip(groups, run_cfgs) for p in pols for seed in seeds
    ]  # fmt: skip
    runs = run_simulations(tasks, cfg.experiments.jobs, desc="compression", cache=plan.run_cache(out))
    per_run = run_summary(runs, KEYS).merge(comm_totals(runs), on="run_id")
    per_run = with_shared_targets(per_run, runs, cfg)[SUMMARY_COLUMNS]
    ratios = lhc_vs_none(per_run, cfg.experiments.ci, cfg.experiments.tie_margin)
    density = density_table(cfg, per_run, {s.name: s.n_workers for s in specs + static_specs})
    io.write_csv(runs, out / "runs.csv")
    io.write_csv(per_run, out / "summary.csv")
    io.write_csv(ratios, out / "compression.csv")
    io.write_csv(density, out / "density.csv")
    agg = stats.aggregate(per_run, KEYS, VALUES, cfg.experiments.ci)
    agent = None
    if "dynamix" in e.policies:
        trained = f"{cfg.rl.model or cfg.model.name}@{cfg.rl.width or cfg.model.width:g}"
        agent = {"spec": policy_names.resolve_policy("dynamix", pdir, name), "trained_on": trained,
                 "transfer": all(trained != f"{w.model}@{w.width:g}" for w in loads)}
    summary = {
        "workloads": {w.label: f"{w.model}@{w.width:g} on {w.dataset}" for w in loads},
        "clusters": [spec.name for spec in specs],
        "static_clusters": [spec.name for spec in static_specs],
        "policies": list(e.policies),
        "static_policies": static_policies(e.policies),
        "agent": agent,
        "n_runs": len(tasks),
        "target_accuracy": {n: {c: float(r["target_accuracy"].iloc[0])
                                for c, r in g.groupby("cluster", sort=False)}
                            for n, g in per_run.groupby("workload", sort=False)},
        "fastest_policy": fastest(per_run),
        "by_compression_and_policy": agg.to_dict(orient="records"),
        "lhc_vs_none": ratios.to_dict(orient="records"),
        "density": density.to_dict(orient="records"),
    }
    links = write_links(per_run, specs + static_specs, out, density)
    summary["links_record"] = paths.relative(LINKS_RECORD) if LINKS_RECORD.exists() else None
    summary["best_static_batch"] = best_batches(links)
    io.write_json(out / "summary.json", summary)
    write_manifest(out, cfg, NAME, {"clusters": list(e.clusters), "static_clusters": list(e.static_clusters)})
    return summary


def figures(out_dir: str | Path, fig_dir: str | Path) -> list[Path]:
    out, fig = Path(out_dir), Path(fig_dir)
    per_run = pd.read_csv(out / "summary.csv")
    ratios = pd.read_csv(out / "compression.csv")
    e = read_manifest(out)["config"]["experiments"]
    agg = stats.aggregate(per_run, KEYS, ["time_to_target_s", "mean_global_batch", "total_time_s"], e["ci"])
    plots.compression(agg, ratios, fig / "compression", stats.tie_band(1.0, "ratio", e["tie_margin"], 0.0))
    plots.density(pd.read_csv(out / "density.csv"), fig / "density")
    return [fig / "compression.png", fig / "density.png"]
