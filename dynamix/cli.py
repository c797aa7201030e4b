"""``dynamix <command>``: one console script; each subcommand lives in its own module.

Every module listed in :data:`COMMANDS` exposes ``add_arguments(parser)`` and ``main(args) -> int``;
it is imported only when its command runs, so ``dynamix --help`` stays fast. Add a command by adding
one line here.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    # name: (module, one-line help)
    "train": ("dynamix.train.cli", "single-process training with a static batch size"),
    "prepare-data": ("dynamix.data.cli", "decode the configured CIFAR-10 source into the tensor cache"),
    "make-mini": ("dynamix.data.cli_mini", "build the embedded class-balanced subset from a full set"),
    "calibrate": ("dynamix.sim.cli_calibrate", "fit the compute cost t(b) = a + c b on this machine"),
    "simulate": ("dynamix.sim.cli_simulate", "train on a virtual cluster: real learning, modelled time"),
    "validate-sim": ("dynamix.sim.cli_validate", "simulator vs engine: predicted and measured iteration times"),
    "run": ("dynamix.experiments.cli", "run one experiment (a notebook's computation) and draw its figures"),
    "arbitrator": ("dynamix.rpc.cli", "serve batch-size decisions to distributed workers over gRPC"),
    "launch": ("dynamix.engine.launch", "train on torch.distributed workers (torchrun): ring or parameter server"),
    "train-policy": ("dynamix.rl.train", "train the DYNAMIX PPO agent on randomised virtual clusters"),
    "sample-clusters": ("dynamix.rl.cli_sample", "write cluster specs drawn from the agent's training distribution"),
    "evaluate": ("dynamix.rl.evaluate", "run policies on cluster specs: runs.csv + summary.csv (time to target)"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dynamix", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (_module, help_) in COMMANDS.items():
        sub.add_parser(name, help=help_, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``dynamix COMMAND [ARGS]``: the command comes first, its module parses the rest."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] not in COMMANDS:
        build_parser().parse_args(argv)  # prints usage or the unknown-command error, exits
        return 2
    name, rest = argv[0], argv[1:]
    module = importlib.import_module(COMMANDS[name][0])
    parser = argparse.ArgumentParser(prog=f"dynamix {name}", description=COMMANDS[name][1])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    module.add_arguments(parser)
    args = parser.parse_args(rest)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    return int(module.main(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
