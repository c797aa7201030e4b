"""The cluster cost model: how long one synchronous data-parallel iteration takes, and what the
network and system counters would read meanwhile (the simulator's clock, and the communication time
the engine's heterogeneity emulation waits out).

One structure, :class:`CostModel`, with a comment on every parameter and the equations here
(AdaptDL's ``PerfParams`` style). For worker i with batch b_i, compute speed s_i (relative to the
calibrated reference machine), link bandwidth bw_i (bytes/ms) and latency l_i (ms), and N workers:

Compute (forward + backward + optimiser step, fitted by :mod:`dynamix.sim.calibrate`), plus the
device's fixed per-iteration cost f_i (kernel launches, the optimiser step, framework overhead: the
reason GPU throughput b / t_i rises with the batch and saturates at s_i / c_m)::

    t_i = (a_m + c_m * b_i) / s_i + f_i                                             [ms]

Ring all-reduce (Patarasuk & Yuan 2009; the bandwidth-optimal reduce-scatter + all-gather, 2(N-1)
steps each moving S/N bytes, paced by the slowest link)::

    T_ring = 2 (N-1)/N * S / min_i bw_i  +  2 (N-1) * max_i l_i                    [ms]

Parameter server with n_s servers of bandwidth bw_s, the gradient sharded evenly across them. In
the push phase every server receives S/n_s bytes from each of the N workers at once (incast), while
each worker sends S over its own link; the pull phase is the mirror image::

    T_ps = 2 * ( max(N * S / (n_s * bw_s), S / min_i bw_i) + max_i l_i )           [ms]

Compressed communication (``engine.compression = lhc``, :mod:`dynamix.comm`): the wire carries
f S bytes instead of S (f = ``wire_fraction`` = 1 / compression ratio, index + sketch + dense
buckets), the reduction is ``collectives`` = k dependent collectives (LHC: 2, the index and then the
sketch), each paying the latency term, and encoding + decoding adds ``codec_ms`` = c (measured)::

    T_comm = T_ring|ps(f S, latency x k) + c                                      [ms]

Iteration time, with a fraction ``overlap`` = o of communication hidden behind the backward pass
(o = 0: none, as in plain gloo all-reduce after backward; o = 1: perfect overlap)::

    T = max( max_i t_i + (1 - o) * T_comm,  T_comm )                              [ms]

Arbitration (the gRPC arbitrator, :mod:`dynamix.rpc`): once per window of k iterations the workers
report and wait for the decision, the window's release-to-last-answer time measured by
``benchmarks/bench_rpc.py`` and fitted as a line in the worker count N (docs/usage.md)::

    A(N) = A_0 + A_1 * N                                                              [ms per window]

The simulator adds A(N) to its clock after every window; A_0 = A_1 = 0 (the default) leaves it out.

T is non-decreasing in every b_i, non-increasing in every s_i and bandwidth (the invariant tests in
``tests/test_sim_costmodel.py`` check this over seeded random parameters). Each worker's T splits
into its own compute t_i, the barrier wait max_j t_j - t_i, and the visible communication
T - max_j t_j, the same decomposition the engine measures.

Synthesised counters, consistent with the times above:

- traffic per iteration: ring tx_i = rx_i = 2 (N-1)/N * S; parameter server tx_i = rx_i = S;
  rates are traffic / T (bytes/s);
- link utilisation u_i = (busy time of the link) / T, where the busy time is tx_i / bw_i (for the
  parameter server, the larger of the worker's link and the server's incast link);
- TCP retransmissions: expected lost segments per iteration = p(u_i) * tx_i / MSS with the loss
  probability ``p(u) = base_loss + congestion_loss * u ** loss_exponent`` (loss is negligible on an
  idle link and climbs steeply as the bottleneck queue fills: the qualitative shape of drop-tail
  loss under load, Mathis et al. 1997 use p as the input to the TCP throughput law);
- CPU-time ratio = t_i / T (a one-thread worker is busy while computing, idle while it waits);
- memory utilisation ``mem_idle + (mem_full - mem_idle) * b_i / max_batch_i``: the device profile's
  ``max_batch`` is the batch that fills its memory.

All functions take numpy arrays over workers so 128-worker clusters cost microseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dynamix.cluster.spec import Architecture

BYTES_PER_MS_PER_GBPS = 1e9 / 8 / 1e3
"""1 Gbit/s = 125,000 bytes per millisecond."""


@dataclass(frozen=True)
class IterationCost:
    """One iteration's times and traffic, per worker (arrays of length N) and cluster-wide."""

    compute_ms: np.ndarray  # t_i
    wait_ms: np.ndarray  # max_j t_j - t_i: barrier wait for slower peers
    comm_ms: float  # T - max_j t_j: communication not hidden behind compute
    comm_total_ms: float  # T_comm before overlap
    iter_ms: float  # T
    tx_bytes: np.ndarray  # bytes each worker sends this iteration
    rx_bytes: np.ndarray  # bytes each worker receives this iteration
    link_util: np.ndarray  # u_i in [0, 1]
    expected_retrans: np.ndarray  # expected retransmitted segments this iteration


