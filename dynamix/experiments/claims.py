"""The paper's claims beside our numbers, each with a 95% bootstrap interval over seeds and a verdict.

Claims (arXiv 2510.08522, abstract and Sec. V) and how each is measured here, always *paired by
seed* (every policy of a seed starts from the same weights and data order). A *cell* is one held-out
cluster and optimiser of the inference experiment; "static" is the median over the whole static
sweep (``static:B`` for every B of ``experiments.baselines.batch_sizes``, all run in every cell).

1. "up to 6.3% improvement in the final model accuracy" (vs static batch sizes): per seed, DYNAMIX's
   final accuracy minus the median static's (points). "Up to" is the largest cell estimate; its
   interval is that of the *maximum* (:func:`max_over_cells`), not of the winning cell alone, which
   would carry the winner's curse. Beside it, the same against the best static batch size of each
   cell (the static with the best estimate over seeds there).
2. "46% reduction in the total training time" (vs static): per seed 100 (1 - T_dynamix / median_B T_B),
   T the time to target; "up to" and the best static as in 1.
3. "maintains the best performance as cluster size increases to 32 nodes": at the largest simulated
   size, per seed T_dynamix / T_other for every other policy; the row shows the binding comparison
   (:func:`binding`): best only if every ratio interval lies below 1.
4. "learned policies generalize effectively across related model architectures": per transfer pair,
   per seed T_transferred / T_target-trained (the target policy trained with the source's PPO budget)
   and T_transferred / T_static.
5. Ours, beyond the paper: DYNAMIX's time to target against LB-BSP, its teacher rule
   ``lbbsp:batch=512``, LB-BSP tuned on validation clusters (``lbbsp:tuned``) and GNS, pooled over
   every cell (:func:`pooled_over_cells`), and per cell in ``per_cluster.csv`` (:func:`per_cluster`).

6. Ours, on the real engine: the agent's wall-clock time ratio to the median static and to LB-BSP
   from a committed quiet-machine run of :mod:`dynamix.evaluation.sim2real`, the simulator's ratio
   for the same runs beside it (:func:`engine_rows`).

A run that never reaches the target is censored at its total time (its time to target is at least
that), identically for every policy. Estimates are the IQM (or mean, ``experiments.aggregate``) over
seeds; intervals are percentile bootstraps that resample seeds within every cell. The verdict of every
row follows from its interval alone (:func:`verdict`, recomputable from ``claims.csv`` with
:func:`row_verdict`).

Outputs: ``claims.csv`` (claim, paper, estimate, ci_lo, ci_hi, null, side, n_seeds, n_cells, verdict,
...), ``claims.md`` (the README table), ``per_config.csv`` (every cell against the median and the best
static), ``per_cluster.csv`` (per cell, DYNAMIX's time ratio to the median static and to every adaptive
policy), ``comparisons.csv`` (every ratio behind the binding scalability row), ``manifest.json``; the
headline numbers go to ``<results>/summary.json`` (the pipeline's DVC metric). Figure: per-cell
accuracy gains and time reductions with intervals against the paper's values.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from dynamix import io, paths, plots
from dynamix.config import Config
from dynamix.evaluation.stats import paired, point_estimate
from dynamix.evaluation.targets import censored_time
from dynamix.experiments.manifest import write_manifest
from dynamix.experiments.shared import TUNED_LBBSP
from dynamix.seeding import derive_seed

log = logging.getLogger(__name__)

NAME = "claims"
PAPER_ACC_GAIN_PTS = 6.3
PAPER_TIME_REDUCTION_PCT = 46.0

SIDES = ("above", "below")
COLUMNS = ["claim", "kind", "paper", "paper_says", "unit", "estimate", "ci_lo", "ci_hi", "null", "side",
           "n_seeds", "n_cells", "where", "verdict"]


# --------------------------------------------------------------------------------------------
# The verdict rule
# --------------------------------------------------------------------------------------------


def verdict(ci_lo: float, ci_hi: float, null: float, side: str, paper: float = math.nan,
            kind: str = "paper") -> str:
    """The verdict of one row from its interval [ci_lo, ci_hi] alone.

    ``null`` is the value of "no effect" (1 for ratios, 0 for differences); ``side`` says where the
    claim puts the effect (``above`` or ``below`` the null); ``paper`` is the paper's own number (NaN
    when it states none); ``kind`` is ``paper`` (a claim of the paper) or ``ours`` (beyond it).

    - ``not measured``: the interval is not finite;
    - ``tie``: the interval holds the null;
    - ``reproduced`` (ours: ``holds``): the interval lies on the claim's side of the null, and does
      not fall wholly short of the paper's number;
    - ``direction only``: on the claim's side, but wholly short of the paper's number (paper claims only);
    - ``not reproduced`` (ours: ``does not hold``): the interval lies on the other side of the null.
    """
    if side not in SIDES:
        raise ValueError(f"side = {side!r} is not allowed: must be one of {', '.join(SIDES)}")
    if kind not in ("paper", "ours"):
        raise ValueError(f"kind = {kind!r} is not allowed: must be 'paper' or 'ours'")
    if not (math.isfinite(ci_lo) and math.isfinite(ci_hi)):
        return "not measured"
    if ci_lo <= null <= ci_hi:
        return "tie"
    on_claimed_side = ci_lo > null if side == "above" else ci_hi < null
    if not on_claimed_side:
        return "not reproduced" if kind == "paper" else "does not hold"
    short = ci_hi < paper if side == "above" else ci_lo > paper  # False when paper is NaN
    if kind == "paper" and short:
        return "direction only"
    return "reproduced" if kind == "paper" else "holds"


def row_verdict(row: Mapping) -> str:
    """:func:`verdict` of one row of ``claims.csv`` (a dict or a pandas row)."""
    paper = float(row["paper"]) if row["paper"] is not None and row["paper"] == row["paper"] else math.nan
    return verdict(float(row["ci_lo"]), float(row["ci_hi"]), float(row["null"]), str(row["side"]), paper,
                   str(row["kind"]))


# --------------------------------------------------------------------------------------------
# Estimates over seeds, within and across cells
# --------------------------------------------------------------------------------------------


def _finite(values) -> np.ndarray:
    x = np.asarray(values, dtype=float)
    return x[np.isfinite(x)]


def _stat(samples: np.ndarray, method: str) -> np.ndarray:
    """IQM (trim floor(n/4) each side, as :func:`dynamix.evaluation.stats.iqm`) or mean of each row."""
    if method == "mean":
        return samples.mean(axis=1)
    if method != "iqm":
        raise ValueError(f"experiments.aggregate = {method!r}: must be 'iqm' or 'mean'")
    s = np.sort(samples, axis=1)
    k = s.shape[1] // 4
    return s[:, k : s.shape[1] - k].mean(axis=1)


def _resample(cells: Sequence[np.ndarray], n_boot: int, seed: int, salt: str) -> list[np.ndarray]:
    """Per cell an (n_boot, n_i) array of its values, seeds drawn with replacement within the cell."""
    rng = np.random.default_rng(derive_seed(seed, "claims-bootstrap", salt))
    return [x[rng.integers(0, x.size, size=(n_boot, x.size))] for x in cells]


def _interval(stats: np.ndarray, ci: float) -> tuple[float, float]:
    lo, hi = np.quantile(stats, [(1 - ci) / 2, 1 - (1 - ci) / 2])
    return float(lo), float(hi)


_EMPTY = {"estimate": math.nan, "ci_lo": math.nan, "ci_hi": math.nan, "n_seeds": 0, "n_cells": 0}


def _counts(cells: Sequence[np.ndarray]) -> dict:
    return {"n_seeds": int(min(x.size for x in cells)), "n_cells": len(cells)}


def within_cell(values, method: str, n_boot: int, ci: float, seed: int = 0, salt: str = "") -> dict:
    """Estimate and interval of one cell's per-seed values (seeds resampled with replacement)."""
    x = _finite(values)
    if x.size == 0:
        return {**_EMPTY, "n_cells": 1}
    lo, hi = _interval(_stat(_resample([x], n_boot, seed, salt)[0], method), ci)
    return {"estimate": float(_stat(x[None], method)[0]), "ci_lo": lo, "ci_hi": hi, **_counts([x])}


