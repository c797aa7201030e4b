"""A heuristic tuned as a practitioner would: one knob swept on validation clusters, never held-out ones.

LB-BSP (:mod:`dynamix.policies.lbbsp`) keeps a global batch B and splits it by each worker's fitted
speed; B is its one knob. A practitioner who adopts it picks B by a small sweep on clusters like the
ones they will run on, and the agent should be judged against that tuned rule, not only against a
default B. Two sweeps, two rules (``key``):

- ``per_worker_batch`` (``lbbsp:tuned``): over the *mean per-worker* batch m, B = m x N on a cluster of
  N workers, so the choice grows with the cluster (128 per worker is 1,024 samples on 8 workers);
- ``global_batch`` (``lbbsp:tuned-global``): over B itself, the same on every cluster. With a learning
  rate set for a global batch, the ``cpu`` profile's best B does not grow with N (docs/results.md): there
  128 per worker misses the target on every seed of an 8-worker cluster, 512 samples on none.

Both sweeps run together (:func:`sweeps`) and read one target and one horizon per validation cluster,
as a held-out cluster's policies do: the fraction of the best mean final accuracy among all their runs
there (in the converged regime LB-BSP at 32 per worker, which only the per-worker sweep has). Read
apart, the global sweep's target sat 0.1-0.8 points lower than the per-worker sweep's on the same
cluster, which let batches that end at the target's edge look fast there. Score of a candidate m,
from the runs of every candidate on every validation cluster under the evaluation protocol
(:mod:`dynamix.evaluation`: same time budget per cluster):

    score(m) = geomean over clusters c of  T_c(m) / min_m' T_c(m')

where T_c(m) is the mean over seeds of the censored time to target
(:func:`dynamix.evaluation.targets.censored_time`: a run that never reaches it counts at the longest
run on that cluster), so a candidate that never gets there cannot win on where its runs ended. The tuned m is the lowest score; a tie goes to the candidate listed first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from dynamix.cluster import ClusterSpec
from dynamix.config import Config
from dynamix.evaluation.runner import SimTask, run_simulations
from dynamix.evaluation.runs import run_summary
from dynamix.evaluation.targets import censored_time, set_targets

KEYS = ("per_worker_batch", "global_batch")
"""What a sweep's candidates are (module docstring)."""
TABLE_COLUMNS = ["cluster", "n_workers", "per_worker_batch", "policy", "seed", "final_accuracy", "total_time_s",
                 "target_accuracy", "time_to_target_s", "time_to_target_censored_s"]


def lbbsp_spec(candidate: int, n_workers: int, key: str = "per_worker_batch") -> str:
    """LB-BSP holding a global batch of ``candidate`` x ``n_workers`` (``key`` per_worker_batch) or of
    ``candidate`` itself (``global_batch``)."""
    if key not in KEYS:
        raise ValueError(f"key = {key!r} is not allowed: must be one of {', '.join(map(repr, KEYS))}")
    return f"lbbsp:batch={int(candidate) * (int(n_workers) if key == 'per_worker_batch' else 1)}"


def sweep_tasks(groups: Sequence[tuple[ClusterSpec, Config]], candidates: Sequence[int], seeds: Sequence[int],
                key: str = "per_worker_batch") -> list[SimTask]:
    """Every candidate of ``candidates`` (per-worker or global batches, ``key``) on every (validation
    cluster, budgeted run config) of ``groups`` over ``seeds``; ``key`` is a column of the runs."""
    return [SimTask(spec, run_cfg, lbbsp_spec(m, spec.n_workers, key), seed, ((key, int(m)),))
            for spec, run_cfg in groups for m in candidates for seed in seeds]


def with_targets(parts: Sequence[tuple[pd.DataFrame, pd.DataFrame]], fraction: float,
                 fixed: float = 0.0) -> list[pd.DataFrame]:
    """Each part's per-run summary with ``target_accuracy``, ``time_to_target_s`` and
    ``time_to_target_censored_s`` from one target and one horizon per cluster over every part's runs
    (module docstring); ``parts``: (per-run summary, the runs' rows). A run in two parts (LB-BSP at 128
    per worker on 4 workers is the global sweep's 512) is the same run and counts once."""
    summary = pd.concat([s.assign(_part=i) for i, (s, _) in enumerate(parts)], ignore_index=True)
    runs = pd.concat([r for _, r in parts], ignore_index=True)
    summary = set_targets(summary, runs, fraction, fixed)
    summary["time_to_target_censored_s"] = censored_time(summary)
    return [summary[summary["_part"] == i].drop(columns="_part").reset_index(drop=True) for i in range(len(parts))]


def sweep_runs(groups: Sequence[tuple[ClusterSpec, Config]], candidates: dict[str, Sequence[int]],
               seeds: Sequence[int], jobs: int = 1, cache: Path | None = None,
               progress: bool = True) -> dict[str, tuple[pd.DataFrame, pd.DataFrame]]:
    """Each non-empty sweep of ``candidates`` (key -> batches) run: key -> (per-run summary without
    targets, the runs' rows), the parts :func:`with_targets` reads."""
    parts = {}
    for key, batches in candidates.items():
        if len(batches):
            runs = run_simulations(sweep_tasks(groups, batches, seeds, key), jobs, desc=f"LB-BSP sweep ({key})",
                                   cache=cache, progress=progress)
            parts[key] = (run_summary(runs, ["cluster", "policy", key]), runs)
    return parts


def sweeps(groups: Sequence[tuple[ClusterSpec, Config]], candidates: dict[str, Sequence[int]], seeds: Sequence[int],
           jobs: int = 1, cache: Path | None = None, progress: bool = True) -> dict[str, pd.DataFrame]:
    """The sweeps ``candidates`` names (key -> its per-worker or global batches; an empty list is no
    sweep) on every (validation cluster, budgeted run config) of ``groups`` over ``seeds``, one table
    per key (:data:`TABLE_COLUMNS` with the key in place of ``per_worker_batch``), every one read
    against the same target and horizon per cluster (module docstring)."""
    if not groups or not any(len(v) for v in candidates.values()) or not seeds:
        raise ValueError("the LB-BSP sweep needs at least one validation cluster, one batch size and one seed")
    parts = sweep_runs(groups, candidates, seeds, jobs, cache, progress)  # lbbsp_spec refuses an unknown key
    fraction, fixed = groups[0][1].evaluation.target_fraction, groups[0][1].evaluation.target_accuracy
    workers = {spec.name: spec.n_workers for spec, _ in groups}
    return {key: table.assign(n_workers=table["cluster"].map(workers))[
                [key if c == "per_worker_batch" else c for c in TABLE_COLUMNS]]
            for key, table in zip(parts, with_targets(list(parts.values()), fraction, fixed))}  # fmt: skip


def scores(table: pd.DataFrame, key: str = "per_worker_batch") -> pd.Series:
    """score(m) of the module docstring, indexed by the candidates (``key``) in the sweep's order."""
    mean = table.groupby(["cluster", key], sort=False)["time_to_target_censored_s"].mean().unstack()
    relative = mean.div(mean.min(axis=1), axis=0)
    order = list(dict.fromkeys(table[key]))
    return np.exp(np.log(relative).mean(axis=0)).reindex(order).rename("score")


def choose(table: pd.DataFrame, key: str = "per_worker_batch") -> int:
    """The tuned batch (per worker or global, ``key``): the lowest :func:`scores` (the first listed on a tie)."""
    return int(scores(table, key).idxmin())
