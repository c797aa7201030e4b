"""Which trained policy ships: candidates scored with the real math on validation clusters only.

Training seeds (or recipes, or snapshots) give several policies whose returns on the surrogate do not
say which is fastest to target on a real cluster. A practitioner picks among them where they may look:
the validation clusters (``experiments.inference.tune_clusters``), never the held-out ones. Each
candidate trains the experiments' workload there under the evaluation protocol, beside LB-BSP at every
global batch of ``tune_global_batches`` (the sweep that tunes ``lbbsp:tuned-global``, so those runs
come from the run cache), and is scored as the tuned rules are (:mod:`dynamix.evaluation.tuning`):

    score(p) = geomean over clusters c of  T_c(p) / min_q T_c(q)

with q over the candidates and the LB-BSP sweep together and T_c the mean over seeds of the censored
time to target (:func:`~dynamix.evaluation.targets.censored_time`, one target per cluster: the fraction
of the best mean final accuracy among all of them). A score of 1.00 is the fastest policy on every
validation cluster; the LB-BSP rows give the simple rule's score beside the candidates'. The lowest
candidate is chosen (the first listed on a tie).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import pandas as pd

from dynamix.cluster import ClusterSpec
from dynamix.config import Config
from dynamix.evaluation.runner import SimTask, run_simulations
from dynamix.evaluation.runs import run_summary
from dynamix.evaluation.targets import censored_time, set_targets
from dynamix.evaluation import tuning
from dynamix.evaluation.tuning import lbbsp_spec

TABLE_COLUMNS = ["cluster", "policy", "candidate", "seed", "final_accuracy", "total_time_s", "target_accuracy",
                 "time_to_target_s", "time_to_target_censored_s"]
"""One row per run of :func:`run_and_score`; ``candidate`` is True for the candidates, False for the LB-BSP sweep."""


def run_and_score(groups: Sequence[tuple[ClusterSpec, Config]], candidates: Mapping[str, str],
                  global_batches: Sequence[int], seeds: Sequence[int], jobs: int = 1, cache: Path | None = None,
                  progress: bool = True) -> tuple[pd.Series, pd.DataFrame]:
    """The scores (module docstring) of ``candidates`` (label -> policy spec) and of LB-BSP at each of
    ``global_batches``, indexed by label (``lbbsp:batch=B`` for the sweep), and the runs' table
    (:data:`TABLE_COLUMNS`). ``groups``: (validation cluster, its budgeted run config)."""
    if not groups or not candidates or not seeds:
        raise ValueError("a selection needs at least one validation cluster, one candidate and one seed")
    sweep = [SimTask(spec, run_cfg, lbbsp_spec(b, spec.n_workers, "global_batch"), seed, (("global_batch", int(b)),))
             for spec, run_cfg in groups for b in global_batches for seed in seeds]  # the tuning sweep's run ids
    mine = [SimTask(spec, run_cfg, policy, seed, label=label)
            for spec, run_cfg in groups for label, policy in candidates.items() for seed in seeds]
    runs = run_simulations(sweep + mine, jobs, desc="selection", cache=cache, progress=progress)
    fraction, fixed = groups[0][1].evaluation.target_fraction, groups[0][1].evaluation.target_accuracy
    table = set_targets(run_summary(runs, ["cluster", "policy"]), runs, fraction, fixed)
    table["candidate"] = table["policy"].isin(list(candidates))
    table["time_to_target_censored_s"] = censored_time(table)
    order = list(candidates) + [lbbsp_spec(b, 0, "global_batch") for b in global_batches]
    return scores(table, order), table[TABLE_COLUMNS]


def scores(table: pd.DataFrame, order: Sequence[str]) -> pd.Series:
    """score(p) of the module docstring for every ``policy`` of ``table`` (censored times per run), in
    ``order``: the tuned rules' score (:func:`dynamix.evaluation.tuning.scores`) with policies as candidates."""
    return tuning.scores(table, key="policy").reindex(list(order))


def choose(scores: pd.Series, candidates: Sequence[str]) -> str:
    """The candidate with the lowest score (the first listed on a tie)."""
    return str(scores.reindex(list(candidates)).idxmin())
