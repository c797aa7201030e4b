"""``dynamix make-mini``: rebuild the embedded subset ``data/cifar10-mini.tar.gz`` (see data/README.md)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from dynamix import paths


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--source", required=True, help="full CIFAR-10, ImageFolder directory or .tar.gz")
    parser.add_argument("--out", default=str(paths.EMBEDDED_CIFAR10))
    parser.add_argument("--train-per-class", type=int, default=1000)
    parser.add_argument("--test-per-class", type=int, default=200)


def main(args: argparse.Namespace) -> int:
    from dynamix.data.embed import make_mini

    counts = make_mini(Path(args.source), Path(args.out), args.train_per_class, args.test_per_class)
    print(json.dumps(counts, indent=2))
    return 0
