"""The DYNAMIX environment: one episode = one training run on a virtual-time cluster.

Two views of the same episode, both driven by :class:`DynamixEnv`:

- :class:`DynamixEnv` (gymnasium, passes ``check_env``): observation ``[S, obs_dim]`` (``rl.state``:
  one row per slot, :mod:`dynamix.rl.state`), action ``MultiDiscrete([choices] * S)``,
  reward = the mean of the workers' rewards (:mod:`dynamix.rl.reward`); the per-worker rewards and
  their parts are in ``info``. The slots (``rl.action``, :mod:`dynamix.rl.actions`): ``worker``, S = N,
  one batch-size step per worker; ``global``, S = 1, one step of the global batch per window, read
  off the workers' mean row and split over them by speed.
- :class:`WorkerVecEnv` (stable-baselines3 ``VecEnv``): the slots are its sub-environments. With
  ``worker`` one shared policy reads each worker's ``[local | global]`` row and gets that worker's own
  reward (parameter sharing, paper Sec. III); with ``global`` the one slot gets the workers' mean
  reward. This is what PPO trains on.

The episode runs on the simulator; ``sim.backend`` picks the real model math (``math``) or the fitted
surrogate (``surrogate``, :mod:`dynamix.sim.surrogate`: the simulator's clock with a fitted model of
learning; same observation, action and reward).

Episode flow, identical to how :func:`dynamix.sim.run.simulate` drives a ``BatchSizePolicy``:
``reset`` draws a cluster (domain randomisation, :mod:`dynamix.rl.domain`, unless fixed specs are
given) and a run seed from the env's RNG, runs the first window at ``batch.initial`` and returns its
observation; each ``step`` applies the actions b_i <- clamp(b_i + step[a_i]), runs the next window
of k = ``batch.window`` real iterations and returns the new observation and rewards.

When the episode ends depends on ``rl.return_shape`` (:mod:`dynamix.rl.reward`). ``paper``: after
``rl.episode_epochs`` epochs. ``time``: after the virtual time the initial batch sizes would need for
``rl.episode_epochs`` epochs, ``budget_s = episode_epochs * n_train / (N * b0) * dt_ref / k``, with
``dt_ref`` the first window's duration (k iterations at ``batch.initial`` on every worker): the
static-``b0`` run's time on this very cluster, so the budget fits each randomised cluster. Every
window's reward is then weighted by ``dt / dt_ref``. The epoch budget stays as a safety cap at
``episode_epochs * batch.max / batch.initial`` epochs (more samples fit in the time with larger batches).
``target``: after ``rl.episode_epochs`` epochs or at the first window whose test accuracy reaches the
target (tested every window), ``evaluation.target_accuracy`` or else ``evaluation.target_fraction``
x the best final test accuracy of the static sweep (``experiments.baselines.batch_sizes``) on a
homogeneous cluster of the episode's workers in the same backend (:func:`reference_target`, once per
worker count: the learning curve does not depend on the cluster's speeds, only its clock does).
"""

from __future__ import annotations

import logging
import math
from typing import Any, Sequence

import gymnasium as gym
import numpy as np
from stable_baselines3.common.vec_env.base_vec_env import VecEnv

from dynamix.cluster import ClusterSpec, homogeneous
from dynamix.cluster.costmodel import CostModel
from dynamix.config import Config, with_overrides
from dynamix.data import Cifar10, load_cifar10
from dynamix.policies import make_policy
from dynamix.policies.base import Bounds
from dynamix.rl.domain import draw_workers, horizon_iters, sample_cluster
from dynamix.rl.reward import PART_NAMES, target_parts, time_weighted, worker_rewards
from dynamix.rl.actions import scheme_of
from dynamix.rl.state import SPECS, StateBuilder
from dynamix.sim import progress
from dynamix.sim.cluster import ClusterClock, calibrated_cost
from dynamix.sim.run import simulate, virtual_cluster
from dynamix.train.loop import epoch_cap

log = logging.getLogger(__name__)

NO_EVAL = 10**9
"""``train.eval_every`` during RL episodes: the reward reads training accuracy, so test-set
evaluations would only cost time."""


REDRAWS = 20
"""``target`` return, target derived (``evaluation.target_accuracy`` 0): clusters drawn at most for one
episode. A cluster whose first window already reaches the target leaves the agent no decision (a short
run on many workers, where one window is an epoch or more), so another is drawn in its place; a target
set by hand that the first window reaches is refused at once."""


