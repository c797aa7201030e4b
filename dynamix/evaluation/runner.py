"""Run simulated training runs: tasks in-process, in a process pool or on Ray, through the run cache.

A :class:`SimTask` is one run (cluster, full config, policy spec, seed). :func:`run_tasks` runs a list
of them, in ``jobs`` spawned processes with one torch thread each when ``jobs > 1``, or as Ray tasks
(``executor.kind: ray``, :mod:`dynamix.evaluation.executor`), and returns their rows in task order
whatever the scheduling (every run seeds itself from its seed). Each process makes a spec's policy once
and resets it for every run, so a trained policy's artifact is read once, not once per seed; the
processes serve every sweep of the process (:mod:`dynamix.evaluation.pool`), and tasks marked
``shares_start`` run as one run forked where they part (:mod:`dynamix.sim.fork`). :func:`budgets`
fixes each cluster's budget (:mod:`dynamix.evaluation.budget`) and :func:`evaluate` is the whole
protocol of ``dynamix evaluate``::

    dynamix evaluate --cluster clusters/heldout/hetero-speed-4.yaml --policy dynamix:dynamix \\
        --policy static:64 --policy lbbsp --seeds 3 --out results/eval/heldout

It writes ``OUT/runs.csv`` (the simulator's per-window rows, :data:`~dynamix.metrics.schema.RUNS_COLUMNS`,
plus ``cluster``) and ``OUT/summary.csv`` (:data:`SUMMARY_COLUMNS`, one row per cluster, policy and
seed; times in the simulator's virtual seconds; ``budget_s`` empty for the ``epochs`` budget; ``clamped``
True for a run whose policy could not run as its spec asks, :func:`simulate_task`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
from concurrent.futures import as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import pandas as pd
import torch
from tqdm.auto import tqdm

from dynamix import cluster as clusters
from dynamix import io
from dynamix.cluster import ClusterSpec
from dynamix.cluster.costmodel import CostModel
from dynamix.config import Config, DataConfig, with_overrides
from dynamix.data import load_dataset
from dynamix.evaluation.budget import budget_time_s, check_budget, reference_policy, time_budget_config
from dynamix.evaluation import executor, replay
from dynamix.evaluation.pool import discard, shared_pool
from dynamix.evaluation.cache import cache_path, cached_run, store
from dynamix.evaluation.runs import run_totals
from dynamix.evaluation.targets import set_targets
from dynamix.metrics.schema import RUNS_COLUMNS
from dynamix.policies.base import BatchSizePolicy, Bounds, PolicySpec, check_first_decision, make_policy
from dynamix.rl.artifact import artifact_paths
from dynamix.sim import progress as surrogate
from dynamix.sim.cluster import calibrated_cost
from dynamix.sim.fork import forkable, simulate_forked
from dynamix.sim.run import Decisions, backend_label, drive, policy_context, simulate, virtual_cluster

log = logging.getLogger(__name__)

SUMMARY_COLUMNS = ["cluster", "policy", "seed", "time_to_target_s", "final_accuracy", "total_time_s",
                   "target_accuracy", "iterations", "mean_global_batch", "budget", "budget_s", "clamped"]


@dataclass(frozen=True)
class SimTask:
    """One simulated run: a cluster, a full config (workload, budget), a policy spec and a seed.

    ``policy`` may be given as text: it is parsed here, once, and a bad spec fails before any run.
    ``keys`` become extra columns of every row of :func:`run_simulations` (e.g. ``optimizer``,
    ``n_workers``), so one tidy ``runs.csv`` holds a whole grid.
    """

    spec: ClusterSpec
    cfg: Config
    policy: PolicySpec
    seed: int
    keys: tuple[tuple[str, Any], ...] = ()
    label: str = ""  # the ``policy`` column of run_simulations; default: policy.label
    # runs whose first windows are the same: the tasks of one sweep so marked that share cluster, config and
    # seed run as one, forked where their decisions part (dynamix.sim.fork; local processes only)
    shares_start: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "policy", PolicySpec.parse(self.policy))

    @property
    def run_id(self) -> str:
        return io.run_id(self.spec.name, *(v for _, v in self.keys), self.label or str(self.policy), self.seed)


@functools.lru_cache(maxsize=2)
def _dataset(data_cfg: DataConfig):
    return load_dataset(data_cfg)


def _simulate(task: SimTask, cost: CostModel, policy: BatchSizePolicy, trace: Decisions | None = None) -> pd.DataFrame:
    """The simulator's rows of one task, timed by ``cost`` (no cache); its decisions appended to ``trace``."""
    if task.cfg.train.threads:
        torch.set_num_threads(task.cfg.train.threads)
    return simulate(task.spec, task.cfg, policy, task.seed, progress=False, data=_dataset(task.cfg.data), cost=cost,
                    trace=trace)