def max_over_cells(cells: Sequence, method: str, n_boot: int, ci: float, seed: int = 0,
                   salt: str = "") -> dict:
    """"Up to": the largest cell estimate, with the bootstrap interval of the maximum.

    Each replicate resamples the seeds within every cell, recomputes every cell's estimate and keeps
    the largest; the interval is the percentiles of those maxima. Reporting the winning cell's own
    interval instead would ignore that it was picked for being high (the winner's curse).
    ``argmax``: the index of the cell with the largest estimate.
    """
    xs = [_finite(c) for c in cells]
    keep = [i for i, x in enumerate(xs) if x.size]
    if not keep:
        return {**_EMPTY, "argmax": -1}
    xs = [xs[i] for i in keep]
    est = np.array([_stat(x[None], method)[0] for x in xs])
    reps = np.stack([_stat(s, method) for s in _resample(xs, n_boot, seed, salt)], axis=1).max(axis=1)
    lo, hi = _interval(reps, ci)
    best = keep[int(est.argmax())]
    return {"estimate": float(est.max()), "ci_lo": lo, "ci_hi": hi, **_counts(xs), "argmax": best}


def pooled_over_cells(cells: Sequence, method: str, n_boot: int, ci: float, seed: int = 0,
                      salt: str = "") -> dict:
    """One estimate over every cell's per-seed values pooled; the bootstrap resamples seeds within
    every cell (a stratified bootstrap), so each replicate keeps every cell's share."""
    xs = [x for x in (_finite(c) for c in cells) if x.size]
    if not xs:
        return dict(_EMPTY)
    pooled = np.concatenate(xs)
    reps = _stat(np.concatenate(_resample(xs, n_boot, seed, salt), axis=1), method)
    lo, hi = _interval(reps, ci)
    return {"estimate": float(_stat(pooled[None], method)[0]), "ci_lo": lo, "ci_hi": hi, **_counts(xs)}


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


