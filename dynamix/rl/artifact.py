"""Policy artifacts: ``<name>.zip`` (the network's tensors) + ``<name>.json`` (what it was trained for
and how to rebuild it). Neither runs code when loaded.

The zip is ``torch.save``'s archive of the learner's state dicts (policy and optimiser: tensors and
numbers), read with ``torch.load(weights_only=True)``, which refuses every pickled object but tensors
and plain containers. The JSON records the format, the recipe (``rl.recipe``), the state-spec version
and feature names (:mod:`dynamix.rl.state`), what a decision moves (``rl.action``,
:mod:`dynamix.rl.actions`) and its choices, the action set and batch bounds, the reward coefficients,
the learner's constructor arguments (``learner``, :data:`dynamix.rl.learner.RECIPE`), the full training
config, and the sha256 of the zip.
:func:`load_policy` checks all of it, constructs the SB3 model from the recorded numbers and only then
reads the tensors; it raises :class:`PolicyArtifactError` with the reason (missing file, corrupt zip,
sha mismatch, other state spec); :func:`check_compatible` refuses to run a policy under another action
set or bounds.

SB3's own archive (format ``dynamix-policy-v1``) stores its settings with cloudpickle, so loading one
runs whatever it holds, and a checksum beside it stops corruption, not someone who can write both
files: such an artifact is refused with the command that converts one you trust (:func:`convert`,
``dynamix convert-policy --trust OLD NEW``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import PPO

from dynamix import io, paths
from dynamix.config import Config
from dynamix.errors import InputFileError
from dynamix.policies.base import Bounds
from dynamix.rl.actions import ACTIONS, ActionScheme, scheme_of
from dynamix.rl.learner import build, check_recipe, recipe_of
from dynamix.rl.state import SPECS, StateBuilder, StateSpec, spec_for_version

FORMAT = "dynamix-policy-v2"
PICKLED = "dynamix-policy-v1"
"""SB3's archive: pickled, refused by :func:`read_meta`, read only by :func:`convert`."""
META_BYTES = 1 << 24
"""The largest metadata JSON read (a real one is tens of kB)."""
PARAMS = ("policy", "policy.optimizer")
"""The state dicts a tensors file holds (SB3's ``get_parameters()``)."""
FIXED = {"algo": ("ppo", "rl.algo (simple, the paper's simplified policy gradient)"),
         "frame_stack": (1, "rl.frame_stack (the observation of the last k windows)")}
"""Fields of the format whose other values named options since removed from the agent, neither trained
beyond smoke size (docs/journal/rl.md): field -> (the one value written and read, what was removed).
An artifact recording another value is refused (:func:`read_meta`); one without the field (written
before ``frame_stack`` existed) reads as that value."""


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
    save_tensors(model, zip_path)
    spec = SPECS[cfg.rl.state]
    scheme = scheme_of(cfg)
    meta = {
        "format": FORMAT,
        "recipe": cfg.rl.recipe,
        "state_spec_version": spec.version,
        "obs_dim": spec.obs_dim,  # the network's input
        "features": list(spec.names),
        "frame_stack": FIXED["frame_stack"][0],
        "action": scheme.kind,
        "action_choices": list(scheme.choices),
        **({"residual": {"anchor": scheme.anchor, "span": scheme.span,
                         **({"per_worker": scheme.per_worker} if scheme.per_worker else {})}}
           if scheme.anchor else {}),
        "actions": list(cfg.batch.actions),
        "bounds": {"min": cfg.batch.min, "max": cfg.batch.max},
        "window": cfg.batch.window,
        "reward": dataclasses.asdict(cfg.reward),
        "algo": FIXED["algo"][0],
        "learner": recipe_of(model),
        "n_updates": model._n_updates,
        "training": training,
        "config": cfg.to_dict(),
        "config_hash": cfg.hash(),
        "zip": zip_path.name,
        "zip_sha256": sha256(zip_path),
    }
    io.write_text(json_path, json.dumps(meta, indent=2, default=list) + "\n")
    return zip_path


def convert_hint(zip_path: Path) -> str:
    """The command that converts a trusted artifact in the pickled format, for an error message."""
    return f"`dynamix convert-policy --trust {paths.relative(zip_path.with_suffix(''))} NEW`"


