"""``dynamix sample-clusters``: write a validation set drawn from the agent's training distribution.

    dynamix sample-clusters --profile rl-eval --n 20 --seed 1 --workers 4 5 6 --out clusters/val-random
    dynamix evaluate --profile rl-eval --cluster clusters/val-random/*.yaml --policy ... --out ...

One YAML per cluster (the same schema as ``clusters/*.yaml``), drawn by
:func:`dynamix.rl.domain.sample_set` on a seed stream training never uses; events start within the
first ``train.epochs`` epochs of the profile's data at ``batch.initial``. Select a recipe on such a
set, then report it once on ``clusters/heldout`` (docs/rl.md).
"""

from __future__ import annotations

import argparse
import logging

import yaml

from dynamix import cluster, config
from dynamix.cli import add_config_arguments
from dynamix.data import load_cifar10
from dynamix.rl.domain import sample_set
from dynamix.rundir import out_path

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--n", type=int, default=20, help="clusters to draw (default 20)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the draw (default 1)")
    parser.add_argument("--workers", type=int, nargs="+", default=None,
                        help="worker counts, cycled over the clusters (default: rl.workers)")
    parser.add_argument("--prefix", default="rand", help="cluster name prefix (default rand)")
    parser.add_argument("--out", required=True, help="folder for the YAML files (created)")


def main(args: argparse.Namespace) -> int:
    cfg = config.load(args.params, args.profile, args.overrides)
    n_train = len(load_cifar10(cfg.data).train_y)
    specs = sample_set(cfg.rl, args.n, args.seed, args.workers or [cfg.rl.workers], cfg.train.epochs,
                       n_train, cfg.batch.initial, args.prefix)
    out = out_path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for spec in specs:
        (out / f"{spec.name}.yaml").write_text(yaml.safe_dump(cluster.to_yaml_dict(spec), sort_keys=False))
    log.info("wrote %d cluster specs to %s", len(specs), out)
    return 0
