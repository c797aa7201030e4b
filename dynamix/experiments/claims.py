"""The paper's claims beside our numbers, each with an interval over seeds and a verdict.

One row per claim of arXiv 2510.08522 (abstract, Sec. V): up to +6.3 pts final accuracy and up to 46 %
less training time than static batch sizes (against the median of the whole static sweep, the best
static beside it), the best policy at the largest cluster, transfer across models; then ours: the
agent against LB-BSP, its teacher rule, the tuned LB-BSP and GNS, and on the real engine. How each
is measured, the censoring, the intervals and the verdict rule: ``docs/protocol.md``
(:mod:`dynamix.evaluation.stats` computes them all).

Outputs: ``claims.csv`` (columns :data:`COLUMNS`; every verdict recomputable from its row with
:func:`dynamix.evaluation.stats.row_verdict`), ``claims.md``, ``per_config.csv``, ``per_cluster.csv``,
``held_out.md`` (:func:`held_out_markdown`), ``per_policy.csv`` and ``per_policy.md`` (:func:`per_policy`),
``goal.csv`` and ``goal.md`` (the agent against its bar, :func:`goal`), ``comparisons.csv``,
``manifest.json``, and the headline numbers in ``<results>/summary.json``.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from dynamix import io, isa, paths
from dynamix.config import Config
from dynamix.evaluation import stats
from dynamix.evaluation.oracle import BOUNDS, ORACLE
from dynamix.evaluation.policy_names import TUNED_GLOBAL_LBBSP, TUNED_LBBSP
from dynamix.evaluation.sim2real import ratios as sim2real_ratios
from dynamix.evaluation.targets import censored_time, missed, ratio_cells
from dynamix.pipeline.manifest import write_manifest
from dynamix.plots import claims as plots
from dynamix.rl.actions import scheme_of

log = logging.getLogger(__name__)

NAME = "claims"
PAPER_ACC_GAIN_PTS = 6.3
PAPER_TIME_REDUCTION_PCT = 46.0

COLUMNS = ["claim", "kind", "paper", "paper_says", "unit", "estimate", "ci_lo", "ci_hi", "null", "side",
           "tie_lo", "tie_hi", "n_seeds", "n_cells", "where", "missed", "verdict"]


# --------------------------------------------------------------------------------------------
# Estimates over seeds, within and across cells (dynamix.evaluation.stats; docs/protocol.md)
# --------------------------------------------------------------------------------------------


def _pct(x: float) -> float:
    """A log speed-up x = log(T_ref / T) as a time reduction in %: 100 (1 - e^-x)."""
    return 100.0 * (1.0 - math.exp(-x)) if math.isfinite(x) else math.nan


def _as_pct(est: dict) -> dict:
    """An interval of log speed-ups as time reductions in % (monotone, so the interval maps over)."""
    return {**est, "estimate": _pct(est["estimate"]), "ci_lo": _pct(est["ci_lo"]), "ci_hi": _pct(est["ci_hi"])}


def _tie(cfg: Config, null: float, unit: str) -> dict:
    lo, hi = stats.tie_band(null, unit, cfg.experiments.tie_margin, cfg.experiments.tie_margin_pts)
    return {"tie_lo": lo, "tie_hi": hi}


def with_verdict(row: dict, cfg: Config) -> dict:
    """``row`` with its tie band (from its null and unit) and the verdict of its interval."""
    row = {**row, **_tie(cfg, row["null"], row["unit"])}
    return {**row, "verdict": stats.row_verdict(row)}


def binding(comparisons: Sequence[dict]) -> dict:
    """The comparison that decides "best against every other" (ratios, lower is better): one whose
    interval lies above 1 when any does (the highest such), else the one whose interval reaches
    highest. Its verdict is then the verdict of the whole claim: below 1 only if every one is."""
    above = [c for c in comparisons if c["ci_lo"] > 1]
    if above:
        return max(above, key=lambda c: c["ci_lo"])
    return max(comparisons, key=lambda c: c["ci_hi"] if math.isfinite(c["ci_hi"]) else math.inf)


# --------------------------------------------------------------------------------------------
# The claims
# --------------------------------------------------------------------------------------------


def static_sweep(columns) -> list[str]:
    """The static policies among ``columns``, by batch size."""
    static = [str(c) for c in columns if str(c).startswith("static:")]
    return sorted(static, key=lambda c: int(c.split(":")[1]))


def missed_count(per_run: pd.DataFrame, policies: Sequence[str]) -> str:
    """How many of ``policies``' runs in ``per_run`` missed the target, as "missed/runs"."""
    rows = per_run["policy"].isin(list(policies))
    return f"{int(missed(per_run)[rows].sum())}/{int(rows.sum())}"


def missed_pair(per_run: pd.DataFrame, num: Sequence[str], den: Sequence[str]) -> str:
    """Runs missed on each side of a comparison, "a/n vs b/m" (numerator first): every time built on a
    miss is censored (:func:`~dynamix.evaluation.targets.censored_time`), so a reader must see how many."""
    return f"{missed_count(per_run, num)} vs {missed_count(per_run, den)}"


def best_of(values: pd.DataFrame, reached: pd.DataFrame, policies: list[str], larger_is_better: bool) -> str:
    """The best of ``policies`` in a cell (e.g. the static sizes) by its mean over seeds, chosen among
    those whose every seed reached the target (else among those that reached it most often): a policy
    picked by its censored time would win on where its budget ended, not on when it trained."""
    share = reached[policies].mean()
    pool = [p for p in policies if share[p] == share.max()]
    means = values[pool].mean()
    return str(means.idxmax() if larger_is_better else means.idxmin())


