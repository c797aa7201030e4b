"""The simulator's look ahead: the coming window as it will really run, for simulator-only policies.

A :class:`ClusterForesight` wraps a :class:`~dynamix.sim.cluster.VirtualCluster` read-only. For a
candidate batch vector it replays the next k = ``batch.window`` iterations on a copy of the cluster's
dynamics, starting at the cluster's iteration and virtual time: each iteration's true speeds and
bandwidths (events, stragglers and jitter are functions of the spec's seed and the iteration, and a
time-triggered event of the time the candidate itself reaches), then the cost model's times, exactly
as :meth:`VirtualCluster.run_window` will compute them. The cluster itself is never advanced.
The engine and the arbitrator have no such view: the policies that use it are simulator-only.
"""

from __future__ import annotations

import copy
from typing import Sequence

import numpy as np

from dynamix.policies.base import WindowForecast
from dynamix.sim.cluster import VirtualCluster


class ClusterForesight:
    """The :class:`~dynamix.policies.base.Foresight` of a virtual cluster (see the module docstring)."""

    def __init__(self, cluster: VirtualCluster) -> None:
        self._cluster = cluster

    @property
    def max_batch(self) -> np.ndarray:
        return self._cluster.max_batch

    def compute_ms(self, batch_sizes: np.ndarray, speeds: np.ndarray) -> np.ndarray:
        return self._cluster.cost.compute_ms(batch_sizes, speeds, self._cluster.fixed_ms)

    def window(self, batch_sizes: Sequence[int]) -> WindowForecast:
        c = self._cluster
        b = c.clamp(batch_sizes)
        dynamics = copy.deepcopy(c.dynamics)  # time-triggered starts are remembered: replay on a copy
        elapsed_s, start = c.elapsed_s, c.iteration
        rows: list[tuple[np.ndarray, np.ndarray, np.ndarray, float]] = []
        for t in range(start, start + c.cfg.batch.window):
            cost, speeds, bandwidth = c.iteration_cost(b, t, elapsed_s, dynamics)
            elapsed_s += cost.iter_ms / 1e3
            rows.append((speeds, bandwidth, cost.compute_ms, cost.iter_ms))
        speeds, bandwidth, compute, iter_ms = (np.array(col) for col in zip(*rows))
        return WindowForecast(speeds, bandwidth, compute, iter_ms)
