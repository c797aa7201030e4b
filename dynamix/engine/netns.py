"""Real bandwidth shaping on one Linux host (``engine.net_mode: netns``, root only).

Each rank runs in its own network namespace ``dmx<i>`` with address 10.77.0.<i+1>/24 on a veth pair
whose other end is enslaved to the bridge ``dmxbr0``. Both ends of rank i's veth get a ``tc tbf``
qdisc at the spec's bandwidth (worker i's ``bandwidth_gbps``; servers get the architecture's
``server_bandwidth_gbps``), so everything rank i sends or receives crosses a real token bucket; an
infinite bandwidth leaves the link unshaped, and :meth:`NetnsCluster.shape` changes the rates of
running links (a benchmark sweeps link speeds without restarting its ranks). The
netem qdisc (delay) is missing from some kernels, including this project's machines, so latency stays
injected by :mod:`dynamix.engine.hetero` (which then leaves bandwidth to the shaper).

One ``torchrun`` per rank joins a static rendezvous at rank 0's address (``--node-rank`` fixes the
rank, so rank i is the spec's worker i) with ``GLOO_SOCKET_IFNAME`` set to the namespace's veth.
:class:`NetnsCluster` is a context manager: namespaces, veths and the bridge are deleted on exit,
also after errors. Checkpoint restarts (``--max-restarts``) are not supported in this mode.
"""

from __future__ import annotations

import logging
import math
import os
import subprocess
from pathlib import Path

from dynamix.cluster import ClusterSpec

log = logging.getLogger(__name__)

BRIDGE = "dmxbr0"
SUBNET = "10.77.0"
MASTER_PORT = 29611
KERNEL_HZ = 250  # tbf needs burst >= rate / HZ bytes


def ns_name(i: int) -> str:
    return f"dmx{i}"


def address(i: int) -> str:
    return f"{SUBNET}.{i + 1}"


def device(i: int) -> str:
    """Rank i's end of its veth pair, inside its namespace (what gloo binds to)."""
    return f"dmxp{i}"


def tbf_args(bandwidth_gbps: float) -> list[str]:
    """``tc qdisc ... tbf`` parameters for a link of ``bandwidth_gbps``."""
    rate_bytes = bandwidth_gbps * 1e9 / 8
    burst = max(32 * 1024, int(rate_bytes / KERNEL_HZ) + 1)
    return ["tbf", "rate", f"{bandwidth_gbps * 1000:.3f}mbit", "burst", str(burst), "latency", "100ms"]


def _ip(*args: str, check: bool = True) -> None:
    subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


class NetnsCluster:
    """Namespaces and shaped veths for ``len(bandwidths_gbps)`` ranks; cleaned up on exit."""

    def __init__(self, bandwidths_gbps: list[float]) -> None:
        if os.geteuid() != 0:
            raise PermissionError("engine.net_mode = 'netns' needs root (ip netns, tc); use 'inject' otherwise")
        if not 1 <= len(bandwidths_gbps) <= 250:
            raise ValueError(f"netns mode supports 1..250 ranks, got {len(bandwidths_gbps)}")
        self.bandwidths_gbps = list(bandwidths_gbps)

    @classmethod
    def for_spec(cls, spec: ClusterSpec, n_workers: int, n_servers: int) -> "NetnsCluster":
        bws = [w.bandwidth_gbps for w in spec.workers[:n_workers]]
        return cls(bws + [spec.architecture.server_bandwidth_gbps] * n_servers)

    def __enter__(self) -> "NetnsCluster":
        try:
            self.up()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.down()

    def up(self) -> None:
        self.down()  # leftovers of a crashed run
        _ip("link", "add", BRIDGE, "type", "bridge")
        _ip("link", "set", BRIDGE, "up")
        for i, bw in enumerate(self.bandwidths_gbps):
            ns, host_end, ns_end = ns_name(i), f"dmxv{i}", device(i)
            _ip("netns", "add", ns)
            _ip("link", "add", host_end, "type", "veth", "peer", "name", ns_end)
            _ip("link", "set", ns_end, "netns", ns)
            _ip("link", "set", host_end, "master", BRIDGE)
            _ip("link", "set", host_end, "up")
            _ip("-n", ns, "addr", "add", f"{address(i)}/24", "dev", ns_end)
            _ip("-n", ns, "link", "set", ns_end, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        self.shape(self.bandwidths_gbps)

    def shape(self, bandwidths_gbps: list[float]) -> None:
        """Put rank i's links (both veth ends) behind a tbf at ``bandwidths_gbps[i]``; inf: unshaped."""
        if len(bandwidths_gbps) != len(self.bandwidths_gbps):
            raise ValueError(f"{len(bandwidths_gbps)} bandwidths for {len(self.bandwidths_gbps)} ranks")
        for i, bw in enumerate(bandwidths_gbps):
            for prefix, dev in (([], f"dmxv{i}"), (["ip", "netns", "exec", ns_name(i)], device(i))):
                subprocess.run([*prefix, "tc", "qdisc", "del", "dev", dev, "root"], capture_output=True)
                if math.isfinite(bw):
                    subprocess.run([*prefix, "tc", "qdisc", "add", "dev", dev, "root", *tbf_args(bw)], check=True)
        self.bandwidths_gbps = list(bandwidths_gbps)
        log.info("netns: %d namespaces on %s, tbf at %s Gbit/s", len(self.bandwidths_gbps), BRIDGE,
                 self.bandwidths_gbps)

    def down(self) -> None:
        for i in range(len(self.bandwidths_gbps)):
            _ip("netns", "del", ns_name(i), check=False)  # removes the veth pair with it
            _ip("link", "del", f"dmxv{i}", check=False)
        _ip("link", "del", BRIDGE, check=False)

    def commands(self, rank_cmd: list[str]) -> list[tuple[list[str], dict[str, str]]]:
        """(command, extra env) per rank: ``ip netns exec`` + one-process torchrun in a static rendezvous."""
        n = len(self.bandwidths_gbps)
        out = []
        for i in range(n):
            cmd = ["ip", "netns", "exec", ns_name(i), rank_cmd[0], "-m", "torch.distributed.run",
                   f"--nnodes={n}", f"--node-rank={i}", "--nproc-per-node=1", f"--master-addr={address(0)}",
                   f"--master-port={MASTER_PORT}", *rank_cmd[1:]]
            out.append((cmd, {"GLOO_SOCKET_IFNAME": device(i), "DYNAMIX_NETNS": "1"}))
        return out


def run_ranks(cluster: NetnsCluster, module_args: list[str], env: dict[str, str], out_dir: Path,
              timeout_s: float) -> None:
    """Start every rank in its namespace and wait; any failure stops the others."""
    import sys

    procs = []
    for i, (cmd, extra) in enumerate(cluster.commands([sys.executable, *module_args])):
        log_file = open(Path(out_dir) / f"netns-rank{i}.log", "w")
        procs.append((subprocess.Popen(cmd, env={**env, **extra}, stdout=log_file, stderr=subprocess.STDOUT),
                      log_file))
    try:
        for p, _ in procs:
            p.wait(timeout=timeout_s)
        bad = [i for i, (p, _) in enumerate(procs) if p.returncode != 0]
        if bad:
            raise RuntimeError(f"netns ranks {bad} failed; see {out_dir}/netns-rank<i>.log")
    finally:
        for p, fh in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            fh.close()
