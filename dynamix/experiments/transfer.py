"""Policy transfer (paper Sec. V): does a policy trained on one workload help on another?

Each pair ``SRC_MODEL/SRC_OPT->DST_MODEL/DST_OPT`` (paper: ResNet34 -> ResNet50, VGG11-SGD ->
VGG11-Adam; the default profile uses CPU-sized stand-ins) is evaluated on the target workload on
``experiments.transfer.cluster`` with three policies:

- ``transferred``: the policy trained on the source workload, run unchanged on the target;
- ``target-trained``: a policy trained on the target workload itself (the upper reference);
- ``static:<static_batch>``: the static baseline.

All three run under the same budget (``rl.eval_budget``, :func:`common.budgeted`).

A workload's policy is trained with the ``rl`` settings and the workload's model and optimiser
(:func:`workload_config`); policies are cached in ``out_dir/policies/<workload>.zip`` (resumable), and
the main policy of the policy_training stage is reused when its workload matches.

Outputs: ``runs.csv``, ``summary.csv`` (per pair, policy and seed: time to target, final accuracy),
``summary.json`` (IQM and 95% intervals; ``ratio_transferred_vs_target`` of times to target),
``manifest.json``. Figure: time to target per pair and policy.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from dynamix import cluster, plots
from dynamix.config import Config
from dynamix.experiments import common
from dynamix.experiments.inference import with_targets
from dynamix.experiments.policy_training import policy_dir

log = logging.getLogger(__name__)

NAME = "transfer"
KEYS = ["cluster", "pair", "policy"]


@dataclass(frozen=True)
class Workload:
    """A model (at a width multiplier) trained with an optimiser: ``resnet20/sgd``, ``mlp@0.25/adam``."""

    model: str
    optimizer: str
    width: float = 1.0

    def __str__(self) -> str:
        width = "" if self.width == 1.0 else f"@{self.width:g}"
        return f"{self.model}{width}/{self.optimizer}"


def parse_pair(text: str) -> tuple[Workload, Workload]:
    """``"resnet8/sgd->resnet20@0.5/adam"`` -> (source, target); errors name the field and the form."""
    form = "experiments.transfer.pairs entries must look like MODEL[@WIDTH]/OPT->MODEL[@WIDTH]/OPT with OPT sgd or adam"
    if text.count("->") != 1:
        raise ValueError(f"{form}, got {text!r}")
    sides = []
    for side in text.split("->"):
        model, _, opt = side.strip().partition("/")
        model, _, width = model.partition("@")
        try:
            w = float(width) if width else 1.0
        except ValueError:
            w = -1.0
        if not model or opt not in ("sgd", "adam") or not w > 0:
            raise ValueError(f"{form}, got {text!r}")
        sides.append(Workload(model, opt, w))
    return sides[0], sides[1]


def workload_config(cfg: Config, w: Workload) -> Config:
    """The simulated config training workload ``w`` (Adam at ``experiments.inference.adam_lr``)."""
    optim: dict = {"name": w.optimizer}
    if w.optimizer == "adam":
        optim["lr"] = cfg.experiments.inference.adam_lr
    return common.sim_config(cfg, model={"name": w.model, "width": w.width}, optim=optim)


def policy_for(cfg: Config, w: Workload, out: Path) -> Path:
    """The policy trained on workload ``w``: the main policy when ``w`` is its training workload,
    else one trained here (``rl`` settings, ``transfer.timesteps``) into ``out/policies``."""
    from dynamix.rl.env import training_config
    from dynamix.rl.train import train_policy

    main = training_config(cfg)
    if (main.model.name, main.model.width, main.optim.name) == (w.model, w.width, w.optimizer):
        return policy_dir(out) / f"{cfg.experiments.policy_training.name}.zip"
    optim: dict = {"name": w.optimizer}
    if w.optimizer == "adam":
        optim["lr"] = cfg.experiments.inference.adam_lr
    wcfg = common.with_overrides(cfg, {"rl": {"model": w.model, "width": w.width}, "optim": optim})
    timesteps = cfg.experiments.transfer.timesteps or None
    return train_policy(wcfg, policy_name(w), timesteps=timesteps, out_dir=out / "policies", on_stale="restart")


def policy_name(w: Workload) -> str:
    """Artifact name of the policy trained on ``w``: ``mlp@0.5/sgd`` -> ``mlp-0p5-sgd`` (no dots, which
    would read as a file suffix and make two widths share one artifact)."""
    return common.slug(str(w)).replace(".", "p")


def run(cfg: Config, out_dir: str | Path) -> dict:
    out = Path(out_dir)
    e = cfg.experiments.transfer
    spec = cluster.load(e.cluster)
    tasks, pairs = [], []
    parsed = [parse_pair(text) for text in e.pairs]
    run_cfgs = common.budgeted(cfg, [(spec, workload_config(cfg, dst)) for _, dst in parsed])
    for text, (src, dst), wcfg in zip(e.pairs, parsed, run_cfgs):
        pairs.append(text)
        policies = {
            "transferred": f"dynamix:{policy_for(cfg, src, out)}",
            "target-trained": f"dynamix:{policy_for(cfg, dst, out)}",
            f"static:{e.static_batch}": f"static:{e.static_batch}",
        }
        tasks += [
            common.SimTask(spec, wcfg, p, seed, (("pair", f"{src}->{dst}"),), label=label)
            for label, p in policies.items() for seed in common.seeds(cfg)
        ]  # fmt: skip
    runs = common.run_simulations(tasks, cfg.experiments.jobs, desc="transfer")
    per_run = with_targets(common.run_summary(runs, KEYS), runs, cfg, ["pair"])
    common.write_csv(runs, out / "runs.csv")
    common.write_csv(per_run, out / "summary.csv")
    agg = common.aggregate_cfg(per_run, KEYS, ["time_to_target_s", "final_accuracy"], cfg)
    ratios = {}
    for pair, rows in per_run.groupby("pair", sort=False):
        t = rows.pivot_table(index="seed", columns="policy", values="time_to_target_s", aggfunc="first")
        for ref in [c for c in t.columns if c != "transferred"]:
            r = (t["transferred"] / t[ref]).tolist()
            lo, hi = common.bootstrap_ci(r, cfg.experiments.aggregate, cfg.experiments.n_boot, cfg.experiments.ci)
            ratios.setdefault(pair, {})[f"time_ratio_transferred_vs_{ref}"] = {
                "estimate": common.point_estimate(r, cfg.experiments.aggregate), "ci": [lo, hi], "n_seeds": len(r)}
    summary = {"cluster": spec.name, "pairs": pairs, "by_pair_and_policy": agg.to_dict(orient="records"),
               "ratios": ratios}  # fmt: skip
    common.write_json(out / "summary.json", summary)
    common.write_manifest(out, cfg, NAME, {"cluster_spec": e.cluster})
    return summary


def figures(out_dir: str | Path, fig_dir: str | Path) -> list[Path]:
    out, fig = Path(out_dir), Path(fig_dir)
    per_run = pd.read_csv(out / "summary.csv")
    e = common.read_manifest(out)["config"]["experiments"]
    agg = common.aggregate(per_run, ["pair", "policy"], ["time_to_target_s"], e["aggregate"], e["n_boot"], e["ci"])
    plots.transfer(agg, fig / "transfer")
    return [fig / "transfer.png"]
