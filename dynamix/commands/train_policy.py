"""``dynamix train-policy``: train the DYNAMIX agent on randomised virtual clusters.

    dynamix train-policy --name dynamix                       # params.yaml rl: section, default profile
    dynamix train-policy --name smoke --profile smoke         # seconds: an end-to-end check
    dynamix train-policy --name dynamix-resnet20 --init dynamix --timesteps 1024 \\
        --set rl.model=resnet8                                # transfer: fine-tune on another workload

A profile that trains on the surrogate fits it first where its pipeline keeps it, or reuses that fit
(:func:`dynamix.evaluation.surrogate_fit.on_fitted`). Writes ``results/policies/<name>.zip`` +
``.json`` and a resumable ``<name>.run/`` folder (:func:`dynamix.rl.learn.train_policy`); rerunning the
same command resumes, ``--fresh`` starts over.
A relative ``--out`` is read from the current directory; ``--name`` is a plain file name, and a second
training of one name while the first runs is refused (:func:`dynamix.rundir.lock`).
"""

from __future__ import annotations

import argparse

import numpy as np

from dynamix import config, paths, rundir
from dynamix.commands.options import add_config_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", default=None,
                        help="artifact name (default: experiments.policy_training.name)")
    add_config_arguments(parser)
    parser.add_argument("--timesteps", type=int, default=None,
                        help="per-worker transitions (default: rl.timesteps)")
    parser.add_argument("--init", default=None,
                        help="fine-tune this policy artifact (transfer) instead of starting fresh")
    parser.add_argument("--fresh", action="store_true", help="ignore and replace an existing checkpoint")
    parser.add_argument("--out", default=None, help="folder for the artifact (default: results/policies)")


def main(args: argparse.Namespace) -> int:
    from dynamix.evaluation.surrogate_fit import on_fitted
    from dynamix.pipeline.runner import default_root
    from dynamix.rl.learn import train_policy

    cfg = config.load(args.params, args.profile, args.overrides)
    if args.timesteps is not None:
        config.check_value("--timesteps", args.timesteps, config.rng(1, None))
    name = rundir.plain_name("--name", args.name or cfg.experiments.policy_training.name)
    folder = rundir.out_path(args.out).absolute() if args.out is not None else paths.POLICIES
    rundir.lock(folder / f"{name}.run", "--name")  # its checkpoint and progress.csv: one training at a time
    # a profile that trains on the surrogate (rl.world, sim.backend) trains on the one its pipeline fits,
    # fitted here after every argument is checked: a bad one is refused before a single run
    cfg = on_fitted(cfg, default_root(cfg.profile))
    out = train_policy(cfg, name, timesteps=args.timesteps, init=args.init, fresh=args.fresh, out_dir=folder)
    progress = out.with_suffix(".run") / "progress.csv"
    rets = np.loadtxt(progress, delimiter=",", skiprows=1, usecols=2, ndmin=1) if progress.exists() else []
    tail = f"; mean return of the last 10 episodes {np.mean(rets[-10:]):.3f}" if len(rets) else ""
    print(f"policy {out} ({len(rets)} episodes logged in {progress}{tail})")
    return 0
