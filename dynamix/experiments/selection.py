"""Selection: which of the policy_training stage's policies ships, chosen with the real math on the
validation clusters only (:mod:`dynamix.evaluation.selection`).

With ``experiments.policy_training.select`` the stage scores every candidate, the training seeds'
final policies ``<name>`` (seed 0) and ``<name>-s<k>`` and each one's snapshots ``<seed>-at<p>``
(``rl.snapshots``), on ``experiments.inference.tune_clusters`` over ``tune_seeds`` seeds with the first
optimiser of ``experiments.inference.optimizers``, beside LB-BSP at each global batch of
``tune_global_batches``; a choice that is not the warm start (the snapshot at 0 %) is confirmed against
it on ``confirm_seeds`` seeds and ships only when faster with its whole interval. Held-out clusters play
no part. Without ``select`` nothing is scored: the stage records what the name ``dynamix`` means, seed
0's final policy, or keeps the choice an earlier ``dynamix select-policy`` left in this folder.

From then on the policy name ``dynamix`` of every later stage resolves to the chosen artifact
(:func:`dynamix.evaluation.policy_names.trained_policy`, which refuses a choice whose artifact has
changed since). Outputs, whether a choice was made or not: ``summary.json`` (the policy that ships,
whether chosen here, and with a choice its scores and runs missed), ``selection.json`` (the artifact
that ships and its sha256; with a choice the scores, the clusters and seeds, the confirmation against
the warm start or null; without one ``selected: false``), ``selection.csv`` (one row per run,
:data:`dynamix.evaluation.selection.TABLE_COLUMNS`; no rows without a choice), ``manifest.json``.
Figure: each candidate's and each LB-BSP global batch's score (without a choice, what ships).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pandas as pd

from dynamix import io
from dynamix.config import Config
from dynamix.evaluation import plan, policy_names, selection
from dynamix.pipeline.manifest import write_manifest
from dynamix.plots import selection as plots

log = logging.getLogger(__name__)

NAME = policy_names.SELECTION


def run(cfg: Config, out_dir: str | Path, progress: bool = True, choose: bool | None = None) -> dict:
    """The stage (module docstring) into ``out_dir`` (``<results>/selection``): a choice when ``choose``
    (default: ``experiments.policy_training.select``; ``dynamix select-policy`` passes True), else the
    record of what ships without one."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pdir = policy_names.policy_dir(out)
    name = cfg.experiments.policy_training.name
    from dynamix.rl.artifact import sha256

    if not (cfg.experiments.policy_training.select if choose is None else choose):
        ships = policy_names.trained_policy(pdir, name)
        policy_names.require_trained(pdir, [ships.stem])
        record = out / "selection.json"
        old = json.loads(record.read_text()) if record.exists() else {}
        before = old.get("name") == name and old.get("selected", True)  # dynamix select-policy's: kept
        if not before:
            io.write_json(out / "selection.json",
                          {"name": name, "chosen": ships.name, "sha256": sha256(ships), "selected": False})
            io.write_csv(pd.DataFrame(columns=selection.TABLE_COLUMNS), out / "selection.csv")
        summary = {"name": name, "selected": False, "ships": ships.name, "chosen_before": before}
        io.write_json(out / "summary.json", summary)
        write_manifest(out, cfg, NAME, {"ships": str(ships)})
        log.info("no selection (experiments.policy_training.select is off): %s ships", ships.name)
        return summary
    candidates = policy_names.trained_candidates(cfg, pdir)
    opt = cfg.experiments.inference.optimizers[0]
    choice, scores, table, specs, confirmation = selection.on_validation(
        cfg, candidates, plan.sim_config(cfg, optim=plan.optimizer(cfg, opt)), out,
        selection.warm_start(cfg, name), progress)
    record = {
        "name": name,
        "chosen": f"{choice}.zip",
        "sha256": sha256(pdir / f"{choice}.zip"),
        "scores": {k: round(float(v), 4) for k, v in scores.items()},
        "missed": {k: int(v) for k, v in table[~table["confirm"]].groupby("policy")["time_to_target_s"]
                   .apply(lambda s: s.isna().sum()).items()},
        "confirmation": confirmation,
        "clusters": [spec.name for spec in specs],
        "seeds": plan.seeds(cfg)[: cfg.experiments.inference.tune_seeds],
        "optimizer": opt,
    }
    io.write_csv(table, out / "selection.csv")
    io.write_json(out / "selection.json", record)
    summary = {"name": name, "selected": True, "ships": record["chosen"], "candidates": len(candidates),
               "scores": record["scores"], "missed": record["missed"],
               "confirmed": None if confirmation is None else confirmation["ships"] == confirmation["chosen"]}
    io.write_json(out / "summary.json", summary)
    write_manifest(out, cfg, NAME, {"candidates": list(candidates)})
    log.info("selected %s: scores %s", choice, record["scores"])
    return summary


def figures(out_dir: str | Path, fig_dir: str | Path) -> list[Path]:
    """Each candidate's score beside LB-BSP's global batches (:func:`dynamix.plots.selection.scores`);
    without a choice made here (``summary.json``'s ``selected``), no bars: what ships."""
    summary = json.loads((Path(out_dir) / "summary.json").read_text())
    score = pd.Series(summary.get("scores", {}), dtype=float)
    table = pd.read_csv(Path(out_dir) / "selection.csv") if summary["selected"] else None
    stem = Path(fig_dir) / "scores"
    plots.scores(score, table, summary["ships"].removesuffix(".zip"), stem)
    return [stem.with_suffix(".png")]
