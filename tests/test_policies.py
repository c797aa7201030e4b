"""Baseline policies: spec strings, LB-BSP allocation invariants, time fits, closed loops, ramp, state."""

from __future__ import annotations

import json
import numpy as np
import pytest

from dynamix.config import ConfigError
from dynamix.policies import Bounds, PolicyContext, known_policies, make_policy
from dynamix.policies.allocation import allocate, balance, predicted_times_ms, round_to_total
from dynamix.policies.timing import WorkerTimeModel

from helpers.synthetic import SyntheticCluster, drive


def random_case(gen: np.random.Generator):
    n = int(gen.integers(1, 9))
    lo = int(gen.choice([1, 8, 32]))
    hi = int(gen.choice([lo + 1, lo * 4, 1024]))
    a = gen.uniform(0, 20, n) * (gen.random(n) < 0.7)
    c = gen.uniform(0.01, 2.0, n)
    total = int(gen.integers(n * lo, n * hi + 1))
    return n, lo, hi, a, c, total


# ---------------------------------------------------------------------------------------- specs


def test_all_baselines_registered_and_arguments_parsed():
    assert {"static", "lbbsp", "gns", "ramp"} <= set(known_policies())
    assert make_policy("gns:refit=20").options.refit == 20
    ramp = make_policy("ramp:factor=2,every=200").options
    assert (ramp.factor, ramp.every, ramp.epochs) == (2.0, 200, 0.0)
    assert make_policy("ramp").options.every > 0
    assert make_policy("lbbsp:deadband=0.1").options.deadband == 0.1


@pytest.mark.parametrize(
    "spec, words",
    [
        ("gns:refit=0", ["gns.refit", "[1, inf]"]),
        ("lbbsp:deadband=-1", ["lbbsp.deadband", "[0.0, 10.0]"]),
        ("gns:nope=1", ["gns.nope", "refit"]),
        ("ramp:every=10,epochs=1", ["exactly one of every"]),
        ("lbbsp:oops", ["key=value"]),
    ],
)
def test_bad_spec_arguments_name_the_field(spec, words):
    with pytest.raises(ConfigError) as err:
        make_policy(spec)
    for w in words:
        assert w in str(err.value)


# ----------------------------------------------------------------------------- allocation math


def test_allocation_invariants_over_random_parameters():
    """Sizes sum to B, stay in bounds, and equalise predicted times up to one sample's cost."""
    gen = np.random.default_rng(0)
    for _ in range(500):
        n, lo, hi, a, c, total = random_case(gen)
        b = np.array(allocate(total, a, c, lo, hi))
        assert b.sum() == total and b.min() >= lo and b.max() <= hi
        t_star, x = balance(total, a, c, lo, hi)
        assert x.sum() == pytest.approx(total, abs=1e-6)
        t = predicted_times_ms(b, a, c)
        free = (b > lo) & (b < hi)
        assert np.all(np.abs(t[free] - t_star) <= c[free] + 1e-9)
        assert np.all(t[b == lo] >= t_star - c[b == lo] - 1e-9)  # held at lo: would like less
        assert np.all(t[b == hi] <= t_star + c[b == hi] + 1e-9)  # held at hi: would like more


def test_allocation_beats_any_other_split():
    """No feasible split of B has a lower predicted iteration time (beyond integer rounding)."""
    gen = np.random.default_rng(1)
    for _ in range(200):
        n, lo, hi, a, c, total = random_case(gen)
        best = predicted_times_ms(allocate(total, a, c, lo, hi), a, c).max()
        other = round_to_total(gen.dirichlet(np.ones(n)) * total, total, lo, hi)
        assert best <= predicted_times_ms(other, a, c).max() + c.max() + 1e-9


def test_closed_form_without_bounds():
    """T* = (B + sum a_i/c_i) / sum 1/c_i when no bound is active (the LB-BSP equation)."""
    a, c, total = np.array([2.0, 1.0, 5.0]), np.array([0.1, 0.2, 0.3]), 600
    t_star, x = balance(total, a, c, 1, 10_000)
    assert t_star == pytest.approx((total + (a / c).sum()) / (1 / c).sum())
    assert x == pytest.approx((t_star - a) / c)


def test_round_to_total_is_nearest_and_exact():
    gen = np.random.default_rng(2)
    for _ in range(300):
        n = int(gen.integers(1, 10))
        x = gen.dirichlet(np.ones(n)) * 100 * n + 32
        total = int(round(x.sum()))
        b = np.array(round_to_total(x, total, 32, 10_000))
        assert b.sum() == total and np.all(np.abs(b - x) < 1.0 + 1e-9)


