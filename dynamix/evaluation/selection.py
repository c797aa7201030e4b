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

**Confirmed against the warm start** (``experiments.inference.confirm_seeds``). The lowest of several
candidates on few seeds is partly the luckiest: a time to target is a knife edge (``docs/protocol.md``);
one rule's three seeds cross the target at 57 %, 63 % and 90 % of their runs on one held-out cluster.
With a residual action space the warm start is the base rule, doing nothing, so a trained policy must
earn its corrections: when the choice is not the warm start, both run on the seeds the choice was not
made on too, at each validation cluster's own target and horizon, and the choice ships only if its
pooled paired ratio (:func:`dynamix.evaluation.stats.pooled_interval`: per seed the geometric mean over
clusters, then the t interval over seeds) is below 1 with its whole interval, the standard every claim
of "faster" is held to (``docs/protocol.md``), and it misses the target on no more runs than the warm
start; else the warm start ships. Early stopping by validation, on fresh seeds. A point estimate below 1
is not enough: on converged's four validation clusters seed 0's snapshot at half the training scored
0.993 [0.964, 1.023] of its warm start over three seeds and, shipped, missed the target on every seed of
a held-out parameter server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import pandas as pd

from dynamix import cluster
from dynamix.cluster import ClusterSpec
from dynamix.config import Config
from dynamix.evaluation import plan, stats, targets
from dynamix.evaluation.runner import SimTask, run_simulations
from dynamix.evaluation.runs import run_summary
from dynamix.evaluation import tuning
from dynamix.evaluation.tuning import lbbsp_spec

TABLE_COLUMNS = ["cluster", "policy", "candidate", "seed", "final_accuracy", "total_time_s", "target_accuracy",
                 "time_to_target_s", "horizon_s", "time_to_target_censored_s", "confirm"]
"""One row per run of :func:`run_and_score` and :func:`confirm`; ``candidate`` is True for the candidates,
False for the LB-BSP sweep; ``horizon_s`` the cluster's censoring horizon tau (virtual s, the longest run
of the scored sweep, :func:`dynamix.evaluation.targets.horizon`); ``confirm`` True for the confirmation's
runs on the seeds the choice was not made on (not scored)."""


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
    table["horizon_s"] = targets.horizon(table)
    table = table[table["scored"]].assign(confirm=False)
    order = list(candidates) + [lbbsp_spec(b, 0, "global_batch") for b in sweeps["global_batch"]]
    return scores(table, order), table[TABLE_COLUMNS].reset_index(drop=True)


def scores(table: pd.DataFrame, order: Sequence[str]) -> pd.Series:
    """score(p) of the module docstring for every ``policy`` of ``table`` (censored times per run), in
    ``order``: the tuned rules' score (:func:`dynamix.evaluation.tuning.scores`) with policies as candidates."""
    return tuning.scores(table, key="policy").reindex(list(order))


def choose(scores: pd.Series, candidates: Sequence[str]) -> str:
    """The candidate with the lowest score (the first listed on a tie)."""
    return str(scores.reindex(list(candidates)).idxmin())


def confirm(groups: Sequence[tuple[ClusterSpec, Config]], table: pd.DataFrame, chosen: tuple[str, str],
            base: tuple[str, str], seeds: Sequence[int], ci: float = 0.95, jobs: int = 1, cache: Path | None = None,
            progress: bool = True) -> tuple[dict, pd.DataFrame]:
    """The confirmation of the module docstring: ``chosen`` and ``base`` (label, policy spec) on every
    seed of ``seeds`` the scored ``table`` (:func:`run_and_score`'s) lacks, judged with its runs at each
    cluster's target and horizon from ``table``. Returns the record (``chosen``, ``base``, ``seeds``, the
    pooled paired ratio ``ratio`` [``ci_lo``, ``ci_hi``] of chosen over base, runs ``missed`` by each, and
    ``ships``: the label that ships) and the new runs' rows (:data:`TABLE_COLUMNS`, ``confirm`` True)."""
    pair = dict([chosen, base])
    extra = [s for s in seeds if s not in set(table["seed"])]
    tasks = [SimTask(spec, run_cfg, policy, seed, label=label)
             for spec, run_cfg in groups for label, policy in pair.items() for seed in extra]
    runs = run_simulations(tasks, jobs, desc="selection (confirmation)", cache=cache, progress=progress)
    per_cluster = table.groupby("cluster")[["target_accuracy", "horizon_s"]].first()
    added = pd.concat([targets.set_targets(rows, runs[runs["cluster"] == name], 0.0,
                                           fixed=float(per_cluster.loc[name, "target_accuracy"]))
                       for name, rows in run_summary(runs, ["cluster", "policy"]).groupby("cluster", sort=False)],
                      ignore_index=True).assign(candidate=True, confirm=True)
    added["horizon_s"] = added["cluster"].map(per_cluster["horizon_s"])
    both = pd.concat([table[table["policy"].isin(list(pair))], added], ignore_index=True)
    both["horizon_s"] = targets.horizon(both)  # a new run longer than the sweep's longest moves tau
    both["time_to_target_censored_s"] = targets.censored_time(both)
    return verdict(both, chosen[0], base[0], ci), both[both["confirm"]][TABLE_COLUMNS].reset_index(drop=True)


