"""Per-rank entry point that ``torchrun`` starts: ``python -m dynamix.engine --config OUT/config.json --out OUT``.

Users call ``dynamix launch`` (:mod:`dynamix.engine.launch`), which writes the config and builds the
torchrun command; this module only turns its arguments into an :class:`~dynamix.engine.worker.Engine`.
A rank that fails prints one line (a user's mistake: exit 2; anything else: exit 1, its traceback in
``OUT/logs/rank-R.txt``) instead of a traceback per rank.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import traceback
from pathlib import Path

import torch.distributed as dist

from dynamix import cluster as cluster_mod
from dynamix import config as config_mod
from dynamix.engine.launch import parse_sizes
from dynamix.engine.worker import Engine, init_process_group
from dynamix.errors import UserError


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
    rank = os.environ.get("RANK", "?")
    try:
        return run_rank(args)
    except KeyboardInterrupt:  # Ctrl-C reaches every rank: the launcher says it once
        return 130
    except UserError as exc:
        print(f"dynamix engine rank {rank}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 (a bug or a fault: its traceback goes to a file, one line here)
        path = Path(args.out) / "logs" / f"rank-{rank}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(traceback.format_exc())
        print(f"dynamix engine rank {rank}: {type(exc).__name__}: {' '.join(str(exc).split())[:300]} "
              f"(traceback in {path})", file=sys.stderr)
        return 1


def run_rank(args: argparse.Namespace) -> int:
    """Build and run this rank's engine."""
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
