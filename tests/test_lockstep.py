"""Dependent sweeps of several clusters run side by side, and the process pool every sweep shares: the
same rows as run one by one, in as many sweeps as the longest plan has steps."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from dynamix import cluster as clusters
from dynamix import config
from dynamix.cluster.costmodel import CostModel
from dynamix.evaluation import lockstep as lockstep_module
from dynamix.evaluation import pool
from dynamix.evaluation.lockstep import lockstep
from dynamix.evaluation.oracle import oracle_search, search_plan
from dynamix.evaluation.runner import SimTask, run_tasks

pytestmark = pytest.mark.usefixtures("one_torch_thread")

COST = CostModel(a_ms=5.0, c_ms_per_sample=0.5, gradient_bytes=200_000)


def cfg() -> config.Config:
    return config.load(profile="smoke", overrides={
        "model": {"name": "mlp", "width": 0.0625},
        "train": {"max_iters": 20, "eval_every": 5, "eval_samples": 200},
        "batch": {"window": 5, "min": 4, "max": 256, "initial": 16}})


def spec(name: str, slow: float) -> clusters.ClusterSpec:
    return clusters.from_dict({"name": name, "seed": 0,
                               "workers": [{"count": 2}, {"device": {"name": "slow", "speed": slow}}]})


def counted(monkeypatch) -> list[int]:
    """The size of every sweep lockstep runs."""
    sweeps: list[int] = []

    def run(tasks, *args, **kwargs):
        sweeps.append(len(tasks))
        return run_tasks(tasks, *args, **kwargs)

    monkeypatch.setattr(lockstep_module, "run_tasks", run)
    return sweeps


def test_searches_of_two_clusters_share_each_step_and_choose_as_alone(data, monkeypatch):
    specs = [spec("a", 0.3), spec("b", 0.8)]
    alone = [oracle_search(s, cfg(), [24, 48], [0, 1], 0.11, cost=COST, progress=False, refine=True,
                           phase_epochs=[0.5]) for s in specs]
    sweeps = counted(monkeypatch)
    together = lockstep([search_plan(s, cfg(), [24, 48], [0, 1], 0.11, refine=True, phase_epochs=[0.5])
                         for s in specs], cost=COST, progress=False)
    # three steps (the grid, the refined grid, the two-phase members), each one sweep over both clusters
    assert sweeps == [2 * 2 * 2, 2 * 2 * 2, 2 * 2 * 2]
    for a, b in zip(alone, together):
        assert b.policy == a.policy
        pd.testing.assert_frame_equal(b.grid, a.grid)
        pd.testing.assert_frame_equal(b.runs, a.runs)


def test_plans_of_unequal_length_finish_in_order_and_an_empty_step_runs_nothing(data, monkeypatch):
    c = cfg()

    def plan(n_steps: int, name: str):
        out = []
        for k in range(n_steps):
            frames = yield [SimTask(spec(name, 0.5), c, f"static:{16 * (k + 1)}", 0)]
            out.append(int(frames[0]["iteration"].max()))
        nothing = yield []
        assert nothing == []
        return name, out

    sweeps = counted(monkeypatch)
    results = lockstep([plan(1, "short"), plan(3, "long")], cost=COST, progress=False)
    assert results == [("short", [20]), ("long", [20, 20, 20])]
    assert sweeps == [2, 1, 1]  # the short plan's empty step costs no sweep of its own


def test_the_pool_is_kept_across_sweeps_and_made_again_when_the_environment_changes(monkeypatch):
    first = pool.shared_pool(2)
    try:
        assert pool.shared_pool(2) is first
        monkeypatch.setenv("DYNAMIX_POOL_TEST", "1")
        second = pool.shared_pool(2)
        assert second is not first
        assert second.submit(os.getenv, "DYNAMIX_POOL_TEST").result() == "1"  # what a new pool would see
    finally:
        pool.discard(2)
    with pytest.raises(ValueError, match="at least one worker"):
        pool.shared_pool(0)


KEEPS_A_POOL = textwrap.dedent("""
    import os
    from dynamix.evaluation import plan, pool

    def keep(i):
        # a policy trained side by side: its sweeps run in the process's kept pool, left open
        return pool.shared_pool(1).submit(os.getpid).result()

    if __name__ == "__main__":
        print(len(plan.side_by_side(keep, [(0,), (1,)], jobs=2)))
""")


def test_policies_trained_side_by_side_that_kept_a_pool_still_exit(tmp_path):
    """The transfer stage trains two policies side by side in spawned processes, each running its sweeps
    in a kept pool; those processes must exit when their work is done (they once waited for the pools'
    idle workers for ever). Run in a fresh interpreter, so that nothing this test session left running
    can hold or speed the exit."""
    script = tmp_path / "keeps_a_pool.py"
    script.write_text(KEEPS_A_POOL)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]),
                                                         os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the script, its side-by-side workers and their pools
        proc.communicate()
        pytest.fail("the side-by-side workers that kept a pool did not exit within 240 s")
    assert proc.returncode == 0, err
    assert out.split() == ["2"]


def test_sweeps_in_the_kept_pool_give_the_rows_of_one_process(data):
    c = cfg()
    tasks = [SimTask(spec("p", 0.4), c, p, s) for p in ("static:16", "lbbsp") for s in (0, 1)]
    try:
        pooled = [run_tasks(tasks, jobs=2, cost=COST, progress=False) for _ in range(2)]  # one pool, two sweeps
    finally:
        pool.discard(2)
    alone = run_tasks([SimTask(t.spec, config.with_overrides(t.cfg, {"train": {"threads": 1}}), t.policy, t.seed)
                       for t in tasks], cost=COST, progress=False)
    for again in pooled:
        for a, b in zip(alone, again):
            pd.testing.assert_frame_equal(a, b)
