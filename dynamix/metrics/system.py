"""Per-worker network and system state (paper Sec. III-B: the arbitrator's network and system statistics).

What is measured, and why this way:

- **Network bytes and TCP retransmissions of this worker's own sockets**, read with
  ``getsockopt(TCP_INFO)`` on the process's TCP file descriptors (``/proc/self/fd``). This attributes
  traffic to the worker even when several workers share one host and one loopback interface, where
  ``/proc/net/dev`` would only show the host's sum. Fields used (``struct tcp_info``, linux/tcp.h):
  ``tcpi_bytes_sent`` (falls back to ``tcpi_bytes_acked`` on kernels before 4.19), ``tcpi_bytes_received``
  and ``tcpi_total_retrans`` (segments retransmitted over the socket's life). Sockets that close between
  two samples keep the contribution counted up to their last sample.
- **Fallback** (``source="proc"``, or when TCP_INFO is unusable): interface bytes from ``/proc/net/dev``
  of this process's network namespace and ``RetransSegs`` from ``/proc/net/snmp``. Host-wide unless the
  worker runs in its own network namespace (``engine.net_mode: netns``), where they are exact.
- **CPU-time ratio** = process CPU time (all threads, ``time.process_time``) / wall time; it exceeds 1
  when gloo's threads and the compute thread run in parallel.
- **Memory utilisation** = RSS / (RSS + available memory), in [0, 1] (``psutil``).

Every reading is guarded: a failing collector logs one warning and reports zeros, never breaking
training.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import time
from dataclasses import dataclass

import psutil

log = logging.getLogger(__name__)

# struct tcp_info offsets (bytes) in linux/tcp.h
_TCPI_TOTAL_RETRANS = 100  # __u32
_TCPI_BYTES_ACKED = 120  # __u64
_TCPI_BYTES_RECEIVED = 128  # __u64
_TCPI_BYTES_SENT = 200  # __u64, kernel >= 4.19
_TCP_INFO_LEN = 232


@dataclass(frozen=True)
class NetCounters:
    """Cumulative counters at one instant."""

    tx_bytes: float
    rx_bytes: float
    retrans_segments: float


def parse_tcp_info(raw: bytes) -> NetCounters:
    """(bytes sent, bytes received, total retransmitted segments) from a ``struct tcp_info`` blob."""
    (retrans,) = struct.unpack_from("I", raw, _TCPI_TOTAL_RETRANS)
    (acked, received) = struct.unpack_from("QQ", raw, _TCPI_BYTES_ACKED)
    sent = struct.unpack_from("Q", raw, _TCPI_BYTES_SENT)[0] if len(raw) >= _TCPI_BYTES_SENT + 8 else acked
    return NetCounters(float(sent), float(received), float(retrans))


def own_tcp_sockets() -> dict[tuple[int, str], int]:
    """{(fd, 'socket:[inode]'): fd} for this process's socket descriptors (TCP filtered on read)."""
    out = {}
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:"):
            out[(fd, link)] = fd
    return out


def read_tcp_info(fd: int) -> tuple[NetCounters, int] | None:
    """(TCP_INFO counters, local port) of descriptor ``fd``; None when it is not a TCP socket."""
    try:
        sock = socket.fromfd(fd, socket.AF_INET, socket.SOCK_STREAM)
    except OSError:
        return None
    try:
        if sock.getsockopt(socket.SOL_SOCKET, socket.SO_TYPE) != socket.SOCK_STREAM:
            return None
        info = parse_tcp_info(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_LEN))
        return info, sock.getsockname()[1]
    except OSError:  # AF_UNIX and other non-TCP sockets refuse TCP_INFO
        return None
    finally:
        sock.close()  # closes the duplicate only


class TcpInfoCounters:
    """Cumulative bytes/retransmissions over every TCP socket this process has had since creation."""

    def __init__(self) -> None:
        self._last: dict[tuple[int, str], NetCounters] = {}
        self.ports: frozenset[int] = frozenset()  # local ports of this process's TCP sockets
        self._total = [0.0, 0.0, 0.0]
        self.read()
        self._total = [0.0, 0.0, 0.0]  # traffic before the collector existed is not ours to report

    def read(self) -> NetCounters:
        current: dict[tuple[int, str], NetCounters] = {}
        ports = set()
        for key, fd in own_tcp_sockets().items():
            got = read_tcp_info(fd)
            if got is None:
                continue
            c, port = got
            ports.add(port)
            prev = self._last.get(key, NetCounters(0.0, 0.0, 0.0))
            self._total[0] += max(c.tx_bytes - prev.tx_bytes, 0.0)
            self._total[1] += max(c.rx_bytes - prev.rx_bytes, 0.0)
            self._total[2] += max(c.retrans_segments - prev.retrans_segments, 0.0)
            current[key] = c
        self._last = current
        self.ports = frozenset(ports)
        return NetCounters(*self._total)


