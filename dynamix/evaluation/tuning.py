"""A heuristic tuned as a practitioner would: one knob swept on validation clusters, never held-out ones.

LB-BSP (:mod:`dynamix.policies.lbbsp`) keeps a global batch B and splits it by each worker's fitted
speed; B is its one knob. A practitioner who adopts it picks B by a small sweep on clusters like the
ones they will run on, and the agent should be judged against that tuned rule, not only against a
default B. The sweep is over the *mean per-worker* batch m (B = m x N), so one choice carries over
between clusters of different sizes (the validation clusters have 4 to 6 workers).

Score of a candidate m, from the runs of every candidate on every validation cluster under the
evaluation protocol (:mod:`dynamix.evaluation`: same time budget per cluster, target = the fraction
of the best candidate's mean final accuracy there):

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

TABLE_COLUMNS = ["cluster", "n_workers", "per_worker_batch", "policy", "seed", "final_accuracy", "total_time_s",
                 "target_accuracy", "time_to_target_s", "time_to_target_censored_s"]


def lbbsp_spec(per_worker_batch: int, n_workers: int) -> str:
    """LB-BSP holding a global batch of ``per_worker_batch`` x ``n_workers``."""
    return f"lbbsp:batch={int(per_worker_batch) * int(n_workers)}"


def sweep(groups: Sequence[tuple[ClusterSpec, Config]], per_worker: Sequence[int], seeds: Sequence[int],
          jobs: int = 1, cache: Path | None = None, progress: bool = True) -> pd.DataFrame:
    """Every candidate ``m`` of ``per_worker`` on every (validation cluster, budgeted run config) of
    ``groups`` over ``seeds``: one row per run, :data:`TABLE_COLUMNS`."""
    if not groups or not per_worker or not seeds:
        raise ValueError("the LB-BSP sweep needs at least one validation cluster, one batch size and one seed")
    tasks = [SimTask(spec, run_cfg, lbbsp_spec(m, spec.n_workers), seed, (("per_worker_batch", int(m)),))
             for spec, run_cfg in groups for m in per_worker for seed in seeds]
    runs = run_simulations(tasks, jobs, desc="LB-BSP sweep", cache=cache, progress=progress)
    fraction, fixed = groups[0][1].rl.target_fraction, groups[0][1].rl.target_accuracy
    table = set_targets(run_summary(runs, ["cluster", "policy", "per_worker_batch"]), runs, fraction, fixed)
    table["n_workers"] = table["cluster"].map({spec.name: spec.n_workers for spec, _ in groups})
    table["time_to_target_censored_s"] = censored_time(table)
    return table[TABLE_COLUMNS]


def scores(table: pd.DataFrame) -> pd.Series:
    """score(m) of the module docstring, indexed by ``per_worker_batch`` in the sweep's order."""
    mean = table.groupby(["cluster", "per_worker_batch"], sort=False)["time_to_target_censored_s"].mean().unstack()
    relative = mean.div(mean.min(axis=1), axis=0)
    order = list(dict.fromkeys(table["per_worker_batch"]))
    return np.exp(np.log(relative).mean(axis=0)).reindex(order).rename("score")


def choose(table: pd.DataFrame) -> int:
    """The tuned per-worker batch: the lowest :func:`scores` (the first listed on a tie)."""
    return int(scores(table).idxmin())
