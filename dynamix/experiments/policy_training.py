"""Policy training (the paper's reward curve): PPO on randomised virtual clusters (:mod:`dynamix.rl.learn`).

The budget is ``experiments.policy_training.timesteps`` (0: ``rl.timesteps``, what ``dynamix
train-policy`` uses): the default profile trains a shorter policy so the pipeline fits 45 minutes.
The artifact goes to ``<results>/policies/<experiments.policy_training.name>.zip`` (+ ``.json``, and
a resumable ``.run/`` checkpoint folder: rerunning after an interruption continues where it stopped).
``experiments.policy_training.seeds`` policies are trained (``train.seed + k``; k = 0 is the
pipeline's policy, the others ``<name>-s<k>.zip``), so the reward curve shows learning across
training seeds, not one seed's luck; the seeds train side by side in ``experiments.jobs`` processes.
Outputs here: ``progress.csv`` (one row per PPO episode and seed: mean per-worker return and the
reward parts, from each run folder), ``warm_start.csv`` (one row per episode the LB-BSP teacher
played for the pipeline policy's imitation phase, ``rl.warm_start``: episode numbered -n..-1 before
PPO's 0, return as PPO's; empty without a warm start), ``summary.json`` (episodes, timesteps, mean
return of the first and last 10% of PPO episodes, per seed and for the pipeline's policy, their
gain's mean and t interval over seeds, the teacher's mean return), ``manifest.json``. Figure:
cumulative reward per episode, mean over seeds with a band, imitation and PPO phases marked, the
teacher's mean return as a reference line.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import pandas as pd

from dynamix import io
from dynamix.config import Config, with_overrides
from dynamix.evaluation import stats, surrogate_fit
from dynamix.evaluation.plan import side_by_side
from dynamix.evaluation.policy_names import policy_dir
from dynamix.pipeline.manifest import write_manifest
from dynamix.plots import policy_training as plots

log = logging.getLogger(__name__)

NAME = "policy_training"


def run(cfg: Config, out_dir: str | Path) -> dict:
    """Train (or resume) the pipeline's policy and, for the reward curve's band, the other training
    seeds. A checkpoint left by another config (``results/policies`` persists so that an interrupted
    stage resumes) is not this config's training: start over."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = surrogate_fit.on_fitted(cfg, out.parent)
    e = cfg.experiments.policy_training
    zips = side_by_side(train_seed, [(cfg, k, policy_dir(out)) for k in range(e.seeds)], cfg.experiments.jobs)
    progress = pd.concat([pd.read_csv(z.with_suffix(".run") / "progress.csv").assign(seed=k)
                          for k, z in enumerate(zips)], ignore_index=True)
    io.write_csv(progress, out / "progress.csv")
    teacher = teacher_returns(zips[0])
    io.write_csv(teacher, out / "warm_start.csv")
    per_seed = [tenths(progress[progress["seed"] == k]) for k in range(e.seeds)]
    first, last = (np.array([t[i] for t in per_seed], float) for i in (0, 1))
    summary = {
        "policy": str(zips[0]),
        "seeds": e.seeds,
        "episodes": int((progress["seed"] == 0).sum()),
        "timesteps": int(progress.loc[progress["seed"] == 0, "timesteps"].max()) if len(progress) else 0,
        "return_first_tenth": per_seed[0][0],
        "return_last_tenth": per_seed[0][1],
        "return_first_tenth_by_seed": first.tolist(),
        "return_last_tenth_by_seed": last.tolist(),
        "return_gain": stats.mean_interval(last - first, cfg.experiments.ci) if e.seeds > 1 else None,
        "teacher_episodes": int(len(teacher)),
        "teacher_return_mean": float(teacher["return"].mean()) if len(teacher) else None,
    }
    io.write_json(out / "summary.json", summary)
    write_manifest(out, cfg, NAME, {"policy_meta": str(zips[0].with_suffix(".json"))})
    return summary


def train_seed(cfg: Config, k: int, out_dir: Path) -> Path:
    """Policy k: ``train.seed + k`` on the seed stream of ``experiments.policy_training.name``; k = 0 is
    the pipeline's policy (``<name>.zip``), the others ``<name>-s<k>.zip``."""
    from dynamix.rl.learn import train_policy

    e = cfg.experiments.policy_training
    name = e.name if k == 0 else f"{e.name}-s{k}"
    kcfg = with_overrides(cfg, {"train": {"seed": cfg.train.seed + k}}) if k else cfg
    return train_policy(kcfg, name, timesteps=e.timesteps or None, out_dir=out_dir, on_stale="restart",
                        seed_name=e.name)


def tenths(progress: pd.DataFrame) -> tuple[float, float]:
    """Mean return over the first and the last tenth of PPO's episodes (NaN without episodes)."""
    if not len(progress):
        return math.nan, math.nan
    tenth = max(1, len(progress) // 10)
    return float(progress["return"].head(tenth).mean()), float(progress["return"].tail(tenth).mean())


def teacher_returns(zip_path: Path) -> pd.DataFrame:
    """The warm start's teacher episodes (``episode`` -n..-1, ``return``) from the policy's metadata."""
    from dynamix.rl.artifact import read_meta

    ws = read_meta(zip_path)[1].get("training", {}).get("warm_start") or {}
    returns = ws.get("teacher_returns", [])
    return pd.DataFrame({"episode": range(-len(returns), 0), "return": returns}, columns=["episode", "return"])


def figures(out_dir: str | Path, fig_dir: str | Path) -> list[Path]:
    progress = pd.read_csv(Path(out_dir) / "progress.csv")
    ws_path = Path(out_dir) / "warm_start.csv"
    teacher = pd.read_csv(ws_path) if ws_path.exists() else None
    stem = Path(fig_dir) / "reward_curve"
    plots.reward_curve(progress, stem, teacher=teacher)
    return [stem.with_suffix(".png")]
