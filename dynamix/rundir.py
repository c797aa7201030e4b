"""One run per output folder: ``OUT/run.json`` records the identity of the run the folder holds.

A run's identity is everything that shapes it: the command, the policy (for an arbitrator, its
address; the engine labels every window with the policy the arbitrator reports), the cluster, the
seed and every config field. A command claims
its ``--out`` before it writes anything (:func:`claim`): the same identity resumes, a different one
is refused with one line naming what differs, and ``force`` removes the folder's run outputs and
starts afresh. So a run is never spliced onto another's checkpoint, relabelled, or overwritten.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from dynamix import io
from dynamix.errors import InputFileError, UserError

RUN_FILE = "run.json"
OUTPUTS = ("runs.csv", "summary.json", "summary.csv", "compare.csv", "checkpoint.pt", "iterations.csv",
           "progress.json", "config.json", "cluster.yaml")
"""Files a run writes into its folder: their presence means the folder holds a run."""


def out_path(out: str | Path, option: str = "--out") -> Path:
    """An output folder option as a path; empty or naming a file is a :class:`UserError`."""
    if not str(out).strip():
        raise UserError(f"{option} is empty: give an output folder")
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise UserError(f"{option} {out}: not a folder")
    return path


def flat(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"train": {"seed": 0}}`` -> ``{"train.seed": 0}`` (JSON values)."""
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flat(value, name + "."))
        else:
            out[name] = io.jsonable(value)
    return out


def identity(command: str, *, policy: str, cluster: str, seed: int, config: Mapping[str, Any],
             **extra: Any) -> dict[str, Any]:
    """A run's identity as stored in ``run.json`` (``config``: the nested config mapping)."""
    ident = {"command": command, "policy": policy, "cluster": cluster, "seed": seed, **extra,
             "config": flat(config)}
    return json.loads(json.dumps(io.jsonable(ident), default=str))


def _show(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) else value


def differences(old: Mapping[str, Any], new: Mapping[str, Any], limit: int = 3) -> list[str]:
    """``"policy: static:64 there, static:128 here"`` for each differing field (config fields by name)."""
    out = []
    for key in dict.fromkeys([*old, *new]):
        a, b = old.get(key), new.get(key)
        if key == "config" and isinstance(a, Mapping) and isinstance(b, Mapping):
            out += [f"{k}: {_show(a.get(k))} there, {_show(b.get(k))} here"
                    for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)]
        elif a != b:
            out.append(f"{key}: {_show(a)} there, {_show(b)} here")
    return out[:limit] + ([f"{len(out) - limit} more"] if len(out) > limit else [])


def recorded(out: Path) -> dict[str, Any] | None:
    """The folder's ``run.json``, or None."""
    path = out / RUN_FILE
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
        return dict(data) if isinstance(data, dict) and "identity" in data else _corrupt(path)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return _corrupt(path)


def _corrupt(path: Path) -> dict:
    raise InputFileError(f"{path}: not a run record (corrupt): use --force to start afresh, or another --out")


def claim(out: str | Path, ident: Mapping[str, Any], force: bool = False) -> str:
    """Make ``out`` this run's folder before anything is written: ``"new"`` or ``"resume"``.

    Refuses (:class:`UserError`, one line) a folder holding another run, or run outputs with no
    record; ``force`` deletes those outputs first. A record with no outputs beside it (a run refused
    or stopped before it wrote anything) holds nothing and is replaced."""
    path = out_path(out)
    present = [name for name in (RUN_FILE, *OUTPUTS) if (path / name).exists()]
    old = None if force or present in ([], [RUN_FILE]) else recorded(path)
    if force:
        for name in present:
            (path / name).unlink()
    elif old is not None and old["identity"] != ident:
        raise UserError(f"{path} holds another run ({'; '.join(differences(old['identity'], ident))}): "
                        "use --force to start afresh there, or another --out")
    elif old is None and present not in ([], [RUN_FILE]):
        raise UserError(f"{path} holds run outputs ({', '.join(present)}) with no run record: "
                        "use --force to replace them, or another --out")
    state = "resume" if old is not None else "new"
    io.write_json(path / RUN_FILE, {"identity": dict(ident), "status": "running"})
    return state


def finish(out: str | Path) -> None:
    """Mark the folder's run complete (a folder still ``running`` was interrupted)."""
    path = Path(out) / RUN_FILE
    data = json.loads(path.read_text())
    io.write_json(path, {**data, "status": "complete"})


def status(out: str | Path) -> str | None:
    """``running`` (interrupted, or still going), ``complete``, or None (no run)."""
    old = recorded(Path(out))
    return None if old is None else str(old.get("status"))
