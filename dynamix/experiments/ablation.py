"""Ablation: from the paper's recipe to ours (``rl.recipe``), one addition at a time.

The ladder (:data:`dynamix.config.ABLATION_STEPS`), each step adding one thing to the one before it:

- ``paper``: the paper's recipe (``rl.recipe: paper``): its state, T_iter = the iteration time, the
  plain sum of per-window rewards over an epoch-budgeted episode, PPO from scratch. PPO gets the
  whole transition budget the default spends on teacher and PPO together (1024 + 2048 = 3072);
- ``time``: + the duration-weighted return over a time-budgeted episode (``rl.return_shape: time``);
- ``imbalance``: + T_iter = straggler excess + own barrier wait, per iteration (``rl.time_signal``);
- ``state``: + our state, v4 (``rl.state: dynamix``: ``lb_gap``, the compute/wait/communication
  split, ``busy_rel`` and the straggler and noise-scale aggregates);
- ``dynamix``: + the LB-BSP warm start, its teacher transitions taken from PPO's budget: exactly the
  config given (the default recipe).

Beside the ladder, opt-in variants of the default (:data:`dynamix.config.ABLATION_VARIANTS`, named in
``experiments.ablation.steps`` like a step), each one change to the config given:

- ``schedule``: + the schedule signals in the state (``rl.state: schedule``: training progress,
  learning-rate phase, noise-scale trend);
- ``global``: the global-batch action (``rl.action: global``: one factor of the global batch per
  window, split over the workers by speed);
- ``schedule-scratch``, ``global-scratch``: the same two without the warm start, PPO from scratch on
  the whole budget (the teacher's transitions given to PPO, as the ladder's steps before ``dynamix``).

Each step trains ``experiments.ablation.seeds`` policies (training seed ``train.seed + k``, all steps
on the stream of the name ``experiments.policy_training.name``, so the ``dynamix`` step's seed 0 is
the pipeline's policy) and runs policy k with run seed k on the held-out clusters and on the first
``validation`` clusters of the sampled validation set (``dynamix sample-clusters --seed 1 --workers
4 5 6``), beside ``experiments.ablation.baselines`` (run seeds 0..seeds-1). Runs follow the agent's
evaluation protocol (docs/journal/rl.md, ``rl-eval``): the experiments' workload and epochs, the whole test
split once per window, one thread, every run on a cluster given the static ``batch.initial`` run's
time (``evaluation.budget``), target = 0.9 x the best policy's mean final accuracy on that cluster.

Resumable run by run: policies and their checkpoints live in ``out_dir/work/policies``, finished
evaluation runs in ``out_dir/work/cache`` (keyed by config, cost model and policy sha256); a rerun
skips what is done. Costs (2 shared cores): ~5 min per policy, ~5 s per evaluation run, about two
hours for the whole ladder, so the default profile reads the committed per-run results
(``experiments.ablation.precomputed``) and the ``ablation`` profile computes them:

    nohup nice -n 10 dynamix run ablation --profile ablation > results/ablation.log 2>&1 &
    cp results/ablation/summary.csv docs/expected/ablation/summary.csv

Outputs: ``summary.csv`` (one row per run: split, cluster, policy, seed, time to target, final
accuracy), ``compare.csv`` (per split, cluster and policy: ratio to the median static, to LB-BSP and
GNS, accuracy gap, pass), ``table.csv``/``table.md`` (one row per policy), ``summary.json``,
``manifest.json``. Figure: time to target / median static per step and split.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

from dynamix import cluster, config, io, paths
from dynamix.config import Config, ConfigError, with_overrides
from dynamix.evaluation.plan import sim_config
from dynamix.pipeline.manifest import write_manifest
from dynamix.plots import ablation as plots
from dynamix.policies.base import PolicySpec

log = logging.getLogger(__name__)

NAME = "ablation"
BAR = 0.7
"""The bar a policy passes on a cluster (docs/journal/rl.md): time to target <= 0.7 x the median static's
and final accuracy no more than 1 point below the best static's."""
ACC_BAR_PTS = -1.0

SPLITS = ("heldout", "validation")


