"""``dynamix prepare-data``: decode the configured CIFAR-10 source into the tensor cache.

Writes ``--summary`` (JSON: source, per-class counts, load times) so DVC has a small, reviewable
output; the decoded tensors live in ``data/cache/`` (git-ignored).
"""

from __future__ import annotations

import argparse
import json
import time

from dynamix import config, io
from dynamix.commands.options import add_config_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--summary", default=None, help="write a JSON summary here")


def main(args: argparse.Namespace) -> int:
    from dynamix.data import CLASSES, load_cifar10

    cfg = config.load(args.params, args.profile, args.overrides)
    t0 = time.perf_counter()
    data = load_cifar10(cfg.data)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    load_cifar10(cfg.data)
    cached = time.perf_counter() - t0
    summary = {
        "source": data.source, "classes": list(CLASSES),
        "train_images": len(data.train_y), "test_images": len(data.test_y),
        "train_per_class": data.counts("train"), "test_per_class": data.counts("test"),
        "first_load_s": round(first, 3), "cached_load_s": round(cached, 3),
    }  # fmt: skip
    if args.summary:
        io.write_text(args.summary, json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0