def training_config(cfg: Config) -> Config:
    """``cfg`` as an RL episode runs it: the ``rl`` workload, world (``rl.world``) and episode budget; a
    test every window under ``return_shape: target`` (the return needs the time to target), none otherwise."""
    rl = cfg.rl
    epochs = rl.episode_epochs
    if rl.return_shape == "time":  # the time budget ends the episode; epochs only cap it (module docstring)
        epochs = epoch_cap(cfg, epochs)
    every = cfg.batch.window if rl.return_shape == "target" else NO_EVAL  # target: a test every window
    return with_overrides(cfg, {"model": {"name": rl.model or cfg.model.name, "width": rl.width or cfg.model.width},
                                "train": {"epochs": epochs, "max_iters": 0, "eval_every": every,
                                          "schedule_epochs": rl.episode_epochs},
                                "sim": {"backend": rl.world or cfg.sim.backend}})


def reference_target(cfg: Config, n_workers: int, n_train: int, data: Cifar10 | None = None,
                     cost: CostModel | None = None) -> float:
    """``rl.return_shape: target``'s accuracy (module docstring): ``evaluation.target_accuracy`` when
    set, else ``evaluation.target_fraction`` x the best final test accuracy of the static sweep under
    ``cfg`` (an episode's config) on ``n_workers`` homogeneous workers, seed ``train.seed``; sizes whose
    global batch exceeds the ``n_train`` training samples are left out (as a run would refuse them)."""
    if cfg.evaluation.target_accuracy > 0:
        return cfg.evaluation.target_accuracy
    spec = homogeneous(n_workers)
    sizes = [b for b in cfg.experiments.baselines.batch_sizes if b * n_workers <= n_train]
    if not sizes:
        raise ValueError(f"rl.workers = {n_workers}: every static size of experiments.baselines.batch_sizes "
                         f"{list(cfg.experiments.baselines.batch_sizes)} x {n_workers} workers exceeds the "
                         f"{n_train} training samples, so the target return has no reference")
    finals = {}
    for b in sizes:
        rows = simulate(spec, cfg, make_policy(f"static:{b}"), cfg.train.seed, progress=False, data=data, cost=cost)
        finals[b] = float(rows["test_acc"].dropna().iloc[-1])
    target = cfg.evaluation.target_fraction * max(finals.values())
    log.info("target return: target accuracy %.4f = %.2f x the best static's (final accuracy by batch %s)",
             target, cfg.evaluation.target_fraction, {b: round(a, 4) for b, a in finals.items()})
    return target


def state_builder(cfg: Config, bounds: Bounds) -> StateBuilder:
    """The observation builder of an episode under ``cfg`` (``rl.state``), told the run's epoch budget
    (the learning-rate schedule's horizon) and base lr for the schedule features."""
    return StateBuilder(bounds, cfg.rl.state, epochs=cfg.train.horizon_epochs, base_lr=cfg.optim.lr)