def step_configs(cfg: Config) -> dict[str, Config]:
    """The training config of every step (:data:`dynamix.config.ABLATION_STEPS`); the last, ``dynamix``,
    is ``cfg`` itself.

    The transition budget is the default's: ``rl.timesteps`` PPO plus ``rl.warm_start_timesteps``
    teacher transitions, which the steps without a warm start give to PPO.
    """
    if cfg.rl.recipe != "dynamix" or cfg.rl.warm_start == "none":
        raise ConfigError(f"experiments ablation ends at the config given, which must be the dynamix recipe with "
                          f"its warm start: rl.recipe = {cfg.rl.recipe!r}, rl.warm_start = {cfg.rl.warm_start!r}")
    budget = cfg.rl.timesteps + cfg.rl.warm_start_timesteps
    rl = {**config.recipe_overrides("paper"), "timesteps": budget}
    out = {}
    for name in config.ABLATION_STEPS:
        change = config.ABLATION[name].rl
        if change is None:  # the config given
            out[name] = cfg
            continue
        rl = {**rl, **change}
        out[name] = with_overrides(cfg, {"rl": rl})
    return out


def variant_configs(cfg: Config) -> dict[str, Config]:
    """The training config of every variant (:data:`dynamix.config.ABLATION_VARIANTS`): ``cfg``, the
    default, with one change (and, without the warm start, the teacher's transitions given to PPO: the
    same budget)."""
    budget = {"timesteps": cfg.rl.timesteps + cfg.rl.warm_start_timesteps}
    changes = {name: config.ABLATION[name].rl for name in config.ABLATION_VARIANTS}
    return {name: with_overrides(cfg, {"rl": {**change, **(budget if change.get("warm_start") == "none" else {})}})
            for name, change in changes.items()}


def eval_config(cfg: Config) -> Config:
    """The evaluation runs' config: the experiments' workload and budget (``rl-eval`` in the default
    profile), one torch thread, the model math: a policy trained on the surrogate is judged on the
    real-math simulator, never on the model it was trained on."""
    return sim_config(cfg, train={"threads": 1})


def validation_specs(cfg: Config) -> list[cluster.ClusterSpec]:
    """The first ``experiments.ablation.validation`` clusters of the sampled validation set."""
    from dynamix.data import load_cifar10
    from dynamix.rl.domain import sample_set

    a = cfg.experiments.ablation
    if a.validation == 0:
        return []
    ecfg = eval_config(cfg)
    n_train = len(load_cifar10(ecfg.data).train_y)
    return sample_set(ecfg.rl, a.validation, a.validation_seed, list(a.validation_workers), ecfg.train.epochs,
                      n_train, ecfg.batch.initial)


@dataclass(frozen=True)
class Task:
    """One unit of resumable work: train a step's policy k, or evaluate a policy on one split."""

    kind: str  # "train" | "evaluate"
    split: str  # evaluate: heldout | validation
    policy: str  # a step name or a baseline spec
    k: int = -1  # training seed index of a step's policy; -1 for the baselines (run seeds 0..seeds-1)


def plan(cfg: Config) -> list[Task]:
    """Every task, most wanted first: the held-out baselines; ``paper`` and ``dynamix`` at every seed
    (the recipes side by side); the other steps at the first seed; validation; the remaining seeds."""
    a = cfg.experiments.ablation
    ends = [s for s in a.steps if s in ("paper", "dynamix")]
    middle = [s for s in a.steps if s not in ends]
    splits = ["heldout"] + (["validation"] if a.validation else [])
    tasks = [Task("evaluate", "heldout", b) for b in a.baselines]

    def step(s: str, k: int, on: list[str]) -> list[Task]:
        return [Task("train", "", s, k)] + [Task("evaluate", sp, s, k) for sp in on]

    for k in range(a.seeds):
        for s in ends:
            tasks += step(s, k, ["heldout"])
    for s in middle:
        tasks += step(s, 0, ["heldout"])
    if "validation" in splits:
        tasks += [Task("evaluate", "validation", b) for b in a.baselines]
        tasks += [Task("evaluate", "validation", s, k) for k in range(a.seeds) for s in ends]
        tasks += [Task("evaluate", "validation", s, 0) for s in middle]
    for k in range(1, a.seeds):
        for s in middle:
            tasks += step(s, k, splits)
    return tasks