def _boot(cfg: Config) -> tuple[str, int, float]:
    e = cfg.experiments
    return e.aggregate, e.n_boot, e.ci


def static_sweep(columns) -> list[str]:
    """The static policies among ``columns``, by batch size."""
    static = [str(c) for c in columns if str(c).startswith("static:")]
    return sorted(static, key=lambda c: int(c.split(":")[1]))


def per_seed_vs_static(inference: pd.DataFrame, cfg: Config) -> pd.DataFrame:
    """Long table of per-seed effects: cluster, optimizer, seed, metric (``accuracy_gain_pts`` or
    ``time_reduction_pct``), reference (``median static`` or ``best static``), best_static, value."""
    method = cfg.experiments.aggregate
    acc = paired(inference, inference["final_accuracy"].astype(float), ["cluster", "optimizer"])
    tim = paired(inference, censored_time(inference), ["cluster", "optimizer"])
    static = static_sweep(acc.columns)
    if not static or "dynamix" not in acc.columns:
        raise ValueError("inference/summary.csv needs the policy `dynamix` and the static sweep "
                         "(experiments.inference.policies)")
    rows = []
    for (cl, opt), a in acc.groupby(level=[0, 1], sort=False):
        t = tim.loc[a.index]
        seeds = a.index.get_level_values("seed")
        best_acc = max(static, key=lambda p: point_estimate(a[p], method))
        best_t = min(static, key=lambda p: point_estimate(t[p], method))
        effects = {
            ("accuracy_gain_pts", "median static", ""): 100 * (a["dynamix"] - a[static].median(axis=1)),
            ("accuracy_gain_pts", "best static", best_acc): 100 * (a["dynamix"] - a[best_acc]),
            ("time_reduction_pct", "median static", ""): 100 * (1 - t["dynamix"] / t[static].median(axis=1)),
            ("time_reduction_pct", "best static", best_t): 100 * (1 - t["dynamix"] / t[best_t]),
        }
        for (metric, ref, best), v in effects.items():
            rows += [{"cluster": cl, "optimizer": opt, "seed": int(s), "metric": metric, "reference": ref,
                      "best_static": best, "value": float(x)}
                     for s, x in zip(seeds, v.to_numpy())]
    return pd.DataFrame(rows)


