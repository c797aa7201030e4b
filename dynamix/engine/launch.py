"""Build and run the ``torchrun`` command for the distributed engine (``dynamix launch``,
:mod:`dynamix.commands.launch`).

Single machine (N worker processes; ``--arch ps`` adds ``engine.num_servers`` server processes)::

    dynamix launch --nproc 4 --cluster clusters/engine-straggler-4.yaml --policy static:64 \\
        --out results/engine/demo --set train.max_iters=200

Several machines: run the same command on every node with torchrun's standard rendezvous arguments;
``--nproc`` is then the processes per node (servers included) and the last ``engine.num_servers``
ranks are the servers::

    dynamix launch --nnodes 2 --node-rank 0 --nproc 2 --rdzv-endpoint HOST0:29400 --rdzv-id run1 ...
    dynamix launch --nnodes 2 --node-rank 1 --nproc 2 --rdzv-endpoint HOST0:29400 --rdzv-id run1 ...

(``--out`` must be on a file system every node sees when checkpoints are used: every rank reads the
checkpoint on restart.) ``--max-restarts R`` lets torchrun restart the whole group after a rank dies;
it resumes from ``OUT/checkpoint.pt``.

The resolved config is written to ``OUT/config.json`` (and the cluster spec to ``OUT/cluster.yaml``),
which the ranks read (``python -m dynamix.engine``), so every rank trains the same configuration.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import yaml

from dynamix import cluster as cluster_mod
from dynamix import config as config_mod
from dynamix.config import Config, ConfigError

log = logging.getLogger(__name__)


def world_size(cfg: Config, nproc: int) -> int:
    """Processes for ``nproc`` workers: parameter servers are extra processes."""
    return nproc + (cfg.engine.num_servers if cfg.engine.arch == "ps" else 0)


def prepare(cfg: Config, out_dir: str | Path, spec: cluster_mod.ClusterSpec | None) -> tuple[Path, Path | None]:
    """Write OUT/config.json (and OUT/cluster.yaml): what every rank reads."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg_path = out / "config.json"
    cfg_path.write_text(json.dumps(cfg.to_dict(), indent=2, default=list) + "\n")
    spec_path = None
    if spec is not None:
        spec_path = out / "cluster.yaml"
        spec_path.write_text(yaml.safe_dump(cluster_mod.to_yaml_dict(spec), sort_keys=False))
    return cfg_path, spec_path


