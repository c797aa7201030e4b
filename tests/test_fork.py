"""Runs that share their first windows, simulated once and forked where they part: each policy's rows and
decisions are those of its run alone, byte for byte."""

from __future__ import annotations

import pandas as pd
import pytest

from dynamix import cluster as clusters
from dynamix import config
from dynamix.cluster.costmodel import CostModel
from dynamix.evaluation.cache import cache_path
from dynamix.evaluation.runner import SimTask, run_tasks
from dynamix.policies import make_policy
from dynamix.policies.base import BatchSizePolicy, Decision
from dynamix.sim.fork import simulate_forked
from dynamix.sim.run import simulate

pytestmark = pytest.mark.usefixtures("one_torch_thread")

COST = CostModel(a_ms=5.0, c_ms_per_sample=0.5, gradient_bytes=200_000)


def cfg(**over) -> config.Config:
    return config.load(profile="smoke", overrides={
        "model": {"name": "tiny-cnn", "width": 0.25},
        "optim": {"schedule": "multistep", "milestones": [0.5, 0.75], "lr_scaling": "sqrt"},
        "train": {"max_iters": 0, "epochs": 0.3, "eval_every": 5, "eval_samples": 200},
        "batch": {"window": 5, "min": 4, "max": 256, "initial": 16}, **over})


def hetero() -> clusters.ClusterSpec:
    """Unequal workers, a straggler, jitter and a slowdown: every source of randomness of the simulator."""
    return clusters.from_dict({
        "name": "fork-3", "seed": 3, "stragglers": {"probability": 0.2, "factor": 0.5}, "jitter": 0.05,
        "workers": [{"count": 2}, {"device": {"name": "slow", "speed": 0.5}}],
        "events": [{"kind": "slowdown", "at_iteration": 10, "workers": [0], "factor": 0.5, "duration_iterations": 10}]})


MEMBERS = ["oracle:batch=96", "oracle:batch=96,then=48,at=0.1", "oracle:batch=96,then=192,at=0.1",
           "oracle:batch=96,then=48,at=0.2", "oracle:batch=96,then=192,at=0.2", "lbbsp:batch=64"]


def test_forked_runs_are_the_runs_alone_byte_for_byte(data):
    c, spec = cfg(), hetero()
    traces = [[] for _ in MEMBERS]
    forked = simulate_forked(spec, c, [make_policy(m) for m in MEMBERS], 1, data=data, cost=COST, traces=traces)
    for member, frame, trace in zip(MEMBERS, forked, traces):
        alone_trace: list = []
        alone = simulate(spec, c, make_policy(member), 1, progress=False, data=data, cost=COST, trace=alone_trace)
        assert frame.to_csv(index=False) == alone.to_csv(index=False), member
        assert trace == alone_trace, member
    # the two-phase members did part from the constant one, and from each other
    assert len({f["global_batch"].iloc[-1] for f in forked[:5]}) == 3


class Drawing(BatchSizePolicy):
    """A policy that draws from the global random state: it cannot share windows."""

    name = "drawing"

    def initial(self, ctx):
        import random
        random.random()
        return Decision(tuple(ctx.initial_batch_sizes))

    def decide(self, workers, glob):
        return Decision(tuple(w.batch_size for w in workers))


def test_a_policy_that_draws_random_numbers_or_a_surrogate_run_is_refused(data):
    with pytest.raises(RuntimeError, match="drew from the global random state"):
        simulate_forked(hetero(), cfg(), [make_policy("static:16"), Drawing()], 0, data=data, cost=COST)
    with pytest.raises(ValueError, match="real-math simulator"):
        simulate_forked(hetero(), cfg(engine={"compression": "lhc"}), [make_policy("static:16")], 0, data=data,
                        cost=COST)
    same = make_policy("static:16")
    with pytest.raises(ValueError, match="one policy object per run"):
        simulate_forked(hetero(), cfg(), [same, same], 0, data=data, cost=COST)


def test_a_sweep_runs_tasks_that_share_their_start_as_one_and_caches_each(data, tmp_path, monkeypatch):
    from dynamix.evaluation import runner

    c, spec = cfg(), hetero()
    tasks = [SimTask(spec, c, m, s, shares_start=True) for m in MEMBERS[1:5] for s in (0, 1)]
    cache = tmp_path / "runs"
    together: list[int] = []

    def counted(spec, cfg, policies, *args, **kwargs):
        together.append(len(policies))
        return simulate_forked(spec, cfg, policies, *args, **kwargs)

    monkeypatch.setattr(runner, "simulate_forked", counted)
    frames = run_tasks(tasks, cost=COST, cache=cache, progress=False)
    assert together == [4, 4]  # one forked run per seed
    for t, frame in zip(tasks, frames):
        alone = simulate(spec, c, make_policy(str(t.policy)), t.seed, progress=False, data=data, cost=COST)
        pd.testing.assert_frame_equal(frame.drop(columns="clamped"), alone)
        assert cache_path(cache, c, COST, spec, make_policy(str(t.policy)), t.seed).exists()
    again = run_tasks(tasks, cost=COST, cache=cache, progress=False)  # from the cache
    assert together == [4, 4]
    for a, b in zip(frames, again):
        pd.testing.assert_frame_equal(a, b)