def per_seed_vs_static(inference: pd.DataFrame) -> pd.DataFrame:
    """Long table of per-seed effects: cluster, optimizer, seed, metric, reference (``median static`` or
    ``best static``), best_static, value. ``accuracy_gain_pts`` values are differences in points;
    ``time_reduction_pct`` values are log speed-ups log(T_ref / T_dynamix), turned into % by the caller."""
    keys = ["cluster", "optimizer"]
    acc = stats.paired(inference, inference["final_accuracy"].astype(float), keys)
    tim = stats.paired(inference, censored_time(inference), keys)
    hit = stats.paired(inference, inference["time_to_target_s"].notna().astype(float), keys)
    static = static_sweep(acc.columns)
    if not static or "dynamix" not in acc.columns:
        raise ValueError("inference/summary.csv needs the policy `dynamix` and the static sweep "
                         "(experiments.inference.policies)")
    rows = []
    for (cl, opt), a in acc.groupby(level=[0, 1], sort=False):
        t, h = tim.loc[a.index], hit.loc[a.index]
        seeds = a.index.get_level_values("seed")
        best_acc = best_of(a, h, static, larger_is_better=True)
        best_t = best_of(t, h, static, larger_is_better=False)
        effects = {
            ("accuracy_gain_pts", "median static", ""): 100 * (a["dynamix"] - a[static].median(axis=1)),
            ("accuracy_gain_pts", "best static", best_acc): 100 * (a["dynamix"] - a[best_acc]),
            ("time_reduction_pct", "median static", ""): np.log(t[static].median(axis=1) / t["dynamix"]),
            ("time_reduction_pct", "best static", best_t): np.log(t[best_t] / t["dynamix"]),
        }
        for (metric, ref, best), v in effects.items():
            label = best if not best or h[best].all() else f"{best}, which never reached the target on every seed"
            rows += [{"cluster": cl, "optimizer": opt, "seed": int(s), "metric": metric, "reference": ref,
                      "best_static": label, "value": float(x)}
                     for s, x in zip(seeds, v.to_numpy())]
    return pd.DataFrame(rows)


def _metric_interval(values, metric: str, ci: float) -> dict:
    est = stats.mean_interval(values, ci)
    return _as_pct(est) if metric == "time_reduction_pct" else est


def vs_static(inference: pd.DataFrame, cfg: Config) -> pd.DataFrame:
    """Per cell, metric and reference (median / best static): estimate and interval over seeds."""
    long = per_seed_vs_static(inference)
    rows = []
    keys = ["cluster", "optimizer", "metric", "reference"]
    for (cl, opt, metric, ref), g in long.groupby(keys, sort=False):
        est = _metric_interval(g["value"], metric, cfg.experiments.ci)
        rows.append({"cluster": cl, "optimizer": opt, "metric": metric, "reference": ref,
                     "best_static": g["best_static"].iloc[0], **est, "n_cells": 1})  # fmt: skip
    return pd.DataFrame(rows)


def up_to_rows(inference: pd.DataFrame, cfg: Config) -> list[dict]:
    """The two "up to" claims against the median static, each followed by the best-static row."""
    long = per_seed_vs_static(inference)
    static = static_sweep(inference["policy"].unique())
    sweep = f"{static[0].split(':')[1]}..{static[-1].split(':')[1]}" if len(static) > 1 else static[0]
    out = []
    for metric, paper, unit, text in [
        ("accuracy_gain_pts", PAPER_ACC_GAIN_PTS, "pts", "final accuracy"),
        ("time_reduction_pct", PAPER_TIME_REDUCTION_PCT, "%", "less training time"),
    ]:
        for ref in ("median static", "best static"):
            sub = long[(long["metric"] == metric) & (long["reference"] == ref)]
            groups = list(sub.groupby(["cluster", "optimizer"], sort=False))
            est = stats.max_interval([g["value"] for _, g in groups], cfg.experiments.ci)
            est = _as_pct(est) if metric == "time_reduction_pct" else est
            (cl, opt), g = groups[est.pop("argmax")]
            cell = inference[(inference["cluster"] == cl) & (inference["optimizer"] == opt)]
            best = str(g["best_static"].iloc[0]).split(",")[0]
            lost = missed_pair(cell, ["dynamix"], static if ref == "median static" else [best])
            sign = "+" if metric == "accuracy_gain_pts" else ""
            if ref == "median static":
                claim = f"up to {sign}{paper:g}{'%' if unit == '%' else ' pts'} {text} vs static batch sizes"
                where = f"{cl}, {opt} (max of {est['n_cells']} cells); median of static {sweep}"
                kind, paper_says = "paper", f"up to {paper:g} {unit}"
            else:
                claim = f"(beside) {text} vs the best static batch size"
                where = f"{cl}, {opt} (max of {est['n_cells']} cells); best there: {g['best_static'].iloc[0]}"
                kind, paper_says, paper = "ours", "—", math.nan
            out.append({"claim": claim, "kind": kind, "paper": paper, "paper_says": paper_says, "unit": unit,
                        **est, "null": 0.0, "side": "above", "where": where, "missed": lost})  # fmt: skip
    return out


def _ratio_row(claim: str, kind: str, paper_says: str, est: dict, where: str, **extra) -> dict:
    return {"claim": claim, "kind": kind, "paper": math.nan, "paper_says": paper_says, "unit": "time ratio",
            "n_cells": 1, **est, "null": 1.0, "side": "below", "where": where, **extra}


def scalability_rows(scal: pd.DataFrame, cfg: Config) -> tuple[list[dict], list[dict]]:
    """The "best at the largest cluster" row (binding comparison) and every comparison behind it."""
    n_max = int(scal["n_workers"].max())
    at = scal[scal["n_workers"] == n_max]
    comps = []
    for other in [p for p in dict.fromkeys(at["policy"]) if p != "dynamix"]:
        cells = ratio_cells(at, ["n_workers"], "dynamix", other)
        est = stats.ratio_interval(cells[0] if cells else [], cfg.experiments.ci)
        comps.append(with_verdict(_ratio_row(f"DYNAMIX / {other} at {n_max} workers", "paper", "ratio < 1", est,
                                             f"vs {other}", other=other,
                                             missed=missed_pair(at, ["dynamix"], [other])), cfg))
    if not comps:
        return [], []
    b = binding(comps)
    others = ", ".join(c["other"] for c in comps)
    row = {**{k: v for k, v in b.items() if k not in ("other", "verdict", "tie_lo", "tie_hi")},
           "claim": f"best policy at the largest cluster ({n_max} workers)",
           "paper_says": "best (ratio < 1 vs every other)",
           "where": f"vs {b['other']}, the binding one of {len(comps)} others ({others})"}
    return [row], comps


