"""Sweeps that depend on earlier runs, for several clusters at once: one batch of runs per step.

Some experiments choose their next runs from the last ones: the held-out stage reads a cluster's target
off its policies' runs before the oracle's search, whose refined grid and two-phase members follow the
winner of the step before. Run cluster by cluster, each step is a sweep of its own, and at the end of
every sweep all but one process wait for its last run: about 25 such tails in a held-out stage of five
clusters, each up to one run's time on a core that does nothing.

A *plan* is a generator that yields the :class:`~dynamix.evaluation.runner.SimTask` list of its next
step, receives their rows (in task order, as :func:`~dynamix.evaluation.runner.run_tasks` returns them)
and finally returns its result. :func:`lockstep` advances every plan one step at a time and runs the
steps of all plans as one sweep, so five clusters' searches wait at as many tails as one cluster's. The
rows are those of the plans run one by one: every run seeds itself, and the run cache does not care
which sweep ran it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Generator, Sequence, TypeVar

import pandas as pd

from dynamix.cluster.costmodel import CostModel
from dynamix.evaluation.runner import SimTask, run_tasks

T = TypeVar("T")

Plan = Generator[list[SimTask], list[pd.DataFrame], T]
"""Yields the tasks of its next step, is sent their rows, returns its result."""


def lockstep(plans: Sequence[Plan[Any]], jobs: int = 1, desc: str = "runs", cost: CostModel | None = None,
             cache: Path | None = None, progress: bool = True) -> list[Any]:
    """Every plan's result, in plan order (module docstring): at each step the tasks every unfinished
    plan yields run together in one :func:`~dynamix.evaluation.runner.run_tasks` sweep (``jobs``,
    ``cost``, ``cache`` and ``progress`` as there; the sweep's bar is ``desc`` and the step)."""
    results: list[Any] = [None] * len(plans)
    pending: dict[int, list[SimTask]] = {}

    def advance(i: int, rows: list[pd.DataFrame] | None) -> None:
        try:
            pending[i] = list(next(plans[i]) if rows is None else plans[i].send(rows))
        except StopIteration as stop:
            results[i] = stop.value

    for i in range(len(plans)):
        advance(i, None)
    step = 0
    while pending:
        step += 1
        order, asked = list(pending), dict(pending)
        pending.clear()
        tasks = [t for i in order for t in asked[i]]
        frames = run_tasks(tasks, jobs, f"{desc} (step {step})", cost, cache, progress) if tasks else []
        start = 0
        for i in order:
            n = len(asked[i])
            advance(i, frames[start:start + n])
            start += n
    return results
