"""Sweeps on a Ray cluster: every simulated run one Ray task, the driver keeping cache and outputs.

``executor.kind: ray`` (:class:`~dynamix.config.ExecutorConfig`) sends the runs of every sweep
(``dynamix evaluate``, the pipeline's stages, ``validate-surrogate``, the ablation) to Ray instead of
this machine's process pool (:func:`dynamix.evaluation.runner.run_tasks` chooses)::

    ray start --head --port 6379 --include-dashboard=false     # on the head
    ray start --address HEAD:6379                              # on every other node
    dynamix evaluate ... --set executor.kind=ray --set executor.address=HEAD:6379

A task asks for one CPU (one GPU when its run trains on cuda), so a cluster runs as many simulations at
once as it has cores. What a task returns travels back to the driver, which alone reads and writes the
run cache and the outputs: a node needs the same ``requirements.lock`` and the data path, never the
results folder. A task lost with its worker or node runs again elsewhere (:data:`RETRIES`), and its
rows reach the driver once, so a dead node costs time, never a run; an interrupted driver resumes from
its run cache. Ray's dashboard stays off unless ``executor.dashboard`` asks for it.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import socket
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from dynamix import io
from dynamix.config import ExecutorConfig
from dynamix.errors import UserError

log = logging.getLogger(__name__)

RETRIES = 3
"""Times Ray runs a task again after its worker process or node died (a run that raises is not retried)."""

LOOPBACK = "127.0.0.2"
"""Address of a Ray started here: loopback, as Ray rewrites 127.0.0.1 to the machine's routable address."""

CONNECT_TIMEOUT_S = 5.0
"""How long the driver waits for the head's port to answer before it gives up (one line, exit 2)."""

_connected: list[str] = []  # the address this process's Ray connection goes to (one at most)


def check_reachable(address: str, source: str) -> None:
    """Refuse (:class:`UserError`, one line) a Ray address whose port does not answer within
    :data:`CONNECT_TIMEOUT_S`; ``source`` names where the address came from."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        raise UserError(f"{source} = {address!r} is not a Ray address: must be HOST:PORT (ray start --head prints it)")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UserError(f"{source} = {address!r}: no Ray cluster answers there ({reason.lower()}); start one with "
                        "`ray start --head` or correct the address") from None


def connect(settings: ExecutorConfig, cpus: int) -> None:
    """Connect this process to Ray once: to ``executor.address``, else ``$RAY_ADDRESS``, else a Ray it
    starts on this machine's loopback with ``cpus`` CPUs (stopped when the process exits)."""
    import ray

    address = settings.address or os.environ.get("RAY_ADDRESS", "")
    key = address or f"local with {cpus} CPUs"
    if ray.is_initialized() and _connected == [key]:
        return
    if ray.is_initialized():
        ray.shutdown()
    _connected.clear()
    if address and address != "auto":
        check_reachable(address, "executor.address" if settings.address else "$RAY_ADDRESS")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # Ray reports nothing anywhere unless the user opts in
    where = {"address": address} if address else {
        "address": "local", "num_cpus": cpus, "_node_ip_address": LOOPBACK, "include_dashboard": settings.dashboard}
    try:
        ray.init(**where, logging_level=logging.WARNING)
    except ConnectionError as exc:
        raise UserError(f"Ray at {address!r}: {' '.join(str(exc).split())}") from None
    _connected.append(key)
    log.info("Ray: %s, %g CPUs", key, ray.cluster_resources().get("CPU", 0))


@functools.cache
def _remote(fn: Callable) -> Any:
    import ray

    return ray.remote(num_cpus=1, max_retries=RETRIES)(fn)


def ray_map(fn: Callable, calls: Sequence[tuple], gpus: Sequence[bool]) -> Iterator[tuple[int, Any]]:
    """``(i, fn(*calls[i]))`` for every call, as its Ray task finishes (Ray must be :func:`connect`-ed).

    Each task takes one CPU, and one GPU where ``gpus[i]``. Each distinct argument object goes to Ray's
    object store once, however many calls share it (a cost model, a policy's files). Stopping the
    iteration (Ctrl-C, a failed run) leaves the tasks in flight to Ray, which ends them with the driver's
    job: cancelling them first (``ray.cancel``) crashed Ray 2.60's driver at exit."""
    import ray

    remote = _remote(fn)
    stored: dict[int, Any] = {}

    def ref(arg: Any) -> Any:
        if id(arg) not in stored:
            stored[id(arg)] = ray.put(arg)
        return stored[id(arg)]

    pending = {remote.options(num_gpus=int(g)).remote(*map(ref, args)): i for i, (args, g) in enumerate(zip(calls, gpus))}
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        i = pending.pop(done[0])
        yield i, ray.get(done[0])


def materialize(files: Mapping[str, bytes]) -> Path:
    """A folder on this node holding ``files`` (name -> content), written once per content: how a Ray
    task reads a file the driver has (a trained policy, a fitted surrogate) and its node may not."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    folder = Path(tempfile.gettempdir()) / "dynamix-ray-files" / digest.hexdigest()[:16]
    for name, content in files.items():
        if not (folder / name).exists():
            with io.atomic_open(folder / name, "wb") as fh:
                fh.write(content)
    return folder
