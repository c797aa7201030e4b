"""Runs of several policies on one cluster and seed that share their first windows, simulated once.

A simulated run is a function of its settings, cluster, seed and decisions
(:mod:`dynamix.evaluation.replay`), so two policies that take the same decisions for their first w
windows have, up to there, the same run. The oracle's two-phase members are such a family: B until
epoch E, then B/2 or 2B, for two values of E, four runs whose first quarter or half is one run.
:func:`simulate_forked` runs all of them on one cluster: while their decisions agree it runs each
window once; where they part, it copies the cluster mid-run (model, optimiser, data order,
augmentation, dynamics, clock and counter noise: :meth:`VirtualCluster.fork`), with the policies that
take the other way, and runs each branch on. The torch, NumPy and Python random states are those of
the moment the branch parted when it resumes. Each policy's rows and decisions are those
:func:`dynamix.sim.run.simulate` gives it alone, byte for byte (``tests/test_fork.py``).

Only the real-math simulator without compression forks: the surrogate is cheap already, and a
compressed run's codec times are measured, so never reproducible.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from dynamix.cluster import ClusterSpec
from dynamix.cluster.costmodel import CostModel
from dynamix.config import Config
from dynamix.data import Cifar10
from dynamix.metrics.schema import RUNS_COLUMNS, window_rows
from dynamix.policies.base import BatchSizePolicy, Decision, check_decision, check_first_decision
from dynamix.sim.cluster import VirtualCluster
from dynamix.sim.foresight import ClusterForesight
from dynamix.sim.run import Decisions, backend_label, policy_context, run_id, virtual_cluster

log = logging.getLogger(__name__)


def forkable(cfg: Config) -> bool:
    """Whether runs under ``cfg`` can share their first windows (module docstring)."""
    return cfg.sim.backend == "math" and cfg.engine.compression == "none"


def _random_state() -> tuple:
    return torch.get_rng_state(), np.random.get_state(), random.getstate()


def _restore(state: tuple) -> None:
    torch.set_rng_state(state[0])
    np.random.set_state(state[1])
    random.setstate(state[2])


def _untouched(before: tuple, what: str) -> None:
    """Refuse a policy that drew from the global random state: alone it would have drawn at another
    point of the sequence, so the shared windows would not be its own run's."""
    after = _random_state()
    same = (torch.equal(before[0], after[0]) and before[1][0] == after[1][0]
            and np.array_equal(before[1][1], after[1][1]) and before[1][2:] == after[1][2:] and before[2] == after[2])
    if not same:
        raise RuntimeError(f"{what} drew from the global random state: its runs cannot share windows")


@dataclass
class _Branch:
    """A cluster mid-run and the policies (by index) that have taken its windows so far."""

    cluster: VirtualCluster
    members: list[int]
    windows: list = field(default_factory=list)  # (workers, glob) of every window so far
    random_state: tuple | None = None  # the global random states when it parted, None: the trunk


def _key(d: Decision) -> tuple:
    return tuple(int(b) for b in d.batch_sizes), float(d.lr_scale)


def simulate_forked(spec: ClusterSpec, cfg: Config, policies: Sequence[BatchSizePolicy], seed: int,
                    data: Cifar10 | None = None, cost: CostModel | None = None,
                    traces: Sequence[Decisions] | None = None) -> list[pd.DataFrame]:
    """Each policy's rows (:data:`~dynamix.metrics.schema.RUNS_COLUMNS`), as :func:`dynamix.sim.run.simulate`
    would give them one by one, with the windows their decisions share run once (module docstring).
    ``traces``: one list per policy that receives its decisions. The policies must be distinct objects."""
    if not forkable(cfg):
        raise ValueError("only the real-math simulator without compression forks runs "
                         f"(sim.backend = {cfg.sim.backend!r}, engine.compression = {cfg.engine.compression!r})")
    if len({id(p) for p in policies}) != len(policies):
        raise ValueError("simulate_forked needs one policy object per run")
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    policies = list(policies)
    traces = traces if traces is not None else [[] for _ in policies]
    cluster = virtual_cluster(spec, cfg, data=data, seed=seed, cost=cost)
    ctx = policy_context(cluster, cfg, seed)
    decisions: dict[int, Decision] = {}
    for i, p in enumerate(policies):
        before = _random_state()
        p.foresee(ClusterForesight(cluster))
        p.reset(ctx)
        unmet = p.unmet_request(ctx.n_workers, ctx.bounds)
        if unmet:
            log.warning("%s on %s: %s", p.name, spec.name, unmet)
        decisions[i] = check_first_decision(p.initial(ctx), ctx.n_workers, ctx.bounds, ctx.dataset_size)
        _untouched(before, p.name)
    finished: dict[int, list] = {}
    stack = [_Branch(cluster, list(range(len(policies))))]
    while stack:
        branch = stack.pop()
        if branch.random_state is not None:
            _restore(branch.random_state)
        while not branch.cluster.done:
            groups: dict[tuple, list[int]] = {}
            for i in branch.members:
                groups.setdefault(_key(decisions[i]), []).append(i)
            if len(groups) > 1:
                first, *others = groups.values()
                state = _random_state()
                for members in others:  # each other way: a copy of the cluster with its policies
                    copy, riders = branch.cluster.fork([policies[i] for i in members])
                    for i, p in zip(members, riders):
                        policies[i] = p
                    stack.append(_Branch(copy, members, list(branch.windows), state))
                branch.members = first
            d = decisions[branch.members[0]]
            for i in branch.members:
                traces[i].append((d.batch_sizes, d.lr_scale))
            workers, glob = branch.cluster.run_window(d.batch_sizes, d.lr_scale)
            branch.windows.append((workers, glob))
            before = _random_state()
            for i in branch.members:
                decisions[i] = check_decision(policies[i].decide(workers, glob), ctx.n_workers, ctx.bounds)
            _untouched(before, " or ".join(policies[i].name for i in branch.members))
        for i in branch.members:
            finished[i] = branch.windows
    backend = backend_label(cfg)
    frames = []
    for i, p in enumerate(policies):
        key = {"run_id": run_id(spec, p, seed), "backend": backend, "policy": p.name, "seed": seed}
        rows = [row for workers, glob in finished[i] for row in window_rows(key, glob, workers)]
        frames.append(pd.DataFrame(rows, columns=RUNS_COLUMNS))
    return frames
