"""Per-rank entry point that ``torchrun`` starts: ``python -m dynamix.engine --config OUT/config.json --out OUT``.

Users call ``dynamix launch`` (:mod:`dynamix.engine.launch`), which writes the config and builds the
torchrun command; this module only turns its arguments into an :class:`~dynamix.engine.worker.Engine`.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

import torch.distributed as dist

from dynamix import cluster as cluster_mod
from dynamix import config as config_mod
from dynamix.engine.launch import parse_sizes
from dynamix.engine.worker import Engine, init_process_group


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dynamix.engine", description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--cluster")
    p.add_argument("--policy")
    p.add_argument("--arbitrator")
    p.add_argument("--initial")
    p.add_argument("--progress", action="store_true")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with open(args.config) as fh:
        cfg = config_mod.build(config_mod.Config, json.load(fh))
    spec = cluster_mod.load(args.cluster) if args.cluster else None
    device = init_process_group(cfg.engine.backend, cfg.train.device)
    try:
        Engine(cfg, args.out, spec, args.policy, args.arbitrator, parse_sizes(args.initial), device=device,
               progress=args.progress).run()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
