"""``dynamix pipeline --profile P``: every notebook of the pipeline in order, for a profile DVC does not track.

Examples::

    dynamix pipeline --profile cpu                        # -> results/profiles/cpu; again: carries on
    dynamix pipeline --profile cpu --stages claims        # one stage again, on the earlier stages' outputs
    dynamix pipeline --profile cpu --publish              # copy the headline files to docs/expected/cpu

See :mod:`dynamix.experiments.pipeline`. ``dvc repro`` remains the way to run the default profile.
"""

from __future__ import annotations

import argparse

from dynamix import config, paths
from dynamix.rundir import out_path
from dynamix.experiments.pipeline import STAGES, default_root, publish, run_pipeline


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", required=True, help="a profile of params.yaml, e.g. cpu")
    parser.add_argument("--params", default="params.yaml", help="the configuration file (default params.yaml)")
    parser.add_argument("--results", default=None, help="results root (default results/profiles/PROFILE)")
    parser.add_argument("--stages", nargs="+", default=None, metavar="STAGE",
                        help=f"run these stages again (of {', '.join(STAGES)}); default: every stage not yet "
                             "complete under the profile's settings (stage_times.csv)")
    parser.add_argument("--publish", action="store_true",
                        help="copy the finished pipeline's headline files and figures to docs/expected/PROFILE "
                             "(alone: publish only; with --stages: after running them)")


def main(args: argparse.Namespace) -> int:
    config.load(args.params, args.profile)  # a bad profile or value fails here, before any notebook runs
    root = paths.resolve(out_path(args.results, "--results")) if args.results is not None else default_root(args.profile)
    if args.stages or not args.publish:
        run_pipeline(args.profile, root, args.stages, log_output=True)
    if args.publish:
        for path in publish(args.profile, root):
            print(path)
    return 0