@dataclass(frozen=True)
class CostModel:
    """Calibrated compute constants, gradient size and the network/system counter model."""

    a_ms: float  # a_m: per-iteration fixed compute on the reference machine (ms); from calibration
    c_ms_per_sample: float  # c_m: compute per training sample on the reference machine (ms)
    gradient_bytes: int  # S: bytes of one full fp32 gradient (dynamix.models.gradient_bytes)
    mss_bytes: int = 1448  # TCP maximum segment size on a 1500-byte-MTU Ethernet link
    base_loss: float = 1e-6  # packet-loss probability on an idle link
    congestion_loss: float = 2e-3  # extra loss probability when the link is saturated (u = 1)
    loss_exponent: float = 4.0  # how sharply loss rises with utilisation
    mem_idle: float = 0.10  # memory utilisation with a batch of 0 (model, optimiser state, runtime)
    mem_full: float = 0.95  # memory utilisation at the device's max_batch
    wire_fraction: float = 1.0  # f: bytes on the wire / S (1 uncompressed; 1 / compression ratio)
    codec_ms: float = 0.0  # c: encode + decode per iteration (ms), on the critical path
    collectives: int = 1  # k: dependent collectives per reduction (LHC: index, then sketch)
    arbitration_ms: float = 0.0  # A_0: one window's arbitration, fixed part (ms; arbitrator.overhead_ms)
    arbitration_ms_per_worker: float = 0.0  # A_1: its growth per worker (ms; arbitrator.overhead_ms_per_worker)

    def __post_init__(self) -> None:
        for name in ("a_ms", "c_ms_per_sample"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"cost model {name} = {getattr(self, name)} is out of range: must be >= 0")
        if not self.a_ms + self.c_ms_per_sample > 0:
            raise ValueError("cost model a_ms + c_ms_per_sample must be > 0: an iteration takes time")
        if self.gradient_bytes < 0:
            raise ValueError(
                f"cost model gradient_bytes = {self.gradient_bytes} is out of range: must be >= 0")
        if not 0 < self.wire_fraction <= 2:
            raise ValueError(f"cost model wire_fraction = {self.wire_fraction} is out of range: must be in (0, 2]")
        if not (self.arbitration_ms >= 0 and self.arbitration_ms_per_worker >= 0):
            raise ValueError(f"cost model arbitration_ms = {self.arbitration_ms}, arbitration_ms_per_worker = "
                             f"{self.arbitration_ms_per_worker} are out of range: must be >= 0")
        if not self.codec_ms >= 0 or self.collectives < 1:
            raise ValueError(f"cost model codec_ms = {self.codec_ms}, collectives = {self.collectives} are out of "
                             "range: must be >= 0 and >= 1")

    @property
    def wire_bytes(self) -> float:
        """f S: bytes one reduction puts on the wire."""
        return self.wire_fraction * self.gradient_bytes

    def arbitration_window_ms(self, n_workers: int) -> float:
        """A(N) = A_0 + A_1 N: one window's arbitration (ms); 0 when not modelled."""
        return self.arbitration_ms + self.arbitration_ms_per_worker * n_workers

    # ---- compute --------------------------------------------------------------------------------
    def compute_ms(self, batch_sizes: np.ndarray, speeds: np.ndarray, fixed_ms: np.ndarray | float = 0.0) -> np.ndarray:
        """t_i = (a_m + c_m b_i) / s_i + f_i."""
        b = np.asarray(batch_sizes, float)
        return (self.a_ms + self.c_ms_per_sample * b) / np.asarray(speeds, float) + np.asarray(fixed_ms, float)

    # ---- communication ----------------------------------------------------------------------------
    def traffic_bytes(self, n_workers: int, arch: Architecture) -> float:
        """Bytes each worker sends (and receives) per iteration."""
        if n_workers <= 1:
            return 0.0
        if arch.kind == "ring":
            return 2.0 * (n_workers - 1) / n_workers * self.wire_bytes
        return self.wire_bytes

    def comm_ms(self, bandwidth_gbps: np.ndarray, latency_ms: np.ndarray, arch: Architecture) -> float:
        """T_ring or T_ps of the wire bytes, plus the codec (module docstring); 0 for a single worker."""
        n = len(bandwidth_gbps)
        if n <= 1:
            return 0.0
        bw_min = float(np.min(bandwidth_gbps)) * BYTES_PER_MS_PER_GBPS
        lat = float(np.max(latency_ms)) * self.collectives
        s = self.wire_bytes
        if arch.kind == "ring":
            return 2.0 * (n - 1) / n * s / bw_min + 2.0 * (n - 1) * lat + self.codec_ms
        incast = n * s / (arch.num_servers * arch.server_bandwidth_gbps * BYTES_PER_MS_PER_GBPS)
        return 2.0 * (max(incast, s / bw_min) + lat) + self.codec_ms

    # ---- one iteration -------------------------------------------------------------------------------
    def iteration(self, batch_sizes: np.ndarray, speeds: np.ndarray, bandwidth_gbps: np.ndarray,
                  latency_ms: np.ndarray, arch: Architecture, fixed_ms: np.ndarray | float = 0.0) -> IterationCost:
        """Times and traffic of one synchronous iteration (module docstring equations)."""
        t = self.compute_ms(batch_sizes, speeds, fixed_ms)
        t_max = float(t.max())
        comm = self.comm_ms(bandwidth_gbps, latency_ms, arch)
        iter_ms = max(t_max + (1.0 - arch.overlap) * comm, comm)
        n = len(t)
        traffic = self.traffic_bytes(n, arch)
        tx = np.full(n, traffic)
        bw = np.asarray(bandwidth_gbps, float) * BYTES_PER_MS_PER_GBPS
        busy_ms = tx / bw
        if arch.kind == "ps" and n > 1:
            server_bw = arch.num_servers * arch.server_bandwidth_gbps * BYTES_PER_MS_PER_GBPS
            server_busy = n * self.wire_bytes / server_bw
            busy_ms = np.maximum(busy_ms, server_busy)
        util = np.clip(busy_ms / iter_ms, 0.0, 1.0) if iter_ms > 0 else np.zeros(n)
        retrans = self.loss_probability(util) * tx / self.mss_bytes
        return IterationCost(t, t_max - t, iter_ms - t_max, comm, iter_ms, tx, tx.copy(), util, retrans)

    # ---- counters ------------------------------------------------------------------------------------
    def loss_probability(self, util: np.ndarray) -> np.ndarray:
        """p(u) = base_loss + congestion_loss * u**loss_exponent."""
        return self.base_loss + self.congestion_loss * np.power(util, self.loss_exponent)

    def mem_util(self, batch_sizes: np.ndarray, max_batch: np.ndarray) -> np.ndarray:
        """Memory utilisation in [mem_idle, mem_full], linear in b_i / max_batch_i."""
        frac = np.clip(np.asarray(batch_sizes, float) / np.asarray(max_batch, float), 0.0, 1.0)
        return self.mem_idle + (self.mem_full - self.mem_idle) * frac
