"""The oracle bound of a cluster: the perfectly balanced policy at the global batch chosen in hindsight.

:mod:`dynamix.policies.oracle` balances every window with the cluster's true future speeds but runs
at the global batch its spec names: one B for the whole run, or B until epoch E and then B2 (the
two-phase members). :func:`oracle_search` runs the members over a grid on one cluster, every seed
given, reads each run's time to the comparison's target, and keeps the fastest member m*:

    m* = argmin_m  mean_s min(T_m,s, tau)

over the members whose every seed reached the target (else those that reached it most often), with a
run that never reached it counted at the longest run of the grid, tau (the restricted time to target
of ``docs/protocol.md``, :func:`dynamix.evaluation.targets.censored_time`); ties go to the smaller
batch. The grid is a coarse list of constant B, optionally refined to steps of x1.25 around the
constant winner, and optionally joined by two-phase members around it. The grid, every member's time
and which member won are kept beside the choice.

This chooses B on the very runs it is then scored on, held-out clusters included. That is allowed
here and only here: the oracle is not a policy anyone could deploy but the upper bound each cluster
allows (what perfect balance at the best global batch in hindsight achieves), the denominator of
every policy's share of the headroom (:func:`dynamix.experiments.claims.headroom_share`).

Choosing the best of several members on the seeds it is scored on also favours the bound: a member
that wins on these seeds by chance, or clears the target's knife edge on all of them where it would
miss on another, sets it. :meth:`OracleSearch.cross_validated` says by how much: for each seed, the
member the same rule picks on the other seeds, scored on that seed alone (``oracle-cv``, leave one
seed out). It is what choosing the global batch on a cluster's own past runs would buy, with perfect
balance: a bound a policy can approach, where the oracle is one it can only approach by luck.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pandas as pd

from dynamix.cluster import ClusterSpec
from dynamix.cluster.costmodel import CostModel
from dynamix.config import Config
from dynamix.evaluation.lockstep import Plan, lockstep
from dynamix.evaluation.runner import SimTask
from dynamix.evaluation.runs import run_totals
from dynamix.evaluation.targets import censored_time, time_to_target
from dynamix.policies.base import PolicySpec, parse_spec_args
from dynamix.policies.oracle import OracleOptions

ORACLE = "oracle"
"""The ``policy`` label of the chosen B's runs in a comparison's per-run summary."""
ORACLE_CV = "oracle-cv"
"""The label of the runs of the member chosen on the other seeds (:meth:`OracleSearch.cross_validated`)."""
BOUNDS = (ORACLE, ORACLE_CV)
"""The labels of bounds, which no comparison counts among the policies to beat."""

GRID_COLUMNS = ["cluster", "policy", "batch", "then", "at", "n_seeds", "reached", "time_to_target_s", "chosen"]

REFINE = 1.25
"""The step of the refined grid around the coarse winner: B*/1.25 and B* x 1.25."""

PHASE_FACTORS = (0.5, 2.0)
"""The second phase's global batch of the two-phase members, as factors of B*."""


def member_spec(batch: int, then: int = 0, at: float = 0.0) -> str:
    """The oracle's policy spec for a constant global batch, or a two-phase schedule."""
    return f"oracle:batch={int(batch)}" + (f",then={int(then)},at={at:g}" if then else "")


def _members(policy: PolicySpec) -> dict:
    """A member's ``batch``, ``then`` and ``at``, read from its spec as the oracle policy reads them."""
    o = parse_spec_args(policy.kind, policy.arg, OracleOptions)
    return {"batch": int(o.batch), "then": int(o.then), "at": float(o.at)}


@dataclass(frozen=True)
class OracleSearch:
    """``grid``: one row per member (:data:`GRID_COLUMNS`: a constant ``batch``, or ``then`` from epoch
    ``at`` on; ``reached``, the share of seeds that reached the target; ``time_to_target_s``, the mean
    restricted time over seeds, virtual s); ``policy``: the winner's spec; ``runs``: one row per
    (member, seed): cluster, policy, batch, then, at, seed, time_to_target_s (NaN: not reached),
    final_accuracy, total_time_s, iterations, mean_global_batch."""

    grid: pd.DataFrame
    policy: str
    runs: pd.DataFrame

    def chosen_runs(self) -> pd.DataFrame:
        """The winner's runs labelled ``oracle``: rows to append to a comparison's per-run summary."""
        return self.runs[self.runs["policy"] == self.policy].assign(policy=ORACLE)

    def cross_validated(self) -> dict[int, str]:
        """Seed -> the member :func:`pick_fastest` chooses on every other seed of the search (module
        docstring): the choice that never saw the run it is scored on. Needs two seeds or more."""
        seeds = sorted(int(s) for s in self.runs["seed"].unique())
        if len(seeds) < 2:
            raise ValueError("a cross-validated oracle needs the search to run two seeds or more")
        return {s: str(pick_fastest(self.runs[self.runs["seed"] != s]).query("chosen")["policy"].iloc[0])
                for s in seeds}


