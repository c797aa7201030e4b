"""A policy's time to target against the static batch sizes and the adaptive baselines, per cluster.

The acceptance ratios of ``dynamix evaluate --compare`` and of the inference experiment's summary.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from dynamix.config import ConfigError
from dynamix.evaluation.targets import censored_time
from dynamix.seeding import derive_seed


def static_ratio_interval(rows: pd.DataFrame, policy: str, n_boot: int = 2000, ci: float = 0.95,
                          seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap interval of ``policy``'s ratio to the median static on one cluster.

    ``rows`` are one cluster's summary rows with the censored time ``t``. Each draw resamples every
    policy's seeds with replacement, independently (the seeds are the runs' replicates), and recomputes
    the ratio of medians exactly as :func:`compare` does. With a handful of seeds the interval is wide:
    it says how far a ratio near the 0.7 bar can be read.
    """
    rng = np.random.default_rng(derive_seed(seed, "compare-bootstrap"))
    times = {p: g.to_numpy(dtype=float) for p, g in rows.groupby("policy")["t"]}

    def draws(p: str) -> np.ndarray:
        x = times[p]
        return np.median(x[rng.integers(0, len(x), size=(n_boot, len(x)))], axis=1)

    static = np.median(np.stack([draws(p) for p in sorted(times) if p.startswith("static")]), axis=0)
    lo, hi = np.quantile(draws(policy) / static, [(1 - ci) / 2, 1 - (1 - ci) / 2])
    return float(lo), float(hi)


def compare(summary: pd.DataFrame, policy: str, baselines: Sequence[str] = ("lbbsp", "gns")) -> pd.DataFrame:
    """Per cluster: ``policy``'s median time to target over seeds divided by the median static
    baseline's (median over static batch sizes of their per-size median over seeds), with its 95 %
    seed-bootstrap interval (:func:`static_ratio_interval`), and by each of ``baselines``; and its mean
    final accuracy minus the best static's (points, x100).

    A run that never reaches the target counts at its total time (:func:`censored_time`), as in the
    claims (:mod:`dynamix.experiments.claims`): a ratio whose denominator holds such runs is an upper
    bound, one whose numerator does a lower bound. ``policy_unreached`` and ``static_unreached`` count them.
    """
    s = summary.copy()
    s["t"] = censored_time(s)
    s["unreached"] = s["time_to_target_s"].isna()
    out = []
    for name, rows in s.groupby("cluster"):
        med = rows.groupby("policy")["t"].median()
        acc = rows.groupby("policy")["final_accuracy"].mean()
        unreached = rows.groupby("policy")["unreached"].sum()
        static = [p for p in med.index if p.startswith("static")]
        if policy not in med.index:
            raise ConfigError(f"compare: policy {policy!r} is not in the summary: must be one of {sorted(med.index)}")
        row = {"cluster": name, "policy_time_s": med[policy], "policy_final_acc": acc[policy],
               "policy_unreached": int(unreached[policy])}
        if static:
            row["static_unreached"] = int(unreached[static].sum())
            row["median_static_time_s"] = float(np.median(med[static]))
            row["ratio_vs_median_static"] = med[policy] / row["median_static_time_s"]
            row["ratio_ci_low"], row["ratio_ci_high"] = static_ratio_interval(rows, policy)
            row["acc_minus_best_static_pts"] = 100 * (acc[policy] - acc[static].max())
            row["best_static"] = acc[static].idxmax()
        for b in baselines:
            if b in med.index:
                row[f"ratio_vs_{b}"] = med[policy] / med[b]
                row[f"acc_minus_{b}_pts"] = 100 * (acc[policy] - acc[b])
        out.append(row)
    return pd.DataFrame(out)
