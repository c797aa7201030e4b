"""Clusters: the spec every backend shares, its iteration-by-iteration dynamics, and the cost model.

- :mod:`dynamix.cluster.spec`: the YAML schema (workers, architecture, events, stragglers, jitter);
  its public names are re-exported here, so ``from dynamix import cluster; cluster.load(path)`` works;
- :mod:`dynamix.cluster.dynamics`: a spec's events, stragglers and jitter per iteration (seeded);
- :mod:`dynamix.cluster.costmodel`: the documented cost model (compute, ring / parameter-server
  communication, overlap, synthesised network and system counters).

The simulator (:mod:`dynamix.sim`) and the engine's heterogeneity emulation (:mod:`dynamix.engine.hetero`)
both sit above this package, so they read the same spec the same way.
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