def read_meta(path: str | os.PathLike, formats: tuple[str, ...] = (FORMAT,)) -> tuple[Path, dict[str, Any]]:
    """Validate the pair without loading the model: (zip path, metadata). ``formats``: the ones
    accepted (:func:`convert` alone reads :data:`PICKLED`)."""
    zip_path, json_path = artifact_paths(path)
    for p in (zip_path, json_path):
        if not p.exists():
            raise PolicyArtifactError(f"policy {zip_path.with_suffix('')}: {p.name} is missing (need .zip and .json)")
        if not p.is_file():  # a FIFO would block the read forever
            raise PolicyArtifactError(f"policy {zip_path.with_suffix('')}: {p.name} is not a regular file")
    if json_path.stat().st_size > META_BYTES:
        raise PolicyArtifactError(f"policy metadata {json_path}: larger than {META_BYTES:,} bytes")
    try:
        meta = json.loads(json_path.read_text())
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise PolicyArtifactError(f"policy metadata {json_path} is not valid JSON ({str(exc)[:200]})") from None
    got = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
    if got == PICKLED and got not in formats:
        raise PolicyArtifactError(
            f"policy {zip_path} is an SB3 archive ({PICKLED}), whose pickled entries run code when loaded: "
            f"if you trust where it came from, convert it with {convert_hint(zip_path)}")
    if got not in formats:
        raise PolicyArtifactError(f"policy metadata {json_path}: format = {str(got)[:200]!r}, expected "
                                  f"{' or '.join(map(repr, formats))}")
    digest = sha256(zip_path)
    if meta.get("zip_sha256") != digest:
        raise PolicyArtifactError(
            f"policy {zip_path} is corrupt or was replaced: sha256 {digest[:12]}... does not match "
            f"{str(meta.get('zip_sha256'))[:12]}... recorded in {json_path.name}")
    spec = spec_for_version(str(meta.get("state_spec_version")))
    if spec is None or meta.get("features") != list(spec.names):
        known = ", ".join(f"{s.version!r} ({s.obs_dim} features)" for s in SPECS.values())
        raise PolicyArtifactError(
            f"policy {zip_path} was trained on state spec {str(meta.get('state_spec_version'))[:200]!r}; this code "
            f"observes {known}: retrain it with `dynamix train-policy`")
    for key, (only, removed) in FIXED.items():
        value = meta.get(key, only)
        if type(value) is not type(only) or value != only:
            raise PolicyArtifactError(f"policy metadata {json_path}: {key} = {json.dumps(value)[:200]} is not "
                                      f"supported: {removed} was removed; only {json.dumps(only)} is read")
    if not isinstance(meta.get("action", "worker"), str) or meta.get("action", "worker") not in ACTIONS:
        raise PolicyArtifactError(f"policy metadata {json_path}: action = {str(meta.get('action'))[:200]!r}, must be "
                                  f"one of {list(ACTIONS)}")
    choices = meta.get("action_choices", meta.get("actions"))
    if not (isinstance(choices, list) and 1 <= len(choices) <= 1024):
        raise PolicyArtifactError(f"policy metadata {json_path}: action_choices = {str(choices)[:200]}, must be a "
                                  "list of 1 to 1024 steps")
    r = meta.get("residual")
    if r is not None and not (isinstance(r, dict) and meta.get("action") == "global"
                              and type(r.get("anchor")) is int and 1 <= r["anchor"] <= 1 << 20
                              and type(r.get("span")) in (int, float) and 1.0 <= r["span"] <= 64.0
                              and type(r.get("per_worker", 0)) is int and 0 <= r.get("per_worker", 0) <= 1024
                              and set(r) <= {"anchor", "span", "per_worker"}):
        raise PolicyArtifactError(f"policy metadata {json_path}: residual = {str(r)[:200]}, must be "
                                  "{anchor: an integer in [1, 1048576], span: a number in [1, 64], per_worker "
                                  "(optional): an integer in [0, 1024]} on a policy with action 'global'")
    why = check_recipe(meta.get("learner")) if meta["format"] == FORMAT else None
    if why:
        raise PolicyArtifactError(f"policy metadata {json_path}: {why}")
    return zip_path, meta


def save_tensors(model: PPO, path: Path) -> None:
    """The learner's state dicts (:data:`PARAMS`) to ``path``, atomically."""
    io.save_torch(path, model.get_parameters())


def load_tensors(path: Path, what: str = "policy") -> dict[str, Any]:
    """The state dicts at ``path``, read as data only (``weights_only=True``: a pickled object other
    than tensors and plain containers is refused before it is built, so it never runs)."""
    try:
        params = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as exc:  # torch raises many kinds on a bad or hostile archive
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise PolicyArtifactError(f"{what} {path} cannot be loaded ({type(exc).__name__}: {first})") from None
    if not (isinstance(params, dict) and set(params) == set(PARAMS)):
        got = sorted(params) if isinstance(params, dict) else type(params).__name__
        raise PolicyArtifactError(f"{what} {path} cannot be loaded: holds {str(got)[:200]}, need {list(PARAMS)}")
    return params


