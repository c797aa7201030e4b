"""Policy training (the paper's reward curve): PPO on randomised virtual clusters (:mod:`dynamix.rl.train`).

The budget is ``experiments.policy_training.timesteps`` (0: ``rl.timesteps``, what ``dynamix
train-policy`` uses): the default profile trains a shorter policy so the pipeline fits 45 minutes.
The artifact goes to ``<results>/policies/<experiments.policy_training.name>.zip`` (+ ``.json``, and
a resumable ``.run/`` checkpoint folder: rerunning after an interruption continues where it stopped).
Outputs here: ``progress.csv`` (one row per episode: mean per-worker return and the reward parts,
copied from the run folder), ``summary.json`` (episodes, timesteps, mean return of the first and last
10% of episodes), ``manifest.json``. Figure: cumulative reward per episode.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pandas as pd

from dynamix import plots
from dynamix.config import Config
from dynamix.experiments import common

log = logging.getLogger(__name__)

NAME = "policy_training"


def policy_dir(out_dir: str | Path) -> Path:
    """Where the pipeline's policies live: ``policies/`` beside this experiment's folder."""
    return Path(out_dir).parent / "policies"


def run(cfg: Config, out_dir: str | Path) -> dict:
    """Train (or resume) the pipeline's policy. A checkpoint left by another config (``results/policies``
    persists so that an interrupted stage resumes) is not this config's training: start over."""
    from dynamix.rl.train import train_policy

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = cfg.experiments.policy_training.name
    timesteps = cfg.experiments.policy_training.timesteps or None
    zip_path = train_policy(cfg, name, timesteps=timesteps, out_dir=policy_dir(out), on_stale="restart")
    progress_src = zip_path.with_suffix(".run") / "progress.csv"
    shutil.copyfile(progress_src, out / "progress.csv")
    progress = pd.read_csv(out / "progress.csv")
    tenth = max(1, len(progress) // 10)
    summary = {
        "policy": str(zip_path),
        "episodes": int(len(progress)),
        "timesteps": int(progress["timesteps"].iloc[-1]) if len(progress) else 0,
        "return_first_tenth": float(progress["return"].head(tenth).mean()) if len(progress) else None,
        "return_last_tenth": float(progress["return"].tail(tenth).mean()) if len(progress) else None,
    }
    common.write_json(out / "summary.json", summary)
    common.write_manifest(out, cfg, NAME, {"policy_meta": str(zip_path.with_suffix(".json"))})
    return summary


def figures(out_dir: str | Path, fig_dir: str | Path) -> list[Path]:
    progress = pd.read_csv(Path(out_dir) / "progress.csv")
    stem = Path(fig_dir) / "reward_curve"
    plots.reward_curve(progress, stem)
    return [stem.with_suffix(".png")]
