"""Arbitrator helpers for tests and benchmarks: plausible window reports and registrations.

``sample_report(rank, window, batch_size, n_workers)`` builds a :class:`WorkerWindow` and the matching
:class:`GlobalWindow` that pass :mod:`dynamix.rpc.validate`, so a test corrupts exactly one thing
and checks that exactly that is refused.
"""

from __future__ import annotations

import math
from typing import Sequence

from dynamix.metrics.schema import GlobalWindow, WorkerWindow
from dynamix.rpc.validate import Registration


def sample_report(
    rank: int, window: int, batch_size: int, n_workers: int, global_batch: int | None = None, k: int = 10
) -> tuple[WorkerWindow, GlobalWindow]:
    """A valid report of ``rank`` for ``window`` (k iterations per window)."""
    iter_ms = 5.0 + 0.05 * batch_size
    worker = WorkerWindow(
        rank=rank, batch_size=batch_size, iter_time_ms=iter_ms, compute_ms=0.7 * iter_ms,
        comm_ms=0.2 * iter_ms, wait_ms=0.1 * iter_ms, throughput_samples_per_s=batch_size / iter_ms * 1e3,
        net_tx_bytes_per_s=1e6, net_rx_bytes_per_s=1e6, tcp_retrans_per_s=0.0, cpu_time_ratio=0.9,
        mem_util=0.3, loss=2.0 / (1 + window), batch_acc=min(1.0, 0.1 + 0.01 * window), grad_norm=1.5,
        grad_sqnorm=2.5, sigma_norm=math.sqrt(0.4), sigma2_norm=0.4, speed=1.0,
    )
    glob = GlobalWindow(
        window=window, iteration=(window + 1) * k, epoch=0.01 * (window + 1), elapsed_s=0.1 * (window + 1),
        global_batch=global_batch if global_batch is not None else batch_size * n_workers, lr=0.05,
        train_loss=2.0 / (1 + window), train_acc=min(1.0, 0.1 + 0.01 * window), agg_grad_sqnorm=1.0,
        n_workers=n_workers,
    )
    return worker, glob


def registration(rank: int, n_workers: int, initial: Sequence[int] | int = 64, run_id: str = "test-run",
                 next_window: int = 0) -> Registration:
    """A valid registration of ``rank`` in an ``n_workers`` run."""
    sizes = (initial,) * n_workers if isinstance(initial, int) else tuple(initial)
    return Registration(run_id=run_id, rank=rank, world_size=n_workers, initial_batch_sizes=sizes,
                        current_batch_size=sizes[rank], next_window=next_window)
