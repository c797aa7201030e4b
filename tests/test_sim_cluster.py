"""VirtualCluster and simulate(): real learning in the engine's schema, time from the cost model,
caps and budgets honoured, bit-identical reruns (with a different-seed control), 128 workers."""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np
import pandas as pd
import pytest
import torch

from dynamix import cluster as clusters
from dynamix import config
from dynamix.cluster.costmodel import CostModel
from dynamix.metrics.schema import RUNS_COLUMNS, GlobalWindow, WorkerWindow
from dynamix.models import build_model, gradient_bytes
from dynamix.policies.base import make_policy
from dynamix.sim.cluster import VirtualCluster
from dynamix.sim.run import simulate

MODEL = {"name": "tiny-cnn", "width": 0.25}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def cost():
    return CostModel(a_ms=5.0, c_ms_per_sample=0.5, gradient_bytes=gradient_bytes(build_model(**MODEL)))


def cfg_with(**sections) -> config.Config:
    base = {"model": MODEL, "train": {"max_iters": 8, "eval_every": 4, "eval_samples": 200},
            "batch": {"window": 4, "min": 8, "initial": 16}}
    return config.load(profile="smoke", overrides=config.deep_merge(base, sections))


def test_a_window_reports_every_worker_in_the_schema_with_modelled_time(data, cost):
    spec = clusters.load("clusters/slow-worker-4.yaml")
    vc = VirtualCluster(spec, cfg_with(), data=data, seed=0, cost=cost)
    workers, glob = vc.run_window([16, 16, 16, 16])
    assert len(workers) == 4 and all(isinstance(w, WorkerWindow) for w in workers)
    assert isinstance(glob, GlobalWindow) and glob.iteration == 4 and glob.n_workers == 4
    assert glob.global_batch == 64 and glob.epoch == pytest.approx(4 * 64 / len(data.train_y))
    # time is the cost model's: 4 identical iterations (no dynamics in this spec)
    one = cost.iteration(np.full(4, 16), np.array(spec.speeds), np.full(4, 10.0), np.full(4, 0.05),
                         spec.architecture)
    assert glob.elapsed_s == pytest.approx(4 * one.iter_ms / 1e3)
    slow, fast = workers[3], workers[0]
    assert slow.compute_ms == pytest.approx(3 * fast.compute_ms) and slow.wait_ms == 0 and fast.wait_ms > 0
    assert fast.iter_time_ms == pytest.approx(fast.compute_ms + fast.wait_ms + fast.comm_ms)
    assert fast.cpu_time_ratio < slow.cpu_time_ratio <= 1
    assert fast.net_tx_bytes_per_s == pytest.approx(one.tx_bytes[0] / (one.iter_ms / 1e3))
    for w in workers:  # real training statistics from real gradients
        assert 0 < w.loss < 10 and 0 <= w.batch_acc <= 1 and w.grad_norm > 0
        assert w.grad_sqnorm >= w.grad_norm**2 * 0.999 and w.sigma2_norm > 0
        assert w.sigma_norm == pytest.approx(math.sqrt(w.sigma2_norm))
    assert glob.test_acc == glob.test_acc  # evaluated at iteration 4 (eval_every)
    assert glob.agg_grad_sqnorm > 0


def test_learning_is_real(data, cost):
    cfg = cfg_with(train={"max_iters": 60}, batch={"window": 20}, optim={"lr": 0.05})
    vc = VirtualCluster(clusters.homogeneous(2), cfg, data=data, seed=0, cost=cost)
    losses = [vc.run_window([32, 32])[1].train_loss for _ in range(3)]
    assert losses[-1] < losses[0] - 0.1


def test_batch_sizes_are_capped_by_device_memory(data, cost):
    small = {"name": "small", "max_batch": 24}
    spec = clusters.from_dict({"workers": [{"count": 1}, {"count": 1, "device": small}]})
    vc = VirtualCluster(spec, cfg_with(), data=data, seed=0, cost=cost)
    workers, glob = vc.run_window([40, 40])
    assert [w.batch_size for w in workers] == [40, 24] and glob.global_batch == 64
    assert workers[1].mem_util == pytest.approx(cost.mem_full)


