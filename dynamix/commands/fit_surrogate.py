"""``dynamix fit-surrogate``: fit the surrogate of a profile's workload to real-math simulator runs.

    dynamix fit-surrogate --profile default                # -> results/surrogate/mlp-w0.25-sgd.json
    dynamix fit-surrogate --profile smoke --out /tmp/surrogate

Runs the static sweep (``experiments.baselines``) with the model math, fits the progress model and
writes it with its provenance (:mod:`dynamix.evaluation.surrogate_fit`); prints one JSON line.
"""

from __future__ import annotations

import argparse
import json

from dynamix import config, paths, rundir
from dynamix.commands.options import add_config_arguments, add_progress_argument


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--out", default=None, help="folder of the artifact (default: results/surrogate)")
    parser.add_argument("--seeds", type=int, default=1, help="runs per batch size (default 1)")
    add_progress_argument(parser)


def main(args: argparse.Namespace) -> int:
    from dynamix.evaluation.surrogate_fit import fit
    from dynamix.sim import progress

    cfg = config.load(args.params, args.profile, args.overrides)
    if args.seeds < 1:
        raise config.ConfigError(f"--seeds = {args.seeds} is out of range: must be >= 1")
    out = rundir.out_path(args.out).absolute() if args.out is not None else paths.RESULTS / "surrogate"
    rundir.lock(out)  # one fit at a time into a folder: they share its run cache
    path = fit(cfg, out, seeds=args.seeds, progress_bar=not args.no_progress)
    model = progress.load(path)
    print(json.dumps({"surrogate": str(path), "kappa": model.kappa, "noise_scale": model.noise_scale,
                      "rms": model.provenance["fit"]["rms"], "runs": model.provenance["fit"]["runs"]}))
    return 0
