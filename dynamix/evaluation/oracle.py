"""The oracle bound of a cluster: the perfectly balanced policy at the global batch chosen in hindsight.

:mod:`dynamix.policies.oracle` balances every window with the cluster's true future speeds but runs
at the global batch B its spec names. :func:`oracle_search` runs ``oracle:batch=B`` over a grid of B
on one cluster (every seed), reads each run's time to the comparison's target, and keeps the B with
the smallest time:

    B* = argmin_B  mean_s min(T_B,s, tau_B,s)

over the B whose every seed reached the target (else those that reached it most often), with a run
that never reached it counted at the longest run of the grid, tau (the restricted time to target of
``docs/protocol.md``, :func:`dynamix.evaluation.targets.censored_time`); ties go to the smaller B. The grid and every B's time are kept beside the
choice.

This chooses B on the very runs it is then scored on, held-out clusters included. That is allowed
here and only here: the oracle is not a policy anyone could deploy but the upper bound each cluster
allows (what perfect balance at the best global batch in hindsight achieves), the denominator of
every policy's share of the headroom (:func:`dynamix.experiments.claims.headroom_share`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pandas as pd

from dynamix.cluster import ClusterSpec
from dynamix.cluster.costmodel import CostModel
from dynamix.config import Config
from dynamix.evaluation.runner import SimTask, run_tasks
from dynamix.evaluation.runs import run_totals
from dynamix.evaluation.targets import censored_time, time_to_target

ORACLE = "oracle"
"""The ``policy`` label of the chosen B's runs in a comparison's per-run summary."""

GRID_COLUMNS = ["cluster", "batch", "n_seeds", "reached", "time_to_target_s", "chosen"]


@dataclass(frozen=True)
class OracleSearch:
    """``grid``: one row per B (:data:`GRID_COLUMNS`: ``reached``, the share of seeds that reached the
    target; ``time_to_target_s``, the mean restricted time over seeds, virtual s); ``batch``: B*;
    ``runs``: one row per (B, seed): cluster, policy (``oracle:batch=B``), batch, seed,
    time_to_target_s (NaN: not reached), final_accuracy, total_time_s, iterations, mean_global_batch."""

    grid: pd.DataFrame
    batch: int
    runs: pd.DataFrame

    def chosen_runs(self) -> pd.DataFrame:
        """B*'s runs labelled ``oracle``: rows to append to a comparison's per-run summary."""
        return self.runs[self.runs["batch"] == self.batch].assign(policy=ORACLE)


def pick_fastest(runs: pd.DataFrame) -> pd.DataFrame:
    """The grid table of per-(B, seed) ``runs`` (module docstring), ``chosen`` marking B*."""
    restricted = censored_time(runs)
    per_b = runs.assign(_t=restricted, _hit=runs["time_to_target_s"].notna()).groupby("batch").agg(
        cluster=("cluster", "first"), n_seeds=("seed", "count"), reached=("_hit", "mean"),
        time_to_target_s=("_t", "mean")).reset_index()
    pool = per_b[per_b["reached"] == per_b["reached"].max()]
    best = int(pool.sort_values(["time_to_target_s", "batch"]).iloc[0]["batch"])
    return per_b.assign(chosen=per_b["batch"] == best)[GRID_COLUMNS]


def oracle_search(spec: ClusterSpec, cfg: Config, batches: Sequence[int], seeds: Sequence[int],
                  target_accuracy: float, jobs: int = 1, cost: CostModel | None = None,
                  cache: Path | None = None, progress: bool = True) -> OracleSearch:
    """Run ``oracle:batch=B`` for every B in ``batches`` and seed on ``spec`` under ``cfg`` (the
    comparison's run config, its budget included) and choose B* (module docstring) by the time to
    ``target_accuracy``, the comparison's target on this cluster."""
    if not batches or not seeds:
        raise ValueError("oracle_search needs at least one global batch and one seed")
    grid = sorted({int(b) for b in batches})
    tasks = [SimTask(spec, cfg, f"oracle:batch={b}", int(s)) for b in grid for s in seeds]
    frames = run_tasks(tasks, jobs, f"oracle {spec.name}", cost, cache, progress)
    rows = [{"cluster": spec.name, "policy": t.policy, "batch": int(t.policy.split("=")[1]), "seed": t.seed,
             "time_to_target_s": time_to_target(f, target_accuracy), **run_totals(f)}
            for t, f in zip(tasks, frames)]
    runs = pd.DataFrame(rows)
    table = pick_fastest(runs)
    return OracleSearch(table, int(table.loc[table["chosen"], "batch"].iloc[0]), runs)
