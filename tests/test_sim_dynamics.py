"""Cluster dynamics: events switch on and off where the spec says, stragglers and jitter follow the
spec's seed (and nothing else), so the engine and the simulator see the same pattern."""

from __future__ import annotations

import numpy as np
import pytest

from dynamix import cluster as clusters
from dynamix.cluster.dynamics import ClusterDynamics


def spec(**extra):
    base = {"name": "t", "workers": [{"count": 4}]}
    return clusters.from_dict({**base, **extra})


def test_iteration_events_apply_to_their_workers_for_their_duration():
    d = ClusterDynamics(spec(events=[
        {"kind": "slowdown", "at_iteration": 5, "workers": [1, 3], "factor": 0.5, "duration_iterations": 3},
        {"kind": "bandwidth", "at_iteration": 6, "factor": 0.1},
    ]))
    speed = {t: d.factors(t)[0].tolist() for t in range(10)}
    bw = {t: d.factors(t)[1].tolist() for t in range(10)}
    assert speed[4] == [1, 1, 1, 1] and speed[5] == [1, 0.5, 1, 0.5] and speed[7] == [1, 0.5, 1, 0.5]
    assert speed[8] == [1, 1, 1, 1]
    assert bw[5] == [1, 1, 1, 1] and bw[6] == [0.1] * 4 and bw[9] == [0.1] * 4  # duration 0: for good


def test_time_triggered_event_starts_at_the_first_iteration_past_its_time():
    d = ClusterDynamics(spec(events=[{"kind": "slowdown", "at_time_s": 10.0, "factor": 0.25,
                                      "duration_iterations": 2}]))
    times = [0.0, 4.0, 8.0, 12.0, 16.0, 20.0]
    speed = [d.factors(t, s)[0][0] for t, s in enumerate(times)]
    assert speed == [1, 1, 1, 0.25, 0.25, 1]
    d.reset()
    assert d.factors(0, 11.0)[0][0] == 0.25  # a new run triggers afresh


def test_random_factors_depend_only_on_spec_seed_and_iteration():
    s = spec(seed=3, stragglers={"probability": 0.2, "factor": 0.3}, jitter=0.1)
    a, b = ClusterDynamics(s), ClusterDynamics(s)
    forward = [a.factors(t)[0] for t in range(20)]
    backward = [b.factors(t)[0] for t in reversed(range(20))][::-1]  # any order, any process
    np.testing.assert_array_equal(np.stack(forward), np.stack(backward))
    other = ClusterDynamics(spec(seed=4, stragglers={"probability": 0.2, "factor": 0.3}, jitter=0.1))
    assert not np.array_equal(np.stack(forward), np.stack([other.factors(t)[0] for t in range(20)]))


def test_straggler_rate_and_mean_one_jitter():
    n_iter = 3000
    strag = ClusterDynamics(spec(stragglers={"probability": 0.1, "factor": 0.25}))
    f = np.stack([strag.factors(t)[0] for t in range(n_iter)])
    assert set(np.unique(f).tolist()) == {0.25, 1.0}
    assert (f == 0.25).mean() == pytest.approx(0.1, abs=0.01)
    jit = ClusterDynamics(spec(jitter=0.2))
    time_mult = 1.0 / np.stack([jit.factors(t)[0] for t in range(n_iter)])  # compute-time multipliers
    assert time_mult.mean() == pytest.approx(1.0, abs=0.01)
    assert np.log(time_mult).std() == pytest.approx(0.2, abs=0.01)


def test_a_quiet_spec_is_all_ones():
    d = ClusterDynamics(clusters.homogeneous(3))
    speed, bw = d.factors(17, 99.0)
    assert speed.tolist() == [1, 1, 1] and bw.tolist() == [1, 1, 1]
