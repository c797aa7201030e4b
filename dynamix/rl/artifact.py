"""Policy artifacts: ``<name>.zip`` (the SB3 model) + ``<name>.json`` (what it was trained for).

The JSON records the format, the recipe (``rl.recipe``), the state-spec version and feature names (:mod:`dynamix.rl.state`), the
frame stack (``rl.frame_stack``), what a decision moves (``rl.action``, :mod:`dynamix.rl.actions`) and its choices, the
action set and batch bounds, the reward coefficients, the algorithm and the full training config, and
the sha256 of the zip. :func:`load_policy` checks all of it before unpickling anything and raises
:class:`PolicyArtifactError` with the reason (missing file, corrupt zip, sha mismatch, other state
spec); :func:`check_compatible` refuses to run a policy under another action set or bounds.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from stable_baselines3 import PPO

from dynamix import io, paths
from dynamix.config import Config
from dynamix.errors import InputFileError
from dynamix.policies.base import Bounds
from dynamix.rl.actions import ACTIONS, ActionScheme
from dynamix.rl.algos import ALGOS
from dynamix.rl.state import SPECS, StateBuilder, StateSpec, spec_for_version

FORMAT = "dynamix-policy-v1"


class PolicyArtifactError(InputFileError, ValueError):
    """A policy file is missing, corrupt, or was made for another state spec, action set or bounds."""


def artifact_paths(path: str | os.PathLike) -> tuple[Path, Path]:
    """(zip, json) for ``NAME``, ``NAME.zip`` or ``NAME.json``; a bare name means results/policies/NAME."""
    p = Path(str(path))
    if p.suffix in (".zip", ".json"):
        p = p.with_suffix("")
    if len(p.parts) == 1 and not p.is_absolute():
        p = paths.POLICIES / p
    p = paths.resolve(p)
    return p.with_suffix(".zip"), p.with_suffix(".json")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def save_policy(model: PPO, path: str | os.PathLike, cfg: Config, training: dict[str, Any]) -> Path:
    """Write the zip, then the JSON (with the zip's sha256) next to it; returns the zip path."""
    zip_path, json_path = artifact_paths(path)
    with io.atomic_open(zip_path, "wb") as fh:
        model.save(fh)
    spec = SPECS[cfg.rl.state]
    scheme = ActionScheme.of(cfg.rl.action, cfg.batch.actions, Bounds(cfg.batch.min, cfg.batch.max))
    meta = {
        "format": FORMAT,
        "recipe": cfg.rl.recipe,
        "state_spec_version": spec.version,
        "obs_dim": cfg.rl.frame_stack * spec.obs_dim,  # the network's input: frame_stack x the features
        "features": list(spec.names),
        "frame_stack": cfg.rl.frame_stack,
        "action": scheme.kind,
        "action_choices": list(scheme.choices),
        "actions": list(cfg.batch.actions),
        "bounds": {"min": cfg.batch.min, "max": cfg.batch.max},
        "window": cfg.batch.window,
        "reward": dataclasses.asdict(cfg.reward),
        "algo": cfg.rl.algo,
        "training": training,
        "config": cfg.to_dict(),
        "config_hash": cfg.hash(),
        "zip": zip_path.name,
        "zip_sha256": sha256(zip_path),
    }
    io.write_text(json_path, json.dumps(meta, indent=2, default=list) + "\n")
    return zip_path


def read_meta(path: str | os.PathLike) -> tuple[Path, dict[str, Any]]:
    """Validate the pair without loading the model: (zip path, metadata)."""
    zip_path, json_path = artifact_paths(path)
    for p in (zip_path, json_path):
        if not p.exists():
            raise PolicyArtifactError(f"policy {zip_path.with_suffix('')}: {p.name} is missing (need .zip and .json)")
    try:
        meta = json.loads(json_path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise PolicyArtifactError(f"policy metadata {json_path} is not valid JSON ({exc})") from exc
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        got = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise PolicyArtifactError(f"policy metadata {json_path}: format = {got!r}, expected {FORMAT!r}")
    digest = sha256(zip_path)
    if meta.get("zip_sha256") != digest:
        raise PolicyArtifactError(
            f"policy {zip_path} is corrupt or was replaced: sha256 {digest[:12]}... does not match "
            f"{str(meta.get('zip_sha256'))[:12]}... recorded in {json_path.name}")
    spec = spec_for_version(str(meta.get("state_spec_version")))
    if spec is None or meta.get("features") != list(spec.names):
        known = ", ".join(f"{s.version!r} ({s.obs_dim} features)" for s in SPECS.values())
        raise PolicyArtifactError(
            f"policy {zip_path} was trained on state spec {meta.get('state_spec_version')!r}; this code "
            f"observes {known}: retrain it with `dynamix train-policy`")
    if meta.get("algo") not in ALGOS:
        raise PolicyArtifactError(f"policy metadata {json_path}: algo = {meta.get('algo')!r}, must be one of {list(ALGOS)}")
    if meta.get("action", "worker") not in ACTIONS:
        raise PolicyArtifactError(f"policy metadata {json_path}: action = {meta.get('action')!r}, must be one of "
                                  f"{list(ACTIONS)}")
    k = meta.get("frame_stack", 1)
    if not (isinstance(k, int) and k >= 1):
        raise PolicyArtifactError(f"policy metadata {json_path}: frame_stack = {k!r}, must be an integer >= 1")
    return zip_path, meta


def load_policy(path: str | os.PathLike, env=None) -> tuple[PPO, dict[str, Any]]:
    """Validated (model, metadata); ``env`` attaches an environment for further training."""
    zip_path, meta = read_meta(path)
    try:
        model = ALGOS[meta["algo"]].load(zip_path, env=env, device="cpu")
    except Exception as exc:  # SB3 raises many kinds on a bad archive
        raise PolicyArtifactError(f"policy {zip_path} cannot be loaded ({type(exc).__name__}: {exc})") from exc
    n_actions = int(getattr(model.action_space, "n", -1))
    dim = frame_stack(meta) * state_spec(meta).obs_dim
    choices = len(_choices(meta))
    if model.observation_space.shape != (dim,) or n_actions != choices:
        raise PolicyArtifactError(
            f"policy {zip_path}: network expects observations {model.observation_space.shape} and "
            f"{n_actions} actions; metadata says ({dim},) and {choices}")
    return model, meta


def state_spec(meta: dict[str, Any]) -> StateSpec:
    """The observation layout a validated artifact (:func:`read_meta`) was trained on."""
    spec = spec_for_version(str(meta.get("state_spec_version")))
    if spec is None:
        raise PolicyArtifactError(f"policy state spec {meta.get('state_spec_version')!r} is unknown")
    return spec


def frame_stack(meta: dict[str, Any]) -> int:
    """The frames a validated artifact observes (1 for one written before ``rl.frame_stack`` existed)."""
    return int(meta.get("frame_stack", 1))


def _choices(meta: dict[str, Any]) -> list:
    """The policy's action choices: the recorded ones, else (an artifact from before ``rl.action``) the worker steps."""
    return list(meta.get("action_choices", meta["actions"]))


def action_scheme(meta: dict[str, Any], bounds: Bounds) -> ActionScheme:
    """What a validated artifact's decisions move, with the choices it was trained on."""
    return ActionScheme(meta.get("action", "worker"), tuple(_choices(meta)), bounds)


def observer(meta: dict[str, Any], bounds: Bounds, epochs: float = 0.0, base_lr: float = 0.0) -> StateBuilder:
    """The observation builder a validated artifact reads: its state spec and frame stack; ``epochs``
    and ``base_lr`` are the run's (what the schedule features divide by)."""
    return StateBuilder(bounds, state_spec(meta), frame_stack(meta), epochs=epochs, base_lr=base_lr)


def check_compatible(meta: dict[str, Any], actions: tuple[int, ...], bounds: Bounds, where: str = "policy") -> None:
    """Refuse to run under another action set or batch bounds than the policy was trained for (a
    global-batch policy, ``action: global``, never uses the per-worker steps: only its bounds count)."""
    if meta.get("action", "worker") == "worker" and list(actions) != list(meta["actions"]):
        raise PolicyArtifactError(
            f"{where}: trained for actions {meta['actions']}, this run has batch.actions = {list(actions)}")
    want = meta["bounds"]
    if (bounds.min, bounds.max) != (want["min"], want["max"]):
        raise PolicyArtifactError(
            f"{where}: trained for batch bounds [{want['min']}, {want['max']}], this run has "
            f"[batch.min, batch.max] = [{bounds.min}, {bounds.max}]")
