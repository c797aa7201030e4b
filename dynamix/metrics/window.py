"""One worker's per-iteration measurements, aggregated into a :class:`WorkerWindow` every k iterations.

Per iteration the engine reports its time split (compute = forward + backward + emulated slowdown,
wait = barrier wait for slower peers, comm = gradient synchronisation incl. injected delay), the
training statistics of its batch and its local gradient g_i (before aggregation, for
:class:`~dynamix.metrics.gradstats.GradientWindowStats`). At the window's end the system monitor's
counters are differenced over the window's wall time. Means are per iteration.
"""

from __future__ import annotations

import torch

from dynamix.comm import Stats
from dynamix.metrics.gradstats import GradientWindowStats
from dynamix.metrics.schema import WorkerWindow
from dynamix.metrics.system import SystemMonitor


class WindowAccumulator:
    """Sums for one window; :meth:`close` returns the WorkerWindow and starts the next window."""

    def __init__(self, rank: int, monitor: SystemMonitor) -> None:
        self.rank = rank
        self.monitor = monitor
        self.grads = GradientWindowStats()
        self._start = monitor.sample()
        self._reset()

    def _reset(self) -> None:
        self.iters = 0
        self.samples = 0
        self.correct = 0
        self.loss_sum = 0.0  # sum over iterations of (mean batch loss x batch size)
        self.iter_s = self.compute_s = self.comm_s = self.wait_s = 0.0
        self.grads.reset()

    def add(self, *, iter_s: float, compute_s: float, comm_s: float, wait_s: float, loss: float,
            correct: int, n: int, local_grad: torch.Tensor | None) -> None:
        self.iters += 1
        self.samples += n
        self.correct += correct
        self.loss_sum += loss * n
        self.iter_s += iter_s
        self.compute_s += compute_s
        self.comm_s += comm_s
        self.wait_s += wait_s
        if local_grad is not None:
            self.grads.add(local_grad)

    def close(self, batch_size: int, speed: float = 1.0, system: bool = True,
              comm: Stats | None = None) -> WorkerWindow:
        """The window's WorkerWindow; ``system=False`` skips the system counters (reported as 0);
        ``comm``: the window's reduction totals (bytes, compression, encode/decode time)."""
        if system:
            end = self.monitor.sample()
            rates = SystemMonitor.rates(self._start, end)
            mem = self.monitor.mem_util()
        else:
            end = self._start
            rates = dict.fromkeys(("net_tx_bytes_per_s", "net_rx_bytes_per_s", "tcp_retrans_per_s",
                                   "cpu_time_ratio"), 0.0)
            mem = 0.0
        k = max(self.iters, 1)
        iter_ms = 1e3 * self.iter_s / k
        w = WorkerWindow(
            rank=self.rank,
            batch_size=batch_size,
            iter_time_ms=iter_ms,
            compute_ms=1e3 * self.compute_s / k,
            comm_ms=1e3 * self.comm_s / k,
            wait_ms=1e3 * self.wait_s / k,
            throughput_samples_per_s=self.samples / max(self.iter_s, 1e-9),
            mem_util=mem,
            loss=self.loss_sum / max(self.samples, 1),
            batch_acc=self.correct / max(self.samples, 1),
            speed=speed,
            **_comm_fields(comm),
            **rates,
            **self.grads.summary(),
        )
        self._start = end
        self._reset()
        return w


def _comm_fields(comm: Stats | None) -> dict:
    """Per-iteration means of the reduction totals (the schema defaults without them)."""
    if comm is None or not comm.reductions:
        return {}
    k = comm.reductions
    return {"comm_bytes": comm.bytes_sent / k, "compression_ratio": comm.dense_bytes / max(comm.bytes_sent, 1),
            "comm_fallbacks": comm.fallbacks / k, "encode_ms": 1e3 * comm.encode_s / k,
            "decode_ms": 1e3 * comm.decode_s / k}
