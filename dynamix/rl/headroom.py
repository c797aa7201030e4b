"""What the agent could gain in the world it trains in, and what it gained (``dynamix headroom``).

Under a residual span (``rl.residual_span``, :mod:`dynamix.rl.actions`) the warm-started agent starts
as its base rule, x1 in every window. PPO's return can rise above its warm start only where some
schedule of the global batch reaches the target sooner than the base rule does, in the environment PPO
trains in. :func:`headroom` measures that bound before any real-math run: on clusters drawn from the
training distribution it runs, in the training environment itself (the surrogate, the episode's target,
a miss charged as the return charges it: :mod:`dynamix.rl.reward`), a family of open-loop members

- ``x1``: the base rule;
- ``x0.5``, ``x0.8``, ``x1.25``, ``x2``: that factor once, at the first decision, then x1 (the span
  clamps x0.5 and x2 to its edges m(N) / s and m(N) s): a constant global batch split by speed;
- ``x0.5@E``, ``x2@E``: x1 until epoch E, then that factor once (two phases, as the oracle's members);

and any trained policies, greedily, on the same clusters and run seeds (common random numbers: every
member of a cluster and seed sees the same stragglers, jitter and accuracy draw). A member's ``cost`` is
minus its return, the time to target in first-window units. Per cluster the best member bounds, from
below, what a policy of this action space can gain there (a closed-loop policy can do better than every
open-loop member only by reacting to what a member cannot foresee); a trained policy's share of that
gain says whether PPO found it. Measured on the ``cpu-agent`` workload (docs/journal/rl.md, "A warm
start that leaves PPO a network"): over 18 clusters of 2-32 workers the best member costs 0.86 of the base
rule in geometric mean; the policies PPO trained after a whole-network imitation took one action in every
state and cost 1.10-1.37, those after the head-only imitation 0.99-1.07.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from dynamix.cluster import ClusterSpec
from dynamix.config import Config, ConfigError
from dynamix.rl.actions import ActionScheme
from dynamix.rl.env import DynamixEnv, training_config

PHASE_EPOCHS = (8.0, 15.0)
"""Epochs at which the two-phase members move: the oracle's ``oracle_phase_epochs`` on the converged
profile (before and at its first learning-rate drop)."""
BASE = "x1"
"""The base rule's member."""
COLUMNS = ["cluster", "n_workers", "seed", "member", "kind", "cost", "reached", "elapsed_s",
           "mean_global_batch", "target"]
"""One row per (cluster, seed, member): ``kind`` is ``open-loop`` or ``policy``; ``cost`` minus the
episode's return; ``elapsed_s`` virtual s when the episode ended (at the target, or after its epochs);
``mean_global_batch`` over its windows; ``target`` the episode's test-accuracy target."""


@dataclass(frozen=True)
class Member:
    """An open-loop schedule: ``moves`` = ((epoch, action index), ...), each taken once at the first
    decision at or after its epoch; x1 (``scheme.stay``) otherwise."""

    name: str
    moves: tuple[tuple[float, int], ...]


def members(scheme: ActionScheme, phase_epochs: Sequence[float] = PHASE_EPOCHS) -> list[Member]:
    """The open-loop family of the module docstring for a global-action ``scheme``."""
    if scheme.kind != "global":
        raise ConfigError(f"rl.action = {scheme.kind!r}: the headroom's members move the global batch; "
                          "it needs rl.action = 'global'")
    out = [Member(BASE, ())]
    others = [(i, f) for i, f in enumerate(scheme.choices) if i != scheme.stay]
    out += [Member(f"x{f:g}", ((0.0, i),)) for i, f in others]
    edges = [(i, f) for i, f in others if f in (min(scheme.choices), max(scheme.choices))]
    out += [Member(f"x{f:g}@{e:g}", ((float(e), i),)) for e in phase_epochs for i, f in edges]
    return out


def episode(env: DynamixEnv, seed: int, decide: Callable[[np.ndarray, DynamixEnv], int]) -> dict[str, Any]:
    """One episode of ``env`` from ``reset(seed)``, ``decide(observation, env)`` giving each action."""
    obs, _ = env.reset(seed=seed)
    ret, done, batches, info = 0.0, False, [], {}
    while not done:
        obs, reward, done, _, info = env.step(np.array([decide(obs, env)]))
        ret += reward
        batches.append(sum(info["batch_sizes"]))
    return {"cost": -ret, "reached": bool(env.reached), "elapsed_s": float(info["elapsed_s"]),
            "mean_global_batch": float(np.mean(batches)), "target": float(env.target)}


