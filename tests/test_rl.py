"""The DYNAMIX agent: state spec, reward, environment (check_env, determinism), training end to end,
policy artifacts (corrupt or mismatched files refused), domain randomisation, the LB-BSP warm start.

Everything runs real model math on the embedded CIFAR-10 subset with a 32-unit MLP, tiny batches
and a fixed what-if cost model (so no calibration file is written), seconds per episode.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil

import numpy as np
import pandas as pd
import pytest
import torch
from stable_baselines3.common.env_checker import check_env

from dynamix import cli, config
from dynamix import cluster as cluster_mod
from dynamix.cluster import homogeneous
from dynamix.cluster.costmodel import CostModel
from dynamix.config import ConfigError, RewardConfig
from dynamix.models import build_model, gradient_bytes
from dynamix.policies.base import Bounds, PolicyContext, make_policy
from dynamix.rl.learner import make_learner
from dynamix.rl.artifact import PolicyArtifactError, artifact_paths, load_policy
from dynamix.rl.domain import sample_cluster, sample_set
from dynamix.rl.env import DynamixEnv, WorkerVecEnv, training_config
from dynamix.rl.learn import PROGRESS_COLUMNS, train_policy
from dynamix.rl.reward import time_weighted, worker_rewards
from dynamix.rl.state import FEATURE_NAMES, FEATURES, OBS_DIM, OBS_HIGH, OBS_LOW, STATE_SPEC_VERSION, StateBuilder, apply_actions
from dynamix.rl.warmstart import teacher_actions, warm_start
from dynamix.sim.run import simulate

from helpers.rl import ACTIONS, rl_cfg, tiny_cost
from helpers.rl import glob as _glob
from helpers.rl import worker as _worker


@pytest.fixture(scope="module")
def cost() -> CostModel:
    return tiny_cost()


# ---- state spec --------------------------------------------------------------------------------------


def test_state_spec_is_documented_versioned_and_bounded():
    assert STATE_SPEC_VERSION and OBS_DIM == len(FEATURES) == len({f.name for f in FEATURES})
    assert all(f.definition and f.normalisation and f.low < f.high for f in FEATURES)
    workers = [_worker(0, 64, compute=80.0, wait=0.0), _worker(1, 256, compute=40.0, wait=40.0, acc=0.9)]
    sb = StateBuilder(Bounds(32, 1024))
    obs = sb.observe(workers, _glob(workers))
    assert obs.shape == (2, OBS_DIM) and obs.dtype == np.float32
    assert (obs >= OBS_LOW).all() and (obs <= OBS_HIGH).all()
    col = {f.name: i for i, f in enumerate(FEATURES)}
    assert obs[0, col["iter_time_rel"]] == 0.0  # first window is the time reference
    assert obs[1, col["batch_log"]] > obs[0, col["batch_log"]]
    assert obs[0, col["wait_frac"]] == 0.0 and obs[1, col["wait_frac"]] == pytest.approx(0.4)
    assert (obs[0, col["g_train_acc"]:] == obs[1, col["g_train_acc"]:]).all()  # global part shared
    # second window: twice as slow, accuracy up by 0.1 on worker 0
    slower = [dataclasses.replace(workers[0], iter_time_ms=200.0, batch_acc=0.6), workers[1]]
    obs2 = sb.observe(slower, _glob(slower))
    assert obs2[0, col["iter_time_rel"]] == pytest.approx(math.log2(200 / 100))
    assert obs2[0, col["acc_change"]] == pytest.approx(1.0) and obs2[1, col["acc_change"]] == 0.0


def test_actions_step_and_clamp_to_bounds():
    bounds = Bounds(32, 1024)
    assert apply_actions((64, 64, 1000, 40), (4, 0, 4, 0), (-100, -25, 0, 25, 100), bounds) == (164, 32, 1024, 32)
    with pytest.raises(ValueError, match="action 5 is out of range"):
        apply_actions((64,), (5,), (-100, -25, 0, 25, 100), bounds)


# ---- reward ------------------------------------------------------------------------------------------


def test_reward_matches_paper_formula_sgd_and_adam():
    coeffs = RewardConfig(alpha=1.0, beta=0.5, delta=0.02, eta=0.01)
    workers = [_worker(0, 128, iter_ms=150.0, acc=0.6, sigma_norm=0.5, sigma2_norm=0.25)]
    sgd = worker_rewards(workers, np.array([0.1]), t_ref_ms=100.0, coeffs=coeffs, optimizer="sgd")
    want = 0.6 + 1.0 * 0.1 - 0.5 * 1.5 - 0.02 * (math.log2(128) - 5)
    assert sgd.total[0] == pytest.approx(want)
    adam = worker_rewards(workers, np.array([-0.1]), t_ref_ms=100.0, coeffs=coeffs, optimizer="adam")
    assert adam.gain[0] == 0.0  # max(0, dA)
    assert adam.total[0] == pytest.approx(0.6 - 0.75 - 0.04 - 0.01 * 0.75)
    with pytest.raises(ValueError, match="t_ref_ms"):
        worker_rewards(workers, np.array([0.0]), 0.0, coeffs, "sgd")
    # iteration time: the straggler and the worker waiting for it pay the same synchronous iteration
    pair = [_worker(0, 128, iter_ms=100.0, compute=80.0, wait=0.0), _worker(1, 32, iter_ms=100.0, compute=20.0, wait=60.0)]
    shared = worker_rewards(pair, np.zeros(2), 100.0, coeffs, "sgd")
    assert shared.time.tolist() == pytest.approx([0.5, 0.5])
    # busy and marginal were dropped (docs/journal/rl.md, ablation table): refused as any unknown T_iter is
    for dropped in ("busy", "marginal", "wall"):
        with pytest.raises(ValueError, match=rf"time_signal = '{dropped}' is not allowed: must be one of "
                                             r"'iteration', 'imbalance'$"):
            worker_rewards(pair, np.zeros(2), 100.0, coeffs, "sgd", time_signal=dropped)


def test_imbalance_time_signal_is_zero_when_balanced_at_any_scale():
    """time_signal=imbalance: straggler pays its excess, waiting workers their wait, as fractions of
    the iteration; a balanced cluster pays nothing whether its batches are small or large."""
    coeffs = RewardConfig(alpha=1.0, beta=1.0, delta=0.0, eta=0.0)
    trio = [_worker(0, 128, iter_ms=100.0, compute=80.0, wait=0.0),  # busy 100
            _worker(1, 64, iter_ms=100.0, compute=50.0, wait=30.0),  # busy 70
            _worker(2, 32, iter_ms=100.0, compute=20.0, wait=60.0)]  # busy 40
    parts = worker_rewards(trio, np.zeros(3), 100.0, coeffs, "sgd", time_signal="imbalance")
    assert parts.time.tolist() == pytest.approx([0.3, 0.3, 0.6])
    for scale in (1.0, 8.0):  # t_ref does not matter: the signal is a fraction of the iteration
        even = [_worker(i, 64, iter_ms=100.0 * scale, compute=70.0 * scale, wait=0.0) for i in range(3)]
        assert worker_rewards(even, np.zeros(3), 100.0, coeffs, "sgd", time_signal="imbalance").time.tolist() == [0, 0, 0]


def test_state_tells_a_worker_whether_it_is_the_straggler():
    col = {f.name: i for i, f in enumerate(FEATURES)}["busy_rel"]
    workers = [_worker(0, 64, compute=80.0, wait=0.0), _worker(1, 256, compute=40.0, wait=40.0)]
    obs = StateBuilder(Bounds(32, 1024)).observe(workers, _glob(workers))
    assert obs[0, col] == pytest.approx(1.0) and obs[1, col] == pytest.approx(60 / 100)


def test_state_points_each_worker_towards_the_balanced_batch():
    """lb_gap = log2(b*_i / b_i) with b* the LB-BSP split of the same global batch: compute 80 ms at 64
    and 40 ms at 256 are 0.8 and 6.4 samples/ms, so b* = 320 * (1/9, 8/9)."""
    col = {f.name: i for i, f in enumerate(FEATURES)}["lb_gap"]
    workers = [_worker(0, 64, compute=80.0, wait=0.0), _worker(1, 256, compute=40.0, wait=40.0)]
    obs = StateBuilder(Bounds(32, 1024)).observe(workers, _glob(workers))
    assert obs[0, col] == pytest.approx(np.log2(320 / 9 / 64), abs=1e-5)
    assert obs[1, col] == pytest.approx(np.log2(320 * 8 / 9 / 256), abs=1e-5)
    even = [_worker(i, 64, compute=80.0, wait=0.0) for i in range(2)]
    assert StateBuilder(Bounds(32, 1024)).observe(even, _glob(even))[:, col].tolist() == [0.0, 0.0]


def test_shared_communication_does_not_hide_the_imbalance():
    """A parameter server's link adds the same time to every worker's iteration; the balanced split is
    still 2:1 for a worker twice as fast (state v3 divided by busy time and saw a third of the gap)."""
    col = {f.name: i for i, f in enumerate(FEATURES)}["lb_gap"]
    gaps = []
    for comm in (0.0, 100.0):  # same compute (10 ms and 20 ms at 64), with and without a 100 ms link
        workers = [_worker(0, 64, iter_ms=20.0 + comm, compute=10.0, wait=10.0),
                   _worker(1, 64, iter_ms=20.0 + comm, compute=20.0, wait=0.0)]
        gaps.append(StateBuilder(Bounds(32, 1024)).observe(workers, _glob(workers))[:, col])
    assert gaps[0] == pytest.approx(gaps[1])
    assert gaps[1] == pytest.approx(np.log2([128 * 2 / 3 / 64, 128 / 3 / 64]), abs=1e-5)


def test_time_weighted_return_does_not_favour_more_windows():
    """The same reward rate over the same time gives the same return however it is cut into windows;
    the paper's plain sum grows with the number of windows."""
    coeffs = RewardConfig(alpha=0.0, beta=0.5, delta=0.02, eta=0.0)
    parts = worker_rewards([_worker(0, 64, acc=0.9)], np.zeros(1), 100.0, coeffs, "sgd")
    budget_s, ref_s = 12.0, 2.0
    timed = [sum(time_weighted(parts, budget_s / n, ref_s).total[0] for _ in range(n)) for n in (3, 6, 12)]
    assert timed == pytest.approx([parts.total[0] * budget_s / ref_s] * 3)
    plain = [n * parts.total[0] for n in (3, 6, 12)]  # a positive reward per window: more windows, more return
    assert plain[0] < plain[1] < plain[2]
    with pytest.raises(ValueError, match="ref_window_s"):
        time_weighted(parts, 1.0, 0.0)