def test_allocation_rejects_infeasible_global_batch():
    with pytest.raises(ValueError, match=r"must be in \[64, 2048\]"):
        allocate(40, [0, 0], [1, 1], 32, 1024)
    with pytest.raises(ValueError, match="per-sample costs"):
        allocate(100, [0, 0], [1, 0], 32, 1024)


# ------------------------------------------------------------------------------- time models


def test_time_model_recovers_affine_costs_and_falls_back_to_speed():
    m = WorkerTimeModel()
    m.observe(64, 5.0 + 0.2 * 64)
    assert m.fit() == pytest.approx((0.0, (5.0 + 0.2 * 64) / 64))  # one batch size: b/t speed only
    for b in (32, 96, 128):
        m.observe(b, 5.0 + 0.2 * b)
    assert m.fit() == pytest.approx((5.0, 0.2))


def test_time_model_follows_a_slowdown():
    m = WorkerTimeModel(history=8, decay=0.5)
    for b in (64, 96) * 3:
        m.observe(b, 1.0 + 0.1 * b)
    for b in (64, 96) * 3:
        m.observe(b, 1.0 + 0.3 * b)  # worker became 3x slower
    a, c = m.fit()
    assert c == pytest.approx(0.3, rel=0.1)


# ---------------------------------------------------------------------------- closed loops


def _mean_iter_ms(spec: str, a, c, seed: int = 0, windows: int = 30) -> tuple[float, tuple[int, ...]]:
    n = len(a)
    cluster = SyntheticCluster(a, c, comm_ms=1.0, jitter=0.05, seed=seed, window=5)
    ctx = PolicyContext(n_workers=n, initial_batch_sizes=(64,) * n)
    history = drive(make_policy(spec), cluster, ctx, windows)
    assert all(sum(sizes) == 64 * n for sizes, _, _ in history)
    return float(np.mean([h[1] for h in history[5:]])), history[-1][0]


@pytest.mark.parametrize("n", [2, 4])
def test_lbbsp_cuts_iteration_time_with_one_worker_3x_slower(n):
    a = [2.0] * n
    c = [0.1] * (n - 1) + [0.3]
    t_static, _ = _mean_iter_ms("static", a, c)
    t_lbbsp, sizes = _mean_iter_ms("lbbsp", a, c)
    assert t_lbbsp <= 0.6 * t_static
    assert sizes[-1] < min(sizes[:-1])  # the slow worker gets the smallest share


def test_lbbsp_rebalances_after_a_worker_slows_down_mid_run():
    cluster = SyntheticCluster([1.0] * 3, [0.1] * 3, comm_ms=1.0, jitter=0.02, seed=5, window=5)
    ctx = PolicyContext(n_workers=3, initial_batch_sizes=(96,) * 3)
    policy = make_policy("lbbsp")
    policy.reset(ctx)
    decision = policy.initial(ctx)
    for w in range(16):
        if w == 6:
            cluster.c[0] = 0.3  # worker 0 becomes 3x slower (a co-located job, a throttled core)
        workers, glob = cluster.run_window(decision.batch_sizes)
        decision = policy.decide(workers, glob)
    b = decision.batch_sizes
    assert sum(b) == 288 and b[0] < 0.5 * min(b[1:])
    assert cluster.run_window(b)[0][0].iter_time_ms < 0.7 * cluster.run_window((96,) * 3)[0][0].iter_time_ms


def test_lbbsp_dead_band_keeps_a_homogeneous_split_stable():
    cluster = SyntheticCluster([2.0] * 4, [0.1] * 4, comm_ms=1.0, jitter=0.05, seed=3, window=5)
    ctx = PolicyContext(n_workers=4, initial_batch_sizes=(64,) * 4)
    history = drive(make_policy("lbbsp"), cluster, ctx, 40)
    assert {h[0] for h in history} == {(64, 64, 64, 64)}
    # without a dead band the same noise makes it re-split
    cluster = SyntheticCluster([2.0] * 4, [0.1] * 4, comm_ms=1.0, jitter=0.05, seed=3, window=5)
    history = drive(make_policy("lbbsp:deadband=0"), cluster, ctx, 40)
    assert len({h[0] for h in history}) > 1


