"""``dynamix launch``: build and run the ``torchrun`` command for the distributed engine (usage,
multi-node rendezvous and restarts: :mod:`dynamix.engine.launch`).

Every input is checked before torchrun starts, and ``OUT`` holds one run (:mod:`dynamix.rundir`):
the same command again resumes it from ``OUT/checkpoint.pt``; another run there needs ``--force``.
"""

from __future__ import annotations

import argparse
import os
import signal
from pathlib import Path

from dynamix import cluster as cluster_mod
from dynamix import config as config_mod
from dynamix import rundir
from dynamix.commands.options import add_config_arguments, add_out_arguments, cluster_id, policy_id
from dynamix.engine.launch import (build_torchrun_command, check_address, check_launch, parse_sizes, prepare,
                                   run_netns, start_torchrun, world_size)
from dynamix.policies.base import make_live_policy


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--nproc", type=int, help="worker processes (default: engine.world_size); with "
                        "--nnodes > 1: processes on this node")
    parser.add_argument("--arch", choices=("ring", "ps"), help="synchronisation (default: engine.arch)")
    parser.add_argument("--cluster", help="cluster spec YAML for heterogeneity emulation, or 'none' "
                        "(default: engine.cluster)")
    parser.add_argument("--policy", help="batch-size policy spec (default: policy.spec)")
    parser.add_argument("--arbitrator", metavar="HOST:PORT", help="ask a gRPC arbitrator instead of a local policy")
    parser.add_argument("--initial", help="initial per-worker batch sizes, comma-separated")
    add_out_arguments(parser, "output folder (runs.csv, summary.json, checkpoint.pt)")
    parser.add_argument("--max-restarts", type=int, default=0, help="torchrun restarts after a rank fails")
    parser.add_argument("--nnodes", type=int, default=1, help="machines (multi-node rendezvous)")
    parser.add_argument("--node-rank", type=int, default=0, help="this machine's index, 0..nnodes-1")
    parser.add_argument("--rdzv-endpoint", help="HOST:PORT of the c10d rendezvous (multi-node)")
    parser.add_argument("--rdzv-id", default="dynamix", help="rendezvous id shared by the nodes of one run")
    parser.add_argument("--dry-run", action="store_true", help="print the torchrun command and exit")


def run_until_done(cmd: list[str], out: Path) -> int:
    """Run torchrun in its own process group, named in ``out``'s lock while it runs
    (:func:`dynamix.rundir.record_group`); on Ctrl-C pass it on to the group and wait for torchrun to
    stop its ranks and clean up rather than kill it (``subprocess.run`` would)."""
    proc = start_torchrun(cmd)
    rundir.record_group(out, proc.pid)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait()
        raise
    finally:
        if proc.poll() is not None:  # a rank that outlived torchrun keeps the folder refused
            rundir.record_group(out, proc.pid if rundir.group_alive(proc.pid) else None)


def main(args: argparse.Namespace) -> int:
    out = rundir.out_path(args.out)
    overrides = list(args.overrides)
    if args.arch:
        overrides.append(f"engine.arch={args.arch}")
    cfg = config_mod.load(args.params, args.profile, overrides)
    nproc = cfg.engine.world_size if args.nproc is None else args.nproc
    initial = parse_sizes(args.initial)
    spec_arg = args.cluster if args.cluster is not None else cfg.engine.cluster
    spec = None if spec_arg in ("", "none") else cluster_mod.load(spec_arg)
    check_launch(cfg, nproc, initial, args.max_restarts, args.nnodes, args.node_rank, spec)
    if args.rdzv_endpoint:
        check_address("--rdzv-endpoint", args.rdzv_endpoint)
    if args.arbitrator:
        policy = f"arbitrator:{check_address('--arbitrator', args.arbitrator)}"
    else:
        policy = policy_id(make_live_policy(args.policy or cfg.policy.spec, bounds=cfg.batch))
    from dynamix.engine.worker import check_gpu_ranks  # torch.distributed: loaded once the rest passed

    procs = world_size(cfg, nproc) if args.nnodes == 1 else nproc  # this node's ranks, servers included
    check_gpu_ranks(cfg, procs)  # last: a GPU-count mismatch is only worth fixing once the rest holds
    ident = rundir.identity("launch", policy=policy, cluster=cluster_id(spec) if spec else "none",
                            seed=cfg.train.seed, config=cfg.to_dict(), nproc=nproc, nnodes=args.nnodes,
                            initial=list(initial) if initial else None)
    if args.dry_run:
        print(" ".join(build_torchrun_command(out / "config.json", out, procs, policy_spec=args.policy,
                                              arbitrator=args.arbitrator, initial_sizes=initial,
                                              max_restarts=args.max_restarts, nnodes=args.nnodes,
                                              node_rank=args.node_rank, rdzv_endpoint=args.rdzv_endpoint,
                                              rdzv_id=args.rdzv_id, progress=True)))
        return 0
    rundir.claim(out, ident, args.force)
    if cfg.engine.net_mode == "netns":
        rc = run_netns(cfg, spec, args.policy, out, nproc, arbitrator=args.arbitrator, initial_sizes=initial)
    else:
        cfg_path, spec_path = prepare(cfg, out, spec)
        cmd = build_torchrun_command(cfg_path, out, procs, spec_path=spec_path, policy_spec=args.policy,
                                     arbitrator=args.arbitrator, initial_sizes=initial,
                                     max_restarts=args.max_restarts, nnodes=args.nnodes, node_rank=args.node_rank,
                                     rdzv_endpoint=args.rdzv_endpoint, rdzv_id=args.rdzv_id, progress=True)
        rc = run_until_done(cmd, out)
    if rc == 0 and (out / "summary.json").exists():
        rundir.finish(out)
        print((out / "summary.json").read_text())
    return rc
