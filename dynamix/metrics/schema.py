"""The window state: what every backend (real engine, simulator) reports and every policy reads.

A *window* is k consecutive iterations (``batch.window``) under fixed batch sizes. At its end each
worker's measurements are aggregated into one :class:`WorkerWindow`; the cluster-wide view is a
:class:`GlobalWindow`. Policies (:mod:`dynamix.policies`) receive exactly these, so a policy cannot
tell whether it runs on the distributed engine or the virtual-time simulator (paper Sec. III-B: the
arbitrator's state = network + system + training statistics).

Units are in the field names. Both dataclasses are also the rows of ``runs.csv`` (one row per
(window, rank); global fields repeated on every row), see :data:`RUNS_COLUMNS`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class WorkerWindow:
    """One worker's aggregate over one window of k iterations (means unless stated otherwise)."""

    rank: int
    batch_size: int  # b_i used throughout this window
    iter_time_ms: float  # wall (or virtual) time per iteration, including synchronisation
    compute_ms: float  # forward + backward (+ emulated slowdown) per iteration
    comm_ms: float  # gradient synchronisation per iteration
    wait_ms: float  # barrier wait: time spent waiting for slower peers per iteration
    throughput_samples_per_s: float  # b_i / iter_time
    net_tx_bytes_per_s: float
    net_rx_bytes_per_s: float
    tcp_retrans_per_s: float  # TCP segments retransmitted per second (0 when unmeasurable)
    cpu_time_ratio: float  # process CPU time / wall time over the window (may exceed 1)
    mem_util: float  # resident memory / (resident + available), in [0, 1]
    loss: float  # mean training loss on this worker's batches
    batch_acc: float  # mean training accuracy on this worker's batches, in [0, 1]
    grad_norm: float  # mean L2 norm of this worker's local (pre-aggregation) gradient
    grad_sqnorm: float  # mean |g_i|^2 of the local gradient (GNS needs squares, not norms)
    sigma_norm: float  # see dynamix.metrics.gradstats: sqrt(sigma2_norm)
    sigma2_norm: float  # E_t |g_t - gbar|^2 / |gbar|^2 over the window's local gradients
    speed: float = 1.0  # relative compute speed the backend attributes (1.0 = reference); info only
    # gradient reduction on the wire (engine.compression, dynamix.comm), per iteration
    comm_bytes: float = 0.0  # bytes this worker put into the reduction (index + message; 0 = not measured)
    compression_ratio: float = 1.0  # uncompressed gradient bytes / comm_bytes
    comm_fallbacks: float = 0.0  # lhc: buckets sent dense (sketch not smaller, or no sketch size peeled)
    encode_ms: float = 0.0  # lhc: bitmap index + count sketch
    decode_ms: float = 0.0  # lhc: sizing + structural peel + peeling the summed sketch

    def as_row(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class GlobalWindow:
    """The cluster-wide state at the end of a window."""

    window: int  # index of the window that just ended, from 0
    iteration: int  # iterations completed so far
    epoch: float  # fractional epochs completed (samples seen / training-set size)
    elapsed_s: float  # wall or virtual seconds since training started
    global_batch: int  # B = sum_i b_i during this window
    lr: float  # learning rate at the end of the window
    train_loss: float  # sample-weighted mean loss over workers
    train_acc: float  # sample-weighted mean batch accuracy over workers, in [0, 1]
    agg_grad_sqnorm: float  # mean |g|^2 of the aggregated (weighted) gradient
    test_acc: float = math.nan  # last test accuracy (NaN until the first evaluation)
    test_loss: float = math.nan
    n_workers: int = 0

    def as_row(self) -> dict:
        return dataclasses.asdict(self)


WORKER_COLUMNS = [f.name for f in dataclasses.fields(WorkerWindow)]
GLOBAL_COLUMNS = [f.name for f in dataclasses.fields(GlobalWindow)]
RUN_KEY_COLUMNS = ["run_id", "backend", "policy", "seed"]
RUNS_COLUMNS = RUN_KEY_COLUMNS + GLOBAL_COLUMNS + [c for c in WORKER_COLUMNS if c not in GLOBAL_COLUMNS]
"""Columns of every ``runs.csv``: one row per (run, window, rank)."""


def window_rows(run_key: dict, glob: GlobalWindow, workers: list[WorkerWindow]) -> list[dict]:
    """Tidy rows for ``runs.csv``: the global fields repeated beside each worker's fields."""
    g = glob.as_row()
    return [{**run_key, **g, **w.as_row()} for w in workers]
