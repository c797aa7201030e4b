"""Replay (dynamix.evaluation.replay): a run whose decisions are a cached run's is served from that run,
and is the run the simulator would have made, byte for byte; a run that leaves them is simulated."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from dynamix import config
from dynamix.cluster import ClusterSpec, DeviceProfile, WorkerSpec
from dynamix.cluster.costmodel import CostModel
from dynamix.evaluation import replay, runner
from dynamix.evaluation.runner import SimTask, run_tasks
from dynamix.policies.base import make_policy, PolicySpec
from helpers.rl import tiny_cost, two_speed

pytestmark = pytest.mark.usefixtures("one_torch_thread")

COMMITTED_AGENT = Path(__file__).resolve().parents[1] / "results/profiles/cpu-agent/policies/dynamix.zip"


@pytest.fixture(scope="module")
def setup():
    """Two workers at speeds 1 and 0.25: LB-BSP at the initial 2 x 32 moves the split from the second window."""
    cfg = config.load(profile="base", overrides={
        "model": {"name": "mlp", "width": 0.0625},
        "batch": {"min": 8, "max": 256, "initial": 32, "window": 2},
        "train": {"threads": 1, "epochs": 0.08, "eval_every": 2, "eval_samples": 200},
    })
    return cfg, two_speed(), tiny_cost()


def _counting(monkeypatch) -> list[str]:
    """The policies the simulator really ran (not served by the cache or by replay)."""
    calls: list[str] = []
    real = runner._simulate
    monkeypatch.setattr(runner, "_simulate", lambda t, c, p, trace=None: calls.append(str(t.policy)) or real(t, c, p, trace))
    return calls


def _bare(task: SimTask, cost: CostModel) -> pd.DataFrame:
    """The run simulated afresh, no cache."""
    return runner._simulate(task, cost, make_policy(task.policy))


def test_a_policy_with_the_same_decisions_is_replayed_byte_for_byte(setup, tmp_path, monkeypatch):
    """LB-BSP at its initial global batch (2 x 32) and at ``batch=64`` take the same decisions: the second
    is served from the first's cached run, labelled as its own, equal to its simulated run in every
    value; the cache file is the one the simulator would have written."""
    cfg, spec, cost = setup
    first, twin = SimTask(spec, cfg, "lbbsp", 0), SimTask(spec, cfg, "lbbsp:batch=64", 0)
    calls = _counting(monkeypatch)
    run_tasks([first], cost=cost, cache=tmp_path, progress=False)
    (served,) = run_tasks([twin], cost=cost, cache=tmp_path, progress=False)
    assert calls == ["lbbsp"]
    monkeypatch.undo()
    simulated = _bare(twin, cost)
    assert served["policy"].unique().tolist() == ["lbbsp:batch=64"]
    assert served["batch_size"].nunique() > 2  # the split moved: more than the first window was replayed
    pd.testing.assert_frame_equal(served.drop(columns="clamped"), simulated, check_exact=True)
    # on disk, bytes equal to a simulated run's cache file (what a later read returns)
    files = {p.name: p for p in tmp_path.rglob("*.csv.gz")}
    fresh = tmp_path / "fresh"
    run_tasks([twin], cost=cost, cache=fresh, progress=False)
    (again,) = [p for p in fresh.rglob("*.csv.gz")]
    assert files[again.name].read_bytes() == again.read_bytes()
    trace = json.loads(replay.trace_path(files[again.name]).read_text())
    assert trace["cluster"] == "two-speed" and trace["seed"] == 0 and len(trace["decisions"]) == served["window"].nunique()


def test_a_policy_that_leaves_the_recorded_decisions_is_simulated(setup, tmp_path, monkeypatch):
    """LB-BSP starts where static:32 stays (2 x 32) and then splits by speed: the replay stops where they
    part and the run is simulated, equal to a fresh one; another seed or a different start is never
    replayed."""
    cfg, spec, cost = setup
    calls = _counting(monkeypatch)
    run_tasks([SimTask(spec, cfg, "static:32", 0)], cost=cost, cache=tmp_path, progress=False)
    lbbsp = SimTask(spec, cfg, "lbbsp", 0)
    (got,) = run_tasks([lbbsp], cost=cost, cache=tmp_path, progress=False)
    run_tasks([SimTask(spec, cfg, "static:32", 1), SimTask(spec, cfg, "static:16", 0)], cost=cost, cache=tmp_path,
              progress=False)
    assert calls == ["static:32", "lbbsp", "static:32", "static:16"]
    monkeypatch.undo()
    assert got["batch_size"].iloc[0] == 32 and got["batch_size"].nunique() > 1
    pd.testing.assert_frame_equal(got.drop(columns="clamped"), _bare(lbbsp, cost), check_exact=True)


def test_the_oracle_and_compressed_runs_are_never_replayed(setup):
    """The oracle reads the live cluster's foresight and compression's codec times are measured: their
    runs are not functions of their decisions alone."""
    cfg, _, _ = setup
    assert replay.replayable(cfg, make_policy(PolicySpec.parse("lbbsp")))
    assert not replay.replayable(cfg, make_policy(PolicySpec.parse("oracle:batch=64")))
    lhc = config.load(profile="base", overrides={**{"model": {"name": "mlp", "width": 0.0625}}, "engine": {"compression": "lhc"}})
    assert not replay.replayable(lhc, make_policy(PolicySpec.parse("lbbsp")))


def test_an_unreadable_trace_is_skipped_not_trusted(setup, tmp_path, monkeypatch):
    """A damaged decisions file serves nothing: the run is simulated."""
    cfg, spec, cost = setup
    run_tasks([SimTask(spec, cfg, "lbbsp", 0)], cost=cost, cache=tmp_path, progress=False)
    (trace,) = tmp_path.rglob("*" + replay.SUFFIX)
    trace.write_text('{"cluster": "two-speed", "seed": 0, "decisions": [[[32, 32], "x"')
    calls = _counting(monkeypatch)
    run_tasks([SimTask(spec, cfg, "lbbsp:batch=64", 0)], cost=cost, cache=tmp_path, progress=False)
    assert calls == ["lbbsp:batch=64"]


@pytest.mark.skipif(not COMMITTED_AGENT.exists(), reason="the committed cpu-agent policy")
def test_a_trained_agent_shipped_twice_is_replayed(tmp_path, monkeypatch):
    """The published cpu-agent policy, copied to a second name (one warm start shipped by several training
    seeds): the copy decides from the replayed windows as from live ones, so its run is served from the
    first's and equals its simulated run; the agent's own decisions move the batch."""
    cfg = config.load(profile="smoke", overrides={"model": {"name": "mlp", "width": 0.0625},
                                                   "train": {"threads": 1, "epochs": 0.6, "eval_samples": 200}})
    spec = ClusterSpec(name="mixed-4", workers=tuple(WorkerSpec(DeviceProfile(n, s)) for n, s in
                                                     (("a", 1.0), ("b", 1.0), ("c", 0.5), ("d", 0.25))))
    cost = tiny_cost()
    for suffix in (".zip", ".json"):
        (tmp_path / f"twin{suffix}").write_bytes(COMMITTED_AGENT.with_suffix(suffix).read_bytes())
    agent, twin = SimTask(spec, cfg, f"dynamix:{COMMITTED_AGENT}", 0), SimTask(spec, cfg, f"dynamix:{tmp_path / 'twin.zip'}", 0)
    calls = _counting(monkeypatch)
    (first,) = run_tasks([agent], cost=cost, cache=tmp_path / "cache", progress=False)
    (served,) = run_tasks([twin], cost=cost, cache=tmp_path / "cache", progress=False)
    assert len(calls) == 1
    monkeypatch.undo()
    assert served["window"].nunique() > 3 and first["batch_size"].nunique() > 1
    assert served["policy"].iloc[0] != first["policy"].iloc[0]
    pd.testing.assert_frame_equal(served.drop(columns="clamped"), _bare(twin, cost), check_exact=True)
