"""``dynamix validate-surrogate``: the surrogate's time to target against the real-math simulator's.

    dynamix validate-surrogate --profile default --out results/surrogate/validation
    dynamix validate-surrogate --policy static:64 --policy lbbsp --cluster clusters/validation/val-ps-4.yaml --out /tmp/v
    dynamix validate-surrogate --profile cpu --policy gns --per-worker 32 --per-worker 128 --out /tmp/v
    dynamix validate-surrogate --profile cpu-agent --policy lbbsp:batch=512 --real-cache results/profiles/cpu-agent/cache/runs --out /tmp/v

Needs the fitted surrogate of the profile's workload (``dynamix fit-surrogate``, or ``sim.surrogate``).
Writes ``OUT/surrogate_validation.csv`` and ``.json`` (:mod:`dynamix.evaluation.validate_surrogate`) and prints
the statistics as one JSON line. ``OUT`` holds one validation (:mod:`dynamix.rundir`): the same command
again redoes it (its runs are cached), another one there, or files it did not write, need ``--force``.
"""

from __future__ import annotations

import argparse
import json

from dynamix import config, rundir
from dynamix.commands.options import add_config_arguments, add_out_arguments, add_progress_argument

OUTPUTS = ("surrogate_validation.csv", "surrogate_validation.json", "surrogate_summary.csv", "real_summary.csv")
"""What a validation writes into ``OUT``; present without a record, they are someone else's."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    add_out_arguments(parser, "output folder")
    parser.add_argument("--policy", action="append", default=None,
                        help="policy spec (repeatable; default: the static sweep, lbbsp, lbbsp:batch=512, gns, ramp)")
    parser.add_argument("--per-worker", action="append", type=int, default=[], metavar="B",
                        help="also LB-BSP at B samples per worker on each cluster, lbbsp:batch=<B x workers> "
                             "(repeatable; with it, --policy defaults to none)")
    parser.add_argument("--cluster", action="append", default=None,
                        help="cluster spec YAML (repeatable; default: clusters/validation/*.yaml)")
    parser.add_argument("--real-cache", default=None, metavar="DIR",
                        help="where the real-math runs are cached (default OUT/cache/runs; a profile's "
                             "results/profiles/PROFILE/cache/runs reuses its runs)")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per run (default: experiments.seeds)")
    add_progress_argument(parser)


def main(args: argparse.Namespace) -> int:
    from dynamix.evaluation.validate_surrogate import VALIDATION_POLICIES, validate

    cfg = config.load(args.params, args.profile, args.overrides)
    seeds = cfg.experiments.seeds if args.seeds is None else args.seeds
    if seeds < 1:
        raise config.ConfigError(f"--seeds = {seeds} is out of range: must be >= 1")
    if any(b < 1 for b in args.per_worker):
        raise config.ConfigError(f"--per-worker = {args.per_worker} is out of range: every size must be >= 1")
    policies = args.policy or (() if args.per_worker else VALIDATION_POLICIES)
    ident = rundir.identity("validate-surrogate", policy=list(policies), cluster=list(args.cluster or ["default"]),
                            seed=cfg.train.seed, config=cfg.to_dict(), seeds=seeds, per_worker=args.per_worker,
                            real_cache=args.real_cache)
    rundir.claim(args.out, ident, args.force, outputs=OUTPUTS)
    stats = validate(cfg, args.out, policies, args.cluster, seeds, progress_bar=not args.no_progress,
                     per_worker=args.per_worker, real_cache=args.real_cache)
    rundir.finish(args.out)
    print(json.dumps({k: stats[k] for k in ("spearman", "spearman_within_clusters_mean", "median_abs_rel_error",
                                            "n", "meets_goals")}))
    return 0
