"""Finished simulated runs on disk, so an interrupted or extended evaluation only simulates what is new.

A run is keyed by a hash of the config sections a simulated run reads (:data:`SIM_SECTIONS`) and the
cost model (and a surrogate run's fitted model), its run id and, for trained policies, the artifact's sha256: a retrained policy, a new
calibration or a changed setting never reuses stale rows, while unrelated sections (``rl``,
``evaluation``, ``experiments``, ...) do not matter. Files are written atomically, so several processes may share
one cache. Each run is a gzip-compressed CSV (deterministic bytes: no time stamp in the header), about
a sixth of the plain text, so a long profile's finished runs can be kept and carried to another
sitting (``notebooks/README.md``).
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
from pathlib import Path
from typing import Callable

import pandas as pd

from dynamix import io
from dynamix.cluster import ClusterSpec
from dynamix.cluster.costmodel import CostModel
from dynamix.config import Config
from dynamix.policies.base import BatchSizePolicy
from dynamix.sim import progress
from dynamix.sim.run import run_id

SIM_SECTIONS = ("data", "model", "optim", "train", "batch")
"""The config sections :func:`dynamix.sim.run.simulate` reads (policies read only the batch bounds),
and ``engine.compression``."""

NEUTRAL = {"data": {"dataset": "cifar10"}, "train": {"schedule_epochs": 0.0}, "cost": {"wire_fraction": 1.0, "codec_ms": 0.0, "collectives": 1, "arbitration_ms": 0.0, "arbitration_ms_per_worker": 0.0}}
"""Settings added after runs were cached, left out of the key at these values (the behaviour from
before they existed), so the cached runs stay valid. Not :data:`dynamix.config.HASH_NEUTRAL`: that one
keeps :meth:`Config.hash` (stage records, policy artifacts), whose settings were added at other times;
``cost`` is the cost model's, no config section."""


def _keyed(name: str, fields: dict) -> dict:
    neutral = NEUTRAL.get(name, {})
    return {k: v for k, v in fields.items() if k not in neutral or v != neutral[k]}


def sim_key(cfg: Config, cost: CostModel) -> str:
    """Short hash of :data:`SIM_SECTIONS`, the compression and the cost model (and, under ``sim.backend:
    surrogate``, the fitted surrogate's checksum): identifies a simulated run's settings."""
    parts = {k: _keyed(k, dataclasses.asdict(getattr(cfg, k))) for k in SIM_SECTIONS}
    parts["cost"] = _keyed("cost", dataclasses.asdict(cost))
    if cfg.engine.compression != "none":
        parts["compression"] = cfg.engine.compression
    if cfg.sim.backend == "surrogate":
        parts["surrogate"] = progress.for_config(cfg).checksum()
    blob = json.dumps(parts, sort_keys=True, default=list)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def cache_path(cache: Path, cfg: Config, cost: CostModel, spec: ClusterSpec, policy: BatchSizePolicy,
               seed: int) -> Path:
    """Where the run (``cfg``, ``cost``, ``spec``, ``policy``, ``seed``) is cached under ``cache``."""
    fingerprint = getattr(policy, "meta", {}).get("zip_sha256", "")[:12]
    return cache / sim_key(cfg, cost) / f"{run_id(spec, policy, seed)}{'-' + fingerprint if fingerprint else ''}.csv.gz"


def store(path: Path, frame: pd.DataFrame) -> None:
    """Write one run's rows to its cache ``path`` (atomically: a reader sees all of it or nothing)."""
    with io.atomic_open(path, "wb") as fh:
        fh.write(gzip.compress(frame.to_csv(index=False).encode(), mtime=0))


def cached_run(cache: Path | None, cfg: Config, cost: CostModel, spec: ClusterSpec, policy: BatchSizePolicy,
               seed: int, simulate_run: Callable[[], pd.DataFrame]) -> pd.DataFrame:
    """One run's rows: read from ``cache`` when this exact run ran before, else ``simulate_run()``
    (stored in ``cache`` unless it is None)."""
    if cache is None:
        return simulate_run()
    path = cache_path(cache, cfg, cost, spec, policy, seed)
    if path.exists():
        return pd.read_csv(path)
    frame = simulate_run()
    store(path, frame)
    return frame