# ---- environment -------------------------------------------------------------------------------------


def _episode(env: DynamixEnv, action: int, seed: int = 0) -> tuple[dict, list[dict]]:
    _, first = env.reset(seed=seed)
    infos, done = [], False
    while not done:
        _, _, done, _, info = env.step([action] * env.n_workers)
        infos.append(info)
    return first, infos


def test_time_shaped_episode_ends_at_the_time_budget_with_equal_total_weight(cost):
    """return_shape=time: the episode ends at the first window reaching the virtual-time budget, and
    the windows' weights sum to budget / first window whether batches shrink (many windows) or not."""
    env = DynamixEnv(training_config(rl_cfg(return_shape="time", episode_epochs=0.05)), cost=cost)
    n_windows, weights = [], []
    for action in (0, 2):  # all shrink, all keep
        first, infos = _episode(env, action)
        elapsed = [first["elapsed_s"]] + [i["elapsed_s"] for i in infos]
        assert elapsed[-1] >= first["budget_s"] > elapsed[-2]  # stops at the budget, not before
        assert not env.cluster.done  # ended by time, not by the (capped) epoch budget
        counted = first["window_s"] + sum(i["window_s"] for i in infos)
        assert counted == pytest.approx(first["budget_s"])
        n_windows.append(len(infos))
        weights.append(counted / env.ref_window_s)
    assert n_windows[0] > n_windows[1] and weights[0] == pytest.approx(weights[1])
    # the budget is the initial-batch run's time for episode_epochs, measured on the first window
    iters = env.cfg.rl.episode_epochs * env.n_train / (env.n_workers * env.cfg.batch.initial)
    assert first["budget_s"] == pytest.approx(iters * env.ref_window_s / env.cfg.batch.window)


