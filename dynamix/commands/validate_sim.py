"""``dynamix validate-sim``: the simulator's predicted iteration time against the real engine, e.g.

    dynamix validate-sim --out results/validation
    dynamix validate-sim --batch-size 128 --iters 60 --set model.name=resnet8 --out /tmp/val

Prints the table (also in ``OUT/validation.csv``); the acceptance bar is |error_pct| <= 15.
"""

from __future__ import annotations

import argparse

from dynamix import config
from dynamix.commands.options import add_config_arguments
from dynamix.rundir import lock, out_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--batch-size", type=int, default=64,
                        help="static per-worker batch size (default 64)")
    parser.add_argument("--iters", type=int, default=40, help="iterations per run (default 40)")
    parser.add_argument("--window", type=int, default=10, help="iterations per window; the first is warm-up")
    parser.add_argument("--out", required=True, help="output folder (engine and sim runs, validation.csv)")


def main(args: argparse.Namespace) -> int:
    from dynamix.evaluation.validate_sim import default_cases, validate

    cfg = config.load(args.params, args.profile, args.overrides)
    lock(out_path(args.out))
    table = validate(cfg, out_path(args.out), default_cases(args.batch_size), args.iters, args.window)
    cols = ["case", "n_workers", "slowest_speed", "batch_size", "measured_iter_ms", "predicted_iter_ms",
            "error_pct", "within_tolerance"]
    print(table[cols].to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    return 0
