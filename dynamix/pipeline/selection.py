"""Choose the pipeline's policy among the policy_training stage's seeds (``dynamix select-policy``).

A step of the pipeline, not a stage: it runs between ``policy_training`` and ``inference`` when asked,
and writes ``<results>/selection/``: ``selection.csv`` (one row per run,
:data:`dynamix.evaluation.selection.TABLE_COLUMNS`), ``selection.json`` (the scores, the choice that
ships, its sha256, the clusters and seeds, the confirmation against the warm start or null) and
``manifest.json``. From then on the policy name ``dynamix`` of every
stage resolves to the chosen artifact (:func:`dynamix.evaluation.policy_names.trained_policy`); with no
selection it is the first seed's, ``<name>.zip``. The scores: :mod:`dynamix.evaluation.selection`, on
``experiments.inference.tune_clusters`` over ``tune_seeds`` seeds with the first optimiser of
``experiments.inference.optimizers``; held-out clusters play no part.
"""

from __future__ import annotations

import logging
from pathlib import Path

from dynamix import io
from dynamix.config import Config, ConfigError
from dynamix.evaluation import plan, policy_names, selection
from dynamix.pipeline.manifest import write_manifest

log = logging.getLogger(__name__)

NAME = policy_names.SELECTION


def seed_candidates(cfg: Config, pdir: Path) -> dict[str, str]:
    """The policy_training stage's policies, ``<name>`` (seed 0) and ``<name>-s<k>``, then each seed's
    snapshots ``<seed>-at<p>`` (``rl.snapshots``), label -> spec."""
    name, n = cfg.experiments.policy_training.name, cfg.experiments.policy_training.seeds
    labels = [name] + [f"{name}-s{k}" for k in range(1, n)]
    snapshots = [snap for label in labels for snap in cfg.rl.snapshot_names(label)]
    missing = [label for label in labels + snapshots if not (pdir / f"{label}.zip").exists()]
    if missing:
        raise ConfigError(f"no trained policy {', '.join(missing)} in {pdir}: run the policy_training stage first")
    return {label: f"dynamix:{pdir / label}.zip" for label in labels + snapshots}


def run(cfg: Config, root: str | Path, progress: bool = True) -> dict:
    """Score the trained seeds on the validation clusters and record the choice under ``root/selection``."""
    out = Path(root) / NAME
    out.mkdir(parents=True, exist_ok=True)
    e = cfg.experiments.inference
    pdir = policy_names.policy_dir(out)
    candidates = seed_candidates(cfg, pdir)
    opt = e.optimizers[0]
    choice, scores, table, specs, confirmation = selection.on_validation(
        cfg, candidates, plan.sim_config(cfg, optim=plan.optimizer(cfg, opt)), out,
        selection.warm_start(cfg, cfg.experiments.policy_training.name), progress)
    from dynamix.rl.artifact import sha256

    summary = {
        "name": cfg.experiments.policy_training.name,
        "chosen": f"{choice}.zip",
        "sha256": sha256(pdir / f"{choice}.zip"),
        "scores": {k: round(float(v), 4) for k, v in scores.items()},
        "missed": {k: int(v) for k, v in table[~table["confirm"]].groupby("policy")["time_to_target_s"]
                   .apply(lambda s: s.isna().sum()).items()},
        "confirmation": confirmation,
        "clusters": [spec.name for spec in specs],
        "seeds": plan.seeds(cfg)[: e.tune_seeds],
        "optimizer": opt,
    }
    io.write_csv(table, out / "selection.csv")
    io.write_json(out / "selection.json", summary)
    write_manifest(out, cfg, NAME, {"candidates": list(candidates)})
    log.info("selected %s: scores %s", choice, summary["scores"])
    return summary