def transfer_rows(tr: pd.DataFrame, cfg: Config,
                  budgets: Mapping[str, Mapping[str, int]] | None = None) -> list[dict]:
    """Per pair: transferred / target-trained (same PPO budget) and transferred / static, per seed."""
    rows = []
    for pair, sub in tr.groupby("pair", sort=False):
        for ref in [p for p in dict.fromkeys(sub["policy"]) if p != "transferred"]:
            cells = ratio_cells(sub, ["pair"], "transferred", ref)
            est = stats.ratio_interval(cells[0] if cells else [], cfg.experiments.ci)
            where = f"transferred vs {ref}"
            steps = (budgets or {}).get(pair, {})
            if ref == "target-trained" and steps:
                src, dst = steps.get("transferred"), steps.get("target-trained")
                same = f" (both {src} PPO transitions)"
                where += same if src == dst else f" (PPO transitions differ: {src} vs {dst})"
            rows.append(_ratio_row(f"transferred policy generalises ({pair})", "paper", "ratio < 1", est, where,
                                   missed=missed_pair(sub, ["transferred"], [ref])))
    return rows


def teacher_spec(cfg: Config) -> str:
    """The rule the agent's warm start imitates (:mod:`dynamix.rl.warmstart`): LB-BSP's split of a global
    batch of ``rl.warm_start_batch`` (``lbbsp:batch=512`` by default), at least ``rl.residual_per_worker``
    per worker when that is set, or of the current one when 0."""
    m, floor = cfg.rl.warm_start_batch, cfg.rl.residual_per_worker
    if m <= 0:
        return "lbbsp"
    return f"lbbsp:batch={m}" + (f",per_worker={floor}" if floor and cfg.rl.residual_span else "")


def ours_rows(inference: pd.DataFrame, cfg: Config) -> list[dict]:
    """DYNAMIX against LB-BSP, its teacher rule, the rule its decision x1 is (:attr:`~dynamix.rl.actions.
    ActionScheme.base_rule`, under a residual span), the tuned LB-BSPs (per worker, global) and GNS, pooled
    over every cell (the per-seed mean of the cells' log ratios, :func:`dynamix.evaluation.stats.pooled_interval`)."""
    rows = []
    refs = ("lbbsp", teacher_spec(cfg), scheme_of(cfg).base_rule, TUNED_LBBSP, TUNED_GLOBAL_LBBSP, "gns")
    for ref in dict.fromkeys(filter(None, refs)):
        cells = ratio_cells(inference, ["cluster", "optimizer"], "dynamix", ref)
        if not cells:
            continue
        est = stats.pooled_interval(cells, cfg.experiments.ci)
        lost = missed_pair(inference, ["dynamix"], [ref])
        rows.append({**_ratio_row(f"(ours) DYNAMIX vs {ref}, time to target", "ours", "—", est,
                                  f"pooled over {est['n_cells']} held-out cells; missed {lost}", missed=lost,
                                  reference=ref)})
    return rows


def engine_rows(cfg: Config) -> list[dict]:
    """The agent on the real engine (:mod:`dynamix.evaluation.sim2real`, a committed quiet-machine run
    under ``experiments.sim2real.published``): its wall-clock time ratio to the median static and to
    LB-BSP, with the simulator's ratio for the same spec, seeds and policies beside it, recomputed from
    the run's per-run ``summary.csv``. None when nothing is published."""
    folder = cfg.experiments.sim2real.published
    path = paths.resolve(folder) / "summary.csv" if folder else None
    if path is None or not path.exists():
        return []
    runs = pd.read_csv(path)
    table = sim2real_ratios(runs, "dynamix", cfg.experiments.ci)
    engine = runs[runs["backend"] == "engine"]
    meta = json.loads((path.parent / "summary.json").read_text())
    cluster = meta["cluster"] + (f", {meta['workload']}" if "workload" in meta else "")
    rows = []
    for ref in ("median static", "lbbsp"):
        eng = table[(table["backend"] == "engine") & (table["reference"] == ref)]
        sim = table[(table["backend"] == "sim") & (table["reference"] == ref)]
        if eng.empty:
            continue
        e, s = eng.iloc[0], sim.iloc[0] if not sim.empty else None
        beside = f"; simulator {s['estimate']:.2f} [{s['ci_lo']:.2f}, {s['ci_hi']:.2f}]" if s is not None else ""
        est = {k: float(e[k]) for k in ("estimate", "ci_lo", "ci_hi")} | {"n_seeds": int(e["n_seeds"])}
        den = static_sweep(engine["policy"].unique()) if ref == "median static" else [ref]
        rows.append(_ratio_row(f"(real engine) DYNAMIX vs {ref}, wall-clock time to target", "ours", "—", est,
                               f"{cluster}, 4 torchrun workers on this machine{beside}",
                               missed=missed_pair(engine, ["dynamix"], den)))
    return rows


def headroom_share(median_static_t: float, policy_t: float, oracle_t: float) -> float:
    """A policy's share of a cluster's headroom in time to target,

        share = (T_median static - T_policy) / (T_median static - T_oracle),

    0 for the median static, 1 for the oracle bound (:mod:`dynamix.evaluation.oracle`), below 0 for a
    policy slower than the median static. NaN when the oracle is not faster than the median static
    (no headroom to share) or a time is missing."""
    room = median_static_t - oracle_t
    if not (math.isfinite(room) and math.isfinite(policy_t)) or room <= 0:
        return math.nan
    return (median_static_t - policy_t) / room


