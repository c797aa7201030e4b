"""End to end: torchrun workers of the real engine, batch sizes from a gRPC arbitrator on loopback.

``dynamix launch --arbitrator HOST:PORT`` runs ``dynamix.rpc.source.RemoteDecisionSource`` on every
rank. These tests check what a user would: the sizes the engine trained with (``runs.csv``) are the
ones the arbitrator decided, window by window; and killing the arbitrator mid-run loses no iteration,
logs one warning per worker, and decisions resume once it is back.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dynamix import config, paths
from dynamix.engine.launch import build_torchrun_command, prepare, run_local
from dynamix.engine.world import free_port
from dynamix.policies.base import BatchSizePolicy, Decision
from dynamix.rpc.arbitrator import RunSettings
from dynamix.rpc.local import local_server

from helpers.engine import sizes_by_window
from helpers.rpc import registration


class Cycle(BatchSizePolicy):
    """Sizes that differ per rank and per window, so a size not taken from the arbitrator shows."""

    name = "cycle"

    def decide(self, workers, glob):
        return Decision(tuple(32 * (1 + (glob.window + w.rank) % 3) for w in workers))


def engine_cfg(max_iters: int, window: int = 5) -> config.Config:
    return config.load(profile="smoke", overrides={
        "model": {"name": "tiny-cnn", "width": 0.25},
        "train": {"max_iters": max_iters, "eval_every": 100000, "eval_samples": 200, "checkpoint_every": 100000},
        "batch": {"window": window},
    })


@pytest.mark.parametrize("n_workers", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_engine_trains_with_the_sizes_the_arbitrator_decides(tmp_path, n_workers):
    cfg = engine_cfg(max_iters=40)
    decided: dict[int, tuple[int, ...]] = {}
    with local_server(Cycle(), RunSettings.from_config(cfg),
                      on_decision=lambda w, g, d: decided.__setitem__(g.window, d.batch_sizes)) as server:
        summary = run_local(cfg, None, None, tmp_path, n_workers, method="torchrun", arbitrator=server.target,
                            timeout_s=600)
        # the workers left when they finished: the arbitrator takes the next run at once
        server.arbitrator.register(registration(0, 1, run_id="the-next-run"))
    used = sizes_by_window(tmp_path)
    assert summary["iterations"] == 40 and len(used) == 8
    assert used[0] == (64,) * n_workers  # the first window: the run's initial sizes
    for t in range(1, 8):
        assert used[t] == decided[t - 1], f"window {t} trained with {used[t]}, arbitrator said {decided[t - 1]}"
    assert len({used[t] for t in range(1, 8)}) == 3  # the sizes really changed


def _serve(port: int, spec: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "dynamix.cli", "arbitrator", "serve", "--port", str(port),
                             "--policy", spec, "--profile", "smoke", "--set", "batch.window=5"],
                            cwd=paths.ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout.readline().startswith("arbitrator listening on")
    return proc


def _wait_for_window(out: Path, window: int, proc: subprocess.Popen, timeout_s: float = 300) -> int:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if (out / "runs.csv").exists():
            done = sizes_by_window(out)
            if done and max(done) >= window:
                return max(done)
        assert proc.poll() is None, "training ended before the arbitrator could be killed"
        time.sleep(0.02)
    raise TimeoutError(f"window {window} not reached")


@pytest.mark.slow  # ~40 s; the same fail-open/reconnect logic runs in-process in test_rpc_server.py
def test_killing_the_arbitrator_mid_run_loses_nothing_and_decisions_resume_after_restart(tmp_path):
    max_iters, k, n = 300, 5, 2
    cfg = engine_cfg(max_iters=max_iters, window=k)
    port = free_port()
    arbitrator = _serve(port, "static:48")
    cfg_path, _ = prepare(cfg, tmp_path, None)
    cmd = build_torchrun_command(cfg_path, tmp_path, n, arbitrator=f"127.0.0.1:{port}")
    log_path = tmp_path / "workers.log"
    with open(log_path, "w") as log_fh:
        workers = subprocess.Popen(cmd, stdout=log_fh, stderr=subprocess.STDOUT,
                                   env={**os.environ, "OMP_NUM_THREADS": "1"})
        try:
            killed_at = _wait_for_window(tmp_path, 3, workers)
            arbitrator.send_signal(signal.SIGKILL)
            arbitrator.wait()
            restarted_at = _wait_for_window(tmp_path, killed_at + 8, workers)
            arbitrator = _serve(port, "static:80")
            assert workers.wait(timeout=600) == 0
        finally:
            workers.kill()
            arbitrator.send_signal(signal.SIGTERM)
            arbitrator.wait(timeout=30)
    summary = json.loads((tmp_path / "summary.json").read_text())
    used = sizes_by_window(tmp_path)
    # no iteration lost: every window of k iterations is there, once, and training reached its budget
    assert summary["iterations"] == max_iters and list(used) == list(range(max_iters // k))
    assert used[1] == (48, 48)  # the first arbitrator's decision was used
    assert restarted_at < max(used) - 20, "restart came too late in the run to observe resumption"
    # each rank keeps the first arbitrator's size (fail-open) until it reaches the restarted one, then
    # takes its size for good; the ranks reconnect on their own back-off, so for a window they may
    # differ (every rank trains with the gathered vector of the sizes each took: (80, 48) is consistent)
    switched = []
    for r in range(n):
        sizes = [used[t][r] for t in range(1, max(used) + 1)]
        assert 80 in sizes, f"rank {r}'s decisions never resumed after the restart at window {restarted_at}: {used}"
        first = sizes.index(80)
        assert set(sizes[:first]) == {48} and set(sizes[first:]) == {80}, (r, used)
        switched.append(first + 1)
    assert min(switched) > restarted_at and max(switched) - min(switched) <= 2, (switched, used)
    text = log_path.read_text()
    warnings = re.findall(r"WARNING dynamix\.rpc\.client: arbitrator .* failed on", text)
    assert len(warnings) == n, text[-3000:]  # one warning per worker for the whole outage
    assert len(re.findall(r"dynamix\.rpc\.client: arbitrator .* reachable again", text)) == n