def test_paper_shaped_episode_ends_at_the_epoch_budget(cost):
    env = DynamixEnv(training_config(rl_cfg(return_shape="paper")), cost=cost)
    first, infos = _episode(env, 2)
    assert env.cluster.done and math.isinf(first["budget_s"])
    assert env.cluster.sampler.epochs_done >= env.cfg.rl.episode_epochs == env.cfg.train.epochs
    # unweighted: the epoch budget's last window counts as much as the first, however short
    assert len(infos) >= 2 and infos[-1]["window_s"] < infos[0]["window_s"]


@pytest.mark.parametrize("shape", ["paper", "time"])
def test_env_passes_check_env(cost, shape):
    env = DynamixEnv(training_config(rl_cfg(return_shape=shape)), cost=cost)
    check_env(env, warn=True, skip_render_check=True)


def _rollout(seed: int, cost: CostModel) -> tuple[np.ndarray, np.ndarray]:
    """Actions and rewards PPO collects in its first rollout (2 episodes' worth) from ``seed``."""
    cfg = training_config(rl_cfg(n_steps=8))
    venv = WorkerVecEnv(DynamixEnv(cfg, cost=cost))
    venv.seed(seed)
    model = make_learner(cfg.rl, venv, seed)
    model.learn(8 * venv.num_envs)
    return model.rollout_buffer.actions.copy(), model.rollout_buffer.rewards.copy()


