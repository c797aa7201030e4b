"""Train the DYNAMIX agent on randomised virtual clusters (``dynamix train-policy``,
:mod:`dynamix.commands.train_policy`).

    dynamix train-policy --name dynamix                       # params.yaml rl: section, default profile
    dynamix train-policy --name smoke --profile smoke         # seconds: an end-to-end check
    dynamix train-policy --name paper --set rl.recipe=paper   # the paper's method (dynamix.config.RECIPES)
    dynamix train-policy --name dynamix-resnet20 --init dynamix --timesteps 1024 \\
        --set rl.model=resnet8                                # transfer: fine-tune on another workload

Writes ``results/policies/<name>.zip`` + ``.json`` (:mod:`dynamix.rl.artifact`) and, in
``results/policies/<name>.run/``, a resumable checkpoint (``checkpoint.zip`` + ``checkpoint.json``,
written every ``rl.checkpoint_every`` rollouts) and ``progress.csv``: one row per finished episode
with its mean per-worker return and each reward part (the reward-curve figure's data); at each fraction
p of ``rl.snapshots`` also ``<name>-at<100 p>.zip`` + ``.json``, the policy at that point of its
training (0: the warm start), which ``dynamix select-policy`` scores beside the final one. Rerunning the
same command resumes from the checkpoint (the episode in flight restarts); a checkpoint written under
another config, state spec or calibration (cost model) is stale and refused. ``--fresh`` starts over.

Budget (measured here, 2 cores shared with other jobs): the default ``rl`` workload (mlp x0.25, 4
workers, episodes of the 64-batch run's time for 1.5 epochs on the 10k-image embedded set, ~4-6
windows) costs 0.1-1 s of real model math per window, 12-18 per-worker transitions per second: the
warm start's 1024 teacher transitions take about a minute, the default 2048 PPO transitions a few
minutes. That is small for PPO; the warm start (``rl.warm_start``, :mod:`dynamix.rl.warmstart`) is
what makes the outcome depend less on the seed (docs/journal/rl.md).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from tqdm.auto import tqdm

from dynamix import config, io, paths
from dynamix.cluster.costmodel import CostModel
from dynamix.config import Config
from dynamix.rl.artifact import (PolicyArtifactError, artifact_paths, check_compatible, convert_hint, load_policy,
                                  read_meta, rebuild, save_policy, save_tensors, state_spec)
from dynamix.rl.env import DynamixEnv, WorkerVecEnv, training_config
from dynamix.rl.learner import check_recipe, make_learner, quiet_logger, recipe_of
from dynamix.rl.reward import PART_NAMES
from dynamix.rl.state import SPECS
from dynamix.rl.warmstart import agreement, warm_start
from dynamix.policies.base import Bounds
from dynamix.seeding import derive_seed

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = "dynamix-checkpoint-v2"
"""``checkpoint.json`` of a checkpoint whose ``checkpoint.zip`` holds tensors only (as a policy
artifact's, :mod:`dynamix.rl.artifact`); one without it is SB3's pickled archive, never loaded."""

PROGRESS_COLUMNS = ["episode", "timesteps", "return", "windows", *PART_NAMES,
                    "cluster", "elapsed_s", "train_acc", "mean_batch"]


class StaleCheckpoint(config.ConfigError):
    """The run folder's checkpoint was written under another config (or ``--init``): resuming it would
    mix two trainings. The CLI refuses (``--fresh`` starts over); the pipeline's stages start over
    (``on_stale="restart"``), since a params change must retrain their policies."""


def _stale(ckpt_json: Path, expect: dict[str, Any]) -> str | None:
    """Why the checkpoint cannot be resumed by this run, or None when it can (or there is none)."""
    if not ckpt_json.exists():
        return None
    try:
        state = json.loads(ckpt_json.read_text())
    except (ValueError, UnicodeDecodeError):
        return f"checkpoint {ckpt_json} is not valid JSON"
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        return (f"checkpoint {ckpt_json} is not in the {CHECKPOINT_FORMAT} format (an SB3 archive runs code when "
                f"loaded; one you trust converts with its policy: {convert_hint(ckpt_json.parent.with_suffix(''))})")
    for key, want in expect.items():
        if state.get(key) != want:
            return f"checkpoint {ckpt_json} has {key} = {state.get(key)!r}, this run has {want!r}"
    return None


def _cost_fingerprint(ep_cfg: Config, cost: CostModel | None) -> dict[str, float]:
    """The simulator cost model training episodes run on, and on the surrogate its fitted model's
    checksum."""
    if cost is None:
        from dynamix.sim.cluster import calibrated_cost

        cost = calibrated_cost(ep_cfg)
    fingerprint = dataclasses.asdict(cost)
    if ep_cfg.sim.backend == "surrogate":
        from dynamix.sim import progress

        fingerprint["surrogate_sha256"] = progress.for_config(ep_cfg).checksum()
    return fingerprint


class _Progress(BaseCallback):
    """tqdm bar, one ``progress.csv`` row per finished episode, checkpoints every few rollouts."""

    def __init__(self, run_dir: Path, total: int, every: int, save_checkpoint, episode0: int,
                 progress: bool = True, snapshots: Mapping[int, Callable[[], None]] | None = None) -> None:
        super().__init__()
        self.progress = progress
        self.csv_path = run_dir / "progress.csv"
        self.total, self.every, self.save_checkpoint = total, every, save_checkpoint
        self.snapshots = dict(snapshots or {})  # timestep -> save the policy there (at the first rollout end past it)
        self.episode = episode0
        self.rollouts = 0

    def _on_training_start(self) -> None:
        self.bar = tqdm(total=self.total, initial=min(self.num_timesteps, self.total), unit="step",
                        desc="train-policy", mininterval=1.0, disable=not self.progress)
        new = not self.csv_path.exists()
        self.fh = open(self.csv_path, "a", newline="")
        self.writer = csv.DictWriter(self.fh, PROGRESS_COLUMNS)
        if new:
            self.writer.writeheader()

    def _on_step(self) -> bool:
        self.bar.update(self.training_env.num_envs)
        ep = self.locals["infos"][0].get("episode")
        if ep is not None:
            self.writer.writerow({"episode": self.episode, "timesteps": self.num_timesteps, "return": ep["r"],
                                  "windows": ep["l"], **ep["parts"], "cluster": ep["cluster"],
                                  "elapsed_s": ep["elapsed_s"], "train_acc": ep["train_acc"],
                                  "mean_batch": ep["mean_batch"]})
            self.fh.flush()
            self.episode += 1
            self.bar.set_postfix(ret=f"{ep['r']:.2f}", B=f"{ep['mean_batch']:.0f}")
        return True

    def _on_rollout_end(self) -> None:
        self.rollouts += 1
        for at in [t for t in self.snapshots if t <= self.num_timesteps]:
            self.snapshots.pop(at)()
        if self.rollouts % self.every == 0:
            self.save_checkpoint(self.episode)

    def _on_training_end(self) -> None:
        self.bar.close()
        self.fh.close()


def _truncate_progress(csv_path: Path, timesteps: int) -> None:
    """Drop rows logged after the checkpoint we resume from (those episodes will be redone)."""
    if not csv_path.exists():
        return
    with open(csv_path, newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if int(r["timesteps"]) <= timesteps]
    with open(csv_path, "w", newline="") as fh:
        w = csv.DictWriter(fh, PROGRESS_COLUMNS)
        w.writeheader()
        w.writerows(rows)


def _saved(zip_path: Path, cfg: Config, init: str | None, timesteps: int) -> bool:
    """The artifact at ``zip_path`` is intact and is this config's training at ``timesteps``."""
    try:
        _, meta = read_meta(zip_path)
    except PolicyArtifactError:
        return False
    t = meta.get("training", {})
    return meta.get("config_hash") == cfg.hash() and t.get("timesteps") == timesteps and t.get("init") == init


def after_ppo(warm: dict, model, data_path: Path) -> dict:
    """The warm start's record with the trained policy's agreement with its teacher on the teacher's
    states (``agreement_after_ppo``, ``move_agreement_after_ppo``), when those states were kept."""
    if not data_path.exists():
        return warm
    with np.load(data_path) as d:
        after = agreement(model, d["obs"], d["actions"], int(d["stay"]))
    return {**warm, **{f"{k}_after_ppo": round(v, 4) for k, v in after.items()}}


def write_checkpoint(model, run_dir: Path, state: dict[str, Any]) -> None:
    """``checkpoint.zip`` (the learner's tensors) then ``checkpoint.json`` (``state``, the format, the
    learner's recipe and update count): what :func:`resume` rebuilds the learner from."""
    save_tensors(model, run_dir / "checkpoint.zip")
    state = {**state, "format": CHECKPOINT_FORMAT, "learner": recipe_of(model), "n_updates": model._n_updates}
    io.write_text(run_dir / "checkpoint.json", json.dumps(state) + "\n")


def resume(state: dict[str, Any], ckpt_zip: Path, venv: WorkerVecEnv):
    """The learner a checkpoint (:func:`write_checkpoint`) holds, on ``venv``, at its timestep count (the
    episode in flight restarts: its env resets, as SB3's own load makes it)."""
    why = check_recipe(state.get("learner"))
    if why:
        raise PolicyArtifactError(f"checkpoint {ckpt_zip.with_suffix('.json')}: {why}")
    model = rebuild(state["learner"], ckpt_zip, venv, what="checkpoint")
    model.num_timesteps, model._n_updates = int(state["timesteps"]), int(state.get("n_updates", 0))
    return model


def convert_checkpoint(old_run: Path, new_run: Path) -> bool:
    """Rewrite the trusted pickled checkpoint in ``old_run`` (if any) as ``new_run``'s, with the run
    folder's other files; False when there is none. Unpickling it runs whatever it holds."""
    ckpt_zip, ckpt_json = old_run / "checkpoint.zip", old_run / "checkpoint.json"
    if not (ckpt_zip.exists() and ckpt_json.exists()) or json.loads(ckpt_json.read_text()).get("format"):
        return False
    state = json.loads(ckpt_json.read_text())
    model = PPO.load(ckpt_zip, device="cpu")
    if new_run.resolve() != old_run.resolve():
        shutil.copytree(old_run, new_run, dirs_exist_ok=True)
    write_checkpoint(model, new_run, state)
    return True


def train_policy(cfg: Config, name: str, timesteps: int | None = None, init: str | None = None,
                 fresh: bool = False, out_dir: str | os.PathLike | None = None, cost: CostModel | None = None,
                 progress: bool = True, on_stale: str = "refuse", seed_name: str | None = None) -> Path:
    """Train (or resume, or fine-tune from ``init``) and save the artifact; returns the zip path.

    ``cfg`` is the full config; the episode uses :func:`training_config` (the ``rl`` workload).
    ``cost`` overrides the calibrated simulator cost model (tests, what-if studies). ``on_stale``: what
    to do with a checkpoint written under another config, ``"refuse"`` (:class:`StaleCheckpoint`) or
    ``"restart"`` (start over, as ``fresh``). ``seed_name``: the name the training seed derives from
    (default ``name``): several artifacts trained on one seed stream, e.g. the variants of an ablation.
    """
    if on_stale not in ("refuse", "restart"):
        raise ValueError(f"on_stale = {on_stale!r} is not allowed: must be one of 'refuse', 'restart'")
    ep_cfg = training_config(cfg)
    total = cfg.rl.timesteps if timesteps is None else timesteps
    zip_path, _ = artifact_paths(Path(out_dir or paths.POLICIES) / name)
    run_dir = zip_path.with_suffix(".run")
    run_dir.mkdir(parents=True, exist_ok=True)
    ckpt_zip, ckpt_json = run_dir / "checkpoint.zip", run_dir / "checkpoint.json"
    # What makes a checkpoint another training: the config, the --init policy, the state spec the network
    # reads (a code change, not a config one) and the episodes' cost model (a recalibration changes
    # every virtual time the reward sees). --timesteps may change: stop early or extend.
    expect = {"config_hash": cfg.hash(), "init": init, "state_spec_version": SPECS[cfg.rl.state].version,
              "cost": _cost_fingerprint(ep_cfg, cost)}
    stale = None if fresh else _stale(ckpt_json, expect)
    if stale and on_stale == "restart":
        log.warning("%s: starting %s over", stale, name)
        fresh = True
    elif stale:
        raise StaleCheckpoint(f"{stale}: use another --name or pass --fresh to start over")
    ws_json, ws_data = run_dir / "warm_start.json", run_dir / "warm_start.npz"
    snapshot_paths = {f: zip_path.with_name(f"{label}.zip")
                      for label, f in cfg.rl.snapshot_names(zip_path.stem).items()}
    if fresh:
        stale_snapshots = [*zip_path.parent.glob(f"{zip_path.stem}-at[0-9]*.zip"),
                           *zip_path.parent.glob(f"{zip_path.stem}-at[0-9]*.json")]
        for p in (ckpt_zip, ckpt_json, run_dir / "progress.csv", ws_json, ws_data, *stale_snapshots):
            p.unlink(missing_ok=True)
    torch.set_num_threads(cfg.train.threads or 1)
    seed = derive_seed(cfg.train.seed, "rl", seed_name or name) % 2**31  # SB3 seeds numpy's legacy RNG: < 2**32
    env = DynamixEnv(ep_cfg, cost=cost)
    venv = WorkerVecEnv(env)
    episode0 = 0
    if ckpt_json.exists() and ckpt_zip.exists():
        state = json.loads(ckpt_json.read_text())
        model = resume(state, ckpt_zip, venv)
        env.episode = state["episode"] - 1  # the first reset in learn() starts episode state["episode"]
        venv.seed(derive_seed(seed, "resume", state["timesteps"]) % 2**31)  # fresh, reproducible RNG stream
        episode0 = state["episode"]
        _truncate_progress(run_dir / "progress.csv", state["timesteps"])
        log.info("resuming %s at %d/%d timesteps (episode %d)", name, model.num_timesteps, total, episode0)
        reset_timesteps = False
    elif init:
        init_meta = read_meta(init)[1]
        spec = state_spec(init_meta)
        if spec.name != cfg.rl.state:
            raise config.ConfigError(f"--init {init} observes state spec {spec.name!r} ({spec.version}); this run has "
                                     f"rl.state = {cfg.rl.state!r}: set rl.state = {spec.name} to fine-tune it")
        action = init_meta.get("action", "worker")
        if action != cfg.rl.action:
            raise config.ConfigError(f"--init {init} was trained with rl.action = {action!r}; this run has "
                                     f"{cfg.rl.action!r}: set rl.action = {action} to fine-tune it")
        model, meta = load_policy(init, env=venv)
        check_compatible(meta, tuple(cfg.batch.actions), Bounds(cfg.batch.min, cfg.batch.max), where=f"--init {init}")
        venv.seed(seed)
        reset_timesteps = True
        log.info("fine-tuning %s from %s (trained on %s)", name, init, meta["training"].get("workload"))
    else:
        venv.seed(seed)
        model = make_learner(cfg.rl, venv, seed)
        if cfg.rl.warm_start != "none":
            record = warm_start(model, venv, cfg.rl, seed, progress, keep=ws_data)
            ws_json.write_text(json.dumps(record) + "\n")
            env.episode = -1  # PPO's episodes count from 0, as progress.csv and a resume count them
        reset_timesteps = True

    def save_checkpoint(episode: int) -> None:
        write_checkpoint(model, run_dir, {**expect, "timesteps": model.num_timesteps, "episode": episode})

    def record() -> dict[str, Any]:
        """What the artifact says of its training, at the timestep it is saved."""
        return {
            "timesteps": int(model.num_timesteps), "init": init, "seed": seed,
            "workload": {"model": ep_cfg.model.name, "width": ep_cfg.model.width, "optimizer": ep_cfg.optim.name},
            "episode_epochs": cfg.rl.episode_epochs, "workers": list(cfg.rl.workers_range) or env.n_workers,
            "episodes": env.episode, "rl": dataclasses.asdict(cfg.rl), "sim": dataclasses.asdict(cfg.sim),
            "warm_start": after_ppo(json.loads(ws_json.read_text()), model, ws_data) if ws_json.exists() else None,
        }

    def snapshot(path: Path) -> Callable[[], None]:
        return lambda: log.info("snapshot %s", save_policy(model, path, cfg, record()))

    done = 0 if reset_timesteps else model.num_timesteps
    pending = {}
    for fraction, path in snapshot_paths.items():
        if path.exists():
            continue
        at = int(fraction * total)
        if fraction == 0 and reset_timesteps:
            snapshot(path)()  # the warm start (or --init), before PPO
        elif at >= done and fraction > 0:
            pending[at] = snapshot(path)
        else:
            log.warning("snapshot %s is missing and training resumed past it (%d of %d timesteps): it is not "
                        "made again", path.name, done, total)
    remaining = total - done
    if remaining > 0:
        cb = _Progress(run_dir, total, cfg.rl.checkpoint_every, save_checkpoint, episode0, progress, pending)
        model.set_logger(quiet_logger())  # a loaded model (resume, --init) comes with SB3's default logger
        model.learn(remaining, callback=cb, reset_num_timesteps=reset_timesteps, progress_bar=False)
        save_checkpoint(cb.episode)
    elif _saved(zip_path, cfg, init, model.num_timesteps):
        log.info("policy %s is already trained (%d timesteps)", zip_path, model.num_timesteps)
        return zip_path  # unchanged bytes: evaluation caches keyed by its sha256 stay valid
    out = save_policy(model, zip_path, cfg, record())
    log.info("saved policy %s (%d timesteps)", out, model.num_timesteps)
    return out
