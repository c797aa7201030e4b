"""The command line both file generators share (``tools/dvcgen.py``, ``tools/paramsgen.py``): write the
file, or with ``--check`` exit 1 and show the difference when the committed file is not what the
generator writes."""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path
from typing import Callable


def main(argv: list[str] | None, target: Path, render: Callable[[str], str], tool: str, make: str,
         doc: str) -> int:
    """``render(current text)`` written to ``target``; ``tool`` and ``make`` name the generator and its
    make target in the stale-file message."""
    parser = argparse.ArgumentParser(prog=f"python -m tools.{tool}", description=doc.splitlines()[0])
    parser.add_argument("--check", action="store_true", help=f"exit 1 when {target.name} differs from its output")
    args = parser.parse_args(argv)
    now = target.read_text()
    text = render(now)
    if args.check:
        if now == text:
            return 0
        diff = difflib.unified_diff(now.splitlines(), text.splitlines(), target.name, f"tools/{tool}.py",
                                    lineterm="", n=1)
        print("\n".join(list(diff)[:40]), file=sys.stderr)
        print(f"{target.name} is stale: run `make {make}` (python -m tools.{tool})", file=sys.stderr)
        return 1
    target.write_text(text)
    print(target)
    return 0
