"""A run another policy already ran: served from the run cache, without the model math.

A simulated run is a function of its settings, cluster, seed and the sequence of decisions it runs
(each window's batch sizes and learning-rate scale): the model's initialisation, data order,
augmentation, the cluster's dynamics and counter noise come from the seeds, and every window's
learning and cost from the state before it and the decision. So when a policy's decisions are, window
by window, those of a cached run of the same settings, cluster and seed, its run *is* that run, row for
row, and only its labels differ. Policies often coincide: LB-BSP at its initial batch and at the
tuning grid's same batch, the agent and the base rule it starts from, the same warm start shipped by
several training seeds, the policies trained for two workloads that take the same decisions.

:func:`replayed` feeds a policy the recorded windows of each candidate run (:class:`Recorded`, which
stands in for the cluster in :func:`dynamix.sim.run.drive`): the policy decides from exactly the
windows it would see in a real run (read back bit for bit: every field of the window records is a
column of the run), and the replay stops at the first decision that differs (:class:`Diverged`), so
the run is simulated after all. A replay costs the policy's decisions alone, milliseconds per window.
The run cache keeps each run's decisions beside its rows (:func:`write_trace`,
``<run>.decisions.json``). Not replayed: a policy that reads the simulator's foresight (the oracle's
members: its view of the cluster ahead is the live cluster's) and runs with compression (their codec
times are measured, not modelled). ``tests/test_replay.py`` checks that a replayed run equals the
simulated one in every byte.
"""

from __future__ import annotations

import json
from glob import escape as glob_escape
from pathlib import Path
from typing import Callable, Iterable, Iterator

import pandas as pd

from dynamix import io
from dynamix.cluster import ClusterSpec
from dynamix.config import Config
from dynamix.metrics.schema import GLOBAL_COLUMNS, WORKER_COLUMNS, GlobalWindow, WorkerWindow
from dynamix.policies.base import BatchSizePolicy
from dynamix.sim.run import Decisions, run_prefix

SUFFIX = ".decisions.json"
"""A cached run's decision trace sits beside its rows: ``<run>.csv.gz`` -> ``<run>.decisions.json``."""

_INTS = {"rank", "batch_size", "window", "iteration", "global_batch", "n_workers"}
"""Window fields held as Python ints (the others are floats)."""


class Diverged(Exception):
    """The replayed policy asked for another window than the recorded run ran."""


def trace_path(run_path: Path) -> Path:
    """Where the decisions of the run cached at ``run_path`` are kept."""
    return run_path.with_name(run_path.name.removesuffix(".csv.gz") + SUFFIX)


def write_trace(run_path: Path, cluster: str, seed: int, decisions: Decisions) -> None:
    """Keep a cached run's decisions (atomically, before its rows: the rows mark the run finished)."""
    record = {"cluster": cluster, "seed": seed, "decisions": [[list(b), lr] for b, lr in decisions]}
    with io.atomic_open(trace_path(run_path), "w") as fh:
        json.dump(record, fh, separators=(",", ":"))


def sources(run_path: Path, spec: ClusterSpec, seed: int) -> Iterator[tuple[Path, Decisions]]:
    """(rows path, decisions) of every finished run cached beside ``run_path`` (the same settings) on
    cluster ``spec`` with ``seed``; a trace that cannot be read is skipped (the run is simulated instead)."""
    cluster = spec.name
    for trace in sorted(run_path.parent.glob(glob_escape(run_prefix(spec)) + "*" + SUFFIX)):
        rows = trace.with_name(trace.name.removesuffix(SUFFIX) + ".csv.gz")
        if rows == run_path or not rows.exists():
            continue
        try:
            record = json.loads(trace.read_text())
            if record["cluster"] != cluster or record["seed"] != seed:
                continue
            decisions = [(tuple(int(x) for x in b), float(lr)) for b, lr in record["decisions"]]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        yield rows, decisions


def windows(frame: pd.DataFrame) -> list[tuple[list[WorkerWindow], GlobalWindow]]:
    """The (workers, global) window records of a run's rows, in window order, as the cluster returned them."""
    def value(name: str, v):
        return int(v) if name in _INTS else float(v)

    out = []
    for _, rows in frame.groupby("window", sort=True):
        records = rows.sort_values("rank").to_dict("records")
        workers = [WorkerWindow(**{f: value(f, r[f]) for f in WORKER_COLUMNS}) for r in records]
        glob = GlobalWindow(**{f: value(f, records[0][f]) for f in GLOBAL_COLUMNS})
        out.append((workers, glob))
    return out


class Recorded:
    """A finished run's windows, served to a policy as the cluster served them, as long as it asks for
    the windows the run ran (:meth:`run_window` raises :class:`Diverged` otherwise). ``cluster``: the
    run's real cluster, for what the policy is told before the first window."""

    def __init__(self, cluster, frame: pd.DataFrame, decisions: Decisions) -> None:
        self.n_workers, self.n_train, self.total_iters = cluster.n_workers, cluster.n_train, cluster.total_iters
        self._windows = windows(frame)
        if len(self._windows) != len(decisions):
            raise Diverged(f"{len(self._windows)} windows recorded against {len(decisions)} decisions")
        self._decisions = decisions
        self._next = 0
        self.iteration = 0

    @property
    def done(self) -> bool:
        return self._next == len(self._decisions)

    def run_window(self, batch_sizes, lr_scale: float = 1.0):
        asked = (tuple(int(b) for b in batch_sizes), float(lr_scale))
        if asked != self._decisions[self._next]:
            raise Diverged(f"window {self._next}: {asked} against the recorded {self._decisions[self._next]}")
        workers, glob = self._windows[self._next]
        self._next += 1
        self.iteration = glob.iteration
        return workers, glob


def replayable(cfg: Config, policy: BatchSizePolicy) -> bool:
    """Whether ``policy``'s runs under ``cfg`` may be served by replay (module docstring)."""
    return cfg.engine.compression == "none" and type(policy).foresee is BatchSizePolicy.foresee


def replayed(candidates: Iterable[tuple[Path, Decisions]], first: tuple[tuple[int, ...], float],
             run: Callable[[pd.DataFrame, Decisions], pd.DataFrame]) -> tuple[pd.DataFrame, Decisions] | None:
    """The rows and decisions of the first candidate run the policy reproduces, or None. ``first``: the
    policy's first decision (a candidate that starts elsewhere is not read); ``run(frame, decisions)``:
    the policy's run on :class:`Recorded` windows (:func:`dynamix.sim.run.drive`), which raises
    :class:`Diverged` where it leaves them."""
    for rows, decisions in candidates:
        if not decisions or decisions[0] != first:
            continue
        frame = pd.read_csv(rows)  # pandas >= 3 parses the values written, bit for bit (pyproject.toml)
        try:
            return run(frame, decisions), decisions
        except Diverged:
            continue
    return None
