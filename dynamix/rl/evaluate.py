"""``dynamix evaluate``: run policies on cluster specs over seeds; per-window runs and a summary.

    dynamix evaluate --cluster clusters/heldout/hetero-speed-4.yaml --policy dynamix:dynamix \\
        --policy static:64 --policy lbbsp --seeds 3 --out results/eval/heldout

Writes ``OUT/runs.csv`` (the simulator's per-window rows, :data:`~dynamix.metrics.schema.RUNS_COLUMNS`,
plus ``cluster``) and ``OUT/summary.csv``, one row per (cluster, policy, seed) with
``policy, seed, time_to_target_s, final_accuracy, total_time_s, target_accuracy`` and ``cluster,
iterations, mean_global_batch``. All times are the simulator's virtual seconds.

**Target accuracy.** ``rl.target_accuracy > 0`` (or ``--target-accuracy``) fixes it for every
cluster. Otherwise it is set per cluster as ``rl.target_fraction`` (default 0.9) x the best mean
final test accuracy, where the mean is over seeds and the best is over the evaluated policies: a
level the best policy reliably reaches, so every policy's time to it is comparable.
``time_to_target_s`` is when the test accuracy, recorded at the end of every window, first reaches
the target, interpolated linearly between the window below it and the one at or above it
(:func:`time_to_target`); empty when never reached.

**Budget** (``rl.eval_budget`` or ``--budget``). ``time`` (default): on each cluster every run gets the
same virtual time, ``budget_s`` = the time the reference ``static:<batch.initial>`` run (seed 0) needs
for the epoch budget (``train.epochs``) on that cluster; epochs only cap it (:func:`~dynamix.rl.env.epoch_cap`).
This is what "time to target" asks (who gets there first, given the same clock) and how the agent's
training episodes are budgeted (:mod:`dynamix.rl.env`). ``epochs``: every run gets ``train.epochs``;
a policy with larger batches then stops after fewer updates, and may be cut off before the target
(which then reads as never reached, although no clock ran out). ``summary.csv`` records ``budget``
and ``budget_s`` (empty for ``epochs``).

:func:`evaluate` is the function notebooks call; :func:`compare` computes the acceptance ratios.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import logging
import math
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from dynamix import cluster as clusters
from dynamix import config
from dynamix.cluster import ClusterSpec
from dynamix.config import Config
from dynamix.data import load_cifar10
from dynamix.metrics.schema import RUNS_COLUMNS
from dynamix.policies.base import make_policy
from dynamix.seeding import derive_seed
from dynamix.sim.costmodel import CostModel

log = logging.getLogger(__name__)

BUDGETS = ("time", "epochs")
"""How long each run trains (module docstring); ``rl.eval_budget`` takes the same names."""

SUMMARY_COLUMNS = ["cluster", "policy", "seed", "time_to_target_s", "final_accuracy", "total_time_s",
                   "target_accuracy", "iterations", "mean_global_batch", "budget", "budget_s"]


def _run_summary(frame: pd.DataFrame) -> dict:
    """final accuracy, total time, iterations and mean B of one run's per-window rows."""
    per_window = frame.drop_duplicates("window")
    acc = per_window["test_acc"].dropna()
    return {
        "final_accuracy": float(acc.iloc[-1]) if len(acc) else math.nan,
        "total_time_s": float(per_window["elapsed_s"].iloc[-1]),
        "iterations": int(per_window["iteration"].iloc[-1]),
        "mean_global_batch": float(np.average(per_window["global_batch"],
                                              weights=per_window["iteration"].diff().fillna(per_window["iteration"]))),
    }


def time_to_target(frame: pd.DataFrame, target: float) -> float:
    """When test accuracy first reaches ``target`` (virtual s); NaN if never.

    A run records one test accuracy per window, at its end (``batch.window`` iterations apart), so the
    first window at or above the target only bounds the crossing: reading its end time would quantise
    every time to target by a whole window, a tenth or more of a short evaluation run, and ratios of
    such times jump by that much between neighbouring windows. The crossing is instead interpolated
    linearly between the window before, (t0, a0), and the first window at or above the target, (t1, a1):

        t* = t0 + (target - a0) / (a1 - a0) * (t1 - t0)

    With no tested window before it t* = t1, never earlier than a measurement. Where tests are sparser
    than windows (``train.eval_every`` > ``batch.window``) a window repeats the last accuracy, and t0,
    the end of the window before, is no earlier than that test: the estimate errs late, not early.
    """
    per_window = frame.drop_duplicates("window")
    evals = per_window.loc[per_window["test_acc"].notna(), ["elapsed_s", "test_acc"]].to_numpy(dtype=float)
    hit = np.flatnonzero(evals[:, 1] >= target)
    if not len(hit):
        return math.nan
    k = int(hit[0])
    t1, a1 = evals[k]
    if k == 0:
        return float(t1)
    t0, a0 = evals[k - 1]
    return float(t0 + (target - a0) / (a1 - a0) * (t1 - t0))


