"""``dynamix run EXPERIMENT --profile P --out DIR``: one experiment, as its notebook runs it.

Examples::

    dynamix run baselines --profile smoke --out /tmp/results/baselines   # figures in OUT/figures
    dynamix run inference --profile default          # -> results/inference, figures in results/figures/
    dynamix run claims --set experiments.seeds=5

The experiment reads earlier stages' outputs beside ``--out`` (its parent is the results root). A
relative ``--out`` is read from the current directory, and everything the run writes stays in it: it
holds one run (:mod:`dynamix.rundir`), so a run of another experiment or config there needs ``--force``.
Without ``--out`` the stage writes where its notebook does (``results/``, figures in ``results/figures``).
"""

from __future__ import annotations

import argparse
import json

from dynamix import config, paths, rundir
from dynamix.commands.options import add_config_arguments
from dynamix.experiments import EXPERIMENTS, get


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("experiment", choices=list(EXPERIMENTS), help="which experiment")
    add_config_arguments(parser)
    parser.add_argument("--out", default=None, help="output folder (default: results/EXPERIMENT); holds one run")
    parser.add_argument("--force", action="store_true", help="replace the run OUT holds by this one")
    parser.add_argument("--no-figures", action="store_true", help="skip drawing the figures")


def main(args: argparse.Namespace) -> int:
    cfg = config.load(args.params, args.profile, args.overrides)
    module = get(args.experiment)
    if args.out is None:  # the stage's own place in the results tree, as its notebook writes it
        out_dir = paths.RESULTS / args.experiment
        fig_dir = paths.FIGURES / args.experiment
        rundir.lock(out_dir)
    else:
        out_dir = rundir.out_path(args.out).absolute()
        fig_dir = out_dir / "figures"
        ident = rundir.identity(f"run {args.experiment}", policy="none", cluster="none", seed=cfg.train.seed,
                                config=cfg.to_dict())
        rundir.claim(out_dir, ident, args.force)
    summary = module.run(cfg, out_dir)
    if args.out is not None:
        rundir.finish(out_dir)
    if not args.no_figures:
        figures = module.figures(out_dir, fig_dir)
        summary = {**summary, "figures": [str(f) for f in figures]}
    print(json.dumps(summary, indent=2, default=str))
    return 0
