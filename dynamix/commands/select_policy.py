"""``dynamix select-policy``: which of the policy_training stage's seeds ships, chosen with the real
math on the validation clusters (:mod:`dynamix.experiments.selection`), e.g.

    dynamix pipeline --profile cpu-agent --stages prepare baselines policy_training
    dynamix select-policy --profile cpu-agent          # -> results/profiles/cpu-agent/selection/
    dynamix pipeline --profile cpu-agent --stages inference claims

Prints the scores and the choice as one JSON line. Every later stage's ``dynamix`` is then the chosen
policy; delete ``selection/`` to go back to the first seed's. A profile that sets
``experiments.policy_training.select`` (``default``, ``converged``) has its selection stage make this
choice itself, right after ``policy_training``; this command makes it for any profile.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from dynamix import config
from dynamix.commands.options import add_config_arguments, add_progress_argument


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--results", default=None, metavar="DIR",
                        help="the profile's results root (default: the pipeline's, results/profiles/PROFILE)")
    add_progress_argument(parser)


def main(args: argparse.Namespace) -> int:
    from dynamix.experiments import selection
    from dynamix.pipeline.runner import default_root

    if not args.profile:
        raise config.ConfigError("--profile is required: the profile whose trained seeds to choose among")
    cfg = config.load(args.params, args.profile, args.overrides)
    root = Path(args.results) if args.results else default_root(args.profile)
    summary = selection.run(cfg, root / selection.NAME, progress=not args.no_progress, choose=True)
    print(json.dumps({k: summary[k] for k in ("ships", "scores", "missed")}))
    return 0