def per_cluster(inference: pd.DataFrame, cfg: Config) -> pd.DataFrame:
    """Per cell (cluster, optimizer) and reference: DYNAMIX's per-seed time-to-target ratio to the median
    static and to every adaptive policy run there, geometric mean and t interval over seeds, and the
    verdict (lower is better; censored times as everywhere, :func:`~dynamix.evaluation.targets.censored_time`),
    and ``missed``, the runs of each side that missed the target (:func:`missed_pair`).
    The reference ``best other`` (named in ``best_other``) is the policy of the cell, static or
    adaptive but not a bound (:data:`~dynamix.evaluation.oracle.BOUNDS`), that the agent compares worst
    against: the :func:`binding` one of "faster than every other", so its verdict is that claim's. It is
    picked on the same runs it is compared on, which favours it: a ratio below 1 against it is conservative.

    With ``oracle`` runs in ``inference``, two columns more: ``headroom_share``, the reference's
    :func:`headroom_share`, and ``agent_headroom_share``, DYNAMIX's, from the mean censored times over
    seeds (NaN in a cell without oracle runs)."""
    t = stats.paired(inference, censored_time(inference), ["cluster", "optimizer"])
    static = static_sweep(t.columns)
    adaptive = [p for p in t.columns if p != "dynamix" and not str(p).startswith("static:")]
    others = static + [p for p in adaptive if p not in BOUNDS]
    rows = []
    for (cl, opt), g in t.groupby(level=[0, 1], sort=False):
        best = binding([{"other": p, **stats.ratio_interval((g["dynamix"] / g[p]).to_numpy(), cfg.experiments.ci)}
                        for p in others])["other"]
        refs = {"median static": g[static].median(axis=1), **{p: g[p] for p in adaptive}, "best other": g[best]}
        cell = inference[(inference["cluster"] == cl) & (inference["optimizer"] == opt)]
        sides = {"median static": static, "best other": [best]}
        median_t = float(refs["median static"].mean())
        oracle_t = float(g[ORACLE].mean()) if ORACLE in g else math.nan
        for ref, den in refs.items():
            est = stats.ratio_interval((g["dynamix"] / den).to_numpy(), cfg.experiments.ci)
            row = with_verdict({"kind": "ours", "paper": math.nan, "unit": "time ratio", "null": 1.0,
                                "side": "below", **est}, cfg)
            rows.append({"cluster": cl, "optimizer": opt, "reference": ref, **est, "n_cells": 1,
                         "verdict": row["verdict"], "best_other": best if ref == "best other" else "",
                         "missed": missed_pair(cell, ["dynamix"], sides.get(ref, [ref]))})
            if ORACLE in t.columns:
                rows[-1]["headroom_share"] = headroom_share(median_t, float(den.mean()), oracle_t)
                rows[-1]["agent_headroom_share"] = headroom_share(median_t, float(g["dynamix"].mean()), oracle_t)
    return pd.DataFrame(rows)


PER_POLICY_COLUMNS = ["cluster", "optimizer", "policy", "level", "target_accuracy", "n_seeds", "missed", "final_accuracy", "time_to_target_s",
                      "over_oracle", "over_oracle_lo", "over_oracle_hi", "agent_over", "agent_over_lo",
                      "agent_over_hi", "headroom_share", "headroom_share_lo", "headroom_share_hi"]
"""``per_policy.csv``: per cell, policy and target level (a fraction of the best policy's mean final
accuracy, ``experiments.target_levels`` and ``evaluation.target_fraction``), runs missed ("missed/runs"), mean final accuracy, mean
censored time to target (virtual s), its time over the oracle's and the agent's over its (geometric
mean of per-seed ratios and t interval), and its share of the headroom (mean of per-seed shares and t
interval; NaN without oracle runs)."""


