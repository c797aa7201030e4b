"""``dynamix train``: single-process training, e.g.

    dynamix train --model tiny-cnn --dataset cifar10-mini --batch-size 64 --epochs 5 --out results/train/tiny

Datasets: ``cifar10-mini`` (the embedded subset), ``cifar10`` (a local ImageFolder directory or
.tar.gz from ``--data-path``, ``$DYNAMIX_CIFAR10`` or ``data.path``), ``cifar10-download``
(torchvision's download). Any other params.yaml value: ``--set section.key=value``.
"""

from __future__ import annotations

import argparse
import json

from dynamix import config, rundir
from dynamix.commands.options import add_config_arguments, add_out_arguments, add_progress_argument
from dynamix.models import REGISTRY

DATASETS = {
    "cifar10-mini": {"source": "embedded"},
    "cifar10": {"source": "path"},
    "cifar10-download": {"source": "torchvision"},
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--model", choices=sorted(REGISTRY), help="model (default: model.name)")
    parser.add_argument("--width", type=float, help="channel multiplier (default: model.width)")
    parser.add_argument("--dataset", choices=sorted(DATASETS), help="data source (default: data.source)")
    parser.add_argument("--data-path", help="ImageFolder directory or .tar.gz for --dataset cifar10")
    parser.add_argument("--batch-size", type=int, help="batch size (default: train.batch_size)")
    parser.add_argument("--epochs", type=float, help="epochs (default: train.epochs)")
    parser.add_argument("--optimizer", choices=["sgd", "adam"], help="default: optim.name")
    parser.add_argument("--lr", type=float, help="learning rate (default: optim.lr)")
    parser.add_argument("--seed", type=int, help="default: train.seed")
    add_out_arguments(parser, "output folder (resumes if it holds a checkpoint)")
    add_progress_argument(parser)


def overrides_from(args: argparse.Namespace) -> dict:
    """The CLI flags as a nested override mapping (unset flags leave params.yaml in force)."""
    o: dict = {}

    def put(section: str, key: str, value) -> None:
        if value is not None:
            o.setdefault(section, {})[key] = value

    put("model", "name", args.model)
    put("model", "width", args.width)
    if args.dataset:
        o.setdefault("data", {}).update(DATASETS[args.dataset])
    put("data", "path", args.data_path)
    put("train", "batch_size", args.batch_size)
    put("train", "epochs", args.epochs)
    put("optim", "name", args.optimizer)
    put("optim", "lr", args.lr)
    put("train", "seed", args.seed)
    for text in args.overrides:
        o = config.deep_merge(o, config.parse_override(text))
    return o


def main(args: argparse.Namespace) -> int:
    from dynamix.train.loop import run_training

    out = rundir.out_path(args.out)
    cfg = config.load(args.params, args.profile, overrides_from(args))
    ident = rundir.identity("train", policy=f"static:{cfg.train.batch_size}", cluster="none", seed=cfg.train.seed,
                            config=cfg.to_dict())
    rundir.claim(out, ident, args.force)
    summary = run_training(cfg, out, progress=not args.no_progress)
    rundir.finish(out)
    print(json.dumps(summary, indent=2))
    return 0