def vs_static(inference: pd.DataFrame, cfg: Config) -> pd.DataFrame:
    """Per cell, metric and reference (median / best static): estimate and interval over seeds."""
    method, n_boot, ci = _boot(cfg)
    long = per_seed_vs_static(inference, cfg)
    rows = []
    keys = ["cluster", "optimizer", "metric", "reference"]
    for (cl, opt, metric, ref), g in long.groupby(keys, sort=False):
        est = within_cell(g["value"], method, n_boot, ci, salt=f"{cl}/{opt}/{metric}/{ref}")
        rows.append({"cluster": cl, "optimizer": opt, "metric": metric, "reference": ref,
                     "best_static": g["best_static"].iloc[0], **est})  # fmt: skip
    return pd.DataFrame(rows)


def up_to_rows(inference: pd.DataFrame, cfg: Config) -> list[dict]:
    """The two "up to" claims against the median static, each followed by the best-static row."""
    method, n_boot, ci = _boot(cfg)
    long = per_seed_vs_static(inference, cfg)
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
            est = max_over_cells([g["value"] for _, g in groups], method, n_boot, ci, salt=f"{metric}/{ref}")
            (cl, opt), g = groups[est.pop("argmax")]
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
                        **est, "null": 0.0, "side": "above", "where": where})  # fmt: skip
    return out


def ratio_cells(per_run: pd.DataFrame, keys: list[str], num: str, den: str) -> list[np.ndarray]:
    """Per group of ``keys``: the per-seed ratios of censored times ``num`` / ``den``."""
    t = paired(per_run, censored_time(per_run), keys)
    if num not in t.columns or den not in t.columns:
        return []
    r = t[num] / t[den]
    return [g.to_numpy(dtype=float) for _, g in r.groupby(level=list(range(len(keys))), sort=False)]


def scalability_rows(scal: pd.DataFrame, cfg: Config) -> tuple[list[dict], list[dict]]:
    """The "best at the largest cluster" row (binding comparison) and every comparison behind it."""
    method, n_boot, ci = _boot(cfg)
    n_max = int(scal["n_workers"].max())
    at = scal[scal["n_workers"] == n_max]
    comps = []
    for other in [p for p in dict.fromkeys(at["policy"]) if p != "dynamix"]:
        cells = ratio_cells(at, ["n_workers"], "dynamix", other)
        est = within_cell(cells[0] if cells else [], method, n_boot, ci, salt=f"scalability/{other}")
        comps.append({"claim": f"DYNAMIX / {other} at {n_max} workers", "kind": "paper", "paper": math.nan,
                      "paper_says": "ratio < 1", "unit": "time ratio", **est, "null": 1.0, "side": "below",
                      "where": f"vs {other}", "other": other})  # fmt: skip
    if not comps:
        return [], []
    b = binding(comps)
    others = ", ".join(c["other"] for c in comps)
    row = {**{k: v for k, v in b.items() if k != "other"},
           "claim": f"best policy at the largest cluster ({n_max} workers)",
           "paper_says": "best (ratio < 1 vs every other)",
           "where": f"vs {b['other']}, the binding one of {len(comps)} others ({others})"}
    for c in comps:
        c["verdict"] = row_verdict(c)
    return [row], comps


