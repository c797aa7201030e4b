"""``dynamix headroom``: what a residual agent could gain in its training world, and what it gained.

    dynamix headroom --profile cpu-agent --out results/profiles/cpu-agent/headroom

Draws ``--n`` clusters from the agent's training distribution on the validation seed stream
(:func:`dynamix.rl.domain.sample_set`, ``--workers`` cycled), or takes the ``--cluster`` specs, runs the open-loop members of
:mod:`dynamix.rl.headroom` and every trained policy (``--policy``, default every artifact in
``RESULTS/policies``) in the training environment, on the profile's fitted surrogate
(``RESULTS/surrogate``), and writes ``headroom.csv`` (:data:`dynamix.rl.headroom.COLUMNS`) and
``headroom.json`` (:func:`dynamix.rl.headroom.summarize`). Seconds per cluster; no model math.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from dynamix import cluster as clusters
from dynamix import config, io, rundir
from dynamix.commands.options import add_config_arguments, add_out_arguments, cluster_id

log = logging.getLogger(__name__)

WORKERS = (2, 3, 4, 6, 8, 12, 16, 24, 32)
"""Default worker counts, cycled over the drawn clusters: ``rl.workers_range``'s span, log-spaced."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--results", default=None, metavar="DIR",
                        help="the profile's results root, for its surrogate and policies "
                             "(default: results/profiles/PROFILE)")
    parser.add_argument("--policy", action="append", default=None, metavar="PATH",
                        help="a policy artifact to run beside the members (repeatable; default: every "
                             "RESULTS/policies/*.zip)")
    parser.add_argument("--n", type=int, default=18, help="clusters to draw, 1 to 1000 (default 18)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the draw (default 1, as sample-clusters)")
    parser.add_argument("--workers", type=int, nargs="+", default=list(WORKERS),
                        help=f"worker counts, cycled over the clusters (default {' '.join(map(str, WORKERS))})")
    parser.add_argument("--cluster", action="append", default=None, metavar="YAML",
                        help="run on these cluster specs instead of a draw (repeatable; e.g. the validation "
                             "clusters, to set the surrogate's ranking beside the real math's)")
    parser.add_argument("--seeds", type=int, default=3, help="run seeds per cluster and member, 1 to 100 (default 3)")
    add_out_arguments(parser, "folder for headroom.csv and headroom.json")


def main(args: argparse.Namespace) -> int:
    from dynamix.cluster.spec import MAX_WORKERS
    from dynamix.evaluation.surrogate_fit import on_fitted
    from dynamix.pipeline.runner import default_root
    from dynamix.rl import headroom
    from dynamix.policies.base import Bounds
    from dynamix.rl.artifact import check_compatible, load_policy, state_spec
    from dynamix.rl.domain import sample_set
    from dynamix.sim import progress

    if not args.profile:
        raise config.ConfigError("--profile is required: the profile whose training world to measure")
    out = rundir.out_path(args.out)
    config.check_value("--n", args.n, config.rng(1, 1000))
    config.check_value("--seeds", args.seeds, config.rng(1, 100))
    config.check_value("--seed", args.seed, config.SEED)
    config.check_value("--workers", tuple(args.workers), config.rng(1, MAX_WORKERS))
    root = Path(args.results) if args.results else default_root(args.profile)
    cfg = on_fitted(config.load(args.params, args.profile, args.overrides), root)
    paths = [Path(p) for p in args.policy] if args.policy is not None else sorted((root / "policies").glob("*.zip"))
    policies = {}
    for path in paths:
        model, meta = load_policy(path)
        spec, action = state_spec(meta), meta.get("action", "worker")
        if spec.name != cfg.rl.state or action != cfg.rl.action:
            raise config.ConfigError(f"{path}: trained with rl.state = {spec.name!r} and rl.action = {action!r}; this "
                                     f"profile's environment has rl.state = {cfg.rl.state!r} and rl.action = "
                                     f"{cfg.rl.action!r}")
        check_compatible(meta, tuple(cfg.batch.actions), Bounds(cfg.batch.min, cfg.batch.max), where=str(path))
        name = path.with_suffix("").name
        if name in policies:
            raise config.ConfigError(f"--policy {path}: another policy is named {name!r}; rename one of the artifacts")
        policies[name] = model
    given = [clusters.load(path) for path in args.cluster or []]
    ident = rundir.identity("headroom", policy=",".join(sorted(policies)) or "none",
                            cluster=",".join(cluster_id(spec) for spec in given) or "sampled", seed=args.seed,
                            config=cfg.to_dict(), n=args.n, workers=list(args.workers), seeds=args.seeds)
    rundir.claim(out, ident, args.force, outputs=("headroom.csv", "headroom.json"))
    n_train = progress.for_config(cfg).n_train
    specs = given or sample_set(cfg.rl, args.n, args.seed, args.workers, cfg.rl.episode_epochs, n_train,
                                cfg.batch.initial, prefix="head")
    frame = headroom.headroom(cfg, specs, args.seeds, policies, progress=lambda name: log.info("headroom: %s done", name))
    summary = headroom.summarize(frame)
    io.write_csv(frame, out / "headroom.csv")
    clean = json.loads(json.dumps(summary), parse_constant=lambda c: None)  # NaN (no cluster with room) -> null
    io.write_json(out / "headroom.json", clean)
    rundir.finish(out)
    print(json.dumps({"best_over_base_geomean": summary["best_over_base_geomean"],
                      "per_policy": {k: {m: v[m] for m in ("over_base_geomean", "realised_share_median")}
                                     for k, v in clean["per_policy"].items()}}))
    return 0
