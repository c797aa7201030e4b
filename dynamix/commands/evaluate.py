"""``dynamix evaluate``: run policies on cluster specs over seeds; per-window runs and a summary.

    dynamix evaluate --cluster clusters/heldout/hetero-speed-4.yaml --policy dynamix:dynamix \\
        --policy static:64 --policy lbbsp --seeds 3 --out results/eval/heldout

Writes ``OUT/runs.csv`` and ``OUT/summary.csv`` (:func:`dynamix.evaluation.runner.evaluate`; the
protocol, target accuracy and budgets: :mod:`dynamix.evaluation`), prints the median time to target,
final accuracy and total time per cluster and policy, and with ``--compare POLICY`` that policy's
ratios against the static median, LB-BSP and GNS (also in ``OUT/compare.csv``). ``OUT`` holds one
evaluation (:mod:`dynamix.rundir`): the same command again resumes it from its run cache; another one
there needs ``--force``.
"""

from __future__ import annotations

import argparse

import pandas as pd

from dynamix import cluster as clusters
from dynamix import config, io, rundir
from dynamix.commands.options import add_config_arguments, add_out_arguments, add_progress_argument, cluster_id, policy_id
from dynamix.config import ConfigError
from dynamix.evaluation.budget import BUDGETS
from dynamix.evaluation.compare import compare
from dynamix.evaluation.runner import evaluate
from dynamix.policies.base import BatchSizePolicy, PolicySpec, make_policy


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--cluster", action="append", required=True, help="cluster spec YAML (repeatable)")
    parser.add_argument("--policy", action="append", required=True, help="policy spec, e.g. static:64, lbbsp, "
                        "dynamix:results/policies/NAME.zip (repeatable)")
    parser.add_argument("--seeds", type=int, default=3, help="run seeds 0..N-1 (default 3)")
    parser.add_argument("--target-accuracy", type=float, default=None,
                        help="fixed target test accuracy (default: evaluation.target_accuracy, 0 = derived "
                             "per cluster)")
    parser.add_argument("--budget", choices=BUDGETS, default=None,
                        help="every run gets the same virtual time (time) or the same epochs (epochs); "
                        "default: evaluation.budget")
    parser.add_argument("--compare", default=None, metavar="POLICY",
                        help="also print POLICY's time-to-target ratios against the static median, lbbsp, gns")
    add_out_arguments(parser, "output folder for runs.csv and summary.csv")
    parser.add_argument("--cache", default=None, help="finished-run cache, shareable between processes "
                        "(default: OUT/cache)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="simulations in parallel, one torch thread each (default 1: in-process)")
    add_progress_argument(parser)


def check_target(value: float | None) -> float | None:
    """``--target-accuracy``: a test accuracy in (0, 1] (unset: ``evaluation.target_accuracy``)."""
    if value is not None and not 0.0 < value <= 1.0:  # NaN fails both comparisons
        raise ConfigError(f"--target-accuracy = {value!r} is out of range: must be in (0, 1]")
    return value


def checked_policy(text: str, bounds: config.BatchConfig) -> tuple[PolicySpec, BatchSizePolicy]:
    """``--policy TEXT`` parsed and made, refused when ``bounds`` would reject its sizes."""
    spec = PolicySpec.parse(text)
    return spec, make_policy(spec, bounds=bounds)


def compared_policy(text: str, made: dict[PolicySpec, BatchSizePolicy]) -> BatchSizePolicy:
    """``--compare``'s policy, checked before any run: the evaluated one of that spec when it is among
    them, so its artifact is not read again."""
    spec = PolicySpec.parse(text)
    return made[spec] if spec in made else make_policy(spec)


def main(args: argparse.Namespace) -> int:
    out = rundir.out_path(args.out)
    cfg = config.load(args.params, args.profile, args.overrides)
    target = check_target(args.target_accuracy)
    config.check_value("--seeds", args.seeds, config.rng(1, 1000))
    config.check_value("--jobs", args.jobs, config.rng(1, 256))
    specs = [clusters.load(c) for c in args.cluster]
    made = [checked_policy(p, cfg.batch) for p in args.policy]  # (spec, policy) in the order given
    policies = [policy for _, policy in made]
    for option, names in (("--cluster", [s.name for s in specs]), ("--policy", [p.name for p in policies])):
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:  # each would be run and counted twice under one label
            raise ConfigError(f"{option} names {config.clip(', '.join(twice))} more than once: give each once")
    by_spec = dict(made)  # evaluate runs these: a trained policy's artifact is read once
    compared = compared_policy(args.compare, by_spec) if args.compare else None
    ident = rundir.identity("evaluate", policy=[policy_id(p) for p in policies], cluster=[cluster_id(s) for s in specs],
                            seed=args.seeds, config=cfg.to_dict(), target_accuracy=target, budget=args.budget)
    rundir.claim(out, ident, args.force)
    _, summary = evaluate(specs, list(by_spec), cfg, args.seeds, out, target, progress=not args.no_progress,
                          cache_dir=args.cache, budget=args.budget, jobs=args.jobs, policies=by_spec)
    rundir.finish(out)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(summary.groupby(["cluster", "policy"])[["time_to_target_s", "final_accuracy", "total_time_s"]]
              .median().round(3).to_string())
        if compared is not None:
            table = compare(summary, compared.name)
            io.write_csv(table, out / "compare.csv")
            print(table.round(3).to_string(index=False))
    return 0
