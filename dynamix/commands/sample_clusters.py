"""``dynamix sample-clusters``: write a validation set drawn from the agent's training distribution.

    dynamix sample-clusters --profile rl-eval --n 20 --seed 1 --workers 4 5 6 --out clusters/val-random
    dynamix evaluate --profile rl-eval --cluster clusters/val-random/*.yaml --policy ... --out ...

One YAML per cluster (the same schema as ``clusters/*.yaml``), drawn by
:func:`dynamix.rl.domain.sample_set` on a seed stream training never uses; events start within the
first ``train.epochs`` epochs of the profile's data at ``batch.initial``. Select a recipe on such a
set, then report it once on ``clusters/heldout`` (docs/journal/rl.md).

``OUT`` holds one set (:mod:`dynamix.rundir`): the same command again rewrites the same files, and a
folder holding another set, or YAML files it did not write, is refused unless ``--force``.
"""

from __future__ import annotations

import argparse
import logging

import yaml

from dynamix import cluster, config, rundir
from dynamix.cluster.spec import MAX_WORKERS
from dynamix.commands.options import add_config_arguments, add_out_arguments
from dynamix.data import load_cifar10
from dynamix.rl.domain import sample_set

log = logging.getLogger(__name__)

MAX_CLUSTERS = 1000
"""The most clusters one ``--n`` draws (a validation set is tens)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--n", type=int, default=20, help=f"clusters to draw, 1 to {MAX_CLUSTERS} (default 20)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the draw (default 1)")
    parser.add_argument("--workers", type=int, nargs="+", default=None,
                        help="worker counts, cycled over the clusters (default: rl.workers)")
    parser.add_argument("--prefix", default="rand", help="cluster name prefix (default rand)")
    add_out_arguments(parser, "folder for the YAML files (created)")


def main(args: argparse.Namespace) -> int:
    out = rundir.out_path(args.out)
    cfg = config.load(args.params, args.profile, args.overrides)
    config.check_value("--n", args.n, config.rng(1, MAX_CLUSTERS))
    config.check_value("--seed", args.seed, config.SEED)
    workers = args.workers or [cfg.rl.workers]
    config.check_value("--workers", tuple(workers), config.rng(1, MAX_WORKERS))
    rundir.plain_name("--prefix", args.prefix)
    ident = rundir.identity("sample-clusters", policy="none", cluster="none", seed=args.seed, config=cfg.to_dict(),
                            n=args.n, workers=workers, prefix=args.prefix)
    rundir.claim(out, ident, args.force, outputs=("*.yaml", "*.yml"))
    n_train = len(load_cifar10(cfg.data).train_y)
    specs = sample_set(cfg.rl, args.n, args.seed, workers, cfg.train.epochs, n_train, cfg.batch.initial, args.prefix)
    for spec in specs:
        (out / f"{spec.name}.yaml").write_text(yaml.safe_dump(cluster.to_yaml_dict(spec), sort_keys=False))
    rundir.finish(out)
    log.info("wrote %d cluster specs to %s", len(specs), out)
    return 0
