"""Spawn N local gloo ranks on 127.0.0.1 for tests and notebooks (AdaptDL-style local-world helper).

    >>> from dynamix.engine.testing import spawn_world
    >>> spawn_world(my_rank_fn, 2, arg1)     # my_rank_fn(rank, arg1) runs in 2 processes  # doctest: +SKIP

``fn`` must be importable (a module-level function): ranks are started with the ``spawn`` method.
Each rank's return value comes back in rank order. A rank that raises fails the whole world with its
traceback; a world that does not finish within ``timeout_s`` is killed and raises
:class:`WorldTimeout`, which is how tests detect deadlocks.
"""

from __future__ import annotations

import csv
import multiprocessing as mp
import os
import pickle
import queue
import socket
import time
import traceback
from collections import defaultdict
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

import torch.distributed as dist


class WorldTimeout(TimeoutError):
    """The spawned world did not finish in time (a deadlock, or a too-small timeout)."""


def free_port() -> int:
    """A currently free TCP port on the loopback interface."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sizes_by_window(out: str | os.PathLike) -> dict[int, tuple[int, ...]]:
    """window -> the batch sizes each rank trained with in it, read from an engine run's ``runs.csv``
    (what tests compare with the decisions a policy or an agent made)."""
    by: dict[int, dict[int, int]] = defaultdict(dict)
    with open(Path(out) / "runs.csv") as fh:
        for row in csv.DictReader(fh):
            by[int(row["window"])][int(row["rank"])] = int(row["batch_size"])
    return {t: tuple(v[r] for r in sorted(v)) for t, v in sorted(by.items())}


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


def _rank_of(proc) -> int | None:
    try:
        env = open(f"/proc/{proc.pid}/environ", "rb").read().split(b"\0")
    except OSError:
        return None
    for item in env:
        if item.startswith(b"RANK="):
            return int(item[5:])
    return None


def kill_rank_under_torchrun(cfg, out_dir, nproc: int, *, kill_rank: int = 1, kill_after_iteration: int = 10,
                             max_restarts: int = 1, policy_spec: str | None = None,
                             timeout_s: float = 600.0) -> dict:
    """Run the engine under ``torchrun --max-restarts``, SIGKILL one worker once ``progress.json``
    reports ``kill_after_iteration``, and let torchrun restart the group from the checkpoint.

    Returns the run's summary plus ``killed_at_iteration`` (progress when the kill was sent) and the
    killed pid. Used by the restart test and ``benchmarks/bench_engine_restart.py``.
    """
    import json
    import signal
    import subprocess
    from pathlib import Path

    import psutil

    from dynamix.engine.launch import build_torchrun_command, launch_env, prepare, world_size

    out = Path(out_dir)
    cfg_path, _ = prepare(cfg, out, None)
    cmd = build_torchrun_command(cfg_path, out, world_size(cfg, nproc), policy_spec=policy_spec,
                                 max_restarts=max_restarts)
    proc = subprocess.Popen(cmd, env=launch_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout_s
    killed_at, killed_pid = None, None
    try:
        while killed_pid is None:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"run ended or timed out before iteration {kill_after_iteration}")
            try:
                reached = json.loads((out / "progress.json").read_text())["iteration"]
            except (OSError, ValueError, KeyError):
                reached = 0
            if reached >= kill_after_iteration:
                for child in psutil.Process(proc.pid).children(recursive=True):
                    if _rank_of(child) == kill_rank:
                        killed_at, killed_pid = reached, child.pid
                        os.kill(child.pid, signal.SIGKILL)
                        break
            time.sleep(0.05)
        _, err = proc.communicate(timeout=max(deadline - time.monotonic(), 1))
    finally:
        if proc.poll() is None:
            proc.kill()
    if proc.returncode != 0:
        raise RuntimeError(f"torchrun exited with {proc.returncode}:\n{err[-3000:]}")
    summary = json.loads((out / "summary.json").read_text())
    return {**summary, "killed_at_iteration": killed_at, "killed_pid": killed_pid}
