"""Policy training (the paper's reward curve): PPO on randomised virtual clusters (:mod:`dynamix.rl.train`).

The budget is ``experiments.policy_training.timesteps`` (0: ``rl.timesteps``, what ``dynamix
train-policy`` uses): the default profile trains a shorter policy so the pipeline fits 45 minutes.
The artifact goes to ``<results>/policies/<experiments.policy_training.name>.zip`` (+ ``.json``, and
a resumable ``.run/`` checkpoint folder: rerunning after an interruption continues where it stopped).
Outputs here: ``progress.csv`` (one row per PPO episode: mean per-worker return and the reward parts,
copied from the run folder), ``warm_start.csv`` (one row per episode the LB-BSP teacher played for the
imitation phase, ``rl.warm_start``: episode numbered -n..-1 before PPO's 0, return as PPO's; empty
without a warm start), ``summary.json`` (episodes, timesteps, mean return of the first and last 10% of
PPO episodes, the teacher's mean return), ``manifest.json``. Figure: cumulative reward per episode,
imitation and PPO phases marked, the teacher's mean return as a reference line.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pandas as pd

from dynamix import io, plots
from dynamix.config import Config
from dynamix.experiments.manifest import write_manifest
from dynamix.experiments import shared
from dynamix.experiments.shared import policy_dir

log = logging.getLogger(__name__)

NAME = "policy_training"


def run(cfg: Config, out_dir: str | Path) -> dict:
    """Train (or resume) the pipeline's policy. A checkpoint left by another config (``results/policies``
    persists so that an interrupted stage resumes) is not this config's training: start over."""
    from dynamix.rl.train import train_policy

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = shared.on_fitted_surrogate(cfg, out.parent)
    name = cfg.experiments.policy_training.name
    timesteps = cfg.experiments.policy_training.timesteps or None
    zip_path = train_policy(cfg, name, timesteps=timesteps, out_dir=policy_dir(out), on_stale="restart")
    progress_src = zip_path.with_suffix(".run") / "progress.csv"
    shutil.copyfile(progress_src, out / "progress.csv")
    progress = pd.read_csv(out / "progress.csv")
    teacher = teacher_returns(zip_path)
    io.write_csv(teacher, out / "warm_start.csv")
    tenth = max(1, len(progress) // 10)
    summary = {
        "policy": str(zip_path),
        "episodes": int(len(progress)),
        "timesteps": int(progress["timesteps"].iloc[-1]) if len(progress) else 0,
        "return_first_tenth": float(progress["return"].head(tenth).mean()) if len(progress) else None,
        "return_last_tenth": float(progress["return"].tail(tenth).mean()) if len(progress) else None,
        "teacher_episodes": int(len(teacher)),
        "teacher_return_mean": float(teacher["return"].mean()) if len(teacher) else None,
    }
    io.write_json(out / "summary.json", summary)
    write_manifest(out, cfg, NAME, {"policy_meta": str(zip_path.with_suffix(".json"))})
    return summary


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
