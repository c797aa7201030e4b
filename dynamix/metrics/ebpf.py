"""Optional eBPF backend for TCP retransmissions: ``bpftrace`` on the tracepoint ``tcp:tcp_retransmit_skb``.

TCP_INFO's ``tcpi_total_retrans`` (the default, :mod:`dynamix.metrics.system`) counts per socket but
only while the socket is open; the tracepoint sees every retransmitted segment as it happens. Each
event prints its source and destination port; an event counts for this worker when either port is
one of the worker's own TCP sockets' local ports (refreshed every window).

Needs root, the ``bpftrace`` binary (Debian package ``bpftrace``) and tracefs (``mount -t tracefs
nodev /sys/kernel/tracing``). When any is missing, :meth:`BpftraceRetransmits.start` logs one line and
returns None, and the TCP_INFO counter stays in use: metrics never break training.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import threading
from pathlib import Path

log = logging.getLogger(__name__)

PROGRAM = 'tracepoint:tcp:tcp_retransmit_skb { printf("%d %d\\n", args->sport, args->dport); }'
TRACEPOINT = Path("/sys/kernel/tracing/events/tcp/tcp_retransmit_skb")


def parse_event(line: str) -> tuple[int, int] | None:
    """(sport, dport) from one output line of :data:`PROGRAM`; None for anything else."""
    parts = line.split()
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1])


def unavailable_reason() -> str | None:
    """Why the backend cannot run here, or None when it can."""
    if shutil.which("bpftrace") is None:
        return "bpftrace is not installed (Debian package bpftrace)"
    if os.geteuid() != 0:
        return "bpftrace needs root"
    if not TRACEPOINT.exists():
        return f"tracefs is not mounted ({TRACEPOINT} missing; mount -t tracefs nodev /sys/kernel/tracing)"
    return None


class BpftraceRetransmits:
    """A running bpftrace process and a thread counting this worker's retransmission events."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.ports: frozenset[int] = frozenset()
        self.count = 0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, name="bpftrace-retrans", daemon=True)
        self._thread.start()

    @classmethod
    def start(cls) -> "BpftraceRetransmits | None":
        reason = unavailable_reason()
        if reason is None:
            try:
                proc = subprocess.Popen(["bpftrace", "-e", PROGRAM], stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, text=True, bufsize=1)
                return cls(proc)
            except OSError as exc:
                reason = str(exc)
        log.info("metrics: eBPF retransmission backend off (%s); using TCP_INFO counters", reason)
        return None

    def _read(self) -> None:
        for line in self.proc.stdout:
            ev = parse_event(line)
            if ev is not None and (ev[0] in self.ports or ev[1] in self.ports):
                with self._lock:
                    self.count += 1

    def set_ports(self, ports: frozenset[int]) -> None:
        self.ports = ports

    def read(self) -> float:
        with self._lock:
            return float(self.count)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=5)
