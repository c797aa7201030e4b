"""Which trained policy ships: candidates scored with the real math on validation clusters only.

Training seeds (or recipes, or snapshots) give several policies whose returns on the surrogate do not
say which is fastest to target on a real cluster. A practitioner picks among them where they may look:
the validation clusters (``experiments.inference.tune_clusters``), never the held-out ones. Each
candidate trains the experiments' workload there under the evaluation protocol, beside the tuned
rules' LB-BSP sweeps (the same runs, so they come from the run cache), and is scored as the tuned rules
are (:mod:`dynamix.evaluation.tuning`), beside LB-BSP at every global batch of ``tune_global_batches``:

    score(p) = geomean over clusters c of  T_c(p) / min_q T_c(q)

with q over the candidates and the LB-BSP sweep together and T_c the mean over seeds of the censored
time to target (:func:`~dynamix.evaluation.targets.censored_time`). Target and horizon are the
validation cluster's one target and horizon, as the tuned rules read them
(:func:`dynamix.evaluation.tuning.with_targets`): the fraction of the best mean final accuracy among the
candidates and both LB-BSP sweeps, the per-worker one (``tune_batches``) included, whose smallest
batch sets it in the converged regime, as the static sweep's smallest sets a held-out cluster's.
Without it the target sat up to 0.8 points lower than the held-out rule puts it, and a candidate
ending at the target's edge scored as fast. A score of 1.00 is the fastest policy on every
validation cluster; the LB-BSP rows give the simple rule's score beside the candidates'. The lowest
candidate is chosen (the first listed on a tie).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import pandas as pd

from dynamix import cluster
from dynamix.cluster import ClusterSpec
from dynamix.config import Config
from dynamix.evaluation import plan
from dynamix.evaluation.runner import SimTask, run_simulations
from dynamix.evaluation.runs import run_summary
from dynamix.evaluation import tuning
from dynamix.evaluation.tuning import lbbsp_spec

TABLE_COLUMNS = ["cluster", "policy", "candidate", "seed", "final_accuracy", "total_time_s", "target_accuracy",
                 "time_to_target_s", "time_to_target_censored_s"]
"""One row per run of :func:`run_and_score`; ``candidate`` is True for the candidates, False for the LB-BSP sweep."""


def run_and_score(groups: Sequence[tuple[ClusterSpec, Config]], candidates: Mapping[str, str],
                  sweeps: Mapping[str, Sequence[int]], seeds: Sequence[int], jobs: int = 1, cache: Path | None = None,
                  progress: bool = True) -> tuple[pd.Series, pd.DataFrame]:
    """The scores (module docstring) of ``candidates`` (label -> policy spec) and of LB-BSP at each
    global batch of ``sweeps["global_batch"]``, indexed by label (``lbbsp:batch=B`` for the sweep), and
    the runs' table (:data:`TABLE_COLUMNS`; the per-worker sweep's rows, which set the target, are not
    scored). ``groups``: (validation cluster, its budgeted run config); ``sweeps``: the tuned rules'
    candidates by key (:data:`dynamix.evaluation.tuning.KEYS`)."""
    if not groups or not candidates or not seeds or not sweeps.get("global_batch"):
        raise ValueError("a selection needs at least one validation cluster, one candidate, one seed and one "
                         "global batch (experiments.inference.tune_global_batches)")
    # the tuning sweeps' own runs, so they come from the run cache
    parts = [(summary.assign(candidate=False, scored=key == "global_batch"), runs)
             for key, (summary, runs) in tuning.sweep_runs(groups, sweeps, seeds, jobs, cache, progress).items()]
    mine = [SimTask(spec, run_cfg, policy, seed, label=label)
            for spec, run_cfg in groups for label, policy in candidates.items() for seed in seeds]
    runs = run_simulations(mine, jobs, desc="selection", cache=cache, progress=progress)
    parts.append((run_summary(runs, ["cluster", "policy"]).assign(candidate=True, scored=True), runs))
    fraction, fixed = groups[0][1].evaluation.target_fraction, groups[0][1].evaluation.target_accuracy
    table = pd.concat(tuning.with_targets(parts, fraction, fixed), ignore_index=True)
    table = table[table["scored"]]
    order = list(candidates) + [lbbsp_spec(b, 0, "global_batch") for b in sweeps["global_batch"]]
    return scores(table, order), table[TABLE_COLUMNS].reset_index(drop=True)


def scores(table: pd.DataFrame, order: Sequence[str]) -> pd.Series:
    """score(p) of the module docstring for every ``policy`` of ``table`` (censored times per run), in
    ``order``: the tuned rules' score (:func:`dynamix.evaluation.tuning.scores`) with policies as candidates."""
    return tuning.scores(table, key="policy").reindex(list(order))


def choose(scores: pd.Series, candidates: Sequence[str]) -> str:
    """The candidate with the lowest score (the first listed on a tie)."""
    return str(scores.reindex(list(candidates)).idxmin())


def on_validation(cfg: Config, candidates: Mapping[str, str], run_cfg: Config, out: Path,
                  progress: bool = True) -> tuple[str, pd.Series, pd.DataFrame, list[ClusterSpec]]:
    """The choice among ``candidates`` (label -> policy spec) on ``experiments.inference.tune_clusters``
    over ``tune_seeds`` seeds, each run under ``run_cfg`` (the workload's simulated config) budgeted per
    cluster, beside the tuning sweeps (:func:`run_and_score`, :func:`choose`); returns the chosen label,
    the scores, the runs' table and the clusters. The pipeline's selection and the transfer stage's
    choice of another workload's policy both choose through here."""
    e = cfg.experiments.inference
    specs = [cluster.load(c) for c in e.tune_clusters]
    groups = list(zip(specs, plan.budgeted(cfg, [(spec, run_cfg) for spec in specs], out)))
    sweeps = {"per_worker_batch": e.tune_batches, "global_batch": e.tune_global_batches}
    scores, table = run_and_score(groups, candidates, sweeps, plan.seeds(cfg)[: e.tune_seeds], cfg.experiments.jobs,
                                  cache=plan.run_cache(out), progress=progress)
    return choose(scores, list(candidates)), scores, table, specs
