"""One process pool for every sweep of a process, instead of one per sweep.

A spawned pool worker imports torch and dynamix and loads the data set before its first run: 3-4 s of
wall time, paid again by every sweep that makes its own pool (about 25 in the held-out stage of a
profile with an oracle). :func:`shared_pool` keeps one :class:`~concurrent.futures.ProcessPoolExecutor`
per worker count and hands it to every sweep of the process, so the workers start once per stage.

A spawned worker sees the environment and working directory of the moment it was spawned. So that a
kept pool runs as a new one would, the pool is made again whenever either has changed since (a test
that sets ``$DYNAMIX_CIFAR10``, a caller that changes directory). A sweep that fails or is interrupted
calls :func:`discard`, which stops the runs in flight now; the next sweep starts a fresh pool. The
pools are shut down when the process exits, by a ``multiprocessing`` finalizer, not ``atexit``: a
process that ``multiprocessing`` started (a policy trained side by side,
:func:`dynamix.evaluation.plan.side_by_side`) ends in ``multiprocessing.util._exit_function``, which
joins the process's live children before any ``atexit`` handler runs (a forked one then leaves through
``os._exit`` and runs none), so a kept pool's idle workers would keep it joining for ever. The finalizer
runs before that join, in every kind of process, and before the finalizers that close the pools' queues
(priority 10), which would swallow the workers' stop signals.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import util

_POOLS: dict[int, tuple[tuple, ProcessPoolExecutor]] = {}
"""Worker count -> (the environment and directory it was spawned with, the pool)."""


def _ignore_sigint() -> None:
    """Pool workers leave Ctrl-C to the parent, which stops them (:func:`discard`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _context() -> tuple:
    return tuple(sorted(os.environ.items())), os.getcwd()


def shared_pool(jobs: int) -> ProcessPoolExecutor:
    """The process's pool of ``jobs`` spawned workers: the one an earlier sweep made, unless the
    environment or working directory changed since (module docstring)."""
    if jobs < 1:
        raise ValueError(f"a process pool needs at least one worker, got jobs = {jobs}")
    now = _context()
    kept = _POOLS.get(jobs)
    if kept is not None and kept[0] == now:
        return kept[1]
    if kept is not None:
        discard(jobs, terminate=False)
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_ignore_sigint)
    _POOLS[jobs] = (now, pool)
    return pool


def discard(jobs: int, terminate: bool = True) -> None:
    """Forget the pool of ``jobs`` workers and shut it down; ``terminate``: kill its workers first, so
    the runs in flight stop now (a failed or interrupted sweep; the finished runs are cached)."""
    kept = _POOLS.pop(jobs, None)
    if kept is None:
        return
    pool = kept[1]
    if terminate:
        for proc in list((getattr(pool, "_processes", None) or {}).values()):
            proc.terminate()
    pool.shutdown(wait=True, cancel_futures=True)


def _shutdown_all() -> None:
    for jobs in list(_POOLS):
        discard(jobs, terminate=False)


util.Finalize(None, _shutdown_all, exitpriority=100)  # before its queues close (10) and it joins its children
