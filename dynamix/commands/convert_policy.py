"""``dynamix convert-policy --trust OLD NEW``: rewrite a policy artifact saved as SB3's pickled
archive (``dynamix-policy-v1``) in the data-only format (:mod:`dynamix.rl.artifact`), with its
``.run/`` checkpoint, e.g.

    dynamix convert-policy --trust results/policies/dynamix results/policies/dynamix   # in place

Loading the old archive unpickles it, which runs whatever code it holds: ``--trust`` says you made
the file or trust where it came from, and nothing else loads one. The converted policy is checked to
hold the same tensors and to decide as the old one on random observations.
"""

from __future__ import annotations

import argparse

from dynamix.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("old", metavar="OLD", help="the pickled artifact: NAME, NAME.zip or NAME.json")
    parser.add_argument("new", metavar="NEW", help="where to write the converted one (may be OLD)")
    parser.add_argument("--trust", action="store_true",
                        help="required: OLD is unpickled, which runs any code it holds")


def main(args: argparse.Namespace) -> int:
    from dynamix.rl.artifact import artifact_paths, convert, read_meta, PICKLED
    from dynamix.rl.learn import convert_checkpoint

    if not args.trust:
        raise UserError(f"loading {args.old} unpickles it, which runs any code it holds: pass --trust if you "
                        "made it or trust where it came from")
    old_zip, _ = read_meta(args.old, formats=(PICKLED,))
    new_zip = convert(old_zip, args.new)
    converted = convert_checkpoint(old_zip.with_suffix(".run"), artifact_paths(args.new)[0].with_suffix(".run"))
    print(f"policy {new_zip}{' and its checkpoint' if converted else ''} converted")
    return 0