def rebuild(recipe: dict[str, Any], path: Path, env=None, spaces: tuple | None = None, what: str = "policy") -> PPO:
    """The learner ``recipe`` describes (:func:`dynamix.rl.learner.build`) with the tensors at ``path``."""
    params = load_tensors(path, what)
    model = build(recipe, env, spaces)
    try:
        model.set_parameters(params, exact_match=True, device="cpu")
    except (RuntimeError, ValueError, KeyError) as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise PolicyArtifactError(f"{what} {path} cannot be loaded: its tensors do not fit the network its "
                                  f"metadata describes ({first})") from None
    return model


def load_policy(path: str | os.PathLike, env=None) -> tuple[PPO, dict[str, Any]]:
    """Validated (model, metadata); ``env`` attaches an environment for further training."""
    zip_path, meta = read_meta(path)
    dim = state_spec(meta).obs_dim
    choices = len(_choices(meta))
    spaces = (gym.spaces.Box(-np.inf, np.inf, (dim,), np.float32), gym.spaces.Discrete(choices))
    if env is not None and (env.observation_space.shape != (dim,) or getattr(env.action_space, "n", -1) != choices):
        raise PolicyArtifactError(
            f"policy {zip_path} observes ({dim},) and has {choices} actions; the environment has "
            f"{env.observation_space.shape} and {env.action_space}")
    model = rebuild(meta["learner"], zip_path, env, spaces)
    training = meta.get("training")
    steps = training.get("timesteps") if isinstance(training, dict) else None
    updates = meta.get("n_updates")  # both as SB3's own load restores them
    model.num_timesteps, model._n_updates = (v if type(v) is int else 0 for v in (steps, updates))
    return model, meta


def convert(old: str | os.PathLike, new: str | os.PathLike) -> Path:
    """Rewrite the trusted pickled artifact ``old`` in this format as ``new`` (may be the same name);
    returns the new zip. Unpickling ``old`` runs whatever it holds: only for a file you trust. The
    converted policy must hold the same tensors and decide as the old one on 256 random observations."""
    old_zip, meta = read_meta(old, formats=(PICKLED,))
    try:
        model = PPO.load(old_zip, device="cpu")
    except Exception as exc:  # SB3 raises many kinds on a bad archive
        raise PolicyArtifactError(f"policy {old_zip} cannot be loaded ({type(exc).__name__}: {exc})") from exc
    new_zip, new_json = artifact_paths(new)
    save_tensors(model, new_zip)
    meta = {**meta, "format": FORMAT, "learner": recipe_of(model), "n_updates": model._n_updates, "zip": new_zip.name,
            "zip_sha256": sha256(new_zip)}
    io.write_text(new_json, json.dumps(meta, indent=2) + "\n")
    rebuilt, _ = load_policy(new_zip)
    obs = np.random.default_rng(0).normal(size=(256, *model.observation_space.shape)).astype(np.float32)
    same = all(torch.equal(a, b) for a, b in zip(model.policy.state_dict().values(),
                                                   rebuilt.policy.state_dict().values()))
    if not same or not np.array_equal(model.predict(obs, deterministic=True)[0],
                                      rebuilt.predict(obs, deterministic=True)[0]):
        raise PolicyArtifactError(f"policy {new_zip}: the converted network decides otherwise than {old_zip}")
    return new_zip


def state_spec(meta: dict[str, Any]) -> StateSpec:
    """The observation layout a validated artifact (:func:`read_meta`) was trained on."""
    spec = spec_for_version(str(meta.get("state_spec_version")))
    if spec is None:
        raise PolicyArtifactError(f"policy state spec {meta.get('state_spec_version')!r} is unknown")
    return spec


def _choices(meta: dict[str, Any]) -> list:
    """The policy's action choices: the recorded ones, else (an artifact from before ``rl.action``) the worker steps."""
    return list(meta.get("action_choices", meta["actions"]))


def action_scheme(meta: dict[str, Any], bounds: Bounds) -> ActionScheme:
    """What a validated artifact's decisions move, with the choices (and residual span) it was trained on."""
    r = meta.get("residual") or {}
    return ActionScheme(meta.get("action", "worker"), tuple(_choices(meta)), bounds, int(r.get("anchor", 0)),
                        float(r.get("span", 0.0)), int(r.get("per_worker", 0)))


def observer(meta: dict[str, Any], bounds: Bounds, epochs: float = 0.0, base_lr: float = 0.0) -> StateBuilder:
    """The observation builder a validated artifact reads: its state spec; ``epochs`` and ``base_lr``
    are the run's (what the schedule features divide by)."""
    return StateBuilder(bounds, state_spec(meta), epochs=epochs, base_lr=base_lr)


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