def transfer_rows(tr: pd.DataFrame, cfg: Config,
                  budgets: Mapping[str, Mapping[str, int]] | None = None) -> list[dict]:
    """Per pair: transferred / target-trained (same PPO budget) and transferred / static, per seed."""
    method, n_boot, ci = _boot(cfg)
    rows = []
    for pair, sub in tr.groupby("pair", sort=False):
        for ref in [p for p in dict.fromkeys(sub["policy"]) if p != "transferred"]:
            cells = ratio_cells(sub, ["pair"], "transferred", ref)
            est = within_cell(cells[0] if cells else [], method, n_boot, ci, salt=f"transfer/{pair}/{ref}")
            where = f"transferred vs {ref}"
            steps = (budgets or {}).get(pair, {})
            if ref == "target-trained" and steps:
                src, dst = steps.get("transferred"), steps.get("target-trained")
                same = f" (both {src} PPO transitions)"
                where += same if src == dst else f" (PPO transitions differ: {src} vs {dst})"
            rows.append({"claim": f"transferred policy generalises ({pair})", "kind": "paper",
                         "paper": math.nan, "paper_says": "ratio < 1", "unit": "time ratio", **est,
                         "null": 1.0, "side": "below", "where": where})
    return rows


def teacher_spec(cfg: Config) -> str:
    """The rule the agent's warm start imitates (:mod:`dynamix.rl.warmstart`): LB-BSP's split of a global
    batch of ``rl.warm_start_batch`` (``lbbsp:batch=512`` by default), or of the current one when 0."""
    return f"lbbsp:batch={cfg.rl.warm_start_batch}" if cfg.rl.warm_start_batch > 0 else "lbbsp"


def ours_rows(inference: pd.DataFrame, cfg: Config) -> list[dict]:
    """DYNAMIX against LB-BSP, its teacher rule and GNS, pooled over every cell (stratified bootstrap)."""
    method, n_boot, ci = _boot(cfg)
    rows = []
    for ref in dict.fromkeys(("lbbsp", teacher_spec(cfg), TUNED_LBBSP, "gns")):
        cells = ratio_cells(inference, ["cluster", "optimizer"], "dynamix", ref)
        if not cells:
            continue
        est = pooled_over_cells(cells, method, n_boot, ci, salt=f"ours/{ref}")
        rows.append({"claim": f"(ours) DYNAMIX vs {ref}, time to target", "kind": "ours", "paper": math.nan,
                     "paper_says": "—", "unit": "time ratio", **est, "null": 1.0, "side": "below",
                     "where": f"pooled over {est['n_cells']} held-out cells"})  # fmt: skip
    return rows


def engine_rows(cfg: Config) -> list[dict]:
    """The agent on the real engine (:mod:`dynamix.evaluation.sim2real`, a committed quiet-machine run
    under ``experiments.sim2real.published``): its wall-clock time ratio to the median static and to
    LB-BSP, with the simulator's ratio for the same spec, seeds and policies beside it. None when
    nothing is published."""
    folder = cfg.experiments.sim2real.published
    path = paths.resolve(folder) / "ratios.csv" if folder else None
    if path is None or not path.exists():
        return []
    table = pd.read_csv(path)
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
        rows.append({"claim": f"(real engine) DYNAMIX vs {ref}, wall-clock time to target", "kind": "ours",
                     "paper": math.nan, "paper_says": "—", "unit": "time ratio", "estimate": float(e["estimate"]),
                     "ci_lo": float(e["ci_lo"]), "ci_hi": float(e["ci_hi"]), "n_seeds": int(e["n_seeds"]),
                     "n_cells": 1, "null": 1.0, "side": "below",
                     "where": f"{cluster}, 4 torchrun workers on this machine{beside}"})  # fmt: skip
    return rows


