"""Which behaviour does each RL return reward? Fixed rules scored by the episode return.

    .venv/bin/python benchmarks/bench_rl_return.py [--seeds 6]

On randomised training clusters (the ``rl`` section of params.yaml, mlp x0.25, 4 workers), three
fixed decision rules play whole episodes of :class:`dynamix.rl.env.DynamixEnv`:

- ``keep``: every worker keeps ``batch.initial``;
- ``shrink``: every worker steps down to ``batch.min`` (what the paper-shaped agent learned);
- ``balance``: every worker steps towards ``B * r_i / sum_j r_j``, ``B`` the current global batch
  and ``r_i = b_i / compute_i`` from the last window (LB-BSP's rule read off the state: the warm-start
  teacher at the current global batch, :func:`dynamix.rl.warmstart.teacher_actions`).

under (return_shape, time_signal) = (paper, iteration), the paper recipe's, (time, iteration) and
(time, imbalance), the default's. A return fit for "reach the target accuracy sooner" should rank
``balance`` first: it does the same samples per iteration in less time. Prints one line per setting
and, last, one JSON line with each setting's mean returns and ``balance_minus_shrink`` (> 0: the
return prefers load balancing to cutting batches). The ``busy`` rows of docs/journal/rl.md's ablation table
were measured here under a T_iter since dropped.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from dynamix import config
from dynamix.rl.env import DynamixEnv, training_config
from dynamix.rl.warmstart import teacher_actions

SETTINGS = (("paper", "iteration"), ("time", "iteration"), ("time", "imbalance"))
RULES = ("keep", "shrink", "balance")


def play(env: DynamixEnv, rule: str, seed: int) -> float:
    steps = np.array(env.steps)
    obs, _ = env.reset(seed=seed)
    total, done = 0.0, False
    while not done:
        b = np.array(env.batch_sizes, dtype=float)
        if rule == "balance":
            actions = teacher_actions(obs, env.steps, env.bounds)
        else:
            target = env.cfg.batch.initial if rule == "keep" else env.cfg.batch.min
            actions = [int(np.argmin(np.abs(bi + steps - target))) for bi in b]
        obs, reward, done, _, _ = env.step(actions)
        total += reward
    return total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=6)
    args = parser.parse_args()
    torch.set_num_threads(1)
    out = {}
    for shape, signal in SETTINGS:
        cfg = config.load(overrides={"rl": {"return_shape": shape, "time_signal": signal}, "train": {"threads": 1}})
        env = DynamixEnv(training_config(cfg))
        means = {r: float(np.mean([play(env, r, s) for s in range(args.seeds)])) for r in RULES}
        key = f"{shape}/{signal}"
        out[key] = {**{k: round(v, 4) for k, v in means.items()},
                    "balance_minus_shrink": round(means["balance"] - means["shrink"], 4)}
        print(key, out[key], flush=True)
    print(json.dumps({"bench": "rl_return", "seeds": args.seeds, "episode_epochs": cfg.rl.episode_epochs, **out}))


if __name__ == "__main__":
    main()
