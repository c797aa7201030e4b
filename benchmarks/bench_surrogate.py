"""Surrogate vs real-math environment: transitions per second of the same episodes, one core each.

    .venv/bin/python benchmarks/bench_surrogate.py [--cluster clusters/heldout/hetero-speed-4.yaml]
                                                   [--profile default] [--surrogate PATH]
                                                   [--seconds 20] [--rounds 3]

Both sides are :class:`dynamix.rl.env.DynamixEnv` on the same fixed cluster and profile (the RL
workload, ``training_config``), one torch thread, stepping the same seeded random actions and
resetting at the end of each episode (a reset runs the episode's first window, so it is counted as
time, not as a transition). ``real``: ``sim.backend: math``, the model math; ``surrogate``:
``sim.backend: surrogate`` with the fitted model of the profile's workload: ``results/surrogate``'s
(``dynamix fit-surrogate``), else the one the profile published (``docs/expected/PROFILE/``, or
``results/profiles/PROFILE/surrogate/``), so it runs on a fresh clone. Rounds alternate real / surrogate so machine-load drift hits both alike; each side's rate is
the median over rounds. A transition is one worker's window, so a step of N workers is N transitions.
Wall time on a shared machine swings with the other processes, so the ratio of steps per CPU second of
this process (one thread: CPU time is the work done) is reported beside it. The last line is one JSON
object with ``steps_per_s_ratio`` (surrogate over real, wall; goal >= 1000) and ``cpu_steps_per_s_ratio``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch

from dynamix import cluster as clusters
from dynamix import config, paths
from dynamix.rl.env import DynamixEnv, training_config
from dynamix.sim import progress


def surrogate_path(profile: str) -> str:
    """The profile's fitted surrogate: the one fitted here when there is one, else the published one."""
    cfg = training_config(config.load(profile=profile))
    if cfg.sim.surrogate:  # the profile names its own
        return cfg.sim.surrogate
    fitted = progress.default_path(cfg)
    published = [paths.ROOT / "docs" / "expected" / profile / f"surrogate-{fitted.name}",
                 paths.RESULTS / "profiles" / profile / "surrogate" / fitted.name]
    found = [p for p in (fitted, *published) if p.exists()]
    if not found:
        raise SystemExit(f"no fitted surrogate of profile {profile!r} ({fitted} or the published "
                         f"{published[0]}): run `dynamix fit-surrogate --profile {profile}` first")
    return paths.relative(found[0])


def rate(env: DynamixEnv, seconds: float, seed: int) -> tuple[float, float, int]:
    """Environment steps per wall second and per CPU second of this process over about ``seconds`` of
    stepping random actions, and the steps taken."""
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    steps, t0, c0 = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - t0 < seconds:
        _, _, done, _, _ = env.step(rng.integers(0, len(env.steps), env.n_workers))
        steps += 1
        if done:
            env.reset()
    return steps / (time.perf_counter() - t0), steps / (time.process_time() - c0), steps


def main() -> int:
    torch.set_num_threads(1)  # one core each side
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", default="clusters/heldout/hetero-speed-4.yaml",
                        help="the one cluster every episode of both sides runs on")
    parser.add_argument("--profile", default="default",
                        help="profile of the RL workload and its fitted surrogate")
    parser.add_argument("--surrogate", default="",
                        help="fitted surrogate JSON (sim.surrogate); default: the profile's own")
    parser.add_argument("--seconds", type=float, default=20.0, help="stepping time per side and round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    spec = clusters.load(args.cluster)
    surrogate = args.surrogate or surrogate_path(args.profile)
    envs = {}
    for side, backend in (("real", "math"), ("surrogate", "surrogate")):
        overrides = {"sim": {"backend": backend, "surrogate": surrogate}}
        cfg = training_config(config.load(profile=args.profile, overrides=overrides))
        envs[side] = DynamixEnv(cfg, specs=[spec])
    rates: dict[str, list[float]] = {"real": [], "surrogate": []}
    cpu_rates: dict[str, list[float]] = {"real": [], "surrogate": []}
    for r in range(args.rounds):
        for side, env in envs.items():
            wall, cpu, steps = rate(env, args.seconds, seed=r)
            rates[side].append(wall)
            cpu_rates[side].append(cpu)
            print(f"round {r} {side}: {steps} steps, {wall:.1f} steps/s ({cpu:.1f} per CPU second), "
                  f"{wall * env.n_workers:.1f} transitions/s", flush=True)
    real, sur = statistics.median(rates["real"]), statistics.median(rates["surrogate"])
    real_cpu, sur_cpu = statistics.median(cpu_rates["real"]), statistics.median(cpu_rates["surrogate"])
    n = envs["real"].n_workers
    print(json.dumps({"cluster": spec.name, "profile": args.profile, "workers": n, "threads": 1,
                      "real_steps_per_s": round(real, 3), "surrogate_steps_per_s": round(sur, 1),
                      "real_transitions_per_s": round(real * n, 3), "surrogate_transitions_per_s": round(sur * n, 1),
                      "surrogate_us_per_step": round(1e6 / sur, 1), "steps_per_s_ratio": round(sur / real, 1),
                      "cpu_steps_per_s_ratio": round(sur_cpu / real_cpu, 1)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
