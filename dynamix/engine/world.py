"""Spawn N local gloo ranks on 127.0.0.1 in one call (AdaptDL-style local-world helper).

Used by :func:`dynamix.engine.launch.run_local` with ``method="spawn"`` and by tests::

    >>> from dynamix.engine.world import spawn_world
    >>> spawn_world(my_rank_fn, 2, arg1)     # my_rank_fn(rank, arg1) runs in 2 processes  # doctest: +SKIP

``fn`` must be importable (a module-level function): ranks are started with the ``spawn`` method.
Each rank's return value comes back in rank order. A rank that raises fails the whole world with its
traceback; a world that does not finish within ``timeout_s`` is killed and raises
:class:`WorldTimeout`, which is how tests detect deadlocks.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import queue
import socket
import time
import traceback
from datetime import timedelta
from typing import Any, Callable

import torch.distributed as dist


class WorldTimeout(TimeoutError):
    """The spawned world did not finish in time (a deadlock, or a too-small timeout)."""


def free_port() -> int:
    """A currently free TCP port on the loopback interface."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child(fn: Callable, rank: int, world: int, port: int, args: tuple, results: Any, timeout_s: float) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    try:
        dist.init_process_group("gloo", timeout=timedelta(seconds=timeout_s))
        out = fn(rank, *args)
        results.put((rank, True, pickle.dumps(out)))  # by value: the rank may exit before it is read
    except BaseException:  # report any failure to the parent instead of hanging it
        results.put((rank, False, traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def spawn_world(fn: Callable, nproc: int, *args: Any, timeout_s: float = 120.0) -> list[Any]:
    """Run ``fn(rank, *args)`` in ``nproc`` gloo processes; returns the results in rank order."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_child, args=(fn, r, nproc, port, args, results, timeout_s), daemon=True)
             for r in range(nproc)]
    for p in procs:
        p.start()
    out: dict[int, Any] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < nproc:
            try:
                rank, ok, value = results.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                raise WorldTimeout(f"{nproc} ranks did not finish within {timeout_s:.0f} s "
                                   f"(finished: {sorted(out)})") from None
            if not ok:
                raise RuntimeError(f"rank {rank} failed:\n{value}")
            out[rank] = pickle.loads(value)
    finally:
        for p in procs:
            p.join(timeout=5 if len(out) == nproc else 0.1)
            if p.is_alive():
                p.kill()
                p.join()
    return [out[r] for r in range(nproc)]