def test_bad_batch_vectors_are_rejected(data, cost):
    vc = VirtualCluster(clusters.homogeneous(3), cfg_with(), data=data, seed=0, cost=cost)
    with pytest.raises(ValueError, match="one per worker"):
        vc.run_window([16, 16])
    with pytest.raises(ValueError, match=">= 1"):
        vc.run_window([16, 0, 16])


def test_budget_ends_the_run_mid_window(data, cost):
    cfg = cfg_with(train={"max_iters": 6})
    vc = VirtualCluster(clusters.homogeneous(2), cfg, data=data, seed=0, cost=cost)
    assert vc.run_window([16, 16])[1].iteration == 4
    _, glob = vc.run_window([16, 16])
    assert glob.iteration == 6 and vc.done and glob.test_acc == glob.test_acc
    with pytest.raises(RuntimeError, match="done"):
        vc.run_window([16, 16])
    vc.reset()
    assert not vc.done and vc.iteration == 0 and vc.elapsed_s == 0


@pytest.mark.parametrize("batch", [16, 64])
def test_schedule_follows_the_runs_own_epochs_and_the_time_budget_only_stops_it(data, cost, batch):
    """Under a time budget the learning rate is the cosine of the run's own epochs over the schedule's
    horizon, whatever virtual second it is; the budget ends the run without moving the schedule."""
    cfg = cfg_with(optim={"schedule": "cosine", "lr": 0.1},
                   train={"max_iters": 0, "epochs": 50, "max_time_s": 1.0, "schedule_epochs": 0.5})
    vc = VirtualCluster(clusters.homogeneous(2), cfg, data=data, seed=0, cost=cost)
    windows = []
    while not vc.done:
        windows.append(vc.run_window([batch, batch])[1])
    for g in windows:
        assert g.lr == pytest.approx(0.05 * (1 + math.cos(math.pi * min(1.0, g.epoch / 0.5))))
    assert vc.elapsed_s >= 1.0 and windows[-1].epoch < 50  # stopped by the clock, not the epochs


def test_the_arbitrators_cost_is_added_once_per_window_and_nothing_when_not_modelled(data, cost):
    spec = clusters.load("clusters/slow-worker-4.yaml")
    arbitrated = dataclasses.replace(cost, arbitration_ms=30.0, arbitration_ms_per_worker=5.0)  # A(4) = 50 ms
    elapsed = []
    for model in (cost, arbitrated):
        vc = VirtualCluster(spec, cfg_with(), data=data, seed=0, cost=model)
        elapsed.append([vc.run_window([16] * 4)[1].elapsed_s for _ in range(2)])
    # a window reports the time its iterations ended; the decision it waits for comes after
    assert elapsed[1][0] == elapsed[0][0]
    assert elapsed[1][1] == pytest.approx(elapsed[0][1] + 0.050)


def test_events_and_stragglers_move_virtual_time(data, cost):
    quiet = clusters.homogeneous(4)
    event = clusters.Event(kind="slowdown", at_iteration=4, factor=0.25)
    slowed = dataclasses.replace(quiet, events=(event,))
    times = []
    for spec in (quiet, slowed):
        vc = VirtualCluster(spec, cfg_with(), data=data, seed=0, cost=cost)
        times.append([vc.run_window([16] * 4)[0][0].iter_time_ms for _ in range(2)])
    assert times[0][0] == times[1][0]  # before the event
    assert times[1][1] > 3.5 * times[0][1]  # compute-bound: a quarter of the speed, ~4x the time


def test_same_seed_gives_bit_identical_runs_csv_and_another_seed_does_not(data, cost, tmp_path):
    spec = clusters.load("clusters/noisy-spot.yaml")  # stragglers, jitter, events
    cfg = cfg_with(train={"max_iters": 8})
    outs = {}
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        simulate(spec, cfg, make_policy("static:16"), seed, out_dir=tmp_path / name, progress=False,
                 data=data, cost=cost)
        outs[name] = (tmp_path / name / "runs.csv").read_bytes()
    assert outs["a"] == outs["b"]
    assert outs["a"] != outs["c"]
    frame = pd.read_csv(tmp_path / "a" / "runs.csv")
    assert list(frame.columns) == RUNS_COLUMNS
    assert len(frame) == 2 * spec.n_workers and set(frame["backend"]) == {"sim"}
    assert frame["run_id"].iloc[0] == "sim-noisy-spot-static-16-seed1"


