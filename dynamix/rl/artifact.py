"""Policy artifacts: ``<name>.zip`` (the SB3 model) + ``<name>.json`` (what it was trained for).

The JSON records the format, the recipe (``rl.recipe``), the state-spec version and feature names (:mod:`dynamix.rl.state`), the
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
from dynamix.rl.algos import ALGOS
from dynamix.rl.state import SPECS, StateSpec, spec_for_version

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
    meta = {
        "format": FORMAT,
        "recipe": cfg.rl.recipe,
        "state_spec_version": spec.version,
        "obs_dim": spec.obs_dim,
        "features": list(spec.names),
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
    return zip_path, meta


def load_policy(path: str | os.PathLike, env=None) -> tuple[PPO, dict[str, Any]]:
    """Validated (model, metadata); ``env`` attaches an environment for further training."""
    zip_path, meta = read_meta(path)
    try:
        model = ALGOS[meta["algo"]].load(zip_path, env=env, device="cpu")
    except Exception as exc:  # SB3 raises many kinds on a bad archive
        raise PolicyArtifactError(f"policy {zip_path} cannot be loaded ({type(exc).__name__}: {exc})") from exc
    n_actions = int(getattr(model.action_space, "n", -1))
    dim = state_spec(meta).obs_dim
    if model.observation_space.shape != (dim,) or n_actions != len(meta["actions"]):
        raise PolicyArtifactError(
            f"policy {zip_path}: network expects observations {model.observation_space.shape} and "
            f"{n_actions} actions; metadata says ({dim},) and {len(meta['actions'])}")
    return model, meta


def state_spec(meta: dict[str, Any]) -> StateSpec:
    """The observation layout a validated artifact (:func:`read_meta`) was trained on."""
    spec = spec_for_version(str(meta.get("state_spec_version")))
    if spec is None:
        raise PolicyArtifactError(f"policy state spec {meta.get('state_spec_version')!r} is unknown")
    return spec


def check_compatible(meta: dict[str, Any], actions: tuple[int, ...], bounds: Bounds, where: str = "policy") -> None:
    """Refuse to run under another action set or batch bounds than the policy was trained for."""
    if list(actions) != list(meta["actions"]):
        raise PolicyArtifactError(
            f"{where}: trained for actions {meta['actions']}, this run has batch.actions = {list(actions)}")
    want = meta["bounds"]
    if (bounds.min, bounds.max) != (want["min"], want["max"]):
        raise PolicyArtifactError(
            f"{where}: trained for batch bounds [{want['min']}, {want['max']}], this run has "
            f"[batch.min, batch.max] = [{bounds.min}, {bounds.max}]")