def test_same_seed_same_actions_and_rewards_different_seed_differs(cost):
    a1, r1 = _rollout(3, cost)
    a2, r2 = _rollout(3, cost)
    a3, r3 = _rollout(4, cost)
    np.testing.assert_array_equal(a1, a2)
    np.testing.assert_array_equal(r1, r2)
    assert not np.array_equal(r1, r3)
    assert not np.array_equal(a1, a3)


def test_domain_randomisation_is_seeded_and_within_ranges():
    rl = config.load(profile="base").rl
    specs = [sample_cluster(rl, np.random.default_rng(5), 100) for _ in range(2)]
    assert specs[0] == specs[1]
    many = [sample_cluster(rl, np.random.default_rng(s), 100) for s in range(30)]
    speeds = [w.device.speed for s in many for w in s.workers]
    assert min(speeds) >= rl.speed[0] * 0.999 and max(speeds) <= rl.speed[1] * 1.001
    assert len({s.speeds for s in many}) == 30 and {s.architecture.kind for s in many} == {"ring", "ps"}
    with pytest.raises(ConfigError, match=r"rl.speed"):
        sample_cluster(dataclasses.replace(rl, speed=(2.0, 1.0)), np.random.default_rng(0), 100)


def test_domain_randomisation_spans_fixed_cost_and_overlap_only_when_asked():
    """Ranges of fixed per-iteration cost and ring overlap: drawn within them when set; left out of the
    draws (every fixed cost 0, no overlap) at the default [0, 0]."""
    rl = config.load(profile="base").rl
    plain = [sample_cluster(rl, np.random.default_rng(s), 100) for s in range(20)]
    assert {w.device.fixed_ms for s in plain for w in s.workers} == {0.0}
    assert {s.architecture.overlap for s in plain} == {0.0}
    wide = dataclasses.replace(rl, fixed_ms=(1.0, 4.0), overlap=(0.5, 0.9), ps_probability=0.0)
    many = [sample_cluster(wide, np.random.default_rng(s), 100) for s in range(20)]
    fixed = [w.device.fixed_ms for s in many for w in s.workers]
    overlaps = [s.architecture.overlap for s in many]
    assert 1.0 <= min(fixed) and max(fixed) <= 4.0 and len(set(fixed)) > 10
    assert 0.5 <= min(overlaps) and max(overlaps) <= 0.9
    with pytest.raises(ConfigError, match=r"rl.fixed_ms"):
        sample_cluster(dataclasses.replace(rl, fixed_ms=(3.0, 1.0)), np.random.default_rng(0), 100)


def test_sample_clusters_writes_a_seeded_validation_set_off_the_training_stream(tmp_path):
    """`dynamix sample-clusters`: loadable specs, worker counts cycled, same seed same set, and not the
    clusters training draws from the same seed."""
    def draw(seed, out):
        assert cli.main(["sample-clusters", "--profile", "smoke", "--n", "4", "--seed", str(seed),
                         "--workers", "4", "6", "--out", str(out)]) == 0
        return [cluster_mod.load(p) for p in sorted(out.glob("*.yaml"))]

    a, again, other = draw(3, tmp_path / "a"), draw(3, tmp_path / "b"), draw(4, tmp_path / "c")
    assert [s.name for s in a] == ["rand-00-4w", "rand-01-6w", "rand-02-4w", "rand-03-6w"]
    assert [s.n_workers for s in a] == [4, 6, 4, 6]
    assert a == again and a != other
    rl = config.load(profile="smoke").rl
    training = sample_cluster(rl, np.random.default_rng(3), 100)  # gymnasium's np_random(3) is this generator
    assert training.speeds != a[0].speeds
    with pytest.raises(ConfigError, match=r"n = 0"):
        sample_set(rl, 0, 3, [4], 1.0, 1000, 64)


