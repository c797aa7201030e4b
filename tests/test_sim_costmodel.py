"""The cost model: exact equations on hand-checked cases, and AdaptDL-style invariants over seeded
random clusters (iteration time never falls when a batch grows, a worker slows or a link narrows)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dynamix.cluster import Architecture
from dynamix.cluster.costmodel import BYTES_PER_MS_PER_GBPS, CostModel

CASES = 300


def random_case(rng: np.random.Generator):
    n = int(rng.integers(1, 65))
    arch = Architecture(
        kind=str(rng.choice(["ring", "ps"])), num_servers=int(rng.integers(1, 5)),
        server_bandwidth_gbps=float(10 ** rng.uniform(-2, 2)),
        overlap=float(rng.choice([0.0, rng.uniform(), 1.0])),
    )
    cost = CostModel(a_ms=float(rng.uniform(0, 50)), c_ms_per_sample=float(10 ** rng.uniform(-3, 1)),
                     gradient_bytes=int(10 ** rng.uniform(3, 9)))
    b = rng.integers(1, 1025, n)
    speeds = 10 ** rng.uniform(-1.5, 1, n)
    bw = 10 ** rng.uniform(-2, 2, n)
    lat = rng.uniform(0, 2, n)
    return cost, arch, b, speeds, bw, lat


def test_ring_allreduce_matches_the_formula():
    cost = CostModel(a_ms=0.0, c_ms_per_sample=1.0, gradient_bytes=1_000_000)
    arch = Architecture(kind="ring")
    bw = np.array([10.0, 1.0, 10.0, 10.0])  # Gbit/s: the 1 Gbit/s link paces the ring
    lat = np.array([0.05, 0.05, 0.2, 0.05])
    expected = 2 * 3 / 4 * 1_000_000 / (1.0 * BYTES_PER_MS_PER_GBPS) + 2 * 3 * 0.2
    assert cost.comm_ms(bw, lat, arch) == pytest.approx(expected)
    assert expected == pytest.approx(12.0 + 1.2)  # 1.5 MB at 125 kB/ms, 6 latency hops


def test_parameter_server_time_is_set_by_incast_or_the_slowest_worker_link():
    s = 4_000_000
    cost = CostModel(a_ms=0.0, c_ms_per_sample=1.0, gradient_bytes=s)
    bw = np.full(8, 10.0)
    lat = np.zeros(8)
    # 8 workers x 2 MB shard into each of 2 servers at 1 Gbit/s: incast 16 MB / 125 kB/ms = 128 ms per phase
    incast = Architecture(kind="ps", num_servers=2, server_bandwidth_gbps=1.0)
    assert cost.comm_ms(bw, lat, incast) == pytest.approx(2 * 8 * s / (2 * 1.0 * BYTES_PER_MS_PER_GBPS))
    # fat servers: the slowest worker link (0.1 Gbit/s) dominates: 4 MB / 12.5 kB/ms = 320 ms per phase
    bw[3] = 0.1
    fat = Architecture(kind="ps", num_servers=2, server_bandwidth_gbps=100.0)
    assert cost.comm_ms(bw, lat, fat) == pytest.approx(2 * s / (0.1 * BYTES_PER_MS_PER_GBPS))


def test_iteration_decomposes_into_compute_wait_and_visible_comm():
    cost = CostModel(a_ms=2.0, c_ms_per_sample=0.5, gradient_bytes=10_000_000)
    arch = Architecture(kind="ring", overlap=0.5)
    it = cost.iteration(np.array([64, 128]), np.array([1.0, 0.5]), np.array([1.0, 1.0]), np.zeros(2), arch)
    assert it.compute_ms.tolist() == pytest.approx([34.0, 132.0])  # (2 + 0.5 b) / s
    comm = 2 * 1 / 2 * 10_000_000 / BYTES_PER_MS_PER_GBPS  # 80 ms
    assert it.comm_total_ms == pytest.approx(comm)
    assert it.iter_ms == pytest.approx(132.0 + 0.5 * comm)
    np.testing.assert_allclose(it.compute_ms + it.wait_ms + it.comm_ms, it.iter_ms)
    assert it.wait_ms.tolist() == pytest.approx([98.0, 0.0])


def test_single_worker_has_no_communication():
    cost = CostModel(a_ms=1.0, c_ms_per_sample=0.1, gradient_bytes=10**8)
    it = cost.iteration(np.array([100]), np.array([1.0]), np.array([0.001]), np.array([5.0]), Architecture())
    assert it.iter_ms == pytest.approx(11.0) and it.tx_bytes.tolist() == [0.0]


def test_invariants_over_random_clusters():
    rng = np.random.default_rng(0)
    for _ in range(CASES):
        cost, arch, b, speeds, bw, lat = random_case(rng)
        base = cost.iteration(b, speeds, bw, lat, arch)
        i = int(rng.integers(len(b)))
        assert base.iter_ms >= base.compute_ms.max() - 1e-9 and base.iter_ms >= base.comm_total_ms - 1e-9
        np.testing.assert_allclose(base.compute_ms + base.wait_ms + base.comm_ms, base.iter_ms, rtol=1e-12)
        # a larger batch on any worker never shortens the iteration
        bigger = b.copy()
        bigger[i] += int(rng.integers(1, 512))
        assert cost.iteration(bigger, speeds, bw, lat, arch).iter_ms >= base.iter_ms
        # slowing any worker never speeds the iteration up
        slower = speeds.copy()
        slower[i] *= rng.uniform(0.01, 1.0)
        assert cost.iteration(b, slower, bw, lat, arch).iter_ms >= base.iter_ms
        # more bandwidth (any worker's link, or the servers') never slows it down
        wider = bw.copy()
        wider[i] *= rng.uniform(1.0, 100.0)
        assert cost.iteration(b, speeds, wider, lat, arch).iter_ms <= base.iter_ms
        fat_servers = dataclasses.replace(arch, server_bandwidth_gbps=arch.server_bandwidth_gbps * 10)
        assert cost.iteration(b, speeds, bw, lat, fat_servers).iter_ms <= base.iter_ms
        # more overlap never slows it down either
        more_overlap = dataclasses.replace(arch, overlap=min(1.0, arch.overlap + 0.25))
        assert cost.iteration(b, speeds, bw, lat, more_overlap).iter_ms <= base.iter_ms


def test_counters_are_consistent_with_the_times():
    rng = np.random.default_rng(1)
    for _ in range(CASES):
        cost, arch, b, speeds, bw, lat = random_case(rng)
        it = cost.iteration(b, speeds, bw, lat, arch)
        n = len(b)
        share = 2 * (n - 1) / n if arch.kind == "ring" else 1.0
        expected_tx = 0.0 if n == 1 else share * cost.gradient_bytes
        np.testing.assert_allclose(it.tx_bytes, expected_tx)
        np.testing.assert_allclose(it.rx_bytes, it.tx_bytes)
        assert ((it.link_util >= 0) & (it.link_util <= 1)).all()
        # the narrowest link is the busiest one, and loses the most segments
        if n > 1:
            k = int(np.argmin(bw))
            assert it.link_util[k] == pytest.approx(it.link_util.max())
            assert it.expected_retrans[k] == pytest.approx(it.expected_retrans.max())


def test_loss_grows_with_utilisation_and_memory_with_batch():
    cost = CostModel(a_ms=1.0, c_ms_per_sample=0.1, gradient_bytes=1000)
    p = cost.loss_probability(np.linspace(0, 1, 11))
    assert (np.diff(p) > 0).all() and p[0] == cost.base_loss
    mem = cost.mem_util(np.array([0, 256, 512, 4096]), np.array([512, 512, 512, 512]))
    assert mem.tolist() == pytest.approx([cost.mem_idle, (cost.mem_idle + cost.mem_full) / 2, cost.mem_full,
                                          cost.mem_full])


@pytest.mark.parametrize("field,kwargs", [
    ("a_ms", dict(a_ms=-1.0, c_ms_per_sample=1.0, gradient_bytes=1)),
    ("c_ms_per_sample", dict(a_ms=1.0, c_ms_per_sample=-0.1, gradient_bytes=1)),
    ("gradient_bytes", dict(a_ms=1.0, c_ms_per_sample=1.0, gradient_bytes=-5)),
])
def test_bad_parameters_name_the_field(field, kwargs):
    with pytest.raises(ValueError, match=field):
        CostModel(**kwargs)


def test_compressed_communication_moves_fewer_bytes_pays_two_latencies_and_the_codec():
    arch = Architecture(kind="ring")
    bw, lat = np.full(4, 1.0), np.full(4, 0.2)
    dense = CostModel(a_ms=0.0, c_ms_per_sample=1.0, gradient_bytes=1_000_000)
    lhc = dataclasses.replace(dense, wire_fraction=0.05, codec_ms=3.0, collectives=2)
    assert lhc.comm_ms(bw, lat, arch) == pytest.approx(12.0 * 0.05 + 2 * 1.2 + 3.0)  # vs 12.0 + 1.2 dense
    assert lhc.traffic_bytes(4, arch) == pytest.approx(0.05 * dense.traffic_bytes(4, arch))
    ps = Architecture(kind="ps", num_servers=1, server_bandwidth_gbps=1.0)
    assert lhc.comm_ms(bw, lat, ps) < dense.comm_ms(bw, lat, ps) / 5
    for bad in ({"wire_fraction": 0.0}, {"codec_ms": -1.0}, {"collectives": 0}):
        with pytest.raises(ValueError, match="out of range"):
            dataclasses.replace(dense, **bad)


def test_a_window_of_arbitration_is_reported_beside_the_windows_iterations():
    import pandas as pd

    from dynamix.experiments.scalability import arbitration

    cost = CostModel(a_ms=1.0, c_ms_per_sample=0.1, gradient_bytes=1000, arbitration_ms=2.0,
                     arbitration_ms_per_worker=0.5)  # A(4) = 4 ms, A(32) = 18 ms
    assert CostModel(1.0, 0.1, 1000).arbitration_window_ms(1024) == 0.0  # not modelled by default
    # 4 workers: 2 windows of 100 ms of iterations; 32 workers: 3 windows (the last short) of 50 ms
    per_run = pd.DataFrame({"n_workers": [4, 4, 32], "iterations": [20, 20, 21],
                            "total_time_s": [2 * 0.104, 2 * 0.104, 3 * 0.068]})
    got = arbitration(per_run, cost, k=10)
    assert got[4] == {"arbitration_ms": 4.0, "iterations_ms": 100.0, "arbitration_share": round(4 / 104, 4)}
    assert got[32] == {"arbitration_ms": 18.0, "iterations_ms": 50.0, "arbitration_share": round(18 / 68, 4)}
    with pytest.raises(ValueError, match="out of range"):
        dataclasses.replace(cost, arbitration_ms_per_worker=-0.1)
