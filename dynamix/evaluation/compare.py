"""A policy's time to target against the static batch sizes and the adaptive baselines, per cluster.

The acceptance ratios of ``dynamix evaluate --compare`` and of the inference experiment's summary.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from dynamix.config import ConfigError
from dynamix.evaluation import stats
from dynamix.evaluation.targets import censored_time


def static_ratio_interval(rows: pd.DataFrame, policy: str, ci: float = 0.95) -> tuple[float, float]:
    """Interval of ``policy``'s time ratio to the median static on one cluster, paired by seed: per seed
    t_policy / median over the static sweep of t_static, the t interval of their logs
    (:func:`dynamix.evaluation.stats.ratio_interval`). ``rows`` are one cluster's summary rows with the
    censored time ``t``. With a handful of seeds the interval is wide: it says how far a ratio near the
    0.7 bar can be read."""
    t = stats.paired(rows, rows["t"], [])
    static = [p for p in t.columns if str(p).startswith("static")]
    est = stats.ratio_interval((t[policy] / t[static].median(axis=1)).to_numpy(), ci)
    return est["ci_lo"], est["ci_hi"]


def compare(summary: pd.DataFrame, policy: str, baselines: Sequence[str] = ("lbbsp", "gns")) -> pd.DataFrame:
    """Per cluster: ``policy``'s median time to target over seeds divided by the median static
    baseline's (median over static batch sizes of their per-size median over seeds), with its 95 %
    paired-by-seed interval (:func:`static_ratio_interval`), and by each of ``baselines``; and its mean
    final accuracy minus the best static's (points, x100).

    A run that never reaches the target counts at the cluster's longest run (:func:`censored_time`), as in the
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