def per_cluster(inference: pd.DataFrame, cfg: Config) -> pd.DataFrame:
    """Per cell (cluster, optimizer) and reference: DYNAMIX's per-seed time-to-target ratio to the median
    static and to every adaptive policy run there, estimate and interval over seeds (lower is better;
    censored times as everywhere, :func:`~dynamix.evaluation.targets.censored_time`)."""
    method, n_boot, ci = _boot(cfg)
    t = paired(inference, censored_time(inference), ["cluster", "optimizer"])
    static = static_sweep(t.columns)
    adaptive = [p for p in t.columns if p != "dynamix" and not str(p).startswith("static:")]
    rows = []
    for (cl, opt), g in t.groupby(level=[0, 1], sort=False):
        refs = {"median static": g[static].median(axis=1), **{p: g[p] for p in adaptive}}
        for ref, den in refs.items():
            est = within_cell((g["dynamix"] / den).to_numpy(), method, n_boot, ci, salt=f"cell/{cl}/{opt}/{ref}")
            rows.append({"cluster": cl, "optimizer": opt, "reference": ref, **est,
                         "verdict": verdict(est["ci_lo"], est["ci_hi"], 1.0, "below", kind="ours")})
    return pd.DataFrame(rows)


def _transfer_budgets(tr_dir: Path) -> dict:
    path = tr_dir / "summary.json"
    if not path.exists():
        return {}
    return json.loads(path.read_text()).get("ppo_timesteps", {})


def run(cfg: Config, out_dir: str | Path) -> dict:
    out = Path(out_dir)
    root = out.parent
    inference = pd.read_csv(root / "inference" / "summary.csv")
    rows = up_to_rows(inference, cfg)
    comparisons: list[dict] = []
    scal_path = root / "scalability" / "summary.csv"
    if scal_path.exists():
        row, comparisons = scalability_rows(pd.read_csv(scal_path), cfg)
        rows += row
    tr_path = root / "transfer" / "summary.csv"
    if tr_path.exists():
        rows += transfer_rows(pd.read_csv(tr_path), cfg, _transfer_budgets(root / "transfer"))
    rows += ours_rows(inference, cfg)
    rows += engine_rows(cfg)
    for r in rows:
        r["verdict"] = row_verdict(r)
    table = pd.DataFrame(rows)[COLUMNS]
    per_config = vs_static(inference, cfg)
    io.write_csv(table, out / "claims.csv")
    io.write_csv(per_config, out / "per_config.csv")
    io.write_csv(per_cluster(inference, cfg), out / "per_cluster.csv")
    io.write_csv(pd.DataFrame(comparisons), out / "comparisons.csv")
    io.write_text(out / "claims.md", to_markdown(table, cfg))
    summary = {
        "profile": cfg.profile,
        "claims": table.to_dict(orient="records"),
        "accuracy_gain_pts": rows[0]["estimate"],  # up to, vs the median static
        "time_reduction_pct": next(r["estimate"] for r in rows if r["unit"] == "%" and r["kind"] == "paper"),
    }
    io.write_json(root / "summary.json", summary)
    write_manifest(out, cfg, NAME)
    return summary


def to_markdown(table: pd.DataFrame, cfg: Config) -> str:
    """The claims table as GitHub markdown (the README's "Expected results")."""
    pct = int(round(100 * cfg.experiments.ci))
    ours = f"Ours ({cfg.experiments.aggregate.upper()}, {pct}% CI)"
    lines = [f"| Claim (paper) | Paper | {ours} | Seeds x cells | Where | Verdict |",
             "|---|---|---|---|---|---|"]
    for r in table.itertuples():
        ours = f"{r.estimate:.2f} [{r.ci_lo:.2f}, {r.ci_hi:.2f}] {r.unit}"
        seeds = f"{r.n_seeds} x {r.n_cells}"
        lines.append(f"| {r.claim} | {r.paper_says} | {ours} | {seeds} | {r.where} | {r.verdict} |")
    return "\n".join(lines) + "\n"


def figures(out_dir: str | Path, fig_dir: str | Path) -> list[Path]:
    per_config = pd.read_csv(Path(out_dir) / "per_config.csv")
    stem = Path(fig_dir) / "claims"
    paper = {"accuracy_gain_pts": PAPER_ACC_GAIN_PTS, "time_reduction_pct": PAPER_TIME_REDUCTION_PCT}
    plots.claims(per_config, paper, stem)
    return [stem.with_suffix(".png")]