def read_proc_net_dev(path: str = "/proc/self/net/dev") -> NetCounters:
    """Bytes over all interfaces of this process's namespace except loopback (loopback if it is all)."""
    tx = rx = 0.0
    lo = (0.0, 0.0)
    with open(path) as fh:
        for line in fh.readlines()[2:]:
            name, data = line.split(":", 1)
            f = data.split()
            if name.strip() == "lo":
                lo = (float(f[8]), float(f[0]))
            else:
                tx, rx = tx + float(f[8]), rx + float(f[0])
    if tx == 0.0 and rx == 0.0:
        tx, rx = lo
    return NetCounters(tx, rx, read_snmp_retrans())


def read_snmp_retrans(path: str = "/proc/net/snmp") -> float:
    """``Tcp: RetransSegs`` of this network namespace (cumulative)."""
    with open(path) as fh:
        lines = [line.split() for line in fh if line.startswith("Tcp:")]
    header, values = lines[0], lines[1]
    return float(values[header.index("RetransSegs")])


@dataclass(frozen=True)
class Snapshot:
    wall_s: float
    cpu_s: float
    net: NetCounters


class SystemMonitor:
    """Samples cumulative counters; :meth:`rates` turns two samples into the window's per-second state.

    ``source``: ``tcp_info`` (own sockets, default), ``proc`` (namespace-wide), or ``auto`` (tcp_info,
    falling back to proc when it fails). ``ebpf=True`` counts retransmissions with the bpftrace backend
    (:mod:`dynamix.metrics.ebpf`) when it can run, attributing events by this process's ports.
    """

    def __init__(self, source: str = "auto", ebpf: bool = False) -> None:
        if source not in ("auto", "tcp_info", "proc"):
            raise ValueError(f"metrics source = {source!r} is not allowed: must be one of auto, tcp_info, proc")
        self._proc = psutil.Process()
        self._warned: set[str] = set()
        self._tcp: TcpInfoCounters | None = None
        self.source = source
        if source in ("auto", "tcp_info"):
            self._tcp = self._guard("tcp_info", TcpInfoCounters, None)
            if self._tcp is None:
                self.source = "proc"
        self._zero = NetCounters(0.0, 0.0, 0.0)
        self._ebpf = None
        if ebpf:
            from dynamix.metrics.ebpf import BpftraceRetransmits

            self._ebpf = self._guard("ebpf", BpftraceRetransmits.start, None)

    def _guard(self, what: str, fn, default):
        try:
            return fn()
        except Exception as exc:  # metrics never break training
            if what not in self._warned:
                self._warned.add(what)
                log.warning("metrics: %s unavailable (%s); reporting %r from now on", what, exc, default)
            return default

    def net(self) -> NetCounters:
        if self._tcp is not None:
            c = self._guard("tcp_info", self._tcp.read, self._zero)
        else:
            c = self._guard("proc", read_proc_net_dev, self._zero)
        if self._ebpf is not None and self._tcp is not None:
            self._ebpf.set_ports(self._tcp.ports)
            c = NetCounters(c.tx_bytes, c.rx_bytes, self._ebpf.read())
        return c

    def close(self) -> None:
        if self._ebpf is not None:
            self._ebpf.close()

    def sample(self) -> Snapshot:
        return Snapshot(time.perf_counter(), time.process_time(), self.net())

    @staticmethod
    def rates(a: Snapshot, b: Snapshot) -> dict[str, float]:
        """Per-second network rates and the CPU-time ratio between two snapshots."""
        dt = max(b.wall_s - a.wall_s, 1e-9)
        return {
            "net_tx_bytes_per_s": max(b.net.tx_bytes - a.net.tx_bytes, 0.0) / dt,
            "net_rx_bytes_per_s": max(b.net.rx_bytes - a.net.rx_bytes, 0.0) / dt,
            "tcp_retrans_per_s": max(b.net.retrans_segments - a.net.retrans_segments, 0.0) / dt,
            "cpu_time_ratio": max(b.cpu_s - a.cpu_s, 0.0) / dt,
        }

    def mem_util(self) -> float:
        """RSS / (RSS + available), in [0, 1]."""

        def read() -> float:
            rss = float(self._proc.memory_info().rss)
            return rss / (rss + float(psutil.virtual_memory().available))

        return self._guard("memory", read, 0.0)
