"""Policy transfer (paper Sec. V): does a policy trained on one workload help on another?

Each pair ``SRC_MODEL/SRC_OPT->DST_MODEL/DST_OPT`` (paper: ResNet34 -> ResNet50, VGG11-SGD ->
VGG11-Adam; the default profile uses CPU-sized stand-ins) is evaluated on the target workload on
``experiments.transfer.cluster`` with three policies:

- ``transferred``: the policy trained on the source workload, run unchanged on the target;
- ``target-trained``: a policy trained on the target workload itself with the source's PPO budget
  (``transfer.timesteps`` 0: ``policy_training.timesteps``), the reference a transferred policy is
  judged against;
- ``static:<static_batch>``: the static baseline.

All three run under the same budget (``evaluation.budget``, :func:`~dynamix.evaluation.plan.budgeted`).

A workload's policy is trained with the ``rl`` settings and the workload's model and optimiser
(:func:`workload_config`); policies are cached in ``out_dir/policies/<workload>.zip`` (resumable), and
the policy the pipeline ships (:func:`~dynamix.evaluation.policy_names.trained_policy`: the selection's
choice, else the first seed's) is reused when its workload matches. When the profile chooses what ships
(``experiments.policy_training.select``), every other workload's policy is chosen the same way
(:func:`chosen`): among its final policy and its snapshots (``rl.snapshots``), on the validation
clusters, with that workload's own model math, so both sides of a pair are policies a user would ship.

Outputs: ``runs.csv``, ``summary.csv`` (per pair, policy and seed: time to target, final accuracy),
``summary.json`` (means and 95% t intervals; ``ratios``, per pair, the transferred policy's time to
target over each other policy's, :func:`ratios`;
``ppo_timesteps`` each compared policy was trained for, per pair; ``selected``, per workload whose
policy was chosen here: the choice and every candidate's score), ``selection.csv`` (those choices'
runs, :data:`dynamix.evaluation.selection.TABLE_COLUMNS` and ``workload``; no rows without a choice),
``manifest.json``.
Figure: time to target per pair and policy.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from dynamix import cluster, io
from dynamix.config import Config, with_overrides
from dynamix.evaluation import plan, selection, stats, surrogate_fit
from dynamix.evaluation.runner import SimTask, run_simulations
from dynamix.evaluation.runs import run_summary
from dynamix.evaluation.targets import missed, ratio_cells, with_targets
from dynamix.evaluation.plan import Workload, parse_pair
from dynamix.evaluation.policy_names import policy_dir, trained_policy
from dynamix.pipeline.manifest import read_manifest, write_manifest
from dynamix.plots import transfer as plots
from dynamix.policies.base import PolicySpec

log = logging.getLogger(__name__)

NAME = "transfer"
KEYS = ["cluster", "pair", "policy"]


def workload_config(cfg: Config, w: Workload) -> Config:
    """The simulated config training workload ``w`` (Adam at ``experiments.inference.adam_lr``)."""
    return plan.sim_config(cfg, model={"name": w.model, "width": w.width},
                           optim=plan.optimizer(cfg, w.optimizer))


def policy_for(cfg: Config, w: Workload, out: Path) -> Path:
    """The policy trained on workload ``w``: the main policy when ``w`` is its training workload,
    else one trained here (``rl`` settings; ``transfer.timesteps`` PPO transitions, 0: the main
    policy's ``policy_training.timesteps``, so source and target are trained alike) into ``out/policies``."""
    from dynamix.rl.env import training_config
    from dynamix.rl.learn import train_policy

    main = training_config(cfg)
    if (main.model.name, main.model.width, main.optim.name) == (w.model, w.width, w.optimizer):
        return trained_policy(policy_dir(out), cfg.experiments.policy_training.name)
    wcfg = surrogate_fit.on_fitted(with_overrides(cfg, {"rl": {"model": w.model, "width": w.width},
                                                               "optim": plan.optimizer(cfg, w.optimizer)}),
                                   out.parent)
    timesteps = cfg.experiments.transfer.timesteps or cfg.experiments.policy_training.timesteps or None
    return train_policy(wcfg, policy_name(w), timesteps=timesteps, out_dir=out / "policies", on_stale="restart")


def train_policies(cfg: Config, workloads: list[Workload], out: Path) -> dict[Workload, Path]:
    """:func:`policy_for` of each distinct workload, side by side in ``experiments.jobs`` processes
    (:func:`~dynamix.evaluation.plan.side_by_side`): on a CNN each policy is tens of minutes of
    model math, and one training process uses one core."""
    unique = list(dict.fromkeys(workloads))
    return dict(zip(unique, plan.side_by_side(policy_for, [(cfg, w, out) for w in unique], cfg.experiments.jobs)))


def chosen(cfg: Config, w: Workload, final: Path, out: Path) -> tuple[Path, dict, pd.DataFrame]:
    """The policy that ships for workload ``w`` among ``final`` (its training's last policy) and that
    training's snapshots, chosen on ``experiments.inference.tune_clusters`` with ``w``'s model math as
    the pipeline's selection chooses the main policy (:mod:`dynamix.evaluation.selection`); returns its
    path, the record (``chosen`` and every candidate's ``scores``) and the runs' table."""
    labels = [final.stem, *cfg.rl.snapshot_names(final.stem)]
    candidates = {label: str(PolicySpec.trained(final.parent / f"{label}.zip")) for label in labels}
    choice, scores, table, _, confirmation = selection.on_validation(
        cfg, candidates, workload_config(cfg, w), out, selection.warm_start(cfg, final.stem), progress=False)
    record = {"chosen": f"{choice}.zip", "scores": {k: round(float(v), 4) for k, v in scores.items()},
              "confirmation": confirmation}
    return final.parent / f"{choice}.zip", record, table.assign(workload=str(w))


def ppo_timesteps(spec: str | PolicySpec) -> int:
    """PPO transitions the policy ``dynamix:<zip>`` was trained for (its artifact's metadata)."""
    from dynamix.rl.artifact import read_meta

    return int(read_meta(PolicySpec.parse(spec).path)[1]["training"]["timesteps"])


def policy_name(w: Workload) -> str:
    """Artifact name of the policy trained on ``w``: ``mlp@0.5/sgd`` -> ``mlp-0p5-sgd`` (no dots, which
    would read as a file suffix and make two widths share one artifact)."""
    return io.slug(str(w)).replace(".", "p")


def ratios(per_run: pd.DataFrame, ci: float) -> dict:
    """Per pair and reference policy: the transferred policy's time to target over the reference's,
    paired by seed (geometric mean, t interval of the logs), under the one censoring rule
    (:func:`~dynamix.evaluation.targets.censored_time`: a miss counts at the pair's longest run), with
    the runs each side missed. A transferred policy that misses every seed is therefore slower, never
    absent from the table."""
    out: dict = {}
    for pair, rows in per_run.groupby("pair", sort=False):
        lost = rows.assign(_m=missed(rows)).groupby("policy")["_m"].sum()
        for ref in [p for p in dict.fromkeys(rows["policy"]) if p != "transferred"]:
            (cell,) = ratio_cells(rows, ["pair"], "transferred", ref)
            est = stats.ratio_interval(cell.tolist(), ci)
            out.setdefault(pair, {})[f"time_ratio_transferred_vs_{ref}"] = {
                "estimate": est["estimate"], "ci": [est["ci_lo"], est["ci_hi"]], "n_seeds": est["n_seeds"],
                "missed": {"transferred": int(lost["transferred"]), ref: int(lost[ref])}}
    return out


def run(cfg: Config, out_dir: str | Path) -> dict:
    out = Path(out_dir)
    e = cfg.experiments.transfer
    spec = cluster.load(e.cluster)
    tasks, pairs, budgets = [], [], {}
    parsed = [parse_pair(text) for text in e.pairs]
    run_cfgs = plan.budgeted(cfg, [(spec, workload_config(cfg, dst)) for _, dst in parsed], out)
    trained = train_policies(cfg, [w for pair in parsed for w in pair], out)
    selected, tables = {}, []
    if cfg.experiments.policy_training.select:  # the main workload's is the pipeline's choice already
        for w, final in trained.items():
            if final.parent == out / "policies":
                trained[w], selected[str(w)], table = chosen(cfg, w, final, out)
                tables.append(table)
    for text, (src, dst), wcfg in zip(e.pairs, parsed, run_cfgs):
        pairs.append(text)
        agents = {"transferred": PolicySpec.trained(trained[src]),
                  "target-trained": PolicySpec.trained(trained[dst])}
        budgets[f"{src}->{dst}"] = {label: ppo_timesteps(p) for label, p in agents.items()}
        policies = {**agents, f"static:{e.static_batch}": f"static:{e.static_batch}"}
        tasks += [
            SimTask(spec, wcfg, p, seed, (("pair", f"{src}->{dst}"),), label=label)
            for label, p in policies.items() for seed in plan.seeds(cfg)
        ]  # fmt: skip
    runs = run_simulations(tasks, cfg.experiments.jobs, desc="transfer", cache=plan.run_cache(out))
    per_run = with_targets(run_summary(runs, KEYS), runs, cfg, ["pair"])
    io.write_csv(runs, out / "runs.csv")
    io.write_csv(per_run, out / "summary.csv")
    io.write_csv(pd.concat(tables, ignore_index=True) if tables else  # no rows without a choice
                 pd.DataFrame(columns=[*selection.TABLE_COLUMNS, "workload"]), out / "selection.csv")
    agg = stats.aggregate(per_run, KEYS, ["time_to_target_s", "final_accuracy"], cfg.experiments.ci)
    summary = {"cluster": spec.name, "pairs": pairs, "by_pair_and_policy": agg.to_dict(orient="records"),
               "ratios": ratios(per_run, cfg.experiments.ci), "ppo_timesteps": budgets, "selected": selected}  # fmt: skip
    io.write_json(out / "summary.json", summary)
    write_manifest(out, cfg, NAME, {"cluster_spec": e.cluster})
    return summary


def figures(out_dir: str | Path, fig_dir: str | Path) -> list[Path]:
    out, fig = Path(out_dir), Path(fig_dir)
    per_run = pd.read_csv(out / "summary.csv")
    e = read_manifest(out)["config"]["experiments"]
    agg = stats.aggregate(per_run, ["pair", "policy"], ["time_to_target_s", "total_time_s"], e["ci"])
    plots.transfer(agg, fig / "transfer")
    return [fig / "transfer.png"]