def _policy_name(step: str, k: int) -> str:
    return f"{step}-s{k}"


def compute(cfg: Config, out: Path, progress: bool = True) -> pd.DataFrame:
    """Train and evaluate everything in :func:`plan` (resuming); one row per run, targets set."""
    from dynamix.evaluation.runner import evaluate
    from dynamix.evaluation.targets import set_targets
    from dynamix.rl.learn import train_policy

    a = cfg.experiments.ablation
    work = out / "work"
    configs = {**step_configs(cfg), **variant_configs(cfg)}
    ecfg = eval_config(cfg)
    specs = {"heldout": [cluster.load(c) for c in a.heldout], "validation": validation_specs(cfg)}
    seed_name = cfg.experiments.policy_training.name
    policies: dict[tuple[str, int], Path] = {}
    frames, summaries = [], []
    tasks = plan(cfg)
    bar = tqdm(tasks, desc="ablation", unit="task", disable=not progress)
    for t in bar:
        bar.set_postfix(task=t.kind, split=t.split, policy=t.policy if t.k < 0 else _policy_name(t.policy, t.k))
        if t.kind == "train":
            tcfg = with_overrides(configs[t.policy], {"train": {"seed": cfg.train.seed + t.k}})
            policies[t.policy, t.k] = train_policy(tcfg, _policy_name(t.policy, t.k), out_dir=work / "policies",
                                                   progress=False, on_stale="restart", seed_name=seed_name)
            continue
        spec = t.policy if t.k < 0 else PolicySpec.trained(policies[t.policy, t.k])
        seeds = list(range(a.seeds)) if t.k < 0 else [t.k]
        runs, summary = evaluate(specs[t.split], [spec], ecfg, seeds, progress=False, cache_dir=work / "cache")
        label = t.policy  # a step's runs are pooled under the step's name, seed = k
        for frame in (runs, summary):
            frame["policy"] = label
            frame.insert(0, "split", t.split)
        frames.append(runs)
        summaries.append(summary)
    bar.close()
    runs = pd.concat(frames, ignore_index=True)
    summary = pd.concat(summaries, ignore_index=True)
    targeted = [set_targets(summary[summary["split"] == sp], runs[runs["split"] == sp],
                            ecfg.evaluation.target_fraction, ecfg.evaluation.target_accuracy)
                for sp in SPLITS if (summary["split"] == sp).any()]
    io.write_csv(runs, work / "runs.csv")
    return pd.concat(targeted, ignore_index=True)


def compare_all(summary: pd.DataFrame) -> pd.DataFrame:
    """Per split, cluster and non-static policy: ratio of median time to target to the median static's
    (runs that never reach the target count at their total time), to LB-BSP's and GNS's, final accuracy
    minus the best static's, and whether it passes (:data:`BAR`)."""
    from dynamix.evaluation.compare import compare

    out = []
    for split, rows in summary.groupby("split", sort=False):
        for policy in [p for p in rows["policy"].unique() if not str(p).startswith("static")]:
            c = compare(rows, policy)
            c.insert(0, "policy", policy)
            c.insert(0, "split", split)
            c["n_runs"] = [int(((rows["cluster"] == cl) & (rows["policy"] == policy)).sum()) for cl in c["cluster"]]
            out.append(c)
    table = pd.concat(out, ignore_index=True)
    table["passes"] = (table["ratio_vs_median_static"] <= BAR) & (table["acc_minus_best_static_pts"] >= ACC_BAR_PTS)
    return table


def _order(policies) -> list[str]:
    rows = (*config.ABLATION_STEPS, *config.ABLATION_VARIANTS)
    named = [s for s in rows if s in set(policies)]
    return named + sorted(p for p in set(policies) if p not in rows)


