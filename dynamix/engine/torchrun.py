"""``python -m dynamix.engine.torchrun ARGS``: ``torchrun`` (:mod:`torch.distributed.run`, same arguments)
whose failure is one line.

When its ranks fail beyond ``--max-restarts``, torchrun ends with its own traceback and a box per
failed rank; here the ranks have already said why in one line each (:mod:`dynamix.engine.__main__`),
so this prints one more, naming the first failed rank, how it ended and the restarts spent, and exits
with status 1. Ctrl-C ends it with status 130 and no traceback.
"""

from __future__ import annotations

import sys

from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.run import parse_args, run


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        run(args)
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()
        how = f"signal {failure.signal_name()}" if failure.exitcode < 0 else f"exit status {failure.exitcode}"
        print(f"dynamix launch: error: rank {rank} ended with {how}, and the {args.max_restarts} restart(s) "
              "allowed by --max-restarts are spent", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, SignalException):
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