def test_simulate_drives_the_policy_window_by_window(data, cost):
    frame = simulate(clusters.load("clusters/slow-worker-4.yaml"), cfg_with(train={"max_iters": 12}),
                     make_policy("static:24"), 0, progress=False, data=data, cost=cost)
    assert frame["window"].tolist() == [0] * 4 + [1] * 4 + [2] * 4
    assert set(frame["batch_size"]) == {24} and frame["iteration"].max() == 12
    assert frame["elapsed_s"].is_monotonic_increasing


def test_decisions_outside_the_bounds_fail_as_on_the_engine(data, cost):
    with pytest.raises(ValueError, match=r"outside \[batch.min, batch.max\]"):
        simulate(clusters.homogeneous(2), cfg_with(), make_policy("static:4"), 0, progress=False, data=data,
                 cost=cost)


def test_a_128_worker_cluster_trains_a_tiny_model(data, cost):
    spec = clusters.load("clusters/scale-128.yaml")
    cfg = cfg_with(train={"max_iters": 4, "eval_every": 4}, batch={"window": 2, "min": 4, "initial": 4})
    frame = simulate(spec, cfg, make_policy("static:4"), 0, progress=False, data=data, cost=cost)
    assert frame["rank"].nunique() == 128 and frame["window"].nunique() == 2
    last = frame[frame["window"] == 1]
    assert (last["global_batch"] == 512).all() and last["test_acc"].notna().all()
    t4 = last[last["speed"] < 0.5]["compute_ms"].mean()  # the T4s are the slowest generation
    a100 = last[last["speed"] > 2]["compute_ms"].mean()
    assert t4 > 4 * a100


def test_the_lhc_codec_is_timed_on_one_thread_by_its_own_clock(monkeypatch):
    """As one engine rank runs it: one torch thread, timed by that thread's CPU time (the process's
    would add the model's OpenMP threads spinning after the backward pass: 2x at 2 threads); the
    model's threads are back for the next iteration."""
    from dynamix.sim import cluster as sim_cluster

    seen = []

    def spy(grads, seed, clock):
        seen.append((torch.get_num_threads(), clock, {str(g.device) for g in grads}))
        return real(grads, seed, clock=clock)

    real = sim_cluster.reduce_in_process
    monkeypatch.setattr(sim_cluster, "reduce_in_process", spy)
    cfg = cfg_with(model={"name": "ncf", "width": 1.0}, data={"dataset": "interactions", "augment": False},
                   engine={"compression": "lhc"})
    cost = CostModel(a_ms=5.0, c_ms_per_sample=0.05, gradient_bytes=gradient_bytes(build_model("ncf")))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        spec = clusters.homogeneous(4, bandwidth_gbps=1.0)
        VirtualCluster(spec, cfg, seed=0, cost=cost).run_window([16] * 4)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert seen and all(s == (1, time.thread_time, {"cpu"}) for s in seen)


def test_lhc_compression_on_the_sparse_workload_shrinks_bytes_and_virtual_time():
    """ncf on a 1 Gbit/s ring: the simulator's clock sees the measured compression of each gradient."""
    spec = clusters.homogeneous(4, bandwidth_gbps=1.0)
    ncf = {"model": {"name": "ncf", "width": 1.0}, "data": {"dataset": "interactions", "augment": False}}
    times = {}
    for comp in ("none", "lhc"):
        cfg = cfg_with(**ncf, engine={"compression": comp})
        cost = CostModel(a_ms=5.0, c_ms_per_sample=0.05, gradient_bytes=gradient_bytes(build_model("ncf")))
        workers, glob = VirtualCluster(spec, cfg, seed=0, cost=cost).run_window([16] * 4)
        times[comp] = (workers[0], glob)
    (dense_w, dense_g), (lhc_w, lhc_g) = times["none"], times["lhc"]
    assert dense_w.compression_ratio == 1.0 and dense_w.comm_bytes == gradient_bytes(build_model("ncf"))
    assert lhc_w.compression_ratio > 10 and lhc_w.encode_ms > 0 and lhc_w.decode_ms > 0
    assert lhc_w.comm_ms < dense_w.comm_ms / 2
    assert lhc_g.train_loss == pytest.approx(dense_g.train_loss, abs=1e-5)  # the same learning