# ---- training, artifacts, inference --------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory, cost):
    """One smoke training run (16 then 24 per-worker transitions: a resume), shared by the tests below."""
    out = tmp_path_factory.mktemp("policies")
    cfg = rl_cfg()
    zip_path = train_policy(cfg, "tiny", out_dir=out, cost=cost, progress=False)
    first = json.loads((out / "tiny.run" / "checkpoint.json").read_text())
    zip_path = train_policy(cfg, "tiny", timesteps=24, out_dir=out, cost=cost, progress=False)
    return cfg, zip_path, first


def test_smoke_training_end_to_end_with_resume(trained, cost, tmp_path):
    cfg, zip_path, first = trained
    zip_p, json_p = artifact_paths(zip_path)
    meta = json.loads(json_p.read_text())
    assert meta["state_spec_version"] == STATE_SPEC_VERSION and meta["actions"] == list(ACTIONS)
    assert meta["bounds"] == {"min": 8, "max": 64} and meta["reward"]["beta"] == cfg.reward.beta
    assert first["timesteps"] == 16 and meta["training"]["timesteps"] == 24  # resumed, not restarted
    progress = pd.read_csv(zip_p.with_suffix(".run") / "progress.csv")
    assert list(progress.columns) == PROGRESS_COLUMNS and len(progress) >= 2
    assert progress["episode"].is_unique and progress["timesteps"].is_monotonic_increasing
    parts = progress["acc"] + progress["gain"] - progress["time"] - progress["size"] - progress["noise"]
    np.testing.assert_allclose(parts, progress["return"], rtol=1e-5, atol=1e-6)
    # inference as a BatchSizePolicy in the simulator: within bounds, deterministic
    runs = [simulate(homogeneous(3), cfg, make_policy(f"dynamix:{zip_p}"), seed=1, progress=False, cost=cost)
            for _ in range(2)]
    pd.testing.assert_frame_equal(runs[0], runs[1])
    assert runs[0]["batch_size"].between(8, 64).all() and runs[0]["window"].nunique() >= 3


def test_snapshots_keep_the_warm_start_and_the_midpoint_beside_the_final_policy(cost, tmp_path):
    """rl.snapshots [0, 0.5]: the policy right after the warm start and at the first rollout end past half
    the timesteps are artifacts of their own, loadable and runnable; a fresh run without them drops them."""
    cfg = rl_cfg(warm_start="lbbsp", warm_start_timesteps=16, snapshots=[0.0, 0.5], timesteps=24)
    final = train_policy(cfg, "snap", out_dir=tmp_path, cost=cost, progress=False)
    steps = {p.stem: json.loads(p.with_suffix(".json").read_text())["training"]["timesteps"]
             for p in (tmp_path / "snap-at0.zip", tmp_path / "snap-at50.zip", final)}
    assert steps["snap-at0"] == 0 and 12 <= steps["snap-at50"] < steps["snap"] == 24, steps
    warm = json.loads((tmp_path / "snap-at0.json").read_text())["training"]["warm_start"]
    assert warm["agreement_after_ppo"] == warm["agreement"]  # the imitation itself: PPO has not moved it yet
    for name in ("snap-at0", "snap-at50"):
        runs = simulate(homogeneous(3), cfg, make_policy(f"dynamix:{tmp_path / name}.zip"), seed=1, progress=False,
                        cost=cost)
        assert runs["batch_size"].between(8, 64).all()
    assert (tmp_path / "snap-at0.zip").read_bytes() != final.read_bytes()
    train_policy(rl_cfg(timesteps=8), "snap", out_dir=tmp_path, cost=cost, progress=False, fresh=True)
    assert not list(tmp_path.glob("snap-at*"))


