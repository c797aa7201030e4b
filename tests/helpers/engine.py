"""Engine helpers for tests and benchmarks: what a run trained with, the gradients a step must reduce to,
and a rank killed under torchrun."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import time
from collections import defaultdict
from pathlib import Path

import psutil
import torch

from dynamix.config import Config
from dynamix.data import BatchMaker, GlobalSampler, load_dataset
from dynamix.engine.launch import build_torchrun_command, launch_env, prepare, world_size
from dynamix.models import build_model
from dynamix.seeding import seed_everything
from dynamix.train.core import Trainer


def one_step_rank(rank: int, cfg_dict: dict, sizes: tuple[int, ...]) -> dict | None:
    """One engine iteration (a ``spawn_world`` rank): parameters before and after, the gradient in
    ``.grad`` (ring: the global one), whether ``.grad`` views the flat buffer, the reduction's stats."""
    from dynamix.config import build
    from dynamix.engine.worker import Engine

    eng = Engine(build(Config, cfg_dict), None, initial_sizes=sizes)
    if eng.is_server:
        eng.serve()
        return None
    eng.start()
    before = [p.detach().clone() for p in eng.model.parameters()]
    eng.step(sizes)
    grads = [p.grad.detach().clone() for p in eng.model.parameters()]
    after = [p.detach().clone() for p in eng.model.parameters()]
    views_ok = all(p.grad.data_ptr() >= eng.flat.grad.data_ptr() for p in eng.model.parameters())
    stats = eng.sync.stats.take()
    eng.finish()
    return {"before": before, "after": after, "grads": grads, "views_ok": views_ok, "stats": stats}


def reference_gradients(cfg: Config, sizes: tuple[int, ...]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Single process: the weighted per-worker gradient and the plain gradient on the union batch of
    the engine's first iteration with per-worker batches ``sizes``."""
    data = load_dataset(cfg.data)
    seed_everything(cfg.train.seed)
    model = build_model(cfg.model.name, cfg.model.width)
    trainer = Trainer(model, cfg.optim, 10)
    maker = BatchMaker(data.train_x, data.train_y, False, 0)
    batches = [maker(idx) for idx in GlobalSampler(len(data.train_y), cfg.train.seed).next(list(sizes))]
    trainer.weighted_gradient(batches, track_local=False)
    weighted = [p.grad.clone() for p in model.parameters()]
    x = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    trainer.weighted_gradient([(x, y)], track_local=False)
    union = [p.grad.clone() for p in model.parameters()]
    return weighted, union


def sizes_by_window(out: str | os.PathLike) -> dict[int, tuple[int, ...]]:
    """window -> the batch sizes each rank trained with in it, read from an engine run's ``runs.csv``
    (what tests compare with the decisions a policy or an agent made)."""
    by: dict[int, dict[int, int]] = defaultdict(dict)
    with open(Path(out) / "runs.csv") as fh:
        for row in csv.DictReader(fh):
            by[int(row["window"])][int(row["rank"])] = int(row["batch_size"])
    return {t: tuple(v[r] for r in sorted(v)) for t, v in sorted(by.items())}


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
