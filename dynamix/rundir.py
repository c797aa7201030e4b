"""One run per output folder: ``OUT/run.json`` records the identity of the run the folder holds.

A run's identity is everything that shapes it: the command, the policy (for an arbitrator, its
address; the engine labels every window with the policy the arbitrator reports), the cluster, the
seed and every config field. A command claims
its ``--out`` before it writes anything (:func:`claim`): the same identity resumes, a different one
is refused with one line naming what differs, and ``force`` removes the folder's run outputs and
starts afresh. So a run is never spliced onto another's checkpoint, relabelled, or overwritten.

Two commands never write one folder at once: every command that writes into a folder holds an
exclusive ``fcntl.flock`` on ``OUT/.lock`` for its life (:func:`lock`; :func:`claim` takes it
first), and a second one is refused with one line naming the folder and the holder's pid. The lock
file also names the process group of the ranks a ``launch`` started (:func:`record_group`): the
next command into the folder refuses while any of them lives, even when the launch itself was killed.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import re
from pathlib import Path
from typing import Any, Iterable, Mapping

from dynamix import io
from dynamix.config import HASH_MOVED, UNHASHED, upgrade
from dynamix.errors import InputFileError, UserError

RUN_FILE = "run.json"
LOCK_FILE = ".lock"
_held: dict[Path, int] = {}
"""Folders this process holds: lock file descriptor by resolved folder (a second :func:`lock` of one
is a no-op, so a command and the library calls under it share the lock)."""
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


def plain_name(option: str, value: str) -> str:
    """A name that becomes a file name inside a folder (``--name``, ``--prefix``): letters, digits,
    ``_ . -``, not starting with a dot, so it can never point outside the folder."""
    if not re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}", value):
        raise UserError(f"{option} = {value[:200]!r} is not allowed: must be 1-128 letters, digits, '_', '.' or "
                        "'-', not starting with '.' (it names a file inside the output folder)")
    return value


def _holder(fd: int) -> dict[str, int]:
    """The lock file's record: ``{"pid": ..., "group": ...}`` (what a holder wrote; {} if unreadable)."""
    os.lseek(fd, 0, os.SEEK_SET)
    try:
        data = json.loads(os.read(fd, 4096) or b"{}")
    except ValueError:
        return {}
    return {k: v for k, v in data.items() if type(v) is int and v > 0} if isinstance(data, dict) else {}


def _write_holder(fd: int, record: Mapping[str, int]) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(dict(record)).encode(), 0)


def group_alive(group: int) -> bool:
    """Some process of ``group`` (not ours) is still running."""
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return group != os.getpgrp()


class _Lock:
    """What :func:`lock` returns: a context manager releasing the folder when it took it."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder

    def __enter__(self) -> "_Lock":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.folder is not None:
            release(self.folder)


def lock(out: str | Path, option: str = "--out") -> _Lock:
    """Hold ``out`` (created) exclusively until :func:`release`, the end of a ``with`` block, or the
    end of the process; a folder another process holds, or one a killed launch's ranks still write,
    is a :class:`UserError` naming the folder and the holder."""
    folder = out_path(out, option).resolve()
    if folder in _held:
        return _Lock(None)
    folder.mkdir(parents=True, exist_ok=True)
    while True:  # the holder unlinks the file as it releases: lock the file that is still there
        fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd).get("pid", "unknown")
            os.close(fd)
            raise UserError(f"{out} is in use by another dynamix command (pid {holder}): wait for it to end, "
                            "or use another output folder") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(folder / LOCK_FILE).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    group = _holder(fd).get("group")
    if group is not None and group_alive(group):
        os.close(fd)
        raise UserError(f"{out} is still written by the ranks of an earlier launch (process group {group}): "
                        f"wait for them, or stop them with `kill -- -{group}`")
    _write_holder(fd, {"pid": os.getpid()})
    if not _held:
        atexit.register(release_all)
    _held[folder] = fd
    return _Lock(folder)


def record_group(out: str | Path, group: int | None) -> None:
    """Name in the held lock of ``out`` the process group of ranks writing into it (None: they ended)."""
    fd = _held[Path(out).resolve()]
    _write_holder(fd, {"pid": os.getpid(), **({"group": group} if group is not None else {})})


def release(out: str | Path) -> None:
    """Give ``out`` up (its lock file removed first, so a waiting opener retries on a fresh one)."""
    fd = _held.pop(Path(out).resolve(), None)
    if fd is None:
        return
    if "group" not in _holder(fd):  # a live launch's ranks keep their record for the next command
        Path(out, LOCK_FILE).resolve().unlink(missing_ok=True)
    os.close(fd)


def release_all() -> None:
    """Give up every folder this process holds (the end of a command)."""
    for folder in list(_held):
        release(folder)


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
    """A run's identity as stored in ``run.json`` (``config``: the nested config mapping, less the
    sections that say only where it executes, :data:`~dynamix.config.UNHASHED`)."""
    shaping = {k: v for k, v in config.items() if k not in UNHASHED}
    ident = {"command": command, "policy": policy, "cluster": cluster, "seed": seed, **extra,
             "config": flat(shaping)}
    return json.loads(json.dumps(io.jsonable(ident), default=str))


def upgraded(ident: Mapping[str, Any]) -> dict[str, Any]:
    """A recorded identity with its config's moved settings (:data:`dynamix.config.HASH_MOVED`) at their
    new keys: a run recorded before a setting moved to the section where it acts is the same run."""
    flat_config = ident.get("config")
    if not isinstance(flat_config, Mapping) or not HASH_MOVED.keys() & flat_config.keys():
        return dict(ident)
    nested: dict[str, Any] = {}
    for key, value in flat_config.items():
        *parents, last = key.split(".")
        node = nested
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return {**ident, "config": flat(upgrade(nested))}


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


def claim(out: str | Path, ident: Mapping[str, Any], force: bool = False, outputs: Iterable[str] = OUTPUTS) -> str:
    """Hold ``out`` (:func:`lock`) and make it this run's folder before anything is written: ``"new"``
    or ``"resume"``.

    Refuses (:class:`UserError`, one line) a folder holding another run, or run outputs (``outputs``:
    names or glob patterns) with no record; ``force`` deletes those outputs first. A record with no
    outputs beside it (a run refused or stopped before it wrote anything) holds nothing and is replaced."""
    path = out_path(out)
    lock(path)
    found = [p.name for pattern in (RUN_FILE, *outputs) for p in sorted(path.glob(pattern)) if p.is_file()]
    present = list(dict.fromkeys(found))
    old = None if force or present in ([], [RUN_FILE]) else recorded(path)
    if old is not None and isinstance(old["identity"], Mapping):
        old = {**old, "identity": upgraded(old["identity"])}
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