def _replay(task: SimTask, cost: CostModel, policy: BatchSizePolicy,
            candidates: Iterator[tuple[Path, Decisions]]) -> tuple[pd.DataFrame, Decisions] | None:
    """The task's run served from a cached run of ``candidates`` that ``policy`` reproduces, or None
    (:mod:`dynamix.evaluation.replay`)."""
    runs = list(candidates)
    if not runs or not replay.replayable(task.cfg, policy):
        return None
    cfg = task.cfg
    cluster = virtual_cluster(task.spec, cfg, data=None if cfg.sim.backend == "surrogate" else _dataset(cfg.data),
                              seed=task.seed, cost=cost)
    ctx = policy_context(cluster, cfg, task.seed)
    policy.reset(ctx)
    first = check_first_decision(policy.initial(ctx), ctx.n_workers, ctx.bounds, ctx.dataset_size)

    def run(frame: pd.DataFrame, decisions: Decisions) -> pd.DataFrame:
        return drive(replay.Recorded(cluster, frame, decisions), task.spec, cfg, policy, task.seed,
                     backend_label(cfg), progress=False)

    return replay.replayed(runs, (first.batch_sizes, first.lr_scale), run)


def _clamped(task: SimTask, policy: BatchSizePolicy, frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with the ``clamped`` column of :func:`simulate_task`."""
    bounds = Bounds(task.cfg.batch.min, task.cfg.batch.max)
    return frame.assign(clamped=policy.unmet_request(task.spec.n_workers, bounds) is not None)


def simulate_task(task: SimTask, policy: BatchSizePolicy, cost: CostModel,
                  cache: Path | None = None) -> pd.DataFrame:
    """The simulator's rows of one task under ``policy``, the one made from its spec
    (:func:`made_policies`, :func:`_worker_policy`), read back from ``cache`` when it ran before (or
    replayed from a cached run with the same decisions, :mod:`dynamix.evaluation.replay`), timed
    by ``cost``, with a ``clamped`` column: True when the policy cannot run as its spec asks on this
    cluster (a global batch its workers cannot hold within ``batch.min``/``batch.max``; the simulator
    logs why)."""
    frame = cached_run(cache, task.cfg, cost, task.spec, policy, task.seed,
                       lambda trace: _simulate(task, cost, policy, trace),
                       lambda candidates: _replay(task, cost, policy, candidates))
    return _clamped(task, policy, frame)


def made_policies(specs: Iterable[PolicySpec],
                  made: Mapping[PolicySpec, BatchSizePolicy] | None = None) -> dict[PolicySpec, BatchSizePolicy]:
    """One policy per distinct spec of ``specs``: those in ``made`` (e.g. already checked against the
    bounds) as they are, the others made here. A policy starts afresh at every run's reset, so one
    instance serves all its spec's runs and a trained policy's artifact is read once."""
    out = dict(made or {})
    for spec in specs:
        if spec not in out:
            out[spec] = make_policy(spec)
    return out


@functools.lru_cache(maxsize=None)
def _made(spec: PolicySpec, stamp: tuple) -> BatchSizePolicy:
    return make_policy(spec)


def _worker_policy(spec: PolicySpec) -> BatchSizePolicy:
    """A worker process's policy for ``spec``, made by its first run and reset by every later one. A pool
    worker serves every sweep of its process (:mod:`dynamix.evaluation.pool`), so a trained policy is
    made again when its artifact's files changed on disk (size and modification time) since; a Ray worker
    reads trained policies only at folders named by their content
    (:func:`~dynamix.evaluation.executor.materialize`), so one spec never means two artifacts."""
    paths = artifact_paths(spec.path) if spec.path is not None else []
    return _made(spec, tuple((p.stat().st_size, p.stat().st_mtime_ns) for p in paths if p.exists()))


def _pooled(task: SimTask, cost: CostModel, cache: Path | None) -> pd.DataFrame:
    """:func:`simulate_task` in a pool worker, under that worker's policy for the task's spec."""
    return simulate_task(task, _worker_policy(task.policy), cost, cache)


def simulate_together(tasks: Sequence[SimTask], policies: Sequence[BatchSizePolicy], cost: CostModel,
                      cache: Path | None = None) -> list[pd.DataFrame]:
    """The rows of ``tasks`` (one cluster, config and seed; :func:`simulate_task`'s, ``clamped`` column
    included) under ``policies``, one per task: those in ``cache`` read back, the others simulated as one
    run forked where their decisions part (:func:`dynamix.sim.fork.simulate_forked`) and cached with
    their decisions."""
    t0 = tasks[0]
    paths = [cache_path(cache, t.cfg, cost, t.spec, p, t.seed) if cache is not None else None
             for t, p in zip(tasks, policies)]
    frames: list[pd.DataFrame | None] = [pd.read_csv(p) if p is not None and p.exists() else None for p in paths]
    todo = [k for k, f in enumerate(frames) if f is None]
    if todo:
        traces: list[Decisions] = [[] for _ in todo]
        made = simulate_forked(t0.spec, t0.cfg, [policies[k] for k in todo], t0.seed, data=_dataset(t0.cfg.data),
                               cost=cost, traces=traces)
        for k, frame, trace in zip(todo, made, traces):
            if paths[k] is not None:
                store(paths[k], frame, t0.spec, t0.seed, trace)
            frames[k] = frame
    return [_clamped(t, p, f) for t, p, f in zip(tasks, policies, frames)]


def _pooled_together(tasks: Sequence[SimTask], cost: CostModel, cache: Path | None) -> list[pd.DataFrame]:
    """:func:`simulate_together` in a pool worker, under policies made for these runs: a forked run
    copies its policies, and a kept one still holds the cluster of its last run."""
    return simulate_together(tasks, [make_policy(t.policy) for t in tasks], cost, cache)


def units(tasks: Sequence[SimTask], costs: Sequence[CostModel]) -> list[list[int]]:
    """The tasks' indices grouped into what runs as one: every task alone, except tasks marked
    ``shares_start`` on one cluster, config, seed and cost model, which run together
    (:func:`simulate_together`) when the real-math simulator can fork them."""
    groups: dict[str, list[int]] = {}
    out: list[list[int]] = []
    for i, t in enumerate(tasks):
        if t.shares_start and forkable(t.cfg):
            key = repr((t.spec, t.cfg, t.seed, costs[i]))
            if key not in groups:
                groups[key] = []
                out.append(groups[key])
            groups[key].append(i)
        else:
            out.append([i])
    return out


def _files(policy: PolicySpec, surrogate_path: Path | None) -> dict[str, bytes]:
    """What a run reads from the driver's disk, by name: a trained policy's pair (``dynamix:PATH``) and
    the fitted surrogate (``sim.backend: surrogate``); shipped to Ray nodes, which may lack them."""
    files = {p.name: p.read_bytes() for p in artifact_paths(policy.path)} if policy.path is not None else {}
    if surrogate_path is not None:
        files[SHIPPED_SURROGATE] = surrogate_path.read_bytes()
    return files


SHIPPED_SURROGATE = "surrogate/model.json"
"""The fitted surrogate's name among a shipped run's files (:func:`_files`)."""


def simulate_shipped(task: SimTask, cost: CostModel, files: Mapping[str, bytes]) -> tuple[pd.DataFrame, Decisions]:
    """:func:`_simulate` on a Ray node, the run's policy and surrogate read from the ``files`` the driver
    shipped (:func:`_files`), written to this node first (:func:`~dynamix.evaluation.executor.materialize`);
    the rows and the run's decisions."""
    if files:
        folder = executor.materialize(files)
        if task.policy.path is not None:
            shipped = PolicySpec.trained(folder / artifact_paths(task.policy.path)[0].name)
            task = dataclasses.replace(task, policy=shipped)
        if SHIPPED_SURROGATE in files:
            shipped_surrogate = {"sim": {"surrogate": str(folder / SHIPPED_SURROGATE)}}
            task = dataclasses.replace(task, cfg=with_overrides(task.cfg, shipped_surrogate))
    trace: Decisions = []
    return _simulate(task, cost, _worker_policy(task.policy), trace), trace


def workload_costs(tasks: Sequence[SimTask]) -> list[CostModel]:
    """Each task's calibrated cost model, looked up once per workload (model and width)."""
    models: dict[tuple[str, float], CostModel] = {}
    for t in tasks:
        key = (t.cfg.model.name, t.cfg.model.width)
        if key not in models:
            models[key] = calibrated_cost(t.cfg)
    return [models[(t.cfg.model.name, t.cfg.model.width)] for t in tasks]


def log_progress(bar: tqdm) -> None:
    """One log line per finished run with its ETA (``scalability: 12/48 runs, 7m00s elapsed, ETA
    21m00s``): under papermill the bar is a notebook widget that the pipeline's log never sees. Silent
    with the bar disabled (``progress=False``)."""
    if bar.disable:
        return
    d = bar.format_dict
    # the mean rate so far (tqdm's own smoothed rate is unset between its refreshes)
    left = (d["total"] - d["n"]) * d["elapsed"] / d["n"] if d["n"] else math.nan
    eta = bar.format_interval(left) if math.isfinite(left) else "?"
    log.info("%s: %d/%d runs, %s elapsed, ETA %s", d["prefix"], d["n"], d["total"],
             bar.format_interval(d["elapsed"]), eta)


def _in_pool(tasks: Sequence[SimTask], costs: Sequence[CostModel], cache: Path | None,
             jobs: int) -> Iterator[tuple[int, pd.DataFrame]]:
    """(index, rows) of every task as it finishes in the process's ``jobs`` spawned workers
    (:func:`~dynamix.evaluation.pool.shared_pool`), the tasks that run together (:func:`units`) as one
    job; the largest jobs, then those with the most workers, are submitted first: a long run started
    last would leave the other processes idle at the end of the sweep."""
    pool = shared_pool(jobs)
    jobs_of = sorted(units(tasks, costs), key=lambda u: (-len(u), -tasks[u[0]].spec.n_workers))
    try:
        futures = {(pool.submit(_pooled, tasks[u[0]], costs[u[0]], cache) if len(u) == 1 else
                    pool.submit(_pooled_together, [tasks[i] for i in u], costs[u[0]], cache)): u for u in jobs_of}
        for fut in as_completed(futures):
            u = futures[fut]
            frames = [fut.result()] if len(u) == 1 else fut.result()
            for i, frame in zip(u, frames):
                yield i, frame
    except BaseException:  # Ctrl-C or a failed run: stop the runs in flight now (finished ones are cached)
        discard(jobs)
        raise


def _in_process(tasks: Sequence[SimTask], costs: Sequence[CostModel], cache: Path | None,
                made: Mapping[PolicySpec, BatchSizePolicy]) -> Iterator[tuple[int, pd.DataFrame]]:
    """(index, rows) of every task, run here one after another, those that run together as one
    (:func:`units`)."""
    for u in units(tasks, costs):
        if len(u) == 1:
            yield u[0], simulate_task(tasks[u[0]], made[tasks[u[0]].policy], costs[u[0]], cache)
            continue
        frames = simulate_together([tasks[i] for i in u], [make_policy(tasks[i].policy) for i in u], costs[u[0]],
                                   cache)
        yield from zip(u, frames)


def _on_ray(tasks: Sequence[SimTask], costs: Sequence[CostModel], cache: Path | None, cpus: int,
            policies: Mapping[PolicySpec, BatchSizePolicy]) -> Iterator[tuple[int, pd.DataFrame]]:
    """(index, rows) of every task: the cached runs read (or replayed, :func:`_replay`) here, the others
    simulated as Ray tasks (:func:`simulate_shipped`, with the files they read) and cached here with their
    decisions as their rows arrive, so this process alone touches the cache; ``cpus``: those of a Ray
    started here; ``policies``: each task's policy by spec, for the cache keys."""
    executor.connect(tasks[0].cfg.executor, cpus)
    where = [cache_path(cache, t.cfg, costs[i], t.spec, policies[t.policy], t.seed) if cache is not None else None
             for i, t in enumerate(tasks)]
    todo = []
    for i, t in enumerate(tasks):
        path, policy = where[i], policies[t.policy]
        if path is not None and path.exists():
            yield i, _clamped(t, policy, pd.read_csv(path))
            continue
        found = _replay(t, costs[i], policy, replay.sources(path, t.spec, t.seed)) if path is not None else None
        if found is None:
            todo.append(i)
            continue
        store(path, found[0], t.spec, t.seed, found[1])
        yield i, _clamped(t, policy, found[0])
    packed: dict[tuple[PolicySpec, Path | None], dict[str, bytes]] = {}
    calls = []
    for i in todo:
        t = tasks[i]
        key = (t.policy, surrogate.path_for(t.cfg) if t.cfg.sim.backend == "surrogate" else None)
        if key not in packed:
            packed[key] = _files(*key)
        calls.append((t, costs[i], packed[key]))
    gpus = [tasks[i].cfg.train.device.startswith("cuda") for i in todo]
    for j, (frame, decisions) in executor.ray_map(simulate_shipped, calls, gpus):
        i = todo[j]
        if where[i] is not None:
            store(where[i], frame, tasks[i].spec, tasks[i].seed, decisions)
        yield i, _clamped(tasks[i], policies[tasks[i].policy], frame)


def run_tasks(tasks: Sequence[SimTask], jobs: int = 1, desc: str = "runs", cost: CostModel | None = None,
              cache: Path | None = None, progress: bool = True,
              policies: Mapping[PolicySpec, BatchSizePolicy] | None = None) -> list[pd.DataFrame]:
    """Every task's rows (:func:`simulate_task`), in task order. ``cost`` times every task; None: each
    workload's calibrated cost model, resolved here once per workload, not once per task. ``policies``:
    policies already made, by spec, that the runs in this process use instead of making their own
    (:func:`made_policies`; spawned processes make theirs once each).

    Where the runs execute is the tasks' ``executor`` section (one for the sweep,
    :class:`~dynamix.config.ExecutorConfig`): ``local`` runs them in this process, or in ``jobs``
    spawned processes when ``jobs > 1``; ``ray`` as Ray tasks (:func:`_on_ray`; a Ray started here gets
    ``jobs`` CPUs). In processes and on Ray each task's config is set to one torch thread
    (``train.threads = 1``), so the two give the same rows. Progress: a tqdm bar over the sweep and,
    for logs, :func:`log_progress` after every run."""
    if not tasks:
        raise ValueError("no runs to simulate: check the policies, clusters and seeds")
    kinds = {t.cfg.executor for t in tasks}
    if len(kinds) > 1:
        raise ValueError(f"one sweep runs on one executor; these tasks name {len(kinds)}")
    on_ray = tasks[0].cfg.executor.kind == "ray"
    costs = [cost] * len(tasks) if cost is not None else workload_costs(tasks)
    if jobs > 1 or on_ray:
        tasks = [dataclasses.replace(t, cfg=with_overrides(t.cfg, {"train": {"threads": 1}})) for t in tasks]
    # tasks that differ only in their labels (a tuned rule whose choice is a listed policy) run once
    first: dict[str, int] = {}
    owner = [first.setdefault(same_run(t, c), i) for i, (t, c) in enumerate(zip(tasks, costs))]
    todo = sorted(first.values())
    run, run_costs = [tasks[i] for i in todo], [costs[i] for i in todo]
    if on_ray:
        finished = _on_ray(run, run_costs, cache, jobs, made_policies((t.policy for t in run), policies))
    elif jobs > 1:
        finished = _in_pool(run, run_costs, cache, jobs)
    else:
        finished = _in_process(run, run_costs, cache, made_policies((t.policy for t in run), policies))
    bar = tqdm(total=len(run), desc=desc, unit="run", disable=not progress)
    done: dict[int, pd.DataFrame] = {}
    for k, frame in finished:
        done[todo[k]] = frame
        bar.update()
        log_progress(bar)
    bar.close()
    # each task its own frame: run_simulations labels the frames in place
    return [done[i] if owner[i] == i else done[owner[i]].copy() for i in range(len(tasks))]


def same_run(task: SimTask, cost: CostModel) -> str:
    """What decides a task's rows: everything but its labels (``keys``, ``label``), and its cost model."""
    return repr((dataclasses.replace(task, keys=(), label=""), cost))


def label(task: SimTask, frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with the task's ``run_id``, ``policy`` label, ``cluster`` and ``keys`` columns."""
    frame["run_id"] = task.run_id
    frame["policy"] = task.label or task.policy.label
    frame["cluster"] = task.spec.name
    for k, v in task.keys:
        frame[k] = v
    return frame


def run_simulations(tasks: Sequence[SimTask], jobs: int = 1, desc: str = "runs", cost: CostModel | None = None,
                    cache: Path | None = None, progress: bool = True) -> pd.DataFrame:
    """Every task's rows, labelled (:func:`label`) and concatenated in task order: one tidy table."""
    return labelled(tasks, run_tasks(tasks, jobs, desc, cost, cache, progress))


def labelled(tasks: Sequence[SimTask], frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Each task's rows (``frames``, in task order), labelled (:func:`label`), as one table."""
    return pd.concat([label(t, f) for t, f in zip(tasks, frames)], ignore_index=True)


def budgets(groups: Sequence[tuple[ClusterSpec, Config]], budget: str, jobs: int = 1,
            cost: CostModel | None = None, cache: Path | None = None,
            progress: bool = True) -> list[tuple[Config, float]]:
    """Each (cluster, config) group's run config under ``budget`` and its time budget in virtual s.

    ``epochs``: the config unchanged, budget NaN. ``time``: the config capped at the virtual time the
    group's reference run (:func:`~dynamix.evaluation.budget.reference_policy`, seed 0) needs for its
    epoch budget on that cluster; the reference runs go through :func:`run_tasks` (``jobs``, ``cache``).
    """
    if check_budget(budget) == "epochs":
        return [(run_cfg, math.nan) for _, run_cfg in groups]
    refs = [SimTask(spec, run_cfg, reference_policy(run_cfg), 0) for spec, run_cfg in groups]
    frames = run_tasks(refs, jobs, "time budgets", cost, cache, progress)
    out = []
    for (_, run_cfg), frame in zip(groups, frames):
        budget_s = budget_time_s(frame)
        out.append((time_budget_config(run_cfg, budget_s), budget_s))
    return out


def evaluate(cluster_specs: Sequence[ClusterSpec | str | Path], policy_specs: Sequence[str | PolicySpec],
             cfg: Config, seeds: int | Iterable[int], out_dir: str | Path | None = None,
             target_accuracy: float | None = None, progress: bool = True, cost: CostModel | None = None,
             cache_dir: str | Path | None = None, budget: str | None = None, jobs: int = 1,
             policies: Mapping[PolicySpec, BatchSizePolicy] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Simulate every (cluster, policy, seed); returns (runs_df, summary_df), written to ``out_dir``.

    ``budget`` is ``time`` or ``epochs`` (default ``cfg.evaluation.budget``; :mod:`dynamix.evaluation`);
    the target is ``target_accuracy`` when given, else from ``cfg.rl`` (:func:`set_targets`).
    Finished runs are cached under ``cache_dir`` (default ``out_dir/cache``), so an interrupted or
    extended evaluation (another policy, more seeds) only simulates what is new, and several
    processes may share one cache. ``cost`` overrides the calibrated simulator cost model; ``jobs``
    runs that many processes (:func:`run_tasks`); ``policies``: those of ``policy_specs`` the caller has
    made already (:func:`made_policies`).
    """
    budget = check_budget(budget or cfg.evaluation.budget)
    specs = [s if isinstance(s, ClusterSpec) else clusters.load(s) for s in cluster_specs]
    seed_list = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    if not specs or not policy_specs or not seed_list:
        raise ValueError("evaluate needs at least one cluster, one policy and one seed")
    asked = [PolicySpec.parse(p) for p in policy_specs]
    made = made_policies(asked, policies)  # every policy made (and its spec checked) up front, once
    cache = Path(cache_dir) if cache_dir is not None else (Path(out_dir) / "cache" if out_dir is not None else None)
    if cost is None:
        cost = calibrated_cost(cfg)
    run_cfgs = budgets([(spec, cfg) for spec in specs], budget, jobs, cost, cache, progress)
    tasks, budget_of = [], []
    for spec, (run_cfg, budget_s) in zip(specs, run_cfgs):
        for p in dict.fromkeys(asked):
            for seed in seed_list:
                tasks.append(SimTask(spec, run_cfg, p, seed))
                budget_of.append(budget_s)
    frames = run_tasks(tasks, jobs, "evaluate", cost, cache, progress, made)
    rows = []
    for task, frame, budget_s in zip(tasks, frames, budget_of):
        frame.insert(0, "cluster", task.spec.name)
        rows.append({"cluster": task.spec.name, "policy": made[task.policy].name, "seed": task.seed,
                     **run_totals(frame), "budget": budget, "budget_s": budget_s,
                     "clamped": bool(frame["clamped"].iloc[0])})
    runs = pd.concat(frames, ignore_index=True)[["cluster", *RUNS_COLUMNS]]
    summary = pd.DataFrame(rows)
    fixed = cfg.evaluation.target_accuracy if target_accuracy is None else target_accuracy
    summary = set_targets(summary, runs, cfg.evaluation.target_fraction, fixed)[SUMMARY_COLUMNS]
    if out_dir is not None:
        out = Path(out_dir)
        io.write_csv(runs, out / "runs.csv")
        io.write_csv(summary, out / "summary.csv")
        log.info("wrote %s and %s", out / "runs.csv", out / "summary.csv")
    return runs, summary