def launch_env() -> dict[str, str]:
    """Environment for torchrun: one OpenMP thread per rank unless set, and a fresh c10d store per
    restart. Sharing torchrun's rendezvous store with the workers (the default since torch 2.5) leaves
    the previous attempt's gloo addresses in it, so restarted ranks fail with "connectFullMesh ...
    Connection refused" (pytorch/pytorch#135712); TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 avoids it.
    torchrun's own warnings (LOGLEVEL) are off unless set: a failure is its ERROR line and ours."""
    return {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", "LOGLEVEL": os.environ.get("LOGLEVEL", "ERROR")}


def start_torchrun(cmd: list[str]) -> subprocess.Popen:
    """Start torchrun as the leader of its own process group (its ranks join it), which the kernel
    sends SIGTERM (torchrun then stops its ranks) when this process dies, even by SIGKILL: a killed
    launch leaves no rank training into its folder. The parent-death signal is set by util-linux's
    ``setpriv --pdeathsig TERM`` exec'ing torchrun (it survives the exec), not by Python code in the
    forked child: with a ``preexec_fn`` CPython runs the at-fork handlers in the child, and gRPC's
    (the local arbitrator's server threads in this process) aborted the child. Without ``setpriv``
    (not Linux) there is no parent-death signal; the group record in the folder's lock still refuses
    a second writer."""
    setpriv = shutil.which("setpriv")
    if setpriv:
        cmd = [setpriv, "--pdeathsig", "TERM", *cmd]
    return subprocess.Popen(cmd, env=launch_env(), start_new_session=True)


def engine_args(cfg_path: Path, out_dir: Path, *, spec_path: Path | None = None, policy_spec: str | None = None,
                arbitrator: str | None = None, initial_sizes: tuple[int, ...] | None = None,
                progress: bool = False) -> list[str]:
    """``-m dynamix.engine ...``: the per-rank program and its arguments."""
    args = ["-m", "dynamix.engine", "--config", str(cfg_path), "--out", str(out_dir)]
    if spec_path is not None:
        args += ["--cluster", str(spec_path)]
    if policy_spec:
        args += ["--policy", policy_spec]
    if arbitrator:
        args += ["--arbitrator", arbitrator]
    if initial_sizes:
        args += ["--initial", ",".join(str(b) for b in initial_sizes)]
    if progress:
        args += ["--progress"]
    return args


def build_torchrun_command(cfg_path: Path, out_dir: Path, nproc: int, *, spec_path: Path | None = None,
                           policy_spec: str | None = None, arbitrator: str | None = None,
                           initial_sizes: tuple[int, ...] | None = None, max_restarts: int = 0,
                           nnodes: int = 1, node_rank: int = 0, rdzv_endpoint: str | None = None,
                           rdzv_id: str = "dynamix", progress: bool = False) -> list[str]:
    """The torchrun command line (``nproc`` processes on this node)."""
    cmd = [sys.executable, "-m", "dynamix.engine.torchrun", f"--nproc-per-node={nproc}",
           f"--max-restarts={max_restarts}"]
    if nnodes > 1:
        if not rdzv_endpoint:
            raise ConfigError("--rdzv-endpoint HOST:PORT is required with --nnodes > 1")
        cmd += [f"--nnodes={nnodes}", f"--node-rank={node_rank}", "--rdzv-backend=c10d",
                f"--rdzv-endpoint={rdzv_endpoint}", f"--rdzv-id={rdzv_id}"]
    else:
        cmd += ["--standalone"]
    return cmd + engine_args(cfg_path, out_dir, spec_path=spec_path, policy_spec=policy_spec, arbitrator=arbitrator,
                             initial_sizes=initial_sizes, progress=progress)


def run_netns(cfg: Config, spec: cluster_mod.ClusterSpec | None, policy_spec: str | None, out_dir: str | Path,
              nproc: int, *, arbitrator: str | None = None, initial_sizes: tuple[int, ...] | None = None,
              timeout_s: float = 3600.0) -> int:
    """``engine.net_mode: netns``: every rank in its own shaped network namespace (root; see netns.py)."""
    from dynamix.engine.netns import NetnsCluster, run_ranks

    if spec is None:
        raise ConfigError("engine.net_mode = 'netns' needs a cluster spec (--cluster) for the link bandwidths")
    out = Path(out_dir)
    cfg_path, spec_path = prepare(cfg, out, spec)
    n_servers = cfg.engine.num_servers if cfg.engine.arch == "ps" else 0
    args = engine_args(cfg_path.resolve(), out.resolve(), spec_path=spec_path.resolve(), policy_spec=policy_spec,
                       arbitrator=arbitrator, initial_sizes=initial_sizes)
    with NetnsCluster.for_spec(spec, nproc, n_servers) as nc:
        run_ranks(nc, args, launch_env(), out, timeout_s)
    return 0


def _spawn_rank(rank: int, cfg_dict: dict, out_dir: str, spec: cluster_mod.ClusterSpec | None,
                policy_spec: str | None, arbitrator: str | None, initial_sizes: tuple[int, ...] | None) -> dict | None:
    from dynamix.engine.worker import Engine

    cfg = config_mod.build(Config, cfg_dict)
    return Engine(cfg, out_dir, spec, policy_spec, arbitrator, initial_sizes).run()


def run_local(cfg: Config, spec: cluster_mod.ClusterSpec | None, policy_spec: str | None, out_dir: str | Path,
              nproc: int, *, method: str = "torchrun", arbitrator: str | None = None,
              initial_sizes: tuple[int, ...] | None = None, max_restarts: int = 0,
              timeout_s: float = 3600.0, progress: bool = False) -> dict:
    """Train with ``nproc`` local workers; returns the run's summary (also in OUT/summary.json).

    ``method="torchrun"`` runs the real launcher in a subprocess (supports ``max_restarts``);
    ``method="spawn"`` starts the ranks with :func:`dynamix.engine.world.spawn_world` (tests).
    """
    out = Path(out_dir)
    if method == "spawn":
        from dynamix.engine.world import spawn_world

        out.mkdir(parents=True, exist_ok=True)
        results = spawn_world(_spawn_rank, world_size(cfg, nproc), cfg.to_dict(), str(out), spec, policy_spec,
                              arbitrator, initial_sizes, timeout_s=timeout_s)
        return results[0]
    if method != "torchrun":
        raise ValueError(f"method = {method!r} is not allowed: must be one of torchrun, spawn")
    from dynamix.engine.worker import check_gpu_ranks

    check_gpu_ranks(cfg, world_size(cfg, nproc))
    if cfg.engine.net_mode == "netns":
        run_netns(cfg, spec, policy_spec, out, nproc, arbitrator=arbitrator, initial_sizes=initial_sizes,
                  timeout_s=timeout_s)
        return json.loads((out / "summary.json").read_text())
    cfg_path, spec_path = prepare(cfg, out, spec)
    cmd = build_torchrun_command(cfg_path, out, world_size(cfg, nproc), spec_path=spec_path,
                                 policy_spec=policy_spec, arbitrator=arbitrator, initial_sizes=initial_sizes,
                                 max_restarts=max_restarts, progress=progress)
    log.info("running %s", " ".join(cmd))
    proc = start_torchrun(cmd)
    try:
        rc = proc.wait(timeout=timeout_s)
    finally:
        if proc.poll() is None:  # the timeout, or an interrupt: torchrun stops its ranks on SIGTERM
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait()
    if rc != 0:
        raise subprocess.CalledProcessError(rc, cmd)
    return json.loads((out / "summary.json").read_text())


def parse_sizes(text: str | None) -> tuple[int, ...] | None:
    """``"64,64,32"`` -> ``(64, 64, 32)``: initial per-worker batch sizes (``--initial``); None when empty."""
    if not text:
        return None
    try:
        return tuple(int(v) for v in text.split(","))
    except ValueError:
        raise ConfigError(f"--initial {text!r} must be comma-separated integers, e.g. 64,64,32") from None


def check_launch(cfg: Config, nproc: int, initial: tuple[int, ...] | None, max_restarts: int, nnodes: int,
                 node_rank: int, spec: cluster_mod.ClusterSpec | None) -> None:
    """Everything about a launch that can be checked before torchrun starts (one :class:`ConfigError`).
    What the ranks would refuse is asked here of the functions they call (the engine settings, the
    model, the cluster spec's workers), so a mistake is one line instead of one per rank."""
    from dynamix.engine.hetero import check_fits
    from dynamix.engine.worker import check_engine_config
    from dynamix.models import check_model

    check_engine_config(cfg)
    check_model(cfg.model.name, cfg.model.width)
    config_mod.check_value("--nproc", nproc, config_mod.rng(1, 4096))
    config_mod.check_value("--max-restarts", max_restarts, config_mod.rng(0, 100))
    config_mod.check_value("--nnodes", nnodes, config_mod.rng(1, 4096))
    config_mod.check_value("--node-rank", node_rank, config_mod.rng(0, nnodes - 1))
    if spec is not None and nnodes == 1:
        check_fits(spec, nproc)
    elif spec is not None and nproc + nnodes - 1 > spec.n_workers:  # each other node runs a rank at least
        need = (f"--nnodes must be in [1, {spec.n_workers}]" if nnodes > spec.n_workers
                else f"--nproc must be in [1, {spec.n_workers - nnodes + 1}]")
        raise ConfigError(f"cluster spec {spec.name!r} has {spec.n_workers} workers, fewer than the run's "
                          f"{nproc} + {nnodes - 1} worker ranks at least (--nproc on this node, one on each "
                          f"other of the --nnodes {nnodes}): {need}")
    if initial is not None:
        workers = nproc if nnodes == 1 else None
        if workers is not None and len(initial) != workers:
            raise ConfigError(f"--initial {','.join(map(str, initial))} has {len(initial)} sizes: need one per "
                              f"worker ({workers})")
        config_mod.check_value("--initial", initial, config_mod.rng(cfg.batch.min, cfg.batch.max))


def check_address(name: str, address: str) -> str:
    """A ``HOST:PORT`` option: a host and a port in [1, 65535]."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigError(f"{name} = {address!r} is not allowed: must be HOST:PORT with a port in [1, 65535]")
    return address
