"""Warm start (``rl.warm_start: lbbsp``): imitate an LB-BSP teacher before PPO, then let PPO improve on it.

Why: with the few thousand PPO transitions two CPU cores afford, the policy PPO reaches from a random
start depends mostly on the training seed, and load balancing (a different direction on every
worker) is rarely found (docs/journal/rl.md). Behaviour cloning as initialisation is the standard remedy for
a sample-starved learner ("kickstarting", Schmitt et al. 2018; AlphaStar's supervised start). The
paper trains from scratch; ``rl.warm_start: none`` does too.

The teacher is LB-BSP's allocation (Chen et al., SoCC'20) read off the observation: the state carries
``batch_log`` (b_i) and ``lb_gap`` = log2(b*_i / b_i) (:mod:`dynamix.rl.state`), so the teacher is a
function of what the student sees and can be imitated exactly. Per worker it takes the step that
brings b_i closest to its target t_i (ties: the smallest step), then stands still. Targets:

- default: t_i = b*_i, the split that equalises compute times at the current global batch B;
- ``rl.warm_start_batch`` = m > 0: t_i = b*_i m / B, a global batch of m split by speed (as
  ``lbbsp:batch=m`` does in one jump); it depends on the worker count N, which the state carries.

With ``rl.action: global`` (:mod:`dynamix.rl.actions`) the split is the environment's rule, so the
teacher only sets the scale: it takes the factor that brings the global batch B (decoded from
``g_batch_log`` and ``g_workers``) closest to m in log2 (``rl.warm_start_batch``, or B itself when 0:
stand still) (:func:`teacher_global_actions`).

A teacher that doubled its target where communication dominates the iteration, and teacher episodes
drawn at several worker counts, passed fewer validation clusters and were dropped (docs/journal/rl.md,
ablation table).

Procedure (:func:`warm_start`): roll the teacher for whole episodes in the training environment until
``rl.warm_start_timesteps`` per-worker transitions are collected (same domain randomisation as PPO's
episodes), then fit the fresh PPO policy on them for ``rl.warm_start_epochs`` passes of minibatch
Adam (step ``rl.warm_start_lr``) on

    L = - mean_t [(1 - eps) log pi(a_teacher_t | s_t) + eps/K sum_a log pi(a | s_t)]
        + vf_coef * mean_t (V(s_t) - G_t)^2  -  ent_coef * mean_t H(pi(.|s_t))

where G_t = sum_j gamma^j r_{t+j} is the teacher's discounted return to the end of its episode (the
value head starts as a critic of the teacher, so PPO's first advantages are not noise that would undo
the imitation). The entropy term is PPO's own; eps = ``rl.warm_start_smoothing`` spreads that share of
each label over the K actions (label smoothing, Szegedy et al. 2016), so the fitted policy takes its
teacher's action with probability about 1 - eps (K-1)/K and PPO still explores. Without it (eps = 0)
PPO's entropy bonus does not keep the imitation stochastic: on the `cpu` workload's global action the
teacher's action came out at probability > 0.99 in every teacher state, and 300k PPO transitions at
entropy 0.01 never left it. These transitions are environment samples like PPO's: they are reported
in the artifact's metadata (``training.warm_start``) beside PPO's ``timesteps``.

What is fitted (``rl.warm_start_fit``). ``network`` fits every layer of the policy. Under a residual
span the teacher takes x1 in every state (its start is the base rule), and a whole network fitted to a
constant for 100 passes learns it by driving its hidden tanh units into saturation: on the `cpu-agent`
workload 94 % of the last hidden layer's units sat beyond |h| = 0.99 after the imitation, moving any
feature by 0.5 moved the logits by at most 0.003, and PPO, whose gradients pass through those units, only
shifted the constant: every trained seed took one action in every state of every cluster (docs/journal/rl.md).
``head`` fits only the action head's bias, which represents a constant teacher exactly, and the critic;
the hidden layers and the head's weights stay at PPO's initialisation, so PPO starts from the teacher
with a network that can still learn to depend on the state (residual policy learning starts its
correction at zero the same way: Silver et al. 2018, Johannink et al. 2019).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from stable_baselines3 import PPO
from tqdm.auto import tqdm

from dynamix import io
from dynamix.config import RLConfig
from dynamix.policies.base import Bounds, floored_global_batch
from dynamix.rl.env import WorkerVecEnv
from dynamix.rl.state import FEATURE_NAMES

log = logging.getLogger(__name__)

_B, _GAP, _GB, _GN = (FEATURE_NAMES.index(f) for f in ("batch_log", "lb_gap", "g_batch_log", "g_workers"))


def teacher_actions(obs: np.ndarray, steps: tuple[int, ...], bounds: Bounds,
                    global_batch: int = 0) -> np.ndarray:
    """LB-BSP's step per worker: argmin_a |clamp(b_i + step_a) - t_i|, ties to the smallest |step|.

    ``obs`` is ``[N, OBS_DIM]`` (one row per worker of one cluster); b_i and b*_i are decoded from
    ``batch_log`` and ``lb_gap`` with the state spec's normalisation. The target t_i is b*_i, scaled
    by ``global_batch`` / sum_i b_i when ``global_batch`` > 0 (module docstring).
    """
    lo, hi = math.log2(bounds.min), math.log2(bounds.max)
    b = np.exp2(lo + obs[:, _B].astype(np.float64) * (hi - lo))
    scale = global_batch / b.sum() if global_batch else 1.0
    target = scale * b * np.exp2(obs[:, _GAP].astype(np.float64))
    step = np.asarray(steps, dtype=np.float64)
    cand = np.clip(b[:, None] + step[None, :], bounds.min, bounds.max)
    # distance first, then |step|: np.lexsort sorts by the last key first
    dist = np.round(np.abs(cand - target[:, None]), 6)
    order = [np.lexsort((np.abs(step), d)) for d in dist]
    return np.array([o[0] for o in order], dtype=np.int64)


def teacher_global_actions(obs: np.ndarray, factors: tuple[float, ...], bounds: Bounds,
                           global_batch: int = 0, per_worker: int = 0) -> np.ndarray:
    """The teacher of ``rl.action: global``: argmin_f |log2(clamp(f B) / m)|, ties to the smallest |log f|.

    ``obs`` is ``[1, D]``, the workers' mean row (:meth:`dynamix.rl.actions.ActionScheme.view`); N and
    B are decoded from ``g_workers`` (log2(N) / 5) and ``g_batch_log`` with the state's normalisation;
    m = ``global_batch`` (0: B), at least N ``per_worker`` (the residual start m(N),
    ``rl.residual_per_worker``)."""
    row = obs.reshape(-1, obs.shape[-1])[0].astype(np.float64)
    lo, hi = math.log2(bounds.min), math.log2(bounds.max)
    n = max(1, round(2.0 ** (5.0 * row[_GN])))
    big = n * 2.0 ** (lo + row[_GB] * (hi - lo))
    target = floored_global_batch(global_batch, n, per_worker) if global_batch else big
    g_lo, g_hi = bounds.global_range(n)
    f = np.asarray(factors, dtype=np.float64)
    cand = np.clip(np.round(f * big), g_lo, g_hi)
    dist = np.round(np.abs(np.log2(cand / target)), 6)
    return np.array([np.lexsort((np.abs(np.log(f)), dist))[0]], dtype=np.int64)


def collect(venv: WorkerVecEnv, transitions: int, gamma: float, global_batch: int = 0,
            progress: bool = True, per_worker: int = 0) -> dict[str, np.ndarray]:
    """Roll the teacher for whole episodes until at least ``transitions`` per-worker transitions.

    Returns flat arrays over (window, worker): ``obs``, ``actions`` (the teacher's), ``returns`` (G_t,
    discounted to the end of the episode), and ``episodes`` (how many were rolled); ``episode_returns``:
    each episode's return as ``progress.csv`` records PPO's (mean over workers of the undiscounted sum).
    ``per_worker``: the global teacher's floor per worker on ``global_batch`` (:func:`teacher_global_actions`).
    """
    env = venv.env
    obs_l, act_l, rew_l, done_l, ep_returns = [], [], [], [], []
    obs = venv.reset()
    bar = tqdm(total=transitions, unit="step", desc="warm start (LB-BSP)", mininterval=1.0, disable=not progress)
    episodes = n = 0
    while True:
        if env.scheme.kind == "global":
            act = teacher_global_actions(obs, env.scheme.choices, env.bounds, global_batch, per_worker)
        else:
            act = teacher_actions(obs, env.steps, env.bounds, global_batch)
        nxt, rew, dones, infos = venv.step(act)
        obs_l.append(obs)
        act_l.append(act)
        rew_l.append(rew)
        done_l.append(bool(dones[0]))
        n += venv.num_envs
        bar.update(venv.num_envs)
        obs = nxt
        if dones[0]:
            episodes += 1
            ep_returns.append(float(infos[0]["episode"]["r"]))  # the teacher's return (reward-curve figure)
            if n >= transitions:
                break
    bar.close()
    rewards = np.asarray(rew_l, dtype=np.float64)  # [T, N]
    returns = np.zeros_like(rewards)
    g = np.zeros(rewards.shape[1])
    for t in range(len(rewards) - 1, -1, -1):
        g = rewards[t] + gamma * g * (not done_l[t])
        returns[t] = g
    return {"obs": np.concatenate(obs_l).astype(np.float32), "actions": np.concatenate(act_l),
            "returns": returns.reshape(-1).astype(np.float32), "episodes": np.int64(episodes),
            "episode_returns": np.asarray(ep_returns)}


def imitate(model: PPO, data: dict[str, np.ndarray], rl: RLConfig, seed: int, stay: int) -> dict[str, float]:
    """Fit ``model.policy`` to the teacher's actions and returns (module docstring); returns fit stats.

    ``agreement`` is over all decisions; ``move_agreement`` over those where the teacher moves (action
    ``stay``, the smallest step): the teacher mostly stands still, so the first alone says little."""
    policy = model.policy
    obs = torch.as_tensor(data["obs"])
    act = torch.as_tensor(data["actions"])
    ret = torch.as_tensor(data["returns"])
    opt = torch.optim.Adam(fitted_parameters(policy, rl.warm_start_fit), lr=rl.warm_start_lr)
    gen = torch.Generator().manual_seed(seed)
    policy.set_training_mode(True)
    for _ in range(rl.warm_start_epochs):
        for idx in torch.randperm(len(obs), generator=gen).split(rl.batch_size):
            values, log_prob, entropy = policy.evaluate_actions(obs[idx], act[idx])
            if rl.warm_start_smoothing:
                log_prob = (1.0 - rl.warm_start_smoothing) * log_prob + rl.warm_start_smoothing * mean_log_prob(policy, obs[idx])
            loss = (-log_prob.mean() + rl.vf_coef * torch.nn.functional.mse_loss(values.flatten(), ret[idx])
                    - rl.ent_coef * entropy.mean())
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), model.max_grad_norm)
            opt.step()
    policy.set_training_mode(False)
    with torch.no_grad():
        values, log_prob, _ = policy.evaluate_actions(obs, act)
    return {**agreement(model, data["obs"], data["actions"], stay),
            "teacher_prob": float(log_prob.exp().mean()),
            "value_rmse": float(torch.sqrt(torch.mean((values.flatten() - ret) ** 2)))}


def fitted_parameters(policy, fit: str) -> list[torch.nn.Parameter]:
    """What the imitation moves (``rl.warm_start_fit``): every parameter (``network``), or the action
    head's bias and the critic (``head``; module docstring, "What is fitted")."""
    if fit == "network":
        return list(policy.parameters())
    if fit != "head":
        raise ValueError(f"rl.warm_start_fit = {fit!r} is not allowed: must be 'network' or 'head'")
    return [policy.action_net.bias, *policy.mlp_extractor.value_net.parameters(), *policy.value_net.parameters()]


