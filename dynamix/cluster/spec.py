"""Cluster specs: the one YAML schema shared by the simulator and the engine's heterogeneity emulation.

A spec describes workers (device profile, link bandwidth and latency), the synchronisation
architecture, and dynamics (events at given iterations, random stragglers, jitter). Example::

    name: mixed-4
    seed: 0
    architecture: {kind: ring}                 # or {kind: ps, num_servers: 1, server_bandwidth_gbps: 10}
    workers:
      - {count: 3, device: reference, bandwidth_gbps: 10, latency_ms: 0.05}
      - {count: 1, device: {name: slow, speed: 0.33}, bandwidth_gbps: 1, latency_ms: 0.5}
    events:
      - {at_iteration: 200, kind: slowdown, workers: [1], factor: 0.5}
      - {at_iteration: 400, kind: bandwidth, workers: [0, 1], factor: 0.1, duration_iterations: 100}
    stragglers: {probability: 0.01, factor: 0.3}
    jitter: 0.02

``workers`` is a list of groups, each a ``count`` of identical workers; a device is a name from
:data:`DEVICE_PROFILES` or an inline mapping. Speeds are relative to the calibrated reference machine
(the one ``dynamix calibrate`` ran on), so a spec means the same on the engine and the simulator.
Validation goes through :func:`dynamix.config.build`: errors name the field and its range.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from dynamix import paths
from dynamix.config import ConfigError, build, one_of, read_yaml, rng, setting


@dataclass(frozen=True)
class DeviceProfile:
    """A kind of worker: relative compute speed and the largest batch its memory holds."""

    name: str = setting("reference")
    speed: float = setting(1.0, rng(1e-3, 1e4))  # samples/s relative to the calibrated machine
    max_batch: int = setting(65536, rng(1, None))  # memory cap: batch sizes above are clamped
    # Fixed cost per iteration on this device (ms of virtual time, not scaled by speed): what makes
    # throughput rise with the batch (docs/clusters.md has the measurements behind the values used).
    fixed_ms: float = setting(0.0, rng(0.0, 1e5))


# Relative speeds for ``paper``-profile specs. Only ``reference`` is meaningful on a CPU machine;
# GPU entries are relative throughputs of common accelerators for ResNet-50 training (ratios of
# published numbers, NVIDIA Deep Learning Performance docs / MLPerf Training results), normalised to
# V100 = 1.0. They describe GPU clusters relative to each other, not to the CPU reference.
DEVICE_PROFILES: dict[str, DeviceProfile] = {
    "reference": DeviceProfile("reference", 1.0),
    "half": DeviceProfile("half", 0.5),
    "third": DeviceProfile("third", 1 / 3),
    "double": DeviceProfile("double", 2.0),
    "t4": DeviceProfile("t4", 0.35, 512),
    "p100": DeviceProfile("p100", 0.55, 512),
    "v100": DeviceProfile("v100", 1.0, 1024),
    "a10": DeviceProfile("a10", 1.1, 1024),
    "a100": DeviceProfile("a100", 2.3, 2048),
    "h100": DeviceProfile("h100", 4.5, 4096),
}


@dataclass(frozen=True)
class WorkerSpec:
    """One worker after expansion of the ``count`` groups."""

    device: DeviceProfile = field(default_factory=DeviceProfile)
    bandwidth_gbps: float = setting(10.0, rng(1e-4, 1e4))
    latency_ms: float = setting(0.05, rng(0.0, 1e4))


@dataclass(frozen=True)
class Architecture:
    kind: str = setting("ring", one_of("ring", "ps"))
    num_servers: int = setting(1, rng(1, 1024))
    server_bandwidth_gbps: float = setting(10.0, rng(1e-4, 1e4))
    overlap: float = setting(0.0, rng(0.0, 1.0))  # fraction of communication hidden behind backward


@dataclass(frozen=True)
class Event:
    """A change at an iteration (or virtual time): ``slowdown`` scales speed, ``bandwidth`` scales
    bandwidth, each by ``factor``, on ``workers`` (empty: all), for ``duration_iterations`` (0:
    for the rest of the run)."""

    kind: str = setting("slowdown", one_of("slowdown", "bandwidth"))
    at_iteration: int = setting(0, rng(0, None))
    at_time_s: float = setting(-1.0, rng(-1.0, None))  # >= 0: trigger by virtual time instead
    workers: tuple[int, ...] = setting((), rng(0, None))
    factor: float = setting(1.0, rng(1e-4, 1e4))
    duration_iterations: int = setting(0, rng(0, None))


@dataclass(frozen=True)
class Stragglers:
    """Each iteration, each worker independently runs ``factor`` times as fast with ``probability``."""

    probability: float = setting(0.0, rng(0.0, 1.0))
    factor: float = setting(0.3, rng(1e-4, 1.0))


CLUSTER_KINDS = ("compute", "fixed-cost", "comm", "dynamic")


@dataclass(frozen=True)
class ClusterSpec:
    name: str = setting("cluster")
    seed: int = setting(0, rng(0, 2**31 - 1))
    architecture: Architecture = field(default_factory=Architecture)
    workers: tuple[WorkerSpec, ...] = ()
    events: tuple[Event, ...] = ()
    stragglers: Stragglers = field(default_factory=Stragglers)
    jitter: float = setting(0.0, rng(0.0, 1.0))  # lognormal sigma of per-iteration compute noise
    # What limits the cluster, as its author designed it (a label for tables, docs/clusters.md):
    # compute (speeds differ), fixed-cost (per-iteration device cost), comm (links or server incast),
    # dynamic (events move the bottleneck during the run)
    kind: str = setting("compute", one_of(*CLUSTER_KINDS))

    @property
    def n_workers(self) -> int:
        return len(self.workers)

    @property
    def speeds(self) -> tuple[float, ...]:
        return tuple(w.device.speed for w in self.workers)


def _device(value: Any, where: str) -> DeviceProfile:
    if isinstance(value, str):
        if value not in DEVICE_PROFILES:
            raise ConfigError(
                f"{where}.device = {value!r} is not a known profile: must be one of "
                f"{', '.join(DEVICE_PROFILES)} or a mapping {{name, speed, max_batch}}"
            )
        return DEVICE_PROFILES[value]
    return build(DeviceProfile, value, prefix=f"{where}.device")


MAX_WORKERS = 4096
"""Workers in one cluster, over all its groups (``engine.world_size``'s bound)."""


def from_dict(data: Mapping[str, Any], source: str = "cluster") -> ClusterSpec:
    """Validate and expand a spec mapping (``count`` groups -> one WorkerSpec per worker)."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: a cluster spec must be a mapping")
    data = dict(data)
    groups = data.pop("workers", None)
    if not groups:
        raise ConfigError(f"{source}: workers is missing or empty: need at least one worker group")
    workers: list[WorkerSpec] = []
    for i, group in enumerate(groups):
        where = f"{source}: workers[{i}]"
        if not isinstance(group, Mapping):
            raise ConfigError(f"{where} must be a mapping")
        group = dict(group)
        count = group.pop("count", 1)
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_WORKERS:
            raise ConfigError(f"{where}.count = {count!r} is out of range: must be in [1, {MAX_WORKERS}]")
        device = _device(group.pop("device", "reference"), where)
        w = build(WorkerSpec, group, prefix=where)
        workers.extend([WorkerSpec(device, w.bandwidth_gbps, w.latency_ms)] * count)
    if len(workers) > MAX_WORKERS:
        counts = [g.get("count", 1) for g in groups]
        raise ConfigError(f"{source}: workers total {len(workers)} (counts {counts}) is out of range: "
                          f"must be in [1, {MAX_WORKERS}] over all groups")
    events = tuple(
        build(Event, e, prefix=f"{source}: events[{i}]") for i, e in enumerate(data.pop("events", []) or [])
    )
    spec = build(ClusterSpec, data, prefix=source)
    for i, e in enumerate(events):
        bad = [w for w in e.workers if w >= len(workers)]
        if bad:
            raise ConfigError(
                f"{source}: events[{i}].workers = {list(e.workers)} names worker(s) {bad}: "
                f"must be in [0, {len(workers) - 1}]"
            )
    return dataclasses.replace(spec, workers=tuple(workers), events=events)


def load(path: str | Path) -> ClusterSpec:
    """Load a spec from YAML (relative paths resolve against the repo root)."""
    p = paths.resolve(path)
    if not p.exists():
        raise ConfigError(f"cluster spec {p} does not exist (examples in {paths.CLUSTERS})")
    return from_dict(read_yaml(p, f"cluster spec {p}") or {}, source=p.name)


def homogeneous(n: int, bandwidth_gbps: float = 10.0, latency_ms: float = 0.05) -> ClusterSpec:
    """``n`` reference workers on equal links (tests and quick runs)."""
    return ClusterSpec(name=f"homogeneous-{n}", workers=(WorkerSpec(DeviceProfile(), bandwidth_gbps, latency_ms),) * n)


def to_yaml_dict(spec: ClusterSpec) -> dict:
    """Round-trippable mapping (one group per worker) for writing a spec back to YAML."""
    d = dataclasses.asdict(spec)
    d["workers"] = [
        {"device": dataclasses.asdict(w.device), "bandwidth_gbps": w.bandwidth_gbps, "latency_ms": w.latency_ms}
        for w in spec.workers
    ]
    d["events"] = [{**dataclasses.asdict(e), "workers": list(e.workers)} for e in spec.events]
    return d