def set_targets(summary: pd.DataFrame, runs: pd.DataFrame, fraction: float, fixed: float = 0.0) -> pd.DataFrame:
    """Fill ``target_accuracy`` and ``time_to_target_s`` per cluster (see module docstring)."""
    summary = summary.copy()
    for name, rows in summary.groupby("cluster"):
        target = fixed if fixed > 0 else fraction * float(rows.groupby("policy")["final_accuracy"].mean().max())
        summary.loc[rows.index, "target_accuracy"] = target
        for i, r in rows.iterrows():
            run = runs[(runs["cluster"] == name) & (runs["policy"] == r["policy"]) & (runs["seed"] == r["seed"])]
            summary.loc[i, "time_to_target_s"] = time_to_target(run, target)
    return summary


SIM_SECTIONS = ("data", "model", "optim", "train", "batch")
"""The config sections :func:`dynamix.sim.run.simulate` reads (policies read only the batch bounds)."""


def sim_key(cfg: Config, cost: CostModel) -> str:
    """Short hash of :data:`SIM_SECTIONS` and the cost model: identifies a simulated run's settings in
    the cache (a recalibration changes every virtual time, so it must not reuse earlier runs)."""
    blob = json.dumps({**{k: dataclasses.asdict(getattr(cfg, k)) for k in SIM_SECTIONS},
                       "cost": dataclasses.asdict(cost)}, sort_keys=True, default=list)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _cached_run(cache: Path | None, cfg: Config, cost: CostModel, spec: ClusterSpec, policy, seed: int,
                simulate_run) -> pd.DataFrame:
    """One run's rows, read from ``cache`` when this exact (config, cost model, cluster, policy, seed)
    ran before.

    The key is a hash of the config sections a simulated run reads (:data:`SIM_SECTIONS`) and the cost
    model, the run id and, for trained policies, the artifact's sha256, so a retrained policy, a new
    calibration or a changed setting never reuses stale rows, while unrelated sections (``rl``,
    ``experiments``, ...) do not matter.
    """
    if cache is None:
        return simulate_run()
    from dynamix.sim.run import run_id

    fingerprint = getattr(policy, "meta", {}).get("zip_sha256", "")[:12]
    path = cache / sim_key(cfg, cost) / f"{run_id(spec, policy, seed)}{'-' + fingerprint if fingerprint else ''}.csv"
    if path.exists():
        return pd.read_csv(path)
    frame = simulate_run()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    frame.to_csv(tmp, index=False)
    tmp.replace(path)
    return frame


def reference_policy(cfg: Config) -> str:
    """The run whose epoch-budget time sets a cluster's time budget: every worker at ``batch.initial``."""
    return f"static:{cfg.batch.initial}"


def time_budget_config(cfg: Config, budget_s: float) -> Config:
    """``cfg`` with runs ending at ``budget_s`` virtual seconds, its epoch budget only a cap."""
    from dynamix.rl.env import epoch_cap

    if not budget_s > 0:
        raise ValueError(f"budget_s = {budget_s} is out of range: must be > 0")
    train = dataclasses.replace(cfg.train, max_time_s=float(budget_s), max_iters=0,
                                epochs=epoch_cap(cfg, cfg.train.epochs))
    return dataclasses.replace(cfg, train=train)


def budget_time_s(reference: pd.DataFrame) -> float:
    """A cluster's time budget: the reference run's (:func:`reference_policy`) total virtual time."""
    return _run_summary(reference)["total_time_s"]


