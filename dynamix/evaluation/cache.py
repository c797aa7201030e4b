"""Finished simulated runs on disk, so an interrupted or extended evaluation only simulates what is new.

A run is keyed by a hash of the config sections a simulated run reads (:data:`SIM_SECTIONS`) and the
cost model (and a surrogate run's fitted model), its run id and, for trained policies, the artifact's sha256: a retrained policy, a new
calibration or a changed setting never reuses stale rows, while unrelated sections (``rl``,
``evaluation``, ``experiments``, ...) do not matter. Files are written atomically, so several processes may share
one cache. Each run is a gzip-compressed CSV (deterministic bytes: no time stamp in the header), about
a sixth of the plain text, so a long profile's finished runs can be kept and carried to another
sitting (``notebooks/README.md``), with its decisions beside it (``<run>.decisions.json``): a policy
that takes the decisions of a run cached under the same key, cluster and seed is served from that
run instead of simulated (:mod:`dynamix.evaluation.replay`).
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import logging
from pathlib import Path
from typing import Callable, Iterator

import pandas as pd

from dynamix import io
from dynamix.cluster import ClusterSpec
from dynamix.cluster.costmodel import CostModel
from dynamix.config import Config
from dynamix.evaluation import replay
from dynamix.policies.base import BatchSizePolicy
from dynamix.sim import progress
from dynamix.sim.run import Decisions, run_id

log = logging.getLogger(__name__)

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


def store(path: Path, frame: pd.DataFrame, spec: ClusterSpec | None = None, seed: int = 0,
          decisions: Decisions | None = None) -> None:
    """Write one run's rows to its cache ``path`` (atomically: a reader sees all of it or nothing), its
    ``decisions`` on ``spec`` with ``seed`` beside them when given (:mod:`dynamix.evaluation.replay`)."""
    if decisions is not None and spec is not None:
        replay.write_trace(path, spec.name, seed, decisions)
    with io.atomic_open(path, "wb") as fh:
        fh.write(gzip.compress(frame.to_csv(index=False).encode(), mtime=0))


Replay = Callable[[Iterator[tuple[Path, Decisions]]], "tuple[pd.DataFrame, Decisions] | None"]
"""Serves a run from the finished runs it is given (:func:`dynamix.evaluation.replay.replayed`), or None."""


def cached_run(cache: Path | None, cfg: Config, cost: CostModel, spec: ClusterSpec, policy: BatchSizePolicy,
               seed: int, simulate_run: Callable[[Decisions], pd.DataFrame],
               replay_run: Replay | None = None) -> pd.DataFrame:
    """One run's rows: read from ``cache`` when this exact run ran before; else served by ``replay_run``
    from a cached run on the same cluster and seed whose decisions the policy takes
    (:mod:`dynamix.evaluation.replay`); else ``simulate_run(trace)``, which fills ``trace`` with its
    decisions. Stored in ``cache`` with the decisions unless it is None."""
    if cache is None:
        return simulate_run([])
    path = cache_path(cache, cfg, cost, spec, policy, seed)
    if path.exists():
        return pd.read_csv(path)
    found = replay_run(replay.sources(path, spec, seed)) if replay_run is not None else None
    if found is not None:
        frame, decisions = found
        log.info("%s: replayed from a cached run with the same decisions", path.name)
    else:
        decisions = []
        frame = simulate_run(decisions)
    store(path, frame, spec, seed, decisions)
    return frame