def mean_log_prob(policy, obs: torch.Tensor) -> torch.Tensor:
    """(1/K) sum_a log pi(a | s) per state, summed over the action's parts (one per worker slot of a
    MultiDiscrete action): the uniform label's log-likelihood."""
    dist = policy.get_distribution(obs).distribution
    parts = dist if isinstance(dist, (list, tuple)) else [dist]
    return sum(part.logits.mean(dim=-1) for part in parts)


def agreement(model: PPO, obs: np.ndarray, actions: np.ndarray, stay: int) -> dict[str, float]:
    """How often ``model``'s greedy action is the teacher's on the teacher's own states: over all
    decisions (``agreement``) and over those where the teacher moves (``move_agreement``; action
    ``stay`` is standing still, which the teacher mostly does, so the first alone says little).
    Measured after imitation and again after PPO: how far PPO moved the policy from its teacher."""
    obs_t, act = torch.as_tensor(obs), torch.as_tensor(actions)
    with torch.no_grad():
        greedy = model.policy.get_distribution(obs_t).distribution.probs.argmax(dim=1)
    moved = act != stay
    return {"agreement": float((greedy == act).float().mean()),
            "move_agreement": float((greedy[moved] == act[moved]).float().mean()) if moved.any() else math.nan}


def warm_start(model: PPO, venv: WorkerVecEnv, rl: RLConfig, seed: int,
               progress: bool = True, keep: Path | None = None) -> dict[str, Any]:
    """Collect ``rl.warm_start_timesteps`` teacher transitions in ``venv`` (PPO's own training
    environment) and fit ``model`` on them; returns what the artifact records. ``keep``: where to save
    the teacher's states and actions (``.npz``), for :func:`agreement` after PPO."""
    if rl.warm_start != "lbbsp":
        raise ValueError(f"rl.warm_start = {rl.warm_start!r}: only 'lbbsp' warm-starts")
    data = collect(venv, rl.warm_start_timesteps, rl.gamma, rl.warm_start_batch, progress, rl.residual_per_worker)
    stay = venv.env.scheme.stay
    if keep is not None:
        with io.atomic_open(keep, "wb") as fh:
            np.savez_compressed(fh, obs=data["obs"], actions=data["actions"], stay=stay)
    stats = imitate(model, data, rl, seed, stay=stay)
    out = {"teacher": "lbbsp", "global_batch": rl.warm_start_batch,
           **({"per_worker": rl.residual_per_worker} if rl.residual_per_worker else {}), "transitions": int(len(data["actions"])),
           "episodes": int(data["episodes"]), "epochs": rl.warm_start_epochs, "fit": rl.warm_start_fit,
           **{k: round(v, 4) for k, v in stats.items()},
           # the teacher's own episode returns, as progress.csv records PPO's: the reward curve's reference
           "teacher_returns": [round(float(r), 4) for r in data["episode_returns"]]}
    log.info("warm start: %s", {k: v for k, v in out.items() if k != "teacher_returns"})
    return out