def per_policy(inference: pd.DataFrame, cfg: Config, levels: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every policy of every held-out cell beside the oracle bound (:data:`PER_POLICY_COLUMNS`), at the
    primary target (``inference``'s) or at every level of ``levels`` (the inference stage's
    ``levels.csv``, :func:`~dynamix.evaluation.targets.at_levels`), fastest first within a level."""
    frames = ([(cfg.evaluation.target_fraction, inference)] if levels is None
              else list(levels.groupby("level", sort=True)))
    parts = [_per_policy_at(frame, cfg).assign(level=float(level)) for level, frame in frames]
    return pd.concat(parts, ignore_index=True)[PER_POLICY_COLUMNS]


def _per_policy_at(inference: pd.DataFrame, cfg: Config) -> pd.DataFrame:
    """:func:`per_policy` at one target. A policy's share on seed s is (M_s - T_s) / (M_s - O_s), with
    M_s the median static's censored time, O_s the oracle's: above 1, the policy beat the "bound"."""
    t = stats.paired(inference, censored_time(inference), ["cluster", "optimizer"])
    acc = inference.groupby(["cluster", "optimizer", "policy"], sort=False)["final_accuracy"].mean()
    static = static_sweep(t.columns)
    rows = []
    for (cl, opt), g in t.groupby(level=[0, 1], sort=False):
        cell = inference[(inference["cluster"] == cl) & (inference["optimizer"] == opt)]
        median = g[static].median(axis=1)
        for p in g.columns:
            if g[p].isna().all():
                continue
            row = {"cluster": cl, "optimizer": opt, "policy": p, "n_seeds": int(g[p].notna().sum()),
                   "target_accuracy": float(cell["target_accuracy"].iloc[0]) if "target_accuracy" in cell
                   else math.nan,
                   "missed": missed_count(cell, [p]), "final_accuracy": float(acc[(cl, opt, p)]),
                   "time_to_target_s": float(g[p].mean())}
            for name, den in (("over_oracle", g[ORACLE] if ORACLE in g else None), ("agent_over", g[p])):
                num = g[p] if name == "over_oracle" else g.get("dynamix")
                est = stats.ratio_interval((num / den).to_numpy(), cfg.experiments.ci) \
                    if num is not None and den is not None else {"estimate": math.nan, "ci_lo": math.nan, "ci_hi": math.nan}
                row.update({name: est["estimate"], f"{name}_lo": est["ci_lo"], f"{name}_hi": est["ci_hi"]})
            room = (median - g[ORACLE]).where(lambda r: r > 0) if ORACLE in g else median * math.nan
            share = stats.mean_interval(((median - g[p]) / room).to_numpy(), cfg.experiments.ci)
            row.update({"headroom_share": share["estimate"], "headroom_share_lo": share["ci_lo"],
                        "headroom_share_hi": share["ci_hi"]})
            rows.append(row)
    return pd.DataFrame(rows, columns=[c for c in PER_POLICY_COLUMNS if c != "level"]).sort_values(
        ["cluster", "optimizer", "time_to_target_s"], kind="stable", ignore_index=True)


ACROSS_COLUMNS = ["optimizer", "policy", "clusters", "missed", "geomean_over_oracle", "worst_over_oracle", "worst_cluster"]


def across_clusters(table: pd.DataFrame, level: float) -> pd.DataFrame:
    """Each policy over the held-out cells of :func:`per_policy` at target ``level``
    (:data:`ACROSS_COLUMNS`): its time over the oracle's, geometric mean over the cells and its worst
    cell, and its runs that missed the target out of all its runs, lowest mean first. What a user who
    meets a cluster nobody has seen would choose by: near the bound everywhere, not on average only."""
    at = table[(table["level"] == level) & table["over_oracle"].gt(0)]
    rows = []
    for (opt, policy), g in at.groupby(["optimizer", "policy"], sort=False):
        worst = g.loc[g["over_oracle"].idxmax()]
        k, n = (sum(int(m.split("/")[i]) for m in g["missed"]) for i in (0, 1))
        rows.append({"optimizer": opt, "policy": policy, "clusters": len(g), "missed": f"{k}/{n}",
                     "geomean_over_oracle": float(np.exp(np.log(g["over_oracle"]).mean())),
                     "worst_over_oracle": float(worst["over_oracle"]), "worst_cluster": worst["cluster"]})
    return pd.DataFrame(rows, columns=ACROSS_COLUMNS).sort_values(
        ["optimizer", "geomean_over_oracle"], kind="stable", ignore_index=True)


def per_policy_markdown(table: pd.DataFrame, primary: float) -> str:
    """:func:`per_policy` as GitHub tables (``per_policy.md``): first every policy across the cells
    (:func:`across_clusters`) at the ``primary`` level, then the same at each other level, then one table
    per cell with every column at the ``primary`` level and the time to target with the runs missed at
    each other level beside them. A time over the oracle that misses on some seed is a lower bound (the
    miss is censored at the cell's longest run). The oracle is the member chosen at the primary level,
    so at another level it is a reference, not a bound: a verdict that holds at one level only hangs on
    where the target sits (``docs/protocol.md``)."""
    fmt = lambda v, lo, hi: "—" if not math.isfinite(v) else f"{v:.2f} [{lo:.2f}, {hi:.2f}]"  # noqa: E731
    time = lambda r: f"{'≥ ' if not r.missed.startswith('0/') else ''}{r.time_to_target_s:.2f}"  # noqa: E731
    others = sorted(set(table["level"]) - {primary})
    head = "".join(f" time at {lv:g} (missed) |" for lv in others)
    out = []
    for level in [primary, *others]:
        bound = "" if level == primary else f", the member chosen at level {primary:g}"
        out += [f"**Across the held-out clusters** (level {level:g}; time to target over the oracle's{bound})", "",
                "| policy | optimiser | clusters | runs missing the target | geometric mean | worst | worst cluster |",
                "|---|---|---|---|---|---|---|"]
        for r in across_clusters(table, level).itertuples():
            at_least = "≥ " if not r.missed.startswith("0/") else ""
            out.append(f"| {r.policy} | {r.optimizer} | {r.clusters} | {r.missed} | {at_least}"
                       f"{r.geomean_over_oracle:.2f} | {r.worst_over_oracle:.2f} | {r.worst_cluster} |")
        out.append("")
    for (cl, opt), g in table.groupby(["cluster", "optimizer"], sort=False):
        at = g[g["level"] == primary]
        target = at["target_accuracy"].iloc[0] if len(at) else math.nan
        out += [f"**{cl}** ({opt}; level {primary:g}: target accuracy {target:.3f})", "",
                f"| policy | runs missing the target | final accuracy | time to target (s) | over the oracle "
                f"| agent over it | headroom share |{head}", "|---" * (7 + len(others)) + "|"]
        for r in at.itertuples():
            extra = "".join(f" {time(q)} ({q.missed}) |" for q in
                            g[(g["policy"] == r.policy) & (g["level"] != primary)].sort_values("level").itertuples())
            out.append(f"| {r.policy} | {r.missed} | {r.final_accuracy:.3f} | {time(r)} | "
                       f"{fmt(r.over_oracle, r.over_oracle_lo, r.over_oracle_hi)} | "
                       f"{fmt(r.agent_over, r.agent_over_lo, r.agent_over_hi) if r.policy != 'dynamix' else ''} | "
                       f"{fmt(r.headroom_share, r.headroom_share_lo, r.headroom_share_hi)} |{extra}")
        out.append("")
    return "\n".join(out)


GOAL_GEOMEAN, GOAL_WORST, GOAL_POOLED = 1.05, 1.15, 0.95
"""The bar a learned batch-size policy clears to be worth deploying on a cluster nobody has seen
(``docs/protocol.md``, "The agent's bar"): at the primary target level, its time to target at most
1.05x a bound's in geometric mean over the held-out cells and 1.15x on the worst cell, no policy but
the bounds lower (within the tie band), every run reaching the target, and its pooled paired time at
most 0.95 of each rule's (:func:`ours_rows`) with the whole interval below 1."""

GOAL_COLUMNS = ["criterion", "reference", "bar", "measured", "ci_lo", "ci_hi", "bound", "where", "met"]
"""``goal.csv``: one row per criterion of the agent's bar (:func:`goal`). ``reference``: the bound
(``oracle``, ``oracle-cv``), the policy compared with, or empty; ``bar``: the largest passing value;
``measured``: the agent's value (ci_lo / ci_hi: its t interval, pooled rows only); ``bound``:
"≥" when the agent missed a run (its value is a lower bound), "≤" when only the reference did;
``where``: the worst cell, or the runs missed (the agent's, "vs" the reference's); ``met``: the
criterion holds ("≥" never does: the value could lie on the wrong side of the bar)."""


def goal(inference: pd.DataFrame, policies: pd.DataFrame, cfg: Config) -> pd.DataFrame:
    """The agent (``dynamix``) against its bar (:data:`GOAL_GEOMEAN` and the rest) at the primary
    target level, from :func:`per_policy`'s table and the pooled ratios of :func:`ours_rows`
    (:data:`GOAL_COLUMNS`). The geometric-mean and worst-cell rows stand once per bound that ran
    (the oracle chosen on the scored seeds, and ``oracle-cv`` chosen on each cell's other seeds): the
    first is the bound, the second what knowing each cluster from its other runs reaches. A run the
    agent missed counts at its cell's horizon, so every ratio of its is then a lower bound ("≥") and
    passes no bar. Empty without the agent."""
    agent = inference[inference["policy"] == "dynamix"]
    if agent.empty:
        return pd.DataFrame(columns=GOAL_COLUMNS)
    at = policies[(policies["level"] == cfg.evaluation.target_fraction) & policies["over_oracle"].gt(0)]
    over = at.pivot_table(index=["cluster", "optimizer"], columns="policy", values="over_oracle")
    lost = inference["time_to_target_s"].isna().groupby(inference["policy"]).any()
    bound = lambda ref: "≥" if lost["dynamix"] else "≤" if lost.get(ref, False) else ""  # noqa: E731
    blank = {"ci_lo": math.nan, "ci_hi": math.nan, "where": ""}
    rows = []
    for ref in (b for b in BOUNDS if "dynamix" in over and b in over):
        ratio = (over["dynamix"] / over[ref]).dropna()
        rows += [{**blank, "criterion": "geometric mean over the held-out cells", "reference": ref,
                  "bar": GOAL_GEOMEAN, "measured": float(np.exp(np.log(ratio).mean())), "bound": bound(ref)},
                 {**blank, "criterion": "worst held-out cell", "reference": ref, "bar": GOAL_WORST,
                  "measured": float(ratio.max()), "bound": bound(ref), "where": ", ".join(map(str, ratio.idxmax()))}]
    if "dynamix" in over and ORACLE in over:
        geo = np.exp(np.log(over.drop(columns=[*BOUNDS], errors="ignore").dropna(axis=1)).mean())
        best = geo.drop("dynamix").idxmin()
        rows.append({**blank, "criterion": "geometric mean over the best other policy's", "reference": best,
                     "bar": 1 + cfg.experiments.tie_margin, "measured": float(geo["dynamix"] / geo[best]),
                     "bound": bound(best)})
    missed_runs = int(agent["time_to_target_s"].isna().sum())
    rows.append({**blank, "criterion": "runs missing the target", "reference": "", "bar": 0.0,
                 "measured": float(missed_runs), "bound": "", "where": f"{missed_runs}/{len(agent)}"})
    for r in ours_rows(inference, cfg):
        rows.append({"criterion": "pooled paired time ratio", "reference": r["reference"], "bar": GOAL_POOLED,
                     "measured": r["estimate"], "ci_lo": r["ci_lo"], "ci_hi": r["ci_hi"],
                     "bound": bound(r["reference"]), "where": r["missed"]})
    out = pd.DataFrame(rows, columns=GOAL_COLUMNS[:-1])
    pooled = out["criterion"] == "pooled paired time ratio"
    out["met"] = (out["measured"] <= out["bar"]) & out["bound"].ne("≥") & (~pooled | (out["ci_hi"] < 1))
    return out


def write_goal(out: Path, inference: pd.DataFrame, policies: pd.DataFrame, cfg: Config) -> None:
    """``goal.csv`` and ``goal.md`` (:func:`goal`) in ``out``."""
    table = goal(inference, policies, cfg)
    io.write_csv(table, out / "goal.csv")
    io.write_text(out / "goal.md", goal_markdown(table, cfg.evaluation.target_fraction))


def goal_markdown(table: pd.DataFrame, level: float) -> str:
    """:func:`goal` as a GitHub table (``goal.md``), headed by the verdict against each bound: met
    only if every row that does not name the other bound is."""
    if table.empty:
        return f"**The agent's bar** (level {level:g}; docs/protocol.md): no agent in this evaluation\n"
    bounds = [b for b in BOUNDS if b in set(table["reference"])] or [""]
    verdicts = []
    for b in bounds:
        rows = table[~table["reference"].isin(set(BOUNDS) - {b})]
        name = f"against {b}" if b else "without an oracle run"
        verdicts.append(f"{'met' if rows['met'].all() else 'not met'} {name} ({int(rows['met'].sum())} of "
                        f"{len(rows)} criteria)")
    out = [f"**The agent's bar** (level {level:g}; docs/protocol.md): {'; '.join(verdicts)}", "",
           "| criterion | against | bar | measured | met |", "|---|---|---|---|---|"]
    for r in table.itertuples():
        interval = f" [{r.ci_lo:.2f}, {r.ci_hi:.2f}]" if math.isfinite(r.ci_lo) else ""
        value = f"{int(r.measured)}" if r.criterion == "runs missing the target" else f"{r.measured:.2f}"
        where = f" ({r.where})" if r.where else ""
        bar = "0" if r.criterion == "runs missing the target" else f"≤ {r.bar:.2f}"
        bar += ", interval below 1" if interval else ""
        out.append(f"| {r.criterion} | {r.reference or '—'} | {bar} | {r.bound + ' ' if r.bound else ''}{value}"
                   f"{interval}{where} | {'yes' if r.met else 'no'} |")
    return "\n".join(out) + "\n"


def transfer_budgets(summary_json: Path) -> dict:
    """Per transfer pair, the PPO transitions of each policy (the transfer stage's ``summary.json``)."""
    if not summary_json.exists():
        return {}
    return json.loads(summary_json.read_text()).get("ppo_timesteps", {})


def compute(inference: pd.DataFrame, cfg: Config, scalability: pd.DataFrame | None = None,
            transfer: pd.DataFrame | None = None, budgets: Mapping | None = None) -> tuple[pd.DataFrame, list[dict]]:
    """The claims table from the stages' per-run summaries, and the scalability comparisons behind it.

    A pure function of its inputs, so a published table can be recomputed from the published summaries
    (``tests/test_expected.py``)."""
    rows = up_to_rows(inference, cfg)
    comparisons: list[dict] = []
    if scalability is not None:
        row, comparisons = scalability_rows(scalability, cfg)
        rows += row
    if transfer is not None:
        rows += transfer_rows(transfer, cfg, budgets)
    rows += ours_rows(inference, cfg)
    rows += engine_rows(cfg)
    return pd.DataFrame([with_verdict(r, cfg) for r in rows])[COLUMNS], comparisons


def _optional(path: Path) -> pd.DataFrame | None:
    return pd.read_csv(path) if path.exists() else None


def run(cfg: Config, out_dir: str | Path) -> dict:
    out = Path(out_dir)
    root = out.parent
    inference = pd.read_csv(root / "inference" / "summary.csv")
    table, comparisons = compute(inference, cfg, _optional(root / "scalability" / "summary.csv"),
                                 _optional(root / "transfer" / "summary.csv"),
                                 transfer_budgets(root / "transfer" / "summary.json"))
    io.write_csv(table, out / "claims.csv")
    io.write_csv(vs_static(inference, cfg), out / "per_config.csv")
    cells = per_cluster(inference, cfg)
    io.write_csv(cells, out / "per_cluster.csv")
    io.write_text(out / "held_out.md", held_out_markdown(inference, cells, _optional(root / "inference" / "clusters.csv")))
    policies = per_policy(inference, cfg, _optional(root / "inference" / "levels.csv"))
    io.write_csv(policies, out / "per_policy.csv")
    io.write_text(out / "per_policy.md", per_policy_markdown(policies, cfg.evaluation.target_fraction))
    write_goal(out, inference, policies, cfg)
    io.write_csv(pd.DataFrame(comparisons), out / "comparisons.csv")
    io.write_text(out / "claims.md", to_markdown(table, cfg))
    records = table.to_dict(orient="records")
    summary = {
        "profile": cfg.profile,
        "cpu": isa.cpu_identity(),  # the model decides the bits: disagreements() reads it
        "claims": records,
        "accuracy_gain_pts": records[0]["estimate"],  # up to, vs the median static
        "time_reduction_pct": next(r["estimate"] for r in records if r["unit"] == "%" and r["kind"] == "paper"),
    }
    io.write_json(root / "summary.json", summary)
    write_manifest(out, cfg, NAME)
    return summary


REPRO_REL_TOL = 1e-9
"""Relative difference between two runs' estimates that :func:`disagreements` still calls the same on
one CPU model: float noise of summation order, far below any tie band (the runs' numerics are pinned,
:mod:`dynamix.isa`, so on machines of one CPU model a rerun gives the same bits)."""


def same_cpu_model(a: Mapping | None, b: Mapping | None) -> bool:
    """Whether two ``cpu`` records (:func:`dynamix.isa.cpu_identity`) name one CPU model (vendor, family
    and model: what decides the kernels' bits); an unrecorded one is another model."""
    keys = ("vendor", "family", "model")
    return bool(a and b and all(a.get(k) for k in keys) and all(a.get(k) == b.get(k) for k in keys))


def disagreements(fresh: Sequence[dict], committed: Sequence[dict], rel_tol: float = REPRO_REL_TOL,
                  same_cpu: bool = True) -> list[str]:
    """How a rerun's claims (``summary.json``'s ``claims``) differ from the committed ones, one line
    each. Empty: the rerun reproduces the table.

    On one CPU model (``same_cpu``) the rerun must give the same table: a claim only one side has, another
    verdict, count of misses or seeds, an estimate or interval end further apart than ``rel_tol`` of the
    larger magnitude each disagree. On another model every run is a fresh draw of its noise
    (docs/protocol.md), so the stated tolerance is statistical: every claim on both sides with the same
    seeds and verdict, and each side's estimate inside the other's interval; the counts of misses may
    differ (a run near the target crosses it on one machine and not on the other)."""
    def close(a, b) -> bool:
        blank = [v is None or (isinstance(v, float) and math.isnan(v)) for v in (a, b)]
        if any(blank):
            return all(blank)
        return abs(a - b) <= rel_tol * max(abs(a), abs(b))

    def inside(v, row) -> bool:
        lo, hi = row.get("ci_lo"), row.get("ci_hi")
        return any(x is None or x != x for x in (v, lo, hi)) or lo <= v <= hi

    def by_claim(rows: Sequence[dict]) -> dict[str, dict]:  # a claim's second row (another reference) is "claim #2"
        seen: dict[str, int] = {}
        keyed: dict[str, dict] = {}
        for r in rows:
            n = seen[r["claim"]] = seen.get(r["claim"], 0) + 1
            keyed[r["claim"] if n == 1 else f"{r['claim']} #{n}"] = r
        return keyed

    old, new = by_claim(committed), by_claim(fresh)
    out = [f"{c!r}: only in the {side}" for side, mine, other in (("rerun", new, old), ("committed table", old, new))
           for c in mine if c not in other]
    for c in (c for c in new if c in old):
        a, b = new[c], old[c]
        keys = ("verdict", "missed", "n_seeds") if same_cpu else ("verdict", "n_seeds")
        out += [f"{c!r}: {k} {a.get(k)!r} (rerun) vs {b.get(k)!r} (committed)" for k in keys if a.get(k) != b.get(k)]
        if same_cpu:
            out += [f"{c!r}: {k} {a.get(k)!r} (rerun) vs {b.get(k)!r} (committed)"
                    for k in ("estimate", "ci_lo", "ci_hi") if not close(a.get(k), b.get(k))]
        elif not (inside(a.get("estimate"), b) and inside(b.get("estimate"), a)):
            out.append(f"{c!r}: estimate {a.get('estimate')!r} [{a.get('ci_lo')!r}, {a.get('ci_hi')!r}] (rerun) "
                       f"vs {b.get('estimate')!r} [{b.get('ci_lo')!r}, {b.get('ci_hi')!r}] (committed): "
                       f"one outside the other's interval")
    return out


PUBLISHED_INPUTS = {"inference": "inference_summary.csv", "levels": "inference_levels.csv", "scalability": "scalability_summary.csv",
                    "transfer": "transfer_summary.csv", "budgets": "transfer_summary.json"}
"""The per-run summaries a published profile (``docs/expected/<profile>/``) carries for its claims."""


def from_published(folder: str | Path, cfg: Config) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The claims table and per-cluster table recomputed from a published profile's summaries."""
    folder = Path(folder)
    inference = pd.read_csv(folder / PUBLISHED_INPUTS["inference"])
    table, _ = compute(inference, cfg, _optional(folder / PUBLISHED_INPUTS["scalability"]),
                       _optional(folder / PUBLISHED_INPUTS["transfer"]),
                       transfer_budgets(folder / PUBLISHED_INPUTS["budgets"]))
    return table, per_cluster(inference, cfg)


def republish(folder: str | Path, cfg: Config) -> None:
    """Rewrite a published profile's ``claims.csv``, ``claims.md``, ``per_cluster.csv``,
    ``held_out.md``, ``per_policy.*`` and ``goal.*`` from its summaries (after a change of the protocol,
    without rerunning a simulation)."""
    folder = Path(folder)
    table, cells = from_published(folder, cfg)
    io.write_csv(table, folder / "claims.csv")
    io.write_text(folder / "claims.md", to_markdown(table, cfg))
    io.write_csv(cells, folder / "per_cluster.csv")
    inference = pd.read_csv(folder / PUBLISHED_INPUTS["inference"])
    io.write_text(folder / "held_out.md", held_out_markdown(inference, cells, _optional(folder / "clusters.csv")))
    policies = per_policy(inference, cfg, _optional(folder / PUBLISHED_INPUTS["levels"]))
    io.write_csv(policies, folder / "per_policy.csv")
    io.write_text(folder / "per_policy.md", per_policy_markdown(policies, cfg.evaluation.target_fraction))
    write_goal(folder, inference, policies, cfg)


def held_out_markdown(inference: pd.DataFrame, cells: pd.DataFrame, clusters: pd.DataFrame | None = None) -> str:
    """Per held-out cell, what the README leads with (GitHub markdown): the cluster's kind, size and
    trade-off index (``clusters``, the inference stage's ``clusters.csv``), the oracle's mean time to
    target, the agent's ratio to its best other policy (:func:`per_cluster`) with interval and
    verdict, and the agent's and that policy's shares of the headroom ("—" without oracle runs), with
    how many runs of each missed the target. A missed run counts at its cell's horizon (the longest run
    there), a lower bound of its time to target, so what is built on it is a bound and says so: a share "≤"; the ratio "≥" when only
    the agent missed, "≤" when only the other policy did (both: the ratio is neither, and is shown bare
    beside the counts)."""
    info = clusters.set_index("cluster") if clusters is not None and len(clusters) else pd.DataFrame()
    t = inference.assign(_t=censored_time(inference), _missed=inference["time_to_target_s"].isna())
    lines = ["| cluster | kind | workers | trade-off index | oracle's time to target (s) | agent / best other "
             "(95% t interval) | best other | target missed, agent / best other | agent's headroom share "
             "| best other's share |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for (cl, opt), g in cells.groupby(["cluster", "optimizer"], sort=False):
        best = g[g["reference"] == "best other"].iloc[0]
        cell = t[(t["cluster"] == cl) & (t["optimizer"] == opt)]
        oracle = cell[cell["policy"] == ORACLE]["_t"]
        n_missed = [int(cell[cell["policy"] == p]["_missed"].sum()) for p in ("dynamix", best["best_other"])]
        missed = " / ".join(f"{m} of {int((cell['policy'] == p).sum())}"
                            for m, p in zip(n_missed, ("dynamix", best["best_other"])))
        bound = {(True, False): "≥ ", (False, True): "≤ "}.get((n_missed[0] > 0, n_missed[1] > 0), "")
        shares = [("≤ " if m else "") + f"{best[c]:.2f}" if c in best and math.isfinite(best[c]) else "—"
                  for c, m in zip(("agent_headroom_share", "headroom_share"), n_missed)]
        kind, workers, index = ((str(info.loc[cl, "kind"]), str(int(info.loc[cl, "n_workers"])),
                                 f"{info.loc[cl, 'trade_off_index']:.2f}") if cl in info.index else ("—",) * 3)
        name = cl if inference["optimizer"].nunique() == 1 else f"{cl}, {opt}"
        lines.append(f"| {name} | {kind} | {workers} | {index} | {f'{oracle.mean():.2f}' if len(oracle) else '—'} | "
                     f"{bound}{best['estimate']:.2f} [{best['ci_lo']:.2f}, {best['ci_hi']:.2f}] {best['verdict']} | "
                     f"{best['best_other']} | {missed} | {shares[0]} | {shares[1]} |")
    return "\n".join(lines) + "\n"


def to_markdown(table: pd.DataFrame, cfg: Config) -> str:
    """The claims table as GitHub markdown (the README's headline results)."""
    pct = int(round(100 * cfg.experiments.ci))
    lines = [f"| Claim (paper) | Paper | Ours (mean, {pct}% t interval) | Seeds x cells | Where "
             "| Runs missing the target (ours vs reference) | Verdict |",
             "|---|---|---|---|---|---|---|"]
    for r in table.itertuples():
        ours = f"{r.estimate:.2f} [{r.ci_lo:.2f}, {r.ci_hi:.2f}] {r.unit}"
        seeds = f"{r.n_seeds} x {r.n_cells}"
        lines.append(f"| {r.claim} | {r.paper_says} | {ours} | {seeds} | {r.where} | {r.missed} | {r.verdict} |")
    return "\n".join(lines) + "\n"


def figures(out_dir: str | Path, fig_dir: str | Path) -> list[Path]:
    per_config = pd.read_csv(Path(out_dir) / "per_config.csv")
    stem = Path(fig_dir) / "claims"
    paper = {"accuracy_gain_pts": PAPER_ACC_GAIN_PTS, "time_reduction_pct": PAPER_TIME_REDUCTION_PCT}
    plots.claims(per_config, paper, stem)
    return [stem.with_suffix(".png")]