def verdict(runs: pd.DataFrame, chosen: str, base: str, ci: float = 0.95) -> dict:
    """The confirmation's record (:func:`confirm`) from ``runs``, the two policies' rows on every seed
    with ``time_to_target_s`` and ``time_to_target_censored_s`` (one target and horizon per cluster)."""
    t = runs.pivot_table(index=["cluster", "seed"], columns="policy", values="time_to_target_censored_s")
    cells = [(g[chosen] / g[base]).droplevel(0) for _, g in t.groupby(level=0, sort=False)]
    est = stats.pooled_interval(cells, ci)
    missed = {label: int(runs.loc[runs["policy"] == label, "time_to_target_s"].isna().sum()) for label in (chosen, base)}
    ships = chosen if est["ci_hi"] < 1.0 and missed[chosen] <= missed[base] else base
    return {"chosen": chosen, "base": base, "seeds": sorted(set(runs["seed"].astype(int))), "ratio": est["estimate"],
            "ci_lo": est["ci_lo"], "ci_hi": est["ci_hi"], "missed": missed, "ships": ships}


def warm_start(cfg: Config, label: str) -> str | None:
    """The label of policy ``label``'s warm start, its snapshot at 0 % of the training (``rl.snapshots``
    holds 0), against which a trained choice is confirmed (:func:`confirm`); None without that snapshot."""
    return next((name for name, f in cfg.rl.snapshot_names(label).items() if f == 0.0), None)


def on_validation(cfg: Config, candidates: Mapping[str, str], run_cfg: Config, out: Path, base: str | None = None,
                  progress: bool = True) -> tuple[str, pd.Series, pd.DataFrame, list[ClusterSpec], dict | None]:
    """The choice among ``candidates`` (label -> policy spec) on ``experiments.inference.tune_clusters``
    over ``tune_seeds`` seeds, each run under ``run_cfg`` (the workload's simulated config) budgeted per
    cluster, beside the tuning sweeps (:func:`run_and_score`, :func:`choose`), then, with
    ``confirm_seeds`` set and a ``base`` candidate (the warm start's label) that is not the choice,
    confirmed against it (:func:`confirm`). Returns the label that ships, the scores, the runs' table,
    the clusters and the confirmation's record (None without one). The pipeline's selection and the
    transfer stage's choice of another workload's policy both choose through here."""
    e = cfg.experiments.inference
    specs = [cluster.load(c) for c in e.tune_clusters]
    groups = list(zip(specs, plan.budgeted(cfg, [(spec, run_cfg) for spec in specs], out)))
    sweeps = {"per_worker_batch": e.tune_batches, "global_batch": e.tune_global_batches}
    scores, table = run_and_score(groups, candidates, sweeps, plan.seeds(cfg)[: e.tune_seeds], cfg.experiments.jobs,
                                  cache=plan.run_cache(out), progress=progress)
    choice = choose(scores, list(candidates))
    if not e.confirm_seeds or base is None or choice == base:
        return choice, scores, table, specs, None
    record, added = confirm(groups, table, (choice, candidates[choice]), (base, candidates[base]),
                            plan.seeds(cfg)[: e.confirm_seeds], cfg.experiments.ci, cfg.experiments.jobs,
                            cache=plan.run_cache(out), progress=progress)
    return record["ships"], scores, pd.concat([table, added], ignore_index=True), specs, record
