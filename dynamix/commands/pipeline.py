"""``dynamix pipeline --profile P``: every notebook of the pipeline in order, for a profile DVC does not track.

Examples::

    dynamix pipeline --profile cpu                        # -> results/profiles/cpu; again: carries on
    dynamix pipeline --profile cpu --stages claims        # one stage again, on the earlier stages' outputs
    dynamix pipeline --profile cpu --publish              # copy the headline files to docs/expected/cpu

See :mod:`dynamix.pipeline.runner` and :mod:`dynamix.pipeline.publish`. ``dvc repro`` remains the way
to run the default profile. The notebooks read the repository's ``params.yaml`` (the file DVC tracks),
so ``--params`` may name no other file; the results root is held for the whole run
(:func:`dynamix.rundir.lock`).
"""

from __future__ import annotations

import argparse

from pathlib import Path

from dynamix import config, paths, rundir
from dynamix.pipeline.publish import publish
from dynamix.pipeline.runner import STAGES, default_root, run_pipeline


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", required=True, help="a profile of params.yaml, e.g. cpu")
    parser.add_argument("--params", default=None, help="the configuration file: only the repository's params.yaml, "
                        "which the notebooks read")
    parser.add_argument("--results", default=None, help="results root (default results/profiles/PROFILE)")
    parser.add_argument("--stages", nargs="+", default=None, metavar="STAGE",
                        help=f"run these stages again (of {', '.join(STAGES)}); default: every stage not yet "
                             "complete under the profile's settings (stage_times.csv)")
    parser.add_argument("--publish", action="store_true",
                        help="copy the finished pipeline's headline files and figures to docs/expected/PROFILE "
                             "(alone: publish only; with --stages: after running them)")


def main(args: argparse.Namespace) -> int:
    if args.params is not None and Path(args.params).absolute().resolve() != paths.PARAMS.resolve():
        raise config.ConfigError(f"--params {config.clip(args.params)}: the pipeline's notebooks read {paths.PARAMS}, "
                                 "so it runs no other file: put the profile there")
    config.load(None, args.profile)  # a bad profile or value fails here, before any notebook runs
    root = rundir.out_path(args.results, "--results").absolute() if args.results is not None else \
        default_root(args.profile)
    rundir.lock(root, "--results")
    if args.stages or not args.publish:
        run_pipeline(args.profile, root, args.stages, log_output=True)
    if args.publish:
        for path in publish(args.profile, root):
            print(path)
    return 0
