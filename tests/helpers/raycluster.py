"""A Ray cluster of separate processes on this machine's loopback, for the executor's tests.

A head (no CPUs: every task runs on a worker node) and worker nodes, each one ``ray start --block``
process in a session of its own, bound to :data:`~dynamix.evaluation.executor.LOOPBACK` with the
dashboard off, a small object store, usage reporting off and a token of its own (Ray 2.60 turns token
authentication on for a head when ``~/.ray/auth_token`` exists: the cluster must not depend on that
file). While the cluster is up, this process's environment carries the token, as a driver's must. :meth:`LocalRayCluster.kill_node` ends a
worker node as a power cut would (SIGKILL to its whole process group); :meth:`LocalRayCluster.stop`
ends them all alike.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dynamix.evaluation.executor import LOOPBACK

RAY = str(Path(sys.executable).parent / "ray")
TOKEN = secrets.token_hex(32)
"""One token for every cluster of this process: Ray's driver keeps the first token it reads."""
COMMON = [f"--node-ip-address={LOOPBACK}", "--object-store-memory=100000000", "--disable-usage-stats", "--block"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


class LocalRayCluster:
    """``with LocalRayCluster((2,)) as c:`` a head and one worker node of 2 CPUs at ``c.address``."""

    def __init__(self, worker_cpus: tuple[int, ...] = (2,), timeout_s: float = 90.0) -> None:
        self.worker_cpus = worker_cpus
        self.timeout_s = timeout_s
        self.port = free_port()
        self.address = f"{LOOPBACK}:{self.port}"
        self.temp = tempfile.mkdtemp(prefix="ray")  # short: Ray's socket paths live under it
        self.auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": TOKEN}
        self.saved = {k: os.environ.get(k) for k in self.auth}
        self.env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **self.auth}
        self.head: subprocess.Popen | None = None
        self.nodes: list[subprocess.Popen] = []
        self.log = open(Path(self.temp) / "ray-start.log", "wb")  # what ray start said, for a failed start

    def _start(self, args: list[str]) -> subprocess.Popen:
        # the agent ports default to fixed numbers: nodes sharing a machine need their own
        ports = [f"--dashboard-agent-listen-port={free_port()}", f"--metrics-export-port={free_port()}"]
        return subprocess.Popen([RAY, "start", *args, *ports, *COMMON], env=self.env, start_new_session=True,
                                stdout=self.log, stderr=subprocess.STDOUT)

    def __enter__(self) -> "LocalRayCluster":
        self._use_auth(self.auth)
        self.head = self._start(["--head", f"--port={self.port}", "--num-cpus=0", "--include-dashboard=false",
                                 f"--ray-client-server-port={free_port()}", f"--temp-dir={self.temp}"])
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                socket.create_connection((LOOPBACK, self.port), 0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.head.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"the Ray head did not start at {self.address}")
                time.sleep(0.2)
        for n in self.worker_cpus:  # one at a time: nodes joining at once on one machine sometimes lose one
            self.nodes.append(self._start([f"--address={self.address}", f"--num-cpus={n}"]))
            while Path(self.log.name).read_bytes().count(b"Ray runtime started.") < 1 + len(self.nodes):
                if time.monotonic() > deadline or self.nodes[-1].poll() is not None:
                    self.stop()
                    raise RuntimeError(f"a Ray worker node did not join {self.address}")
                time.sleep(0.2)
        return self

    def wait_for_cpus(self, cpus: float) -> None:
        """Block until the connected driver (``ray.init``) sees ``cpus`` CPUs in the cluster."""
        import ray

        deadline = time.monotonic() + self.timeout_s
        while ray.cluster_resources().get("CPU", 0) < cpus:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Ray cluster has {ray.cluster_resources().get('CPU', 0)} CPUs, not {cpus}")
            time.sleep(0.2)

    def kill_node(self, k: int) -> None:
        """Worker node ``k`` dies at once: SIGKILL to its raylet, workers and ``ray start`` alike."""
        os.killpg(self.nodes[k].pid, signal.SIGKILL)
        self.nodes[k].wait()

    def stop(self) -> None:
        """Every node's process group, SIGKILL: a test cluster keeps nothing worth a graceful drain."""
        for p in (*self.nodes, self.head):
            if p is not None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        self.log.close()
        shutil.rmtree(self.temp, ignore_errors=True)
        self._use_auth(self.saved)

    @staticmethod
    def _use_auth(values: dict) -> None:
        """Set (None: unset) the token variables in this process, and make an imported Ray read them
        again: it caches its settings at import (ray._private.authentication does the same refresh)."""
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if "ray" in sys.modules:
            from ray._raylet import Config

            Config.initialize("")

    def __exit__(self, *exc) -> None:
        import ray

        ray.shutdown()
        self.stop()
