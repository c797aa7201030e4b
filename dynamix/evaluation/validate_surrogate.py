"""The fitted surrogate against the real-math simulator (``dynamix validate-surrogate``).

:func:`validate` evaluates the same policies on the same clusters in both backends
(:func:`dynamix.evaluation.runner.evaluate`, each with its own target and time budget, as an evaluation
on that backend would report them) and writes ``surrogate_validation.csv`` (columns :data:`COLUMNS`:
the mean time to target over seeds, a run that never reached it counted at its total time) and
``surrogate_validation.json``: the Spearman rank correlation of the two times over every (cluster,
policy) and within each cluster, and the median absolute relative error of the surrogate's time,
beside the goals (Spearman >= 0.8, median error <= 15 %), and per cluster (:func:`per_cluster`) the
share of runs that reach or miss alike, the final-accuracy error per policy, and how well the real math
agrees with itself from seed to seed (:func:`real_agreement`), the ceiling of any model of the mean
read against single runs. The surrogate itself
is fitted by :mod:`dynamix.evaluation.surrogate_fit`.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from dynamix import cluster as clusters
from dynamix import io, paths
from dynamix.cluster import ClusterSpec
from dynamix.config import Config, with_overrides
from dynamix.evaluation.plan import run_cache, sim_config
from dynamix.evaluation.runner import evaluate
from dynamix.evaluation.targets import censored_time
from dynamix.paths import git_sha
from dynamix.sim import progress

log = logging.getLogger(__name__)

COLUMNS = ["cluster", "policy", "surrogate_tta_s", "real_tta_s"]
GOALS = {"spearman_min": 0.8, "median_abs_rel_error_max": 0.15}
VALIDATION_POLICIES = ("static:32", "static:64", "static:128", "static:256", "static:512", "lbbsp",
                       "lbbsp:batch=512", "gns", "ramp")
"""The compared policies: the static sweep, LB-BSP at its own and at a fixed global batch, GNS, ramp."""


def validation_clusters() -> list[str]:
    """The validation clusters (``clusters/validation/``): never held-out, never trained on."""
    return sorted(str(p.relative_to(paths.ROOT)) for p in (paths.ROOT / "clusters" / "validation").glob("*.yaml"))


def tta_table(summary: pd.DataFrame) -> pd.Series:
    """Mean time to target per (cluster, policy) over seeds, censored by the one rule (:func:`censored_time`)."""
    return summary.assign(tta=censored_time(summary)).groupby(["cluster", "policy"])["tta"].mean()


def statistics(table: pd.DataFrame) -> dict:
    """Spearman (pooled and the mean within clusters) and the median absolute relative error."""
    s, r = table["surrogate_tta_s"].to_numpy(float), table["real_tta_s"].to_numpy(float)
    within = [spearmanr(g["surrogate_tta_s"], g["real_tta_s"]).statistic for _, g in table.groupby("cluster")]
    rel = np.abs(s - r) / r
    return {"spearman": float(spearmanr(s, r).statistic), "spearman_within_clusters_mean": float(np.nanmean(within)),
            "spearman_within_clusters": dict(zip(sorted(table["cluster"].unique()), map(float, within))),
            "median_abs_rel_error": float(np.median(rel)), "mean_abs_rel_error": float(np.mean(rel)),
            "n": int(len(table))}


def _spearman(a: pd.Series, b: pd.Series) -> float | None:
    """Spearman of two aligned series; None where either is constant (no rank correlation exists)."""
    return float(spearmanr(a, b).statistic) if a.nunique() > 1 and b.nunique() > 1 else None


def _seed_times(runs: pd.DataFrame) -> pd.DataFrame:
    """One cluster's censored times to target (:func:`censored_time`), [policy] x [seed]."""
    return runs.assign(tta=censored_time(runs)).pivot(index="policy", columns="seed", values="tta")