def evaluate(cluster_specs: Sequence[ClusterSpec | str | Path], policy_specs: Sequence[str], cfg: Config,
             seeds: int | Iterable[int], out_dir: str | Path | None = None, target_accuracy: float | None = None,
             progress: bool = True, cost: CostModel | None = None,
             cache_dir: str | Path | None = None, budget: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Simulate every (cluster, policy, seed); returns (runs_df, summary_df), written to ``out_dir``.

    ``budget`` is ``time`` or ``epochs`` (default ``cfg.rl.eval_budget``; module docstring).
    Finished runs are cached under ``cache_dir`` (default ``out_dir/cache``), so an interrupted or
    extended evaluation (another policy, more seeds) only simulates what is new, and several
    processes may share one cache. ``cost`` overrides the calibrated simulator cost model.
    """
    from dynamix.sim.run import simulate

    budget = budget or cfg.rl.eval_budget
    if budget not in BUDGETS:
        raise ValueError(f"budget = {budget!r} is not allowed: must be one of {', '.join(map(repr, BUDGETS))}")
    specs = [s if isinstance(s, ClusterSpec) else clusters.load(s) for s in cluster_specs]
    seed_list = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    if not specs or not policy_specs or not seed_list:
        raise ValueError("evaluate needs at least one cluster, one policy and one seed")
    policies = {p: make_policy(p) for p in policy_specs}  # load (and validate) every policy up front
    cache = Path(cache_dir) if cache_dir is not None else (Path(out_dir) / "cache" if out_dir is not None else None)
    data = load_cifar10(cfg.data)
    if cost is None:
        from dynamix.sim.cluster import calibrated_cost

        cost = calibrated_cost(cfg)
    frames, rows = [], []
    bar = tqdm(total=len(specs) * len(policies) * len(seed_list), desc="evaluate", unit="run", disable=not progress)
    for spec in specs:
        run_cfg, budget_s = cfg, math.nan
        if budget == "time":
            ref = make_policy(reference_policy(cfg))
            budget_s = budget_time_s(_cached_run(cache, cfg, cost, spec, ref, 0, lambda: simulate(
                spec, cfg, ref, 0, data=data, progress=False, cost=cost)))
            run_cfg = time_budget_config(cfg, budget_s)
        for spec_str, policy in policies.items():
            for seed in seed_list:
                frame = _cached_run(cache, run_cfg, cost, spec, policy, seed, lambda: simulate(
                    spec, run_cfg, policy, seed, data=data, progress=False, cost=cost))
                frame.insert(0, "cluster", spec.name)
                frames.append(frame)
                rows.append({"cluster": spec.name, "policy": policy.name, "seed": seed, **_run_summary(frame),
                             "budget": budget, "budget_s": budget_s})
                bar.update(1)
                bar.set_postfix(cluster=spec.name, policy=policy.name, acc=f"{rows[-1]['final_accuracy']:.3f}")
    bar.close()
    runs = pd.concat(frames, ignore_index=True)[["cluster", *RUNS_COLUMNS]]
    summary = pd.DataFrame(rows)
    fixed = cfg.rl.target_accuracy if target_accuracy is None else target_accuracy
    summary = set_targets(summary, runs, cfg.rl.target_fraction, fixed)[SUMMARY_COLUMNS]
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        runs.to_csv(out / "runs.csv", index=False)
        summary.to_csv(out / "summary.csv", index=False)
        log.info("wrote %s and %s", out / "runs.csv", out / "summary.csv")
    return runs, summary


def censored_time(summary: pd.DataFrame) -> pd.Series:
    """Time to target, a run that never reached it censored at its total time (a lower bound on it)."""
    return summary["time_to_target_s"].astype(float).fillna(summary["total_time_s"].astype(float))


def static_ratio_interval(rows: pd.DataFrame, policy: str, n_boot: int = 2000, ci: float = 0.95,
                          seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap interval of ``policy``'s ratio to the median static on one cluster.

    ``rows`` are one cluster's summary rows with the censored time ``t``. Each draw resamples every
    policy's seeds with replacement, independently (the seeds are the runs' replicates), and recomputes
    the ratio of medians exactly as :func:`compare` does. With a handful of seeds the interval is wide:
    it says how far a ratio near the 0.7 bar can be read.
    """
    rng = np.random.default_rng(derive_seed(seed, "compare-bootstrap"))
    times = {p: g.to_numpy(dtype=float) for p, g in rows.groupby("policy")["t"]}
    def draws(p: str) -> np.ndarray:
        x = times[p]
        return np.median(x[rng.integers(0, len(x), size=(n_boot, len(x)))], axis=1)
    static = np.median(np.stack([draws(p) for p in sorted(times) if p.startswith("static")]), axis=0)
    lo, hi = np.quantile(draws(policy) / static, [(1 - ci) / 2, 1 - (1 - ci) / 2])
    return float(lo), float(hi)


def compare(summary: pd.DataFrame, policy: str, baselines: Sequence[str] = ("lbbsp", "gns")) -> pd.DataFrame:
    """Per cluster: ``policy``'s median time to target over seeds divided by the median static
    baseline's (median over static batch sizes of their per-size median over seeds), with its 95 %
    seed-bootstrap interval (:func:`static_ratio_interval`), and by each of ``baselines``; and its mean
    final accuracy minus the best static's (points, x100).

    A run that never reaches the target counts at its total time (:func:`censored_time`), as in the
    claims (:mod:`dynamix.experiments.claims`): a ratio whose denominator holds such runs is an upper
    bound, one whose numerator does a lower bound. ``policy_unreached`` and ``static_unreached`` count them.
    """
    s = summary.copy()
    s["t"] = censored_time(s)
    s["unreached"] = s["time_to_target_s"].isna()
    out = []
    for name, rows in s.groupby("cluster"):
        med = rows.groupby("policy")["t"].median()
        acc = rows.groupby("policy")["final_accuracy"].mean()
        unreached = rows.groupby("policy")["unreached"].sum()
        static = [p for p in med.index if p.startswith("static")]
        if policy not in med.index:
            raise ValueError(f"compare: policy {policy!r} is not in the summary; have {sorted(med.index)}")
        row = {"cluster": name, "policy_time_s": med[policy], "policy_final_acc": acc[policy],
               "policy_unreached": int(unreached[policy])}
        if static:
            row["static_unreached"] = int(unreached[static].sum())
            row["median_static_time_s"] = float(np.median(med[static]))
            row["ratio_vs_median_static"] = med[policy] / row["median_static_time_s"]
            row["ratio_ci_low"], row["ratio_ci_high"] = static_ratio_interval(rows, policy)
            row["acc_minus_best_static_pts"] = 100 * (acc[policy] - acc[static].max())
            row["best_static"] = acc[static].idxmax()
        for b in baselines:
            if b in med.index:
                row[f"ratio_vs_{b}"] = med[policy] / med[b]
                row[f"acc_minus_{b}_pts"] = 100 * (acc[policy] - acc[b])
        out.append(row)
    return pd.DataFrame(out)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from dynamix.train.cli import add_config_arguments

    add_config_arguments(parser)
    parser.add_argument("--cluster", action="append", required=True, help="cluster spec YAML (repeatable)")
    parser.add_argument("--policy", action="append", required=True, help="policy spec, e.g. static:64, lbbsp, "
                        "dynamix:results/policies/NAME.zip (repeatable)")
    parser.add_argument("--seeds", type=int, default=3, help="run seeds 0..N-1 (default 3)")
    parser.add_argument("--target-accuracy", type=float, default=None,
                        help="fixed target test accuracy (default: rl.target_accuracy, 0 = derived per cluster)")
    parser.add_argument("--budget", choices=BUDGETS, default=None,
                        help="every run gets the same virtual time (time) or the same epochs (epochs); "
                        "default: rl.eval_budget")
    parser.add_argument("--compare", default=None, metavar="POLICY",
                        help="also print POLICY's time-to-target ratios against the static median, lbbsp, gns")
    parser.add_argument("--out", required=True, help="output folder for runs.csv and summary.csv")
    parser.add_argument("--cache", default=None, help="finished-run cache, shareable between processes "
                        "(default: OUT/cache)")
    parser.add_argument("--no-progress", action="store_true", help="no tqdm bar")


def main(args: argparse.Namespace) -> int:
    cfg = config.load(args.params, args.profile, args.overrides)
    _, summary = evaluate(args.cluster, args.policy, cfg, args.seeds, args.out, args.target_accuracy,
                          progress=not args.no_progress, cache_dir=args.cache, budget=args.budget)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(summary.groupby(["cluster", "policy"])[["time_to_target_s", "final_accuracy", "total_time_s"]]
              .median().round(3).to_string())
        if args.compare:
            table = compare(summary, make_policy(args.compare).name)
            table.to_csv(Path(args.out) / "compare.csv", index=False)
            print(table.round(3).to_string(index=False))
    return 0
