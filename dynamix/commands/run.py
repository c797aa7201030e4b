"""``dynamix run EXPERIMENT --profile P --out DIR``: one experiment, as its notebook runs it.

Examples::

    dynamix run baselines --profile smoke --out /tmp/results/baselines
    dynamix run inference --profile default          # -> results/inference, figures in results/figures/
    dynamix run claims --set experiments.seeds=5

The experiment reads earlier stages' outputs beside ``--out`` (its parent is the results root).
"""

from __future__ import annotations

import argparse
import json

from dynamix import config, paths
from dynamix.rundir import out_path
from dynamix.cli import add_config_arguments
from dynamix.experiments import EXPERIMENTS, get


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("experiment", choices=list(EXPERIMENTS), help="which experiment")
    add_config_arguments(parser)
    parser.add_argument("--out", default=None, help="output folder (default: results/EXPERIMENT)")
    parser.add_argument("--no-figures", action="store_true", help="skip drawing the figures")


def main(args: argparse.Namespace) -> int:
    cfg = config.load(args.params, args.profile, args.overrides)
    out_dir = paths.resolve(out_path(args.out)) if args.out is not None else paths.RESULTS / args.experiment
    module = get(args.experiment)
    summary = module.run(cfg, out_dir)
    if not args.no_figures:
        figures = module.figures(out_dir, out_dir.parent / "figures" / args.experiment)
        summary = {**summary, "figures": [str(f) for f in figures]}
    print(json.dumps(summary, indent=2, default=str))
    return 0