def _mean(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return float(np.mean(kept)) if kept else None


def real_agreement(real: pd.DataFrame) -> dict | None:
    """How well one real-math seed predicts another on one cluster (``real``: its runs, >= 2 seeds;
    None with one): the ceiling of a model of the mean, such as the surrogate, read against single runs.

    ``spearman``: the Spearman of two seeds' times to target over the policies (one censoring rule),
    the mean over every pair of seeds; ``reach``: the share of runs whose outcome (reach or miss) is
    their policy's majority one, the best that any model giving each policy one outcome can score;
    ``final_sd``: the largest between-seed standard deviation of a policy's final accuracy, the error
    a perfect mean has against one run. A bar above these is a bar no model of the mean can pass
    against one seed (``docs/protocol.md``, "The surrogate's validation")."""
    seeds = sorted(real["seed"].unique())
    if len(seeds) < 2:
        return None
    times = _seed_times(real)
    pairs = [_spearman(times[a], times[b]) for i, a in enumerate(seeds) for b in seeds[i + 1:]]
    reached = real.assign(hit=real["time_to_target_s"].notna()).groupby("policy")["hit"].mean()
    return {"spearman": _mean(pairs), "reach": float(np.maximum(reached, 1 - reached).mean()),
            "final_sd": float(real.groupby("policy")["final_accuracy"].std(ddof=1).max()), "seeds": len(seeds)}


def per_cluster(surrogate: pd.DataFrame, real: pd.DataFrame) -> dict[str, dict]:
    """Per cluster, where decisions are made: the Spearman of the two backends' mean times to target
    over its policies, and its mean over the real seeds one at a time (``spearman_per_seed``), the share
    of (policy, seed) runs that both reach or both miss their target, the surrogate's final accuracy
    minus the real one per policy (means over seeds) with its largest magnitude, and the real math's
    agreement with itself (:func:`real_agreement`, ``real_self``), what any model of the mean is capped by."""
    out = {}
    times = pd.DataFrame({"surrogate": tta_table(surrogate), "real": tta_table(real)})
    for name, r in real.groupby("cluster", sort=True):
        s = surrogate[surrogate["cluster"] == name]
        runs = r.set_index(["policy", "seed"])["time_to_target_s"].notna().to_frame("real").join(
            s.set_index(["policy", "seed"])["time_to_target_s"].notna().rename("surrogate"), how="inner")
        error = (s.groupby("policy")["final_accuracy"].mean() - r.groupby("policy")["final_accuracy"].mean()).dropna()
        t = times.loc[name]
        one = _seed_times(r)
        out[str(name)] = {"spearman": _spearman(t["surrogate"], t["real"]),
                          "spearman_per_seed": _mean([_spearman(t["surrogate"], one[k].reindex(t.index))
                                                      for k in one.columns]),
                          "reach_agreement": float((runs["real"] == runs["surrogate"]).mean()),
                          "max_abs_final_error": float(error.abs().max()),
                          "final_error": {str(k): round(float(v), 4) for k, v in error.items()}, "n": int(len(t)),
                          "real_self": real_agreement(r)}
    return out


def cluster_policies(spec: ClusterSpec, policies: Sequence[str], per_worker: Sequence[int]) -> list[str]:
    """``policies`` and, for each b of ``per_worker``, LB-BSP at b samples per worker on ``spec``
    (``lbbsp:batch=<b N>``: the family the tuned LB-BSP and the agent's teacher come from)."""
    return list(policies) + [f"lbbsp:batch={int(b) * spec.n_workers}" for b in per_worker]


def validate(cfg: Config, out_dir: str | Path, policies: Sequence[str] = VALIDATION_POLICIES,
             cluster_specs: Sequence[str] | None = None, seeds: int = 1, progress_bar: bool = True,
             per_worker: Sequence[int] = (), real_cache: str | Path | None = None) -> dict:
    """Both backends on ``policies`` (plus :func:`cluster_policies`' LB-BSP at ``per_worker`` sizes) x
    ``cluster_specs`` (default: :func:`validation_clusters`) over ``seeds`` seeds; writes the table and
    statistics into ``out_dir`` and returns the statistics. The real-math runs are cached in
    ``real_cache`` (default ``out_dir/cache/runs``; a profile's run cache reuses its runs)."""
    out = Path(out_dir)
    cluster_specs = list(cluster_specs or validation_clusters())
    if not policies and not per_worker:
        raise ValueError("validate needs at least one policy or per-worker batch")
    run_cfg = sim_config(cfg)
    sur_cfg = with_overrides(run_cfg, {"sim": {"backend": "surrogate"}})
    progress.for_config(sur_cfg)  # a missing or mismatched artifact stops here, before the real runs
    summaries = {}
    caches = {"surrogate": run_cache(out / "surrogate"),
              "real": run_cache(out / "real") if real_cache is None else Path(real_cache)}
    for name, c, jobs in (("surrogate", sur_cfg, 1), ("real", run_cfg, cfg.experiments.jobs)):
        parts = [evaluate([spec], cluster_policies(spec, policies, per_worker), c, seeds, out_dir=None,
                          progress=progress_bar, cache_dir=caches[name], jobs=jobs)[1]
                 for spec in map(clusters.load, cluster_specs)]
        summaries[name] = pd.concat(parts, ignore_index=True)
        io.write_csv(summaries[name], out / f"{name}_summary.csv")
    table = pd.DataFrame({"surrogate_tta_s": tta_table(summaries["surrogate"]),
                          "real_tta_s": tta_table(summaries["real"])}).reset_index()[COLUMNS]
    io.write_csv(table.round(4), out / "surrogate_validation.csv")
    stats = statistics(table)
    stats["per_cluster"] = per_cluster(summaries["surrogate"], summaries["real"])
    sur = progress.for_config(sur_cfg)
    stats.update(goals=GOALS, meets_goals=bool(stats["spearman"] >= GOALS["spearman_min"] and
                                              stats["median_abs_rel_error"] <= GOALS["median_abs_rel_error_max"]),
                 profile=cfg.profile, seeds=seeds, policies=list(policies), per_worker=[int(b) for b in per_worker],
                 clusters=cluster_specs,
                 surrogate_sha256=sur.checksum(), git_sha=git_sha())
    io.write_json(out / "surrogate_validation.json", {k: (None if isinstance(v, float) and math.isnan(v) else v)
                                                      for k, v in stats.items()})
    log.info("surrogate validation: Spearman %.3f, median |relative error| %.1f %% over %d (cluster, policy)",
             stats["spearman"], 100 * stats["median_abs_rel_error"], stats["n"])
    return stats
