"""``dynamix sim2real``: the static sweep, LB-BSP and the agent on the real engine beside the simulator.

Examples::

    dynamix sim2real                                   # -> results/sim2real (needs results/policies/dynamix.zip)
    dynamix sim2real --publish                         # and copy ratios.csv + summary.json to docs/expected/sim2real
    dynamix sim2real --profile smoke --out /tmp/s2r    # a quick look

Wall-clock times: run it on quiet cores. See :mod:`dynamix.evaluation.sim2real`.
"""

from __future__ import annotations

import argparse
import json
import shutil

from dynamix import config, paths
from dynamix.commands.options import add_config_arguments, add_progress_argument
from dynamix.evaluation.policy_names import resolve_policy
from dynamix.rundir import lock, out_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--out", default=None, help="output folder (default: results/sim2real)")
    parser.add_argument("--policy-dir", default=None,
                        help="where the agent's policy lives (default: results/policies)")
    parser.add_argument("--publish", action="store_true",
                        help="copy ratios.csv, summary.csv and summary.json to experiments.sim2real.published")
    add_progress_argument(parser)


def main(args: argparse.Namespace) -> int:
    from dynamix.evaluation import sim2real

    cfg = config.load(args.params, args.profile, args.overrides)
    out = out_path(args.out).absolute() if args.out is not None else paths.RESULTS / "sim2real"
    lock(out)
    pdir = paths.resolve(args.policy_dir) if args.policy_dir else paths.RESULTS / "policies"
    name = cfg.experiments.policy_training.name
    policies = {p: resolve_policy(p, pdir, name) for p in cfg.experiments.sim2real.policies}
    summary = sim2real.run(cfg, out, policies, progress=not args.no_progress)
    if args.publish:
        dest = paths.resolve(cfg.experiments.sim2real.published)
        dest.mkdir(parents=True, exist_ok=True)
        for f in ("ratios.csv", "summary.csv", "summary.json", "calibration.json"):
            shutil.copyfile(out / f, dest / f)
    print(json.dumps(summary, indent=2, default=str))
    return 0
