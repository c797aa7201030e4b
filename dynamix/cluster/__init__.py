"""Clusters: the spec every backend shares, its iteration-by-iteration dynamics, and the cost model.

The simulator (:mod:`dynamix.sim`), the engine's heterogeneity emulation
(:mod:`dynamix.engine.hetero`) and the agent's domain randomisation (:mod:`dynamix.rl.domain`) sit
above this package, so they read the same spec the same way; it sits on :mod:`dynamix.config` and
:mod:`dynamix.seeding` alone.

Modules, in data-flow order (a spec in, iteration times and counters out):

- ``spec``       the YAML schema (workers, architecture, events, stragglers, jitter) and its
                 validation; its public names are re-exported here, so
                 ``from dynamix import cluster; cluster.load(path)`` works;
- ``dynamics``   a spec's events, stragglers and jitter as per-iteration speed and bandwidth factors
                 (seeded by the spec and the iteration alone);
- ``costmodel``  the documented cost model: compute, ring / parameter-server (and compressed)
                 communication, overlap, arbitration, synthesised network and system counters;
- ``tradeoff``   the trade-off index: how much a spec's nominal throughput rewards larger batches.
"""

from dynamix.cluster.spec import (  # noqa: F401
    DEVICE_PROFILES,
    Architecture,
    ClusterSpec,
    DeviceProfile,
    Event,
    Stragglers,
    WorkerSpec,
    from_dict,
    homogeneous,
    load,
    to_yaml_dict,
)