class DynamixEnv(gym.Env):
    """Gymnasium view: all N workers at once (see module docstring).

    ``cfg`` is used as given (call :func:`training_config` first for RL training). ``specs``: fixed
    clusters cycled through episode by episode; None draws one per episode from ``cfg.rl``. ``cost``
    overrides the calibrated cost model (as in :class:`~dynamix.sim.cluster.VirtualCluster`).
    """

    metadata = {"render_modes": []}

    def __init__(self, cfg: Config, specs: Sequence[ClusterSpec] | None = None, data: Cifar10 | None = None,
                 cost: CostModel | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.cost = cost
        self.specs = list(specs) if specs else None
        self.n_workers = self.specs[0].n_workers if self.specs else cfg.rl.workers
        if self.specs and any(s.n_workers != self.n_workers for s in self.specs):
            raise ValueError(f"specs have {sorted({s.n_workers for s in self.specs})} workers: one fixed N is needed")
        # the surrogate needs no data (its fitted model counts the training samples) and one cost model
        self.surrogate = progress.for_config(cfg) if cfg.sim.backend == "surrogate" else None
        if self.surrogate is not None:
            self.cost = calibrated_cost(cfg) if cost is None else cost
        self.data = data if data is not None or self.surrogate is not None else load_cifar10(cfg.data)
        self.bounds = Bounds(cfg.batch.min, cfg.batch.max)
        self.steps = tuple(cfg.batch.actions)
        self.state_spec = SPECS[cfg.rl.state]  # rl.state: the observation layout (dynamix.rl.state.SPECS)
        self.state = state_builder(cfg, self.bounds)
        self.scheme = scheme_of(cfg)  # rl.action: what a decision moves (and rl.residual_span)
        self.n_slots = self.scheme.slots(self.n_workers)
        self.observation_space = gym.spaces.Box(
            np.tile(self.state_spec.low, (self.n_slots, 1)), np.tile(self.state_spec.high, (self.n_slots, 1)),
            shape=(self.n_slots, self.state_spec.obs_dim), dtype=np.float32)
        self.action_space = gym.spaces.MultiDiscrete([len(self.scheme.choices)] * self.n_slots)
        self.n_train = self.surrogate.n_train if self.surrogate is not None else len(self.data.train_y)
        self.time_shaped = cfg.rl.return_shape == "time"
        self._targets: dict[int, float] = {}  # the target return's accuracy per worker count, computed once each
        self.target = self._target(self.n_workers)
        self.reached = False
        self.ref_window_s = self.budget_s = math.inf
        self._elapsed_s = 0.0
        self.episode = -1
        self.cluster: ClusterClock | None = None
        self.batch_sizes: tuple[int, ...] = ()
        self.workers: list = []  # the last window's WorkerWindows: what the next action steps from

    def _target(self, n_workers: int) -> float:
        """``return_shape: target``'s accuracy on ``n_workers`` workers (:func:`reference_target`); NaN otherwise."""
        if self.cfg.rl.return_shape != "target":
            return math.nan
        if n_workers not in self._targets:
            self._targets[n_workers] = reference_target(self.cfg, n_workers, self.n_train, self.data, self.cost)
        return self._targets[n_workers]

    def _next_spec(self) -> ClusterSpec:
        if self.specs:
            return self.specs[self.episode % len(self.specs)]
        n = draw_workers(self.cfg.rl, self.np_random)  # rl.workers, or one count per episode (rl.workers_range)
        first = self.scheme.initial(n)  # what the run starts at: the residual span's start, else batch.initial
        per_worker = sum(first) / n if first else self.cfg.batch.initial
        horizon = horizon_iters(self.cfg.rl.episode_epochs, self.n_train, n, per_worker)
        return sample_cluster(self.cfg.rl, self.np_random, horizon, name=f"train-{self.episode}", n_workers=n)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        for _ in range(REDRAWS):
            self.episode += 1
            spec = self._next_spec()
            self.n_workers, self.target = spec.n_workers, self._target(spec.n_workers)
            run_seed = int(self.np_random.integers(0, 2**31 - 1))
            self.cluster = virtual_cluster(spec, self.cfg, self.data, run_seed, self.cost, model=self.surrogate,
                                           seed_spread=True)  # its measured accuracy spread by the run seed
            self.state.reset()
            self.batch_sizes = (self.scheme.initial(self.n_workers)
                                or tuple(self.bounds.clamp(self.cfg.batch.initial) for _ in range(self.n_workers)))
            self._elapsed_s, self.ref_window_s, self.budget_s = 0.0, math.inf, math.inf
            self.reached = False
            obs, _, info = self._window()
            if not self.reached or self.cfg.evaluation.target_accuracy > 0:
                break
            log.debug("episode %d (%s): the derived target is reached in the first window, drawn again",
                      self.episode, spec.name)
        if self.time_shaped:
            iters_per_epoch = self.n_train / (self.n_workers * self.batch_sizes[0])
            self.budget_s = self.cfg.rl.episode_epochs * iters_per_epoch * self.ref_window_s / self.cluster.iteration
        if self.reached:
            raise ValueError(f"evaluation.target_accuracy: the target {self.target:.4f} is reached in the "
                             f"first window (test accuracy {info['test_acc']:.4f}"
                             + (")" if self.cfg.evaluation.target_accuracy > 0 else f" on {REDRAWS} clusters drawn)")
                             + ": set it higher, or leave it 0 for evaluation.target_fraction x the best static's")
        if self.done:
            raise ValueError(
                f"rl.episode_epochs = {self.cfg.rl.episode_epochs} is too short: the first window "
                f"({self.cfg.batch.window} iterations at batch {self.cfg.batch.initial} x {self.n_workers} "
                f"workers) already spends it; need at least two windows per episode")
        info.update(cluster=spec.name, run_seed=run_seed, budget_s=self.budget_s)
        return obs, info

    @property
    def done(self) -> bool:
        """The episode's budget is spent: virtual time (``return_shape: time``) or epochs, or the target
        is reached (``target``)."""
        return bool(self.cluster.done or self.cluster.elapsed_s >= self.budget_s or self.reached)

    def _window(self) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        """Run one window at ``self.batch_sizes``: (observation, per-worker rewards, info)."""
        workers, glob = self.cluster.run_window(self.batch_sizes)
        # the sizes that actually ran (device memory caps may clamp): the next action steps from these
        self.batch_sizes = tuple(w.batch_size for w in workers)
        self.workers = list(workers)
        d_acc = self.state.acc_change(workers)
        obs = self.scheme.view(self.state.observe(workers, glob))
        parts = worker_rewards(workers, d_acc, self.state.t_ref_ms, self.cfg.reward, self.cfg.optim.name,
                               self.cfg.rl.time_signal)
        # the part of the window inside the budget: the return integrates over exactly [0, budget_s]
        window_s = min(glob.elapsed_s, self.budget_s) - self._elapsed_s
        self._elapsed_s = glob.elapsed_s
        if math.isinf(self.ref_window_s):
            self.ref_window_s = window_s  # the first window: k iterations at the initial batch
        if self.time_shaped:
            parts = time_weighted(parts, window_s, self.ref_window_s)
        elif not math.isnan(self.target):
            self.reached = bool(glob.test_acc >= self.target)
            missed = bool(self.cluster.done and not self.reached)
            parts = target_parts(len(workers), window_s, self.ref_window_s, glob.elapsed_s, missed)
        rewards = parts.total
        info = {
            "worker_rewards": rewards,
            "parts": {p: float(getattr(parts, p).sum()) / len(rewards) for p in PART_NAMES},  # means (np.mean's sum / n)
            "batch_sizes": self.batch_sizes,
            "elapsed_s": glob.elapsed_s,
            "window_s": window_s,
            "train_acc": glob.train_acc,
            "test_acc": glob.test_acc,
            "iter_time_ms": workers[0].iter_time_ms,
            "busy_ms": tuple(w.iter_time_ms - w.wait_ms for w in workers),
        }
        return obs, rewards, info

    def step(self, action):
        if self.cluster is None:
            raise RuntimeError("step() before reset()")
        self.batch_sizes = self.scheme.apply(self.workers, action)
        obs, rewards, info = self._window()
        return obs, float(rewards.sum()) / len(rewards), self.done, False, info


class WorkerVecEnv(VecEnv):
    """SB3 view: sub-environment i is worker i of the current cluster; auto-resets on termination.

    Each ``info`` carries the worker's reward parts; the info of a finished episode also carries
    ``episode`` = {r: mean return over workers, l: windows, parts: summed parts, ...} for logging.
    """

    def __init__(self, env: DynamixEnv) -> None:
        self.env = env
        super().__init__(env.n_slots, gym.spaces.Box(env.state_spec.low, env.state_spec.high, dtype=np.float32),
                         gym.spaces.Discrete(len(env.scheme.choices)))
        self._actions: np.ndarray | None = None
        self._reset_episode_sums()

    def _reset_episode_sums(self) -> None:
        self._ret = np.zeros(self.num_envs)
        self._parts = {p: 0.0 for p in PART_NAMES}
        self._len = 0

    def reset(self):
        seed = self._seeds[0]
        obs, info = self.env.reset(seed=seed)
        self._reset_seeds()
        self._reset_episode_sums()
        self._episode_info = info
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions).reshape(-1)

    def step_wait(self):
        obs, _, terminated, _, info = self.env.step(self._actions)
        rewards = info["worker_rewards"].astype(np.float32)
        if self.num_envs != len(rewards):  # one slot for the cluster (rl.action: global): the workers' mean
            rewards = np.full(self.num_envs, rewards.mean(), dtype=np.float32)
        self._ret += rewards
        self._len += 1
        for p, v in info["parts"].items():
            self._parts[p] += v
        infos = [{"parts": info["parts"]} for _ in range(self.num_envs)]
        dones = np.full(self.num_envs, terminated)
        if terminated:
            episode = {"r": float(np.mean(self._ret)), "l": self._len, "parts": dict(self._parts),
                       "cluster": self._episode_info.get("cluster"), "elapsed_s": info["elapsed_s"],
                       "train_acc": info["train_acc"], "mean_batch": float(np.mean(info["batch_sizes"]))}
            for i in range(self.num_envs):
                infos[i]["terminal_observation"] = obs[i]
                infos[i]["episode"] = episode
            obs = self.reset()
        return obs, rewards, dones, infos

    def close(self) -> None:
        """Nothing to release: every episode is simulated in this process."""

    def get_attr(self, attr_name: str, indices=None) -> list[Any]:
        return [getattr(self.env, attr_name) for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices=None) -> None:
        setattr(self.env, attr_name, value)

    def env_method(self, method_name: str, *method_args, indices=None, **method_kwargs) -> list[Any]:
        return [getattr(self.env, method_name)(*method_args, **method_kwargs) for _ in self._get_indices(indices)]

    def env_is_wrapped(self, wrapper_class, indices=None) -> list[bool]:
        return [False for _ in self._get_indices(indices)]
