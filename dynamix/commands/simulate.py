"""``dynamix simulate``: one virtual-time training run, e.g.

    dynamix simulate --cluster clusters/mixed-gpu.yaml --policy static:64 --profile smoke \\
        --out results/tmp/sim
    dynamix simulate --cluster clusters/scale-128.yaml --policy static:32 --set model.name=mlp --out /tmp/s128

Writes ``OUT/runs.csv`` (columns ``dynamix.metrics.schema.RUNS_COLUMNS``) and prints a one-line
summary (windows, iterations, virtual seconds, last test accuracy). ``OUT`` holds one run
(:mod:`dynamix.rundir`): the same command again reruns it from the start, saying so after an
interruption (the simulator keeps no checkpoint; the same seed gives the same ``runs.csv``); another
run there needs ``--force``.
"""

from __future__ import annotations

import argparse
import json
import logging

from dynamix import cluster as clusters
from dynamix import config, rundir
from dynamix.commands.options import add_config_arguments, add_out_arguments, add_progress_argument, cluster_id, policy_id
from dynamix.policies.base import make_policy

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--cluster", required=True,
                        help="cluster spec YAML (see clusters/ and docs/clusters.md)")
    parser.add_argument("--policy", default=None, help="policy spec, e.g. static:64 (default: policy.spec)")
    parser.add_argument("--seed", type=int, default=None, help="run seed (default: train.seed)")
    add_out_arguments(parser, "output folder for runs.csv")
    add_progress_argument(parser)


def main(args: argparse.Namespace) -> int:
    from dynamix.sim.run import simulate

    out = rundir.out_path(args.out)
    cfg = config.load(args.params, args.profile, args.overrides)
    spec = clusters.load(args.cluster)
    policy = make_policy(args.policy or cfg.policy.spec, bounds=cfg.batch)
    seed = cfg.train.seed if args.seed is None else config.check_value("--seed", args.seed, config.SEED)
    ident = rundir.identity("simulate", policy=policy_id(policy), cluster=cluster_id(spec), seed=seed,
                            config=cfg.to_dict())
    interrupted = rundir.status(out) == "running"
    rundir.claim(out, ident, args.force)
    if interrupted:
        log.info("%s held an interrupted run: the simulator keeps no checkpoint, so this one starts from "
                 "iteration 0", out)
    frame = simulate(spec, cfg, policy, seed, out_dir=out, progress=not args.no_progress)
    rundir.finish(out)
    last = frame.iloc[-1]
    print(json.dumps({
        "runs_csv": f"{args.out}/runs.csv", "windows": int(frame["window"].nunique()),
        "iterations": int(last["iteration"]), "virtual_s": float(last["elapsed_s"]),
        "test_acc": float(last["test_acc"]), "mean_iter_time_ms": float(frame["iter_time_ms"].mean()),
    }))
    return 0