def test_corrupt_or_mismatched_policy_refused(trained, tmp_path):
    cfg, zip_path, _ = trained
    zip_p, json_p = artifact_paths(zip_path)
    good_zip, good_json = zip_p.read_bytes(), json_p.read_text()
    load_policy(zip_p)  # the intact pair loads

    def pair(zip_bytes: bytes, meta_text: str):
        z, j = tmp_path / "p.zip", tmp_path / "p.json"
        z.write_bytes(zip_bytes)
        j.write_text(meta_text)
        return z

    flipped = bytearray(good_zip)
    flipped[len(flipped) // 2] ^= 0xFF
    with pytest.raises(PolicyArtifactError, match="corrupt or was replaced"):
        load_policy(pair(bytes(flipped), good_json))
    meta = json.loads(good_json)
    with pytest.raises(PolicyArtifactError, match="state spec"):
        load_policy(pair(good_zip, json.dumps({**meta, "state_spec_version": "dynamix-state-v0"})))
    with pytest.raises(PolicyArtifactError, match="not valid JSON"):
        load_policy(pair(good_zip, good_json[:-20]))
    truncated = good_zip[: len(good_zip) // 2]
    with pytest.raises(PolicyArtifactError, match="cannot be loaded"):
        load_policy(pair(truncated, json.dumps({**meta, "zip_sha256": __import__("hashlib").sha256(truncated).hexdigest()})))
    (tmp_path / "p.json").unlink()
    with pytest.raises(PolicyArtifactError, match="p.json is missing"):
        load_policy(tmp_path / "p.zip")
    policy = make_policy(f"dynamix:{zip_p}")
    ctx = PolicyContext(n_workers=2, initial_batch_sizes=(16, 16), bounds=Bounds(8, 64), actions=(-100, -25, 0, 25, 100))
    with pytest.raises(PolicyArtifactError, match="trained for actions"):
        policy.reset(ctx)
    with pytest.raises(PolicyArtifactError, match="batch bounds"):
        policy.reset(dataclasses.replace(ctx, actions=ACTIONS, bounds=Bounds(32, 1024)))


def test_checkpoint_from_another_config_is_refused_or_restarted_on_request(trained, cost, tmp_path):
    cfg, zip_path, _ = trained
    other = dataclasses.replace(cfg, rl=dataclasses.replace(cfg.rl, gamma=0.5))
    with pytest.raises(ConfigError, match="config_hash"):
        train_policy(other, "tiny", timesteps=32, out_dir=zip_path.parent, cost=cost, progress=False)
    shutil.copytree(zip_path.parent, tmp_path / "policies")  # the pipeline's stages: start over instead
    train_policy(other, "tiny", timesteps=8, out_dir=tmp_path / "policies", cost=cost, progress=False,
                 on_stale="restart")
    _, meta = load_policy(tmp_path / "policies" / "tiny.zip")
    assert meta["training"]["rl"]["gamma"] == 0.5 and meta["training"]["timesteps"] < 32


def test_checkpoint_from_another_calibration_or_state_spec_is_stale(trained, cost, tmp_path):
    """Neither is in the config hash, and a finished checkpoint resumed under either would be saved as
    this run's policy without a step of training on it (it happened: a v3 network saved as state v4)."""
    cfg, zip_path, _ = trained
    shutil.copytree(zip_path.parent, tmp_path / "policies")
    recalibrated = dataclasses.replace(cost, c_ms_per_sample=2 * cost.c_ms_per_sample)
    with pytest.raises(ConfigError, match="cost"):
        train_policy(cfg, "tiny", out_dir=tmp_path / "policies", cost=recalibrated, progress=False)
    ckpt = tmp_path / "policies" / "tiny.run" / "checkpoint.json"
    state = json.loads(ckpt.read_text())
    ckpt.write_text(json.dumps({**state, "state_spec_version": "dynamix-state-v3"}))
    with pytest.raises(ConfigError, match="state_spec_version"):
        train_policy(cfg, "tiny", out_dir=tmp_path / "policies", cost=cost, progress=False)


def test_policy_state_survives_an_arbitrator_restart(trained, cost):
    """state_dict/load_state_dict (what the arbitrator persists) reproduce the same next decision."""
    from dynamix.sim.cluster import VirtualCluster
    from dynamix.sim.run import policy_context

    cfg, zip_path, _ = trained
    cluster = VirtualCluster(homogeneous(2), cfg, seed=0, cost=cost)
    ctx = policy_context(cluster, cfg, 0)
    a = make_policy(f"dynamix:{zip_path}")
    a.reset(ctx)
    a.decide(*cluster.run_window([16, 16]))
    saved = json.loads(json.dumps(a.state_dict()))  # plain data
    window = cluster.run_window([16, 16])
    b = make_policy(f"dynamix:{zip_path}")
    b.reset(ctx)
    b.load_state_dict(saved)
    assert a.decide(*window) == b.decide(*window)


def test_transfer_fine_tunes_on_another_workload(trained, cost):
    cfg, zip_path, _ = trained
    other = dataclasses.replace(cfg, rl=dataclasses.replace(cfg.rl, width=0.125))
    cost2 = dataclasses.replace(cost, gradient_bytes=gradient_bytes(build_model("mlp", 0.125)))
    out = train_policy(other, "tiny-ft", timesteps=8, init=str(zip_path), out_dir=zip_path.parent, cost=cost2, progress=False)
    meta = json.loads(artifact_paths(out)[1].read_text())
    assert meta["training"]["init"] == str(zip_path) and meta["training"]["workload"]["width"] == 0.125
    assert meta["training"]["timesteps"] == 8


# ---- warm start (rl.warm_start: lbbsp) ---------------------------------------------------------------

PAPER_STEPS = (-100, -25, 0, 25, 100)


def _obs(batches, targets, bounds=Bounds(32, 1024)) -> np.ndarray:
    """Rows whose batch_log and lb_gap encode b_i and b*_i (the other features do not matter)."""
    obs = np.zeros((len(batches), OBS_DIM), dtype=np.float32)
    lo, hi = np.log2(bounds.min), np.log2(bounds.max)
    obs[:, FEATURE_NAMES.index("batch_log")] = (np.log2(batches) - lo) / (hi - lo)
    obs[:, FEATURE_NAMES.index("lb_gap")] = np.log2(np.asarray(targets, float) / np.asarray(batches, float))
    return obs


def test_teacher_takes_the_step_closest_to_the_lbbsp_split():
    batches = [64, 64, 64, 256, 256, 32, 1024]
    targets = [170, 92, 70, 150, 250, 16, 3000]
    # +100 (164 is closest), +25 (89), stay (70 is nearer 64 than 89), -100 (156), stay (250: 231 is
    # further), at the minimum every step down clamps to 32 (ties go to the smallest step: stay), at the max stay
    expect = [100, 25, 0, -100, 0, 0, 0]
    got = teacher_actions(_obs(batches, targets), PAPER_STEPS, Bounds(32, 1024))
    assert [PAPER_STEPS[a] for a in got] == expect


def test_teacher_moves_the_global_batch_to_the_configured_size():
    """rl.warm_start_batch = m: LB-BSP's split of m samples, reached in the action set's steps."""
    obs = _obs([64, 64, 64, 64], [96, 32, 64, 64])  # B = 256; the split of 1024: 384, 128, 256, 256
    got = teacher_actions(obs, PAPER_STEPS, Bounds(32, 1024), global_batch=1024)
    assert [PAPER_STEPS[a] for a in got] == [100, 100, 100, 100]
    obs = _obs([512, 128, 256, 128], [384, 128, 256, 256])  # B = 1024: w0 overshoots, w3 is short
    got = teacher_actions(obs, PAPER_STEPS, Bounds(32, 1024), global_batch=1024)
    assert [PAPER_STEPS[a] for a in got] == [-100, 0, 0, 100]


def _agreement(model, venv, rl, episodes: int) -> tuple[float, set[int]]:
    """Share of a fresh teacher rollout's decisions the policy (greedy) makes the same way."""
    same, total, seen = 0, 0, set()
    obs = venv.reset()
    done = 0
    while done < episodes:
        teach = teacher_actions(obs, venv.env.steps, venv.env.bounds, rl.warm_start_batch)
        mine, _ = model.predict(obs, deterministic=True)
        same += int((mine == teach).sum())
        total += len(teach)
        seen |= set(teach.tolist())
        obs, _, dones, _ = venv.step(teach)
        done += int(dones[0])
    return same / total, seen


def test_warm_started_policy_imitates_the_teacher(cost):
    cfg = rl_cfg(warm_start="lbbsp", warm_start_timesteps=128, net_arch=[64, 64])
    venv = WorkerVecEnv(DynamixEnv(training_config(cfg), cost=cost))
    venv.seed(3)
    model = make_learner(cfg.rl, venv, seed=3)
    before, _ = _agreement(model, venv, cfg.rl, episodes=8)
    stats = warm_start(model, venv, cfg.rl, seed=3, progress=False)
    after, seen = _agreement(model, venv, cfg.rl, episodes=8)  # episodes the imitation never saw
    assert stats["transitions"] >= 128 and stats["episodes"] >= 1
    assert len(seen) >= 2  # the teacher does move batches on these clusters
    assert after >= 0.8 and after > before + 0.2, (before, after)


def test_smoothed_imitation_keeps_the_teacher_greedy_and_the_policy_exploring(cost):
    """rl.warm_start_smoothing = 0.2: the greedy action is still the teacher's, but the teacher's
    action is taken with probability near 1 - 0.2 x 4/5 = 0.84 (less the entropy bonus's share), well
    below its probability without it (0.93 on this small fit, > 0.99 on the cpu workload's)."""
    probs = {}
    for eps in (0.0, 0.2):
        cfg = rl_cfg(warm_start="lbbsp", warm_start_timesteps=128, net_arch=[64, 64], warm_start_smoothing=eps)
        venv = WorkerVecEnv(DynamixEnv(training_config(cfg), cost=cost))
        venv.seed(3)
        model = make_learner(cfg.rl, venv, seed=3)
        stats = warm_start(model, venv, cfg.rl, seed=3, progress=False)
        assert stats["agreement"] >= 0.8
        probs[eps] = stats["teacher_prob"]
    assert 0.7 < probs[0.2] < 0.9 and probs[0.0] > probs[0.2] + 0.1, probs


def test_a_head_only_imitation_learns_a_constant_teacher_in_the_bias_and_leaves_the_network_to_ppo(cost):
    """rl.warm_start_fit = head under a residual span, where the teacher takes x1 in every state: only the
    action head's bias and the critic move, the policy's hidden layers and head weights stay PPO's
    initialisation bit for bit, and the teacher's action is still the greedy one at about 1 - 0.2 x 4/5.
    The whole-network fit of the same teacher drives the last hidden layer's tanh units into saturation
    (|h| > 0.99), where PPO's gradients vanish; the head fit leaves them as initialised."""
    out = {}
    for fit in ("network", "head"):
        cfg = rl_cfg(state="schedule", action="global", residual_span=1.25, warm_start_batch=48, warm_start="lbbsp",
                     warm_start_timesteps=128, net_arch=[64, 64], warm_start_smoothing=0.2, warm_start_fit=fit)
        venv = WorkerVecEnv(DynamixEnv(training_config(cfg), cost=cost))
        venv.seed(3)
        model = make_learner(cfg.rl, venv, seed=3)
        before = {k: v.clone() for k, v in model.policy.state_dict().items()}
        stats = warm_start(model, venv, cfg.rl, seed=3, progress=False)
        moved = {k for k, v in model.policy.state_dict().items() if not torch.equal(v, before[k])}
        obs = torch.as_tensor(venv.reset())
        with torch.no_grad():
            last = model.policy.mlp_extractor.policy_net[:3](obs)  # the last hidden layer, before its tanh
        out[fit] = moved, stats, float((last.abs() > math.atanh(0.99)).float().mean())
    moved, stats, saturated = out["head"]
    assert moved == {"action_net.bias"} | {k for k in out["network"][0] if "value" in k}
    assert stats["agreement"] >= 0.8 and 0.7 < stats["teacher_prob"] < 0.9 and stats["fit"] == "head"
    assert out["network"][0] > moved and out["network"][2] > saturated + 0.1, (out["network"][2], saturated)


def test_train_policy_records_the_warm_start_in_the_artifact(cost, tmp_path):
    cfg = rl_cfg(warm_start="lbbsp", warm_start_timesteps=32, warm_start_epochs=2)
    out = train_policy(cfg, "ws", timesteps=8, out_dir=tmp_path, cost=cost, progress=False)
    training = json.loads(artifact_paths(out)[1].read_text())["training"]
    assert training["timesteps"] == 8 and training["warm_start"]["teacher"] == "lbbsp"
    assert training["warm_start"]["transitions"] >= 32
    # agreement with the teacher is recorded after imitation and again after PPO, on the teacher's states
    ws = training["warm_start"]
    assert 0.0 <= ws["agreement_after_ppo"] <= 1.0 and "move_agreement_after_ppo" in ws
    with np.load(out.with_suffix(".run") / "warm_start.npz") as kept:
        assert len(kept["actions"]) == ws["transitions"]
    plain = train_policy(rl_cfg(), "plain", timesteps=8, out_dir=tmp_path, cost=cost, progress=False)
    assert json.loads(artifact_paths(plain)[1].read_text())["training"]["warm_start"] is None