def _open_loop(member: Member) -> Callable[[np.ndarray, DynamixEnv], int]:
    todo = list(member.moves)

    def decide(_obs: np.ndarray, env: DynamixEnv) -> int:
        if todo and env.cluster.epochs_done >= todo[0][0]:
            return todo.pop(0)[1]
        return env.scheme.stay
    return decide


def _greedy(model) -> Callable[[np.ndarray, DynamixEnv], int]:
    def decide(obs: np.ndarray, _env: DynamixEnv) -> int:
        action, _ = model.predict(obs, deterministic=True)
        return int(np.asarray(action).reshape(-1)[0])
    return decide


def headroom(cfg: Config, specs: Sequence[ClusterSpec], seeds: int,
             policies: Mapping[str, Any] | None = None, phase_epochs: Sequence[float] = PHASE_EPOCHS,
             progress: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Every member of :func:`members` and every policy of ``policies`` (name -> a loaded SB3 model of
    this ``cfg``'s state and action) on each of ``specs`` for run seeds 0..``seeds``-1, in the training
    environment of ``cfg`` (:func:`~dynamix.rl.env.training_config`; ``sim.backend: surrogate`` with
    its fitted model, ``rl.return_shape: target``); rows :data:`COLUMNS`. ``progress`` is told each
    finished cluster's name."""
    if cfg.rl.return_shape != "target":
        raise ConfigError(f"rl.return_shape = {cfg.rl.return_shape!r}: the headroom compares times to target; "
                          "it needs rl.return_shape = 'target'")
    if seeds < 1:
        raise ConfigError(f"seeds = {seeds}: must be >= 1")
    tcfg = training_config(cfg)
    rows = []
    for spec in specs:
        env = DynamixEnv(tcfg, specs=[spec])
        runs = [(m.name, "open-loop", lambda m=m: _open_loop(m)) for m in members(env.scheme, phase_epochs)]
        runs += [(name, "policy", lambda model=model: _greedy(model)) for name, model in (policies or {}).items()]
        for seed in range(seeds):
            for name, kind, make in runs:
                rows.append({"cluster": spec.name, "n_workers": spec.n_workers, "seed": seed, "member": name,
                             "kind": kind, **episode(env, seed, make())})
        if progress is not None:
            progress(spec.name)
    return pd.DataFrame(rows, columns=COLUMNS)


def summarize(frame: pd.DataFrame, margin: float = 0.01) -> dict[str, Any]:
    """Per cluster, the base rule's mean cost and the best open-loop member's, and their ratio; per
    policy, its cost over the base rule's (geometric mean and worst over clusters) and, where the best
    member beats the base rule by more than ``margin``, the share of that gain it realised,
    (base - policy) / (base - best): 1 found it, 0 stayed at the base rule, < 0 lost."""
    cost = frame.groupby(["cluster", "member"])["cost"].mean().unstack("member")
    open_loop = sorted(set(frame.loc[frame["kind"] == "open-loop", "member"]))
    base, best = cost[BASE], cost[open_loop].min(axis=1)
    per_cluster = {c: {"n_workers": int(frame.loc[frame["cluster"] == c, "n_workers"].iloc[0]),
                       "base_cost": round(float(base[c]), 4), "best_member": str(cost.loc[c, open_loop].idxmin()),
                       "best_over_base": round(float(best[c] / base[c]), 4)} for c in cost.index}
    gain = base - best
    room = gain > margin * base
    per_policy = {}
    for name in sorted(set(frame.loc[frame["kind"] == "policy", "member"])):
        ratio = cost[name] / base
        share = ((base - cost[name]) / gain)[room]
        per_policy[name] = {"over_base_geomean": round(float(np.exp(np.log(ratio).mean())), 4),
                            "over_base_worst": round(float(ratio.max()), 4),
                            "realised_share_median": round(float(share.median()), 4) if len(share) else math.nan,
                            "realised_share": {c: round(float(v), 4) for c, v in share.items()}}
    return {"clusters": len(cost), "seeds": int(frame["seed"].nunique()),
            "best_over_base_geomean": round(float(np.exp(np.log(best / base).mean())), 4),
            "clusters_with_room": int(room.sum()), "margin": margin,
            "per_cluster": per_cluster, "per_policy": per_policy}
