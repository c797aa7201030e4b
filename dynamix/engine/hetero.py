"""Heterogeneity emulation on one machine: one rank behaves like a worker of a mixed cluster.

The cluster spec (:mod:`dynamix.cluster`, the simulator's schema) gives worker i a relative speed s_i,
a link (bandwidth bw_i, latency l_i), events and stragglers. Per iteration t, with the simulator's
:class:`~dynamix.cluster.dynamics.ClusterDynamics` factors (so the engine and the simulator see the same
straggler pattern for a spec):

- **compute, by time dilation**: speed f = s_i * speed_factor_i(t); after measuring its compute c
  (batch construction, forward and backward, plus the previous iteration's optimiser step) the rank
  sleeps (1/f - 1) * c before the barrier, so its compute takes c / f: the same work the cost model's
  t_i = (a_m + c_m b_i) / s_i scales (:mod:`dynamix.sim.calibrate` times exactly that). The sleep
  falls where the faster peers wait at the barrier anyway, so every rank starts computing together
  after the reduction, as the calibration's lockstep processes do. (Dilating forward and backward
  alone would leave batch construction and the step at native speed, and the emulated worker faster
  than the cost model; docs/clusters.md.) Speeds above 1 cannot be emulated on the reference machine
  and run at native speed. A device's fixed cost per iteration f_i is slept on top.
- **network, by injected time**: the modelled communication time T_comm(t) of
  :meth:`~dynamix.cluster.costmodel.CostModel.comm_ms` (ring or parameter server, with bandwidths scaled
  by the bandwidth events) is a floor on the measured synchronisation time; after the real
  collective the rank sleeps max(0, T_comm - measured). Every rank computes the same T_comm, so the
  collective behaves as if it ran over the slowest link. This is portable (no root, no qdisc); with
  ``engine.net_mode: netns`` the bandwidth is additionally shaped for real by ``tc tbf``
  (:mod:`dynamix.engine.netns`).
"""

from __future__ import annotations

import dataclasses
import logging
import time

import numpy as np

from dynamix.cluster import ClusterSpec
from dynamix.cluster.costmodel import CostModel
from dynamix.cluster.dynamics import ClusterDynamics
from dynamix.config import ConfigError

log = logging.getLogger(__name__)


def check_fits(spec: ClusterSpec, n_workers: int) -> None:
    """Refuse a spec with fewer workers than ``n_workers`` (:class:`ConfigError`): :func:`fit_spec` on
    every rank, and ``dynamix launch`` before torchrun starts them."""
    if spec.n_workers < n_workers:
        raise ConfigError(f"cluster spec {spec.name!r} has {spec.n_workers} workers, fewer than the run's "
                          f"{n_workers} worker ranks: the workers (--nproc) must be in [1, {spec.n_workers}]")


def fit_spec(spec: ClusterSpec, n_workers: int) -> ClusterSpec:
    """The spec restricted to the first ``n_workers`` workers (:func:`check_fits`)."""
    check_fits(spec, n_workers)
    if spec.n_workers == n_workers:
        return spec
    log.info("cluster spec %s: using its first %d of %d workers", spec.name, n_workers, spec.n_workers)
    bad = [e for e in spec.events if any(w >= n_workers for w in e.workers)]
    events = tuple(e for e in spec.events if e not in bad)
    return dataclasses.replace(spec, workers=spec.workers[:n_workers], events=events)


class Emulator:
    """Rank ``rank``'s slowdown and network floor, iteration by iteration."""

    def __init__(self, spec: ClusterSpec, rank: int, gradient_bytes: int, arch: str, num_servers: int = 1,
                 shaped: bool = False, collectives: int = 1) -> None:
        self.spec = spec
        self.rank = rank
        self.dynamics = ClusterDynamics(spec)
        self.cost = CostModel(a_ms=1.0, c_ms_per_sample=0.0, gradient_bytes=gradient_bytes, collectives=collectives)
        self.arch = dataclasses.replace(spec.architecture, kind=arch, num_servers=num_servers,
                                        **({"server_bandwidth_gbps": 1e4} if shaped else {}))
        self.base_speed = spec.speeds[rank]
        self.fixed_s = spec.workers[rank].device.fixed_ms / 1e3  # the device's fixed cost per iteration
        # With real shaping (netns + tc tbf) bandwidth is enforced by the kernel: inject latency only.
        self.bandwidth_gbps = np.array([1e4 if shaped else w.bandwidth_gbps for w in spec.workers])
        self.latency_ms = np.array([w.latency_ms for w in spec.workers])
        self.speed = self.base_speed
        self.comm_floor_s = 0.0
        if self.base_speed > 1.0:
            log.info("rank %d: speed %.2f > 1 cannot be emulated; runs at native speed", rank, self.base_speed)

    def begin(self, iteration: int, time_s: float) -> None:
        """Fix this iteration's speed and communication floor."""
        speed_f, bw_f = self.dynamics.factors(iteration, time_s)
        self.speed = self.base_speed * float(speed_f[self.rank])
        self._bandwidth_now = self.bandwidth_gbps * bw_f
        self.comm_floor_s = 1e-3 * self.cost.comm_ms(self._bandwidth_now, self.latency_ms, self.arch)

    def dilate(self, compute_s: float) -> float:
        """Sleep (1/f - 1) x compute_s plus the device's fixed cost f_i; returns the seconds slept."""
        extra = (compute_s * (1.0 / self.speed - 1.0) if self.speed < 1.0 else 0.0) + self.fixed_s
        if extra > 0:
            time.sleep(extra)
        return max(extra, 0.0)

    def pad_comm(self, measured_s: float, sent_bytes: int | None = None) -> float:
        """Sleep until the synchronisation has taken the modelled T_comm; returns the seconds slept.

        ``sent_bytes``: what this reduction put on the wire when it differs from the full gradient
        (compression), so the modelled network carries the compressed bytes.
        """
        if sent_bytes is not None and sent_bytes != self.cost.gradient_bytes:
            cost = dataclasses.replace(self.cost, wire_fraction=sent_bytes / self.cost.gradient_bytes)
            self.comm_floor_s = 1e-3 * cost.comm_ms(self._bandwidth_now, self.latency_ms, self.arch)
        extra = self.comm_floor_s - measured_s
        if extra > 0:
            time.sleep(extra)
        return max(extra, 0.0)
