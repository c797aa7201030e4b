"""The RL environment over the real engine (``rl.episodes: engine``): torchrun workers, decisions
through the in-process gRPC arbitrator (dynamix.sim.engine_cluster).

Each episode launches a real 2-worker engine run (8-10 s to start on 2 cores), so the default tier
has one episode; check_env (several resets) and a training run end to end are in the slow tier.
"""

from __future__ import annotations

import csv

import numpy as np
import pytest
from stable_baselines3.common.env_checker import check_env

from dynamix import config
from dynamix.cluster import ClusterSpec, DeviceProfile, WorkerSpec
from dynamix.rl.artifact import load_policy
from dynamix.rl.env import DynamixEnv, training_config
from dynamix.rl.learn import train_policy
from dynamix.rl.state import OBS_DIM, apply_actions

from helpers.engine import sizes_by_window


def engine_rl_cfg(**rl) -> config.Config:
    """2 engine workers, a 16-unit MLP, windows of 4 iterations, episodes of 0.2 epochs (2-8 windows).
    Episodes are epoch-budgeted (``return_shape: paper``): on the engine a time budget would make the
    number of windows depend on the machine's load (the time budget itself is tested on the simulator)."""
    return config.load(overrides={
        "model": {"name": "mlp", "width": 0.0625},
        "data": {"augment": False},
        "batch": {"window": 4},
        "rl": {"episodes": "engine", "return_shape": "paper", "model": "mlp", "width": 0.0625, "workers": 2, "episode_epochs": 0.2,
               "n_steps": 4, "batch_size": 8, "n_epochs": 1, "net_arch": [16], "warm_start": "none", **rl},
    })


# one reference worker and one at half speed (the engine emulates the slow one by time dilation)
TWO = ClusterSpec(name="two", workers=(WorkerSpec(DeviceProfile(), 10.0, 0.05),
                                       WorkerSpec(DeviceProfile("half", 0.5), 10.0, 0.05)))


def test_engine_episode_trains_every_window_with_the_agents_sizes():
    cfg = training_config(engine_rl_cfg())
    env = DynamixEnv(cfg, specs=[TWO])
    obs, info = env.reset(seed=0)
    assert obs.shape == (2, OBS_DIM) and np.isfinite(obs).all()
    cluster = env.cluster
    decided, sizes, done = [], env.batch_sizes, False
    actions = [np.array([4, 0]), np.array([1, 3])]  # (+100, -100), then (-25, +25)
    while not done:
        action = actions[len(decided) % 2]
        sizes = apply_actions(sizes, action, env.steps, env.bounds)
        obs, reward, done, _, info = env.step(action)
        decided.append(sizes)
        assert info["batch_sizes"] == sizes and np.isfinite(reward) and np.isfinite(info["worker_rewards"]).all()
    assert len(decided) >= 2 and info["elapsed_s"] >= info["window_s"] > 0
    env.close()
    assert cluster.proc.poll() is not None, "the episode's engine run must be stopped"
    used = sizes_by_window(cluster.out)
    assert used[0] == (64, 64)  # the first window: the launch's initial sizes
    for t, want in enumerate(decided, start=1):
        assert used[t] == want, f"window {t}: the engine trained with {used[t]}, the agent said {want}"


@pytest.mark.slow
def test_engine_env_passes_check_env():
    env = DynamixEnv(training_config(engine_rl_cfg()), specs=[TWO])
    try:
        check_env(env, skip_render_check=True)
    finally:
        env.close()


@pytest.mark.slow
def test_train_policy_on_the_engine_end_to_end(tmp_path):
    cfg = engine_rl_cfg(timesteps=32)
    path = train_policy(cfg, "engine-smoke", out_dir=tmp_path, progress=False)
    model, meta = load_policy(path)
    assert meta["training"]["timesteps"] >= 32 and meta["training"]["rl"]["episodes"] == "engine"
    rows = list(csv.DictReader(open(path.with_suffix(".run") / "progress.csv")))
    assert rows and all(np.isfinite(float(r["return"])) for r in rows)