def pick_fastest(runs: pd.DataFrame) -> pd.DataFrame:
    """The grid table of per-(member, seed) ``runs`` (module docstring), ``chosen`` marking the winner:
    the smallest mean restricted time among the members that reached the target on the most seeds,
    ties to the smaller batch, then the constant member."""
    runs = runs.assign(**{k: runs[k] if k in runs else v for k, v in (("then", 0), ("at", 0.0))})
    if "policy" not in runs:
        runs = runs.assign(policy=[member_spec(b, t, a) for b, t, a in zip(runs["batch"], runs["then"], runs["at"])])
    restricted = censored_time(runs)
    per = runs.assign(_t=restricted, _hit=runs["time_to_target_s"].notna()).groupby("policy", sort=False).agg(
        cluster=("cluster", "first"), batch=("batch", "first"), then=("then", "first"), at=("at", "first"),
        n_seeds=("seed", "count"), reached=("_hit", "mean"), time_to_target_s=("_t", "mean")).reset_index()
    pool = per[per["reached"] == per["reached"].max()]
    best = pool.sort_values(["time_to_target_s", "batch", "then"]).iloc[0]["policy"]
    return per.assign(chosen=per["policy"] == best)[GRID_COLUMNS]


def search_plan(spec: ClusterSpec, cfg: Config, batches: Sequence[int], seeds: Sequence[int],
                target_accuracy: float, refine: bool = False,
                phase_epochs: Sequence[float] = ()) -> Plan[OracleSearch]:
    """The search of :func:`oracle_search` as a plan of :mod:`dynamix.evaluation.lockstep`: it yields
    each step's runs (the constant grid, the refined grid, the two-phase members) and returns the
    :class:`OracleSearch`, so several clusters' searches share their sweeps."""
    if not batches or not seeds:
        raise ValueError("oracle_search needs at least one global batch and one seed")

    def run(policies: Sequence[str], shares_start: bool = False) -> Plan[pd.DataFrame]:
        tasks = [SimTask(spec, cfg, p, int(s), shares_start=shares_start) for p in policies for s in seeds]
        frames = yield tasks
        return pd.DataFrame([{"cluster": spec.name, "policy": str(t.policy), **_members(t.policy), "seed": t.seed,
                              "time_to_target_s": time_to_target(f, target_accuracy), **run_totals(f)}
                             for t, f in zip(tasks, frames)])

    def constant_winner(runs: pd.DataFrame) -> int:
        return int(pick_fastest(runs[runs["then"] == 0]).query("chosen")["batch"].iloc[0])

    runs = yield from run([member_spec(b) for b in sorted({int(b) for b in batches})])
    if refine:
        best = constant_winner(runs)
        new = [member_spec(b) for b in (round(best / REFINE), round(best * REFINE))]
        runs = pd.concat([runs, (yield from run([p for p in new if p not in set(runs["policy"])]))],
                         ignore_index=True)
    if phase_epochs:
        best = constant_winner(runs)
        # one seed's members are B* up to their switch: they run as one, forked where they part
        runs = pd.concat([runs, (yield from run([member_spec(best, round(best * f), e) for e in phase_epochs
                                                 for f in PHASE_FACTORS], shares_start=True))], ignore_index=True)
    table = pick_fastest(runs)
    return OracleSearch(table, str(table.loc[table["chosen"], "policy"].iloc[0]), runs)


def oracle_search(spec: ClusterSpec, cfg: Config, batches: Sequence[int], seeds: Sequence[int],
                  target_accuracy: float, jobs: int = 1, cost: CostModel | None = None,
                  cache: Path | None = None, progress: bool = True, refine: bool = False,
                  phase_epochs: Sequence[float] = ()) -> OracleSearch:
    """Run ``oracle:batch=B`` for every B in ``batches`` and seed on ``spec`` under ``cfg`` (the
    comparison's run config, its budget included) and choose the fastest member (module docstring)
    by the time to ``target_accuracy``, the comparison's target on this cluster. With ``refine`` the
    grid gains B*/1.25 and B* x 1.25 around the constant winner B*, so the bound's batch is within a
    factor 1.25 of the best constant one; with ``phase_epochs``, the two-phase members B* until epoch
    E, then B* x f (f in :data:`PHASE_FACTORS`), for every E. The winner is chosen among all. One
    cluster's :func:`search_plan`, its steps run in ``jobs`` processes through ``cache``."""
    plan = search_plan(spec, cfg, batches, seeds, target_accuracy, refine, phase_epochs)
    return lockstep([plan], jobs, f"oracle {spec.name}", cost, cache, progress)[0]
