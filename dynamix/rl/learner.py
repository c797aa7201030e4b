"""The learner: stable-baselines3 PPO (Schulman et al. 2017) with GAE advantages, the clipped
surrogate and a value baseline, its hyper-parameters from ``params.yaml`` ``rl:``, built from a recipe
of plain numbers (:data:`RECIPE`) that policy artifacts and training checkpoints record.
"""

from __future__ import annotations

from stable_baselines3 import PPO
from stable_baselines3.common.logger import Logger

from dynamix.config import RLConfig

RECIPE: dict[str, tuple[type, float, float]] = {
    # constructor argument: (type, lowest, highest) a rebuilt learner accepts
    "learning_rate": (float, 1e-9, 1.0), "n_steps": (int, 1, 1 << 20), "batch_size": (int, 2, 1 << 20),
    "n_epochs": (int, 1, 1000), "gamma": (float, 0.0, 1.0), "gae_lambda": (float, 0.0, 1.0),
    "clip_range": (float, 1e-6, 100.0), "ent_coef": (float, 0.0, 100.0), "vf_coef": (float, 0.0, 100.0),
    "max_grad_norm": (float, 0.0, 1e6), "normalize_advantage": (bool, 0, 1), "seed": (int, 0, 2**32 - 1),
}
"""What rebuilds a learner (:func:`build`) besides ``net_arch``: its constructor's arguments and seed.
A policy artifact records them as JSON (:mod:`dynamix.rl.artifact`), so loading one constructs the
network from numbers instead of unpickling SB3's archive, whose pickled entries run code."""
NET_ARCH = (1, 8, 4096)
"""``net_arch`` of a rebuilt learner: 1 to 8 hidden layers of 1 to 4096 units."""


def recipe_for(rl: RLConfig, n_envs: int, seed: int) -> dict:
    """The recipe (:data:`RECIPE`) of a fresh learner for ``rl`` on ``n_envs`` per-worker environments."""
    return dict(learning_rate=rl.learning_rate, n_steps=rl.n_steps, batch_size=min(rl.batch_size, rl.n_steps * n_envs),
                n_epochs=rl.n_epochs, gamma=rl.gamma, gae_lambda=rl.gae_lambda, clip_range=rl.clip_range,
                ent_coef=rl.ent_coef, vf_coef=rl.vf_coef, max_grad_norm=0.5, normalize_advantage=True, seed=seed,
                net_arch=list(rl.net_arch))


def recipe_of(model: PPO) -> dict:
    """The recipe of a live learner (what it was built with; a schedule is read at the start)."""
    out = {}
    for key, (typ, _, _) in RECIPE.items():
        value = getattr(model, key)
        out[key] = typ(value(1.0) if callable(value) else value)
    return {**out, "net_arch": [int(n) for n in model.policy_kwargs.get("net_arch", (64, 64))]}


def check_recipe(recipe: object) -> str | None:
    """Why ``recipe`` (read from a file) cannot rebuild a learner, or None when it can."""
    if not isinstance(recipe, dict) or set(recipe) != {*RECIPE, "net_arch"}:
        keys = sorted(recipe) if isinstance(recipe, dict) else type(recipe).__name__
        return f"learner recipe has {str(keys)[:200]}, need {sorted({*RECIPE, 'net_arch'})}"
    for key, (typ, lo, hi) in RECIPE.items():
        value = recipe[key]
        if not (isinstance(value, typ) or typ is float and isinstance(value, int)) or \
                isinstance(value, bool) != (typ is bool) or not lo <= value <= hi:
            return f"learner recipe {key} = {str(value)[:200]!r}: need a {typ.__name__} in [{lo}, {hi}]"
    arch, (lo, most, hi) = recipe["net_arch"], NET_ARCH
    if not (isinstance(arch, list) and lo <= len(arch) <= most
            and all(type(n) is int and lo <= n <= hi for n in arch)):
        return f"learner recipe net_arch = {str(arch)[:200]}: need {lo} to {most} integers in [{lo}, {hi}]"
    return None


def build(recipe: dict, env=None, spaces: tuple | None = None) -> PPO:
    """A learner from a checked ``recipe``, on ``env`` (to train) or, with ``env=None``, on ``spaces``
    = (observation, action) space (to predict). Seeding as SB3's own load does: the global RNGs from
    ``recipe["seed"]``."""
    kwargs = {k: v for k, v in recipe.items() if k != "net_arch"}
    model = PPO("MlpPolicy", env, policy_kwargs={"net_arch": list(recipe["net_arch"])}, device="cpu", verbose=0,
                _init_setup_model=env is not None, **kwargs)
    if env is None:
        model.observation_space, model.action_space = spaces
        model.n_envs = 1
        model._setup_model()
    model.set_logger(quiet_logger())
    return model


def make_learner(rl: RLConfig, env, seed: int) -> PPO:
    """A fresh learner for ``rl`` on ``env`` (a :class:`~dynamix.rl.env.WorkerVecEnv`)."""
    return build(recipe_for(rl, env.num_envs, seed), env)


def quiet_logger() -> Logger:
    """A logger that writes nowhere: SB3's default creates an empty ``/tmp/SB3-<date>`` folder per learn()."""
    return Logger(folder=None, output_formats=[])
