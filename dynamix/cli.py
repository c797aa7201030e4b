"""``dynamix <command>``: one console script; each command is a module of :mod:`dynamix.commands`.

Every module listed in :data:`COMMANDS` exposes ``add_arguments(parser)`` and ``main(args) -> int``;
it is imported only when its command runs, so ``dynamix --help`` stays fast. Add a command by writing
``dynamix/commands/<name>.py`` and adding one line here. Options several commands share
(``--params``, ``--profile``, ``--set``, ``--no-progress``, ``--out``) are defined once, in
:mod:`dynamix.commands.options`.

A user's mistake (:class:`~dynamix.errors.UserError`, or an input file that does not exist) prints one
line, ``dynamix <command>: error: <message>``, and exits with status 2, as argparse does for a bad
option; ``-v`` prints the traceback instead. Ctrl-C stops a command with one line and exit status 130; what it
wrote stays consistent (files are written atomically, ``OUT/run.json`` says ``running``).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import traceback

from dynamix.errors import UserError

COMMANDS: dict[str, tuple[str, str]] = {
    # name: (module, one-line help)
    "train": ("dynamix.commands.train", "single-process training with a static batch size"),
    "prepare-data": ("dynamix.commands.prepare_data", "decode the configured CIFAR-10 source into the tensor cache"),
    "make-mini": ("dynamix.commands.make_mini", "build the embedded class-balanced subset from a full set"),
    "calibrate": ("dynamix.commands.calibrate", "fit the compute cost t(b) = a + c b on this machine"),
    "simulate": ("dynamix.commands.simulate", "train on a virtual cluster: real learning, modelled time"),
    "validate-sim": ("dynamix.commands.validate_sim", "simulator vs engine: predicted and measured iteration times"),
    "run": ("dynamix.commands.run", "run one experiment (a notebook's computation) and draw its figures"),
    "pipeline": ("dynamix.commands.pipeline", "every notebook in order for one profile, into its own results root"),
    "arbitrator": ("dynamix.commands.arbitrator", "serve batch-size decisions to distributed workers over gRPC"),
    "launch": ("dynamix.commands.launch", "train on torch.distributed workers (torchrun): ring or parameter server"),
    "train-policy": ("dynamix.commands.train_policy", "train the DYNAMIX PPO agent on randomised virtual clusters"),
    "sample-clusters": ("dynamix.commands.sample_clusters", "write cluster specs drawn from the agent's training distribution"),
    "sim2real": ("dynamix.commands.sim2real", "the agent, LB-BSP and the static sweep on the real engine beside the simulator"),
    "fit-surrogate": ("dynamix.commands.fit_surrogate", "fit the fast surrogate of a workload to real-math simulator runs"),
    "validate-surrogate": ("dynamix.commands.validate_surrogate", "surrogate vs real-math simulator: time to target per policy"),
    "headroom": ("dynamix.commands.headroom", "what a residual agent could gain in its training world, and what it gained"),
    "select-policy": ("dynamix.commands.select_policy", "choose the trained seed that ships, by the real math on validation clusters"),
    "convert-policy": ("dynamix.commands.convert_policy", "rewrite a trusted pickled policy artifact as data only"),
    "evaluate": ("dynamix.commands.evaluate", "run policies on cluster specs: runs.csv + summary.csv (time to target)"),
}

EXIT_USAGE = 2
"""Exit status of a user's mistake (argparse's for a bad option, and ours for a bad value or file)."""
EXIT_INTERRUPTED = 130
"""Exit status after Ctrl-C (128 + SIGINT), as a shell reports it."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dynamix", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (_module, help_) in COMMANDS.items():
        sub.add_parser(name, help=help_, add_help=False)
    return parser


MAX_ERROR = 1000
"""The longest error line printed: a message quoting a huge input is cut, never repeated whole."""

FILE_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)
"""An input path the user gave that cannot be opened: a user's mistake, like :class:`UserError`."""


def error_line(exc: BaseException) -> str:
    """The one-line message of a user's mistake; a file error names the file."""
    if isinstance(exc, FILE_ERRORS) and exc.filename is not None:
        line = f"{exc.filename}: {(exc.strerror or type(exc).__name__).lower()}"
    else:
        line = " ".join(str(exc).split()) or type(exc).__name__
    return line if len(line) <= MAX_ERROR else f"{line[:MAX_ERROR - 30]}... ({len(line):,} chars in all)"


def main(argv: list[str] | None = None) -> int:
    """Run ``dynamix COMMAND [ARGS]``: the command comes first, its module parses the rest."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] not in COMMANDS:
        build_parser().parse_args(argv)  # prints usage or the unknown-command error, exits
        return EXIT_USAGE
    name, rest = argv[0], argv[1:]
    module = importlib.import_module(COMMANDS[name][0])
    parser = argparse.ArgumentParser(prog=f"dynamix {name}", description=COMMANDS[name][1])
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="debug logging; an input error shows its traceback")
    module.add_arguments(parser)
    args = parser.parse_args(rest)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(module.main(args) or 0)
    except (UserError, *FILE_ERRORS) as exc:
        if args.verbose:
            traceback.print_exc()
        else:
            print(f"dynamix {name}: error: {error_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"dynamix {name}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        held = sys.modules.get("dynamix.rundir")  # imported by every command that holds a folder
        if held is not None:
            held.release_all()  # the output folders the command held (dynamix.rundir.lock)


if __name__ == "__main__":
    sys.exit(main())