def test_lbbsp_state_round_trip_reproduces_decisions():
    ctx = PolicyContext(n_workers=3, initial_batch_sizes=(64,) * 3)
    cluster = SyntheticCluster([1.0] * 3, [0.1, 0.2, 0.3], jitter=0.05, seed=4, window=5)
    first = make_policy("lbbsp")
    drive(first, cluster, ctx, 6)
    restored = make_policy("lbbsp")
    restored.reset(ctx)
    restored.load_state_dict(json.loads(json.dumps(first.state_dict())))  # JSON-safe state
    workers, glob = cluster.run_window((64, 64, 64))
    assert restored.decide(workers, glob) == first.decide(workers, glob)


# ------------------------------------------------------------------------------------- ramp


def test_ramp_multiplies_every_n_iterations_then_decays_lr_at_the_cap():
    ctx = PolicyContext(n_workers=2, initial_batch_sizes=(64, 128), bounds=Bounds(32, 512))
    cluster = SyntheticCluster([1.0, 1.0], [0.1, 0.1], window=10)
    history = drive(make_policy("ramp:factor=2,every=20"), cluster, ctx, 12)
    sizes = [h[0] for h in history]
    # window w is decided after 10*w iterations: doubles every 2 windows until 512 caps worker 1
    assert sizes[:6] == [(64, 128), (64, 128), (128, 256), (128, 256), (256, 512), (256, 512)]
    assert sizes[6] == (512, 512)  # worker 0 reaches the cap one ramp later
    # noise scale lr/B keeps following 2^-n: lr_scale = achieved growth / 2^n
    assert history[6][2] == pytest.approx((1024 / 192) / 8)
    assert history[8][2] == pytest.approx((1024 / 192) / 16)
    frozen = drive(make_policy("ramp:factor=2,every=20,decay_at_cap=false"), cluster, ctx, 12)
    assert {h[2] for h in frozen} == {1.0}


def test_ramp_by_epochs():
    ctx = PolicyContext(n_workers=1, initial_batch_sizes=(32,))
    policy = make_policy("ramp:factor=3,epochs=0.5")
    policy.reset(ctx)
    cluster = SyntheticCluster([1.0], [0.1])
    workers, glob = cluster.run_window((32,))
    for epoch, expected in [(0.49, 32), (0.5, 96), (1.2, 288)]:
        decision = policy.decide(workers, glob.__class__(**{**glob.as_row(), "epoch": epoch}))
        assert decision.batch_sizes == (expected,)


# -------------------------------------------------------------------------------- the contract


@pytest.mark.parametrize("spec", ["static", "lbbsp", "gns:refit=10", "ramp:factor=4,every=20"])
def test_every_baseline_returns_one_bounded_size_per_worker(spec):
    """Random heterogeneous clusters: every decision has n sizes within bounds and a finite lr_scale > 0."""
    gen = np.random.default_rng(7)
    for trial in range(4):
        n = int(gen.integers(2, 7))
        bounds = Bounds(int(gen.choice([8, 32])), int(gen.choice([256, 1024])))
        ctx = PolicyContext(n_workers=n, initial_batch_sizes=tuple(int(v) for v in gen.integers(8, 300, n)),
                            bounds=bounds)
        cluster = SyntheticCluster(gen.uniform(0, 5, n), gen.uniform(0.02, 1.0, n), comm_ms=float(gen.uniform(0, 50)),
                                   lr=0.02, jitter=0.1, window=5, seed=trial)
        for sizes, _, lr_scale in drive(make_policy(spec), cluster, ctx, 12):
            assert len(sizes) == n and all(bounds.min <= s <= bounds.max for s in sizes)
            assert np.isfinite(lr_scale) and lr_scale > 0


def test_a_global_batch_the_workers_cannot_hold_is_flagged_not_clamped_silently():
    bounds = Bounds(32, 1024)
    note = make_policy("lbbsp:batch=512").unmet_request(32, bounds)
    assert note == ("lbbsp:batch=512 asks for a global batch of 512, which 32 workers cannot hold within "
                    "batch.min, batch.max = [32, 1024] (global [1024, 32768]): it runs at 1024")
    assert make_policy("lbbsp:batch=512").unmet_request(16, bounds) is None  # 16 x 32 = 512: held
    assert make_policy("lbbsp").unmet_request(32, bounds) is None  # the run's own initial batch
    assert make_policy("lbbsp:batch=99999").unmet_request(4, bounds).endswith("it runs at 4096")
    assert make_policy("static:64").unmet_request(32, bounds) is None