def table(compared: pd.DataFrame) -> pd.DataFrame:
    """One row per policy: what it changes, held-out ratios (per cluster and mean) to the median static
    and LB-BSP, validation passes and mean ratio, and how many runs each cell pools."""
    rows = []
    for policy in _order(compared["policy"]):
        row: dict = {"policy": policy,
                     "changes": config.ABLATION[policy].changes if policy in config.ABLATION else "baseline"}
        for split in SPLITS:
            c = compared[(compared["split"] == split) & (compared["policy"] == policy)]
            if not len(c):
                continue
            row[f"{split}_clusters"] = len(c)
            row[f"{split}_passes"] = int(c["passes"].sum())
            row[f"{split}_mean_ratio_vs_median_static"] = float(c["ratio_vs_median_static"].mean())
            if "ratio_vs_lbbsp" in c and policy != "lbbsp":
                row[f"{split}_mean_ratio_vs_lbbsp"] = float(c["ratio_vs_lbbsp"].mean())
            row[f"{split}_mean_acc_minus_best_static_pts"] = float(c["acc_minus_best_static_pts"].mean())
            row[f"{split}_runs_per_cluster"] = int(c["n_runs"].min())
            if split == "heldout":
                for _, r in c.iterrows():
                    row[f"heldout_{r['cluster']}_ratio"] = float(r["ratio_vs_median_static"])
        rows.append(row)
    return pd.DataFrame(rows)


def markdown(tab: pd.DataFrame, compared: pd.DataFrame) -> str:
    """The table docs/journal/rl.md shows ("Ablation: from the paper's recipe to the default")."""
    clusters = list(dict.fromkeys(compared.loc[compared["split"] == "heldout", "cluster"]))

    def f(x, fmt="{:.2f}"):
        return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else fmt.format(x)

    head = ("| policy | what it changes | held-out ratio vs median static (" + " / ".join(clusters) +
            ") | mean | vs LB-BSP | held-out passes | validation passes | validation mean ratio | runs per cluster |")
    lines = [head, "|" + "---|" * 9]
    for _, r in tab.iterrows():
        per = " / ".join(f(r.get(f"heldout_{c}_ratio")) for c in clusters)
        lines.append(
            f"| {r['policy']} | {r['changes']} | {per} | {f(r.get('heldout_mean_ratio_vs_median_static'))} | "
            f"{f(r.get('heldout_mean_ratio_vs_lbbsp'))} | "
            f"{f(r.get('heldout_passes'), '{:.0f}')} / {f(r.get('heldout_clusters'), '{:.0f}')} | "
            f"{f(r.get('validation_passes'), '{:.0f}')} / {f(r.get('validation_clusters'), '{:.0f}')} | "
            f"{f(r.get('validation_mean_ratio_vs_median_static'))} | {f(r.get('heldout_runs_per_cluster'), '{:.0f}')} |")
    return "\n".join(lines) + "\n"


def run(cfg: Config, out_dir: str | Path) -> dict:
    """Compute the ladder (``experiments.ablation.precomputed`` empty) or read its committed per-run
    results; write the tables (module docstring) and return the summary."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    a = cfg.experiments.ablation
    if a.precomputed:
        source = paths.resolve(a.precomputed)
        if not source.exists():
            raise ConfigError(f"experiments.ablation.precomputed = {a.precomputed!r}: {source} does not exist; "
                              "compute it with `dynamix run ablation --profile ablation` or set it to \"\"")
        summary = pd.read_csv(source)
    else:
        summary = compute(cfg, out)
    io.write_csv(summary, out / "summary.csv")
    compared = compare_all(summary)
    tab = table(compared)
    io.write_csv(compared, out / "compare.csv")
    io.write_csv(tab, out / "table.csv")
    io.write_text(out / "table.md", markdown(tab, compared))
    result = {
        "source": a.precomputed or "computed",
        "by_policy": {r["policy"]: {k: v for k, v in r.items() if k not in ("policy", "changes")}
                      for r in tab.to_dict(orient="records")},
    }
    io.write_json(out / "summary.json", result)
    write_manifest(out, cfg, NAME, {"precomputed": a.precomputed})
    return result


def figures(out_dir: str | Path, fig_dir: str | Path) -> list[Path]:
    compared = pd.read_csv(Path(out_dir) / "compare.csv")
    stem = Path(fig_dir) / "ablation"
    order = _order(compared["policy"])
    plots.ablation(compared, order, stem, bar=BAR)
    return [stem.with_suffix(".png")]

