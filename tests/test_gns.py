"""GNS / Pollux goodput: efficiency invariants, the noise-scale estimator, the policy in closed loop."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from dynamix.policies import Bounds, PolicyContext, make_policy
from dynamix.config import OptimConfig
from dynamix.policies.gns import GradientNoiseEstimator, adascale_gain, efficiency, noise_moments
from dynamix.train.optim import batch_scaling, learning_rate

from helpers.synthetic import LinearRegressionProblem, SyntheticCluster, drive


def test_efficiency_in_unit_interval_and_non_increasing_over_random_parameters():
    gen = np.random.default_rng(0)
    for _ in range(1000):
        m0 = float(gen.integers(1, 2048))
        var = float(10 ** gen.uniform(-6, 3)) * (gen.random() < 0.95)
        sqr = float(10 ** gen.uniform(-6, 3)) * (gen.random() < 0.9) - 1e-3 * (gen.random() < 0.05)
        batch = np.sort(np.geomspace(m0, m0 * float(gen.uniform(1, 512)), 64))
        e = efficiency(batch, m0, var, sqr)
        assert np.all((e >= 0) & (e <= 1 + 1e-12))
        assert np.all(np.diff(e) <= 1e-12)
        assert e[0] == pytest.approx(1.0)


def test_efficiency_matches_pollux_form_and_adascale_gain():
    """E(M) = (phi + M0)/(phi + M) with phi = tr(Sigma)/|G|^2, and E = r/S with r in [1, S]."""
    m0, trace, sqr = 64.0, 300.0, 0.5
    phi = trace / sqr
    for m in (64.0, 100.0, 512.0, 4096.0):
        assert efficiency(m, m0, trace / m0, sqr) == pytest.approx((phi + m0) / (phi + m))
        r = adascale_gain(m, m0, trace / m0, sqr)
        assert 1.0 <= r <= m / m0 + 1e-12
        assert r / (m / m0) == pytest.approx(efficiency(m, m0, trace / m0, sqr))
    assert efficiency(1024.0, m0, 1.0, 0.0) == 1.0  # pure noise: larger batches lose nothing
    assert adascale_gain(1024.0, m0, 1.0, 0.0) == pytest.approx(16.0)  # ... and the LR scales linearly


def test_noise_moments_invert_the_expectations_exactly():
    """Feeding E|g_i|^2 = |G|^2 + tr/b_i and E|g|^2 = |G|^2 + tr/B returns (|G|^2, tr) exactly."""
    g2, tr = 0.7, 123.0
    for b in ([16, 48], [32, 32, 32, 32], [17, 300, 64, 5, 900]):
        total = sum(b)
        local = [g2 + tr / bi for bi in b]
        assert noise_moments(b, local, g2 + tr / total) == pytest.approx((g2, tr))
    with pytest.raises(ValueError, match=">= 2 workers"):
        noise_moments([64], [1.0], 1.0)


@pytest.mark.parametrize("batches", [(32, 32, 32, 32), (16, 48, 100, 200)])
def test_estimator_recovers_known_noise_scale_on_linear_regression(batches):
    """Fixed parameters (lr = 0): the EMA of real mini-batch gradient norms gives B_simple within 20%."""
    problem = LinearRegressionProblem(dim=50, noise_std=2.0, seed=1)
    cluster = SyntheticCluster([1.0] * 4, [0.1] * 4, problem=problem, lr=0.0, window=10, seed=2,
                               w0=np.full(50, 0.3))
    truth = problem.noise_scale(cluster.w)
    estimator = GradientNoiseEstimator(m0=float(sum(batches)), smoothing=0.99)
    for _ in range(40):
        estimator.update(*cluster.run_window(batches))
    assert truth == pytest.approx(51 + 4 * 50 / (50 * 0.09))  # (d+1) + s^2 d / |delta|^2
    assert estimator.b_simple == pytest.approx(truth, rel=0.2)
    assert estimator.trace == pytest.approx(problem.trace(cluster.w), rel=0.2)


def test_gns_grows_the_batch_as_the_noise_scale_grows():
    """SGD on regression: |G| shrinks, B_simple grows, so goodput favours ever larger batches."""
    ctx = PolicyContext(n_workers=4, initial_batch_sizes=(32,) * 4, bounds=Bounds(32, 1024))
    cluster = SyntheticCluster([2.0] * 4, [0.05, 0.05, 0.05, 0.15], comm_ms=20.0, lr=0.02, window=10,
                               problem=LinearRegressionProblem(dim=20, noise_std=1.0), seed=0)
    policy = make_policy("gns:refit=20")
    history = drive(policy, cluster, ctx, 60)
    totals = [sum(h[0]) for h in history]
    assert min(totals) == 128 and totals[-1] >= 4 * totals[0]
    assert all(b >= a for a, b in zip(totals, totals[1:]))  # only grows on this problem
    assert all(32 <= s <= 1024 for h in history for s in h[0])
    assert history[-1][0][3] < history[-1][0][0]  # the slow worker carries less of the batch
    assert all(h[2] >= 1.0 for h in history) and history[-1][2] > 1.5  # AdaScale gain
    assert policy.diagnostics["b_simple"] > 4 * 128


def test_gns_adam_takes_square_root_of_gain_and_single_worker_holds():
    ctx = PolicyContext(n_workers=2, initial_batch_sizes=(32, 32), optimizer="adam")
    sgd_ctx = PolicyContext(n_workers=2, initial_batch_sizes=(32, 32))
    runs = {}
    for name, c in (("adam", ctx), ("sgd", sgd_ctx)):  # lr = 0: lr_scale cannot change the trajectory
        cluster = SyntheticCluster([2.0] * 2, [0.05] * 2, comm_ms=20.0, lr=0.0, seed=0, w0=np.full(20, 0.05))
        runs[name] = drive(make_policy("gns:refit=20"), cluster, c, 30)
    assert [h[0] for h in runs["adam"]] == [h[0] for h in runs["sgd"]]
    assert [h[2] for h in runs["adam"]] == pytest.approx([math.sqrt(h[2]) for h in runs["sgd"]])
    assert max(h[2] for h in runs["sgd"]) > 2.0
    one = PolicyContext(n_workers=1, initial_batch_sizes=(64,))
    single = drive(make_policy("gns:refit=10"), SyntheticCluster([1.0], [0.1], lr=0.02), one, 10)
    assert {h[0] for h in single} == {(64,)}


def test_gns_does_not_switch_for_less_than_the_gain_threshold():
    """With a huge threshold the batch never moves, though the goodput optimum does."""
    ctx = PolicyContext(n_workers=4, initial_batch_sizes=(32,) * 4)
    cluster = SyntheticCluster([2.0] * 4, [0.05] * 4, comm_ms=20.0, lr=0.02, seed=0)
    history = drive(make_policy("gns:refit=20,gain=10"), cluster, ctx, 40)
    assert {sum(h[0]) for h in history} == {128}


def test_gns_state_round_trip_reproduces_decisions():
    ctx = PolicyContext(n_workers=2, initial_batch_sizes=(32, 32))
    cluster = SyntheticCluster([2.0] * 2, [0.05, 0.1], comm_ms=20.0, lr=0.02, seed=5)
    first = make_policy("gns:refit=20")
    history = drive(first, cluster, ctx, 12)
    restored = make_policy("gns:refit=20")
    restored.reset(ctx)
    restored.load_state_dict(json.loads(json.dumps(first.state_dict())))  # JSON-safe state
    workers, glob = cluster.run_window(history[-1][0])
    assert restored.decide(workers, glob) == first.decide(workers, glob)


@pytest.mark.parametrize("rule", ["sqrt", "linear", "none"])
def test_gns_takes_the_adascale_gain_instead_of_the_configs_batch_rule(rule):
    """lr = lr0 * scaling(M0) * r(M): the learning rate GNS starts from, times the gain; never the
    config's batch rule and the gain together (lr0 * scaling(M) * r(M))."""
    cfg = OptimConfig(lr=0.1, lr_scaling=rule, base_batch=64)
    ctx = PolicyContext(n_workers=4, initial_batch_sizes=(32,) * 4, bounds=Bounds(32, 1024),
                        lr_scaling=rule, base_batch=64)
    cluster = SyntheticCluster([2.0] * 4, [0.05] * 4, comm_ms=20.0, lr=0.02, window=10,
                               problem=LinearRegressionProblem(dim=20, noise_std=1.0), seed=0)
    policy = make_policy("gns:refit=20")
    history = drive(policy, cluster, ctx, 40)
    decision = policy.decide(*cluster.run_window(history[-1][0]))
    batch, m0, lr_scale = sum(decision.batch_sizes), 128, decision.lr_scale
    assert batch >= 2 * m0 and policy.gain(batch) > 1.5  # the batch grew and the gain with it
    lr = learning_rate(cfg, 0, 1, batch, lr_scale)
    assert lr == pytest.approx(cfg.lr * batch_scaling(rule, m0, 64) * policy.gain(batch))
    if rule != "none":
        assert lr < cfg.lr * batch_scaling(rule, batch, 64) * policy.gain(batch) / 1.4
