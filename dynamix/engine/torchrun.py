"""``python -m dynamix.engine.torchrun ARGS``: ``torchrun`` (:mod:`torch.distributed.run`, same arguments)
whose failure is one line.

When its ranks fail beyond ``--max-restarts``, torchrun ends with its own traceback and a box per
failed rank; here the ranks have already said why in one line each (:mod:`dynamix.engine.__main__`),
so this prints one more, naming the first failed rank, how it ended and the restarts spent, and exits
with status 1. Ctrl-C ends it with status 130 and no traceback. torchrun's temporary log folders
(``torchelastic_*``) go to a private temporary folder removed when it ends.
"""

from __future__ import annotations

import sys
import tempfile

from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.run import parse_args, run


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    with tempfile.TemporaryDirectory(prefix="dynamix-torchrun-") as tmp:
        tempfile.tempdir = tmp
        try:
            return launch(args)
        finally:
            tempfile.tempdir = None


def launch(args) -> int:
    """torchrun's ``run(args)``; its end as an exit status and at most one line."""
    try:
        run(args)
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()
        how = f"signal {failure.signal_name()}" if failure.exitcode < 0 else f"exit status {failure.exitcode}"
        print(f"dynamix launch: error: rank {rank} ended with {how}, and the {args.max_restarts} restart(s) "
              "allowed by --max-restarts are spent; the same command resumes from the last checkpoint",
              file=sys.stderr)
        return 1
    except (KeyboardInterrupt, SignalException):
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
