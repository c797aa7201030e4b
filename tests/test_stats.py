"""The statistics every verdict rests on (dynamix/evaluation/stats.py): t intervals over seeds, the
pooled and "up to" intervals, the tie band, and the verdict rule's false-verdict rate under the null.

The null check compares a policy with itself: two seed sets of the same noisy policy, paired by
index, so every verdict other than ``tie`` or ``inconclusive`` is an error. At the seed counts we run
(3 and 5) the rule must err at most 1 - ci = 5 % of the time; a percentile bootstrap over seeds, the
rule this one replaced, errs about a quarter of the time at n = 3 (checked below, so the bound has teeth).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sp

from dynamix.evaluation import stats

REPS = 4000
BOUND = 0.05 + 3 * math.sqrt(0.05 * 0.95 / REPS)  # nominal 5 %, plus three Monte-Carlo standard errors
NOISE = {  # per-seed log time of one run: the spread of the published per-seed times is ~1-10 %
    "normal": lambda rng, size: 0.05 * rng.standard_normal(size),
    "heavy-tailed": lambda rng, size: 0.05 * rng.standard_t(3, size),
    "skewed": lambda rng, size: 0.05 * (rng.exponential(1.0, size) - 1.0),
}


def _false_verdicts(interval, n: int, noise, cells: int = 1, seed: int = 0) -> float:
    """Share of REPS null experiments (same policy against itself, n seeds, ``cells`` cells) whose
    pooled ratio gets a verdict that claims a difference."""
    rng = np.random.default_rng(seed)
    wrong = 0
    for _ in range(REPS):
        a, b = np.exp(noise(rng, (cells, n))), np.exp(noise(rng, (cells, n)))
        est = interval([pd.Series(a[c] / b[c]) for c in range(cells)])
        lo, hi = stats.tie_band(1.0, "time ratio", 0.03, 0.5)
        v = stats.verdict(est["ci_lo"], est["ci_hi"], 1.0, "below", kind="ours", tie_lo=lo, tie_hi=hi)
        wrong += v in ("holds", "does not hold")
    return wrong / REPS


def _percentile_bootstrap(cells, n_boot: int = 400, ci: float = 0.95, seed: int = 0) -> dict:
    """The replaced rule: the percentile bootstrap of the mean log ratio, seeds resampled within cells."""
    rng = np.random.default_rng(seed)
    logs = [np.log(c.to_numpy(float)) for c in cells]
    reps = np.mean([x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1) for x in logs], axis=0)
    lo, hi = np.quantile(reps, [(1 - ci) / 2, (1 + ci) / 2])
    return {"ci_lo": float(np.exp(lo)), "ci_hi": float(np.exp(hi))}


@pytest.mark.parametrize("noise", NOISE, ids=str)
@pytest.mark.parametrize("n", [3, 5])
def test_verdict_rule_errs_at_most_five_percent_under_the_null(n, noise):
    rate = _false_verdicts(lambda cells: stats.pooled_interval(cells), n, NOISE[noise])
    assert rate <= BOUND, f"n={n}, {noise}: the rule claims a difference in {rate:.1%} of null experiments"


def test_pooled_rule_errs_at_most_five_percent_over_several_cells():
    rate = _false_verdicts(lambda cells: stats.pooled_interval(cells), 3, NOISE["normal"], cells=4, seed=1)
    assert rate <= BOUND


def test_the_replaced_percentile_bootstrap_breaks_the_bound_at_three_seeds():
    rate = _false_verdicts(_percentile_bootstrap, 3, NOISE["normal"])
    assert rate > 0.15, f"{rate:.1%}: the null check would not catch the rule it replaced"


def test_up_to_interval_covers_the_largest_true_effect_under_the_null():
    """Every cell has no effect: "up to" must not claim one (above 0) more than 5 % of the time."""
    rng = np.random.default_rng(2)
    wrong = sum(stats.max_interval([rng.standard_normal(3) for _ in range(4)])["ci_lo"] > 0 for _ in range(REPS))
    assert wrong / REPS <= BOUND


def test_mean_interval_is_the_student_t_interval():
    x = [1.0, 2.0, 4.0, 3.5, 2.5]
    lo, hi = sp.t.interval(0.9, len(x) - 1, loc=np.mean(x), scale=sp.sem(x))
    est = stats.mean_interval(x + [math.nan, math.inf], 0.9)  # only finite values count
    assert (est["estimate"], est["n_seeds"]) == (pytest.approx(np.mean(x)), 5)
    assert (est["ci_lo"], est["ci_hi"]) == (pytest.approx(lo), pytest.approx(hi))
    assert stats.mean_interval([3.0])["ci_lo"] == stats.mean_interval([3.0])["ci_hi"] == 3.0
    assert math.isnan(stats.mean_interval([])["estimate"])


def test_ratio_interval_is_geometric_and_symmetric_under_inversion():
    r = [0.8, 0.9, 0.7, 0.85]
    est, inv = stats.ratio_interval(r), stats.ratio_interval([1 / v for v in r])
    assert est["estimate"] == pytest.approx(float(np.exp(np.mean(np.log(r)))))
    assert (est["ci_lo"], est["ci_hi"]) == (pytest.approx(1 / inv["ci_hi"]), pytest.approx(1 / inv["ci_lo"]))


def test_pooled_interval_averages_cells_per_seed():
    a = pd.Series([0.5, 0.5, 0.5], index=[0, 1, 2])
    b = pd.Series([2.0, 2.0, 2.0], index=[0, 1, 2])
    est = stats.pooled_interval([a, b])
    assert est["estimate"] == pytest.approx(1.0) and est["ci_lo"] == pytest.approx(1.0)
    assert (est["n_seeds"], est["n_cells"]) == (3, 2)


def test_up_to_interval_is_of_the_maximum_not_the_winners_own():
    # cell A is constant at 2; cell B has the same mean but is noisy: the largest true effect may be B's
    est = stats.max_interval([[2.0, 2.0, 2.0], [0.0, 0.0, 6.0]])
    assert est["estimate"] == pytest.approx(2.0) and est["argmax"] == 0
    assert est["ci_lo"] == pytest.approx(2.0)
    b = stats.mean_interval([0.0, 0.0, 6.0], 1 - 0.05 / 2)  # Bonferroni over the 2 cells
    assert est["ci_hi"] == pytest.approx(b["ci_hi"]) and est["ci_hi"] > 6.0
    assert (est["n_seeds"], est["n_cells"]) == (3, 2)


@pytest.mark.parametrize("lo, hi, null, side, paper, kind, expected", [
    (50.0, 60.0, 0.0, "above", 46.0, "paper", "reproduced"),        # on the paper's side, reaches its number
    (10.0, 20.0, 0.0, "above", 46.0, "paper", "direction only"),    # on the paper's side, wholly short of 46
    (-5.0, 20.0, 0.0, "above", 46.0, "paper", "inconclusive"),      # holds the null, reaches past the band
    (-2.0, 2.5, 0.0, "above", 46.0, "paper", "tie"),                # wholly inside +-3 %
    (-9.0, -1.0, 0.0, "above", 46.0, "paper", "not reproduced"),    # the other side
    (math.nan, 1.0, 0.0, "above", 46.0, "paper", "not measured"),
    (0.60, 0.90, 1.0, "below", math.nan, "paper", "reproduced"),    # ratio below 1
    (0.99, 1.01, 1.0, "below", math.nan, "paper", "tie"),
    (1.05, 1.20, 1.0, "below", math.nan, "paper", "not reproduced"),
    (0.60, 0.90, 1.0, "below", math.nan, "ours", "holds"),
    (0.90, 1.10, 1.0, "below", math.nan, "ours", "inconclusive"),
    (0.975, 1.02, 1.0, "below", math.nan, "ours", "tie"),
    (1.10, 1.30, 1.0, "below", math.nan, "ours", "does not hold"),
])  # fmt: skip
def test_verdict_follows_the_interval_and_the_tie_band(lo, hi, null, side, paper, kind, expected):
    unit = "%" if null == 0 else "time ratio"
    t_lo, t_hi = stats.tie_band(null, unit, 0.03, 0.5)
    assert stats.verdict(lo, hi, null, side, paper, kind, t_lo, t_hi) == expected


def test_tie_band_by_unit():
    assert stats.tie_band(1.0, "time ratio", 0.03, 0.5) == (pytest.approx(1 / 1.03), pytest.approx(1.03))
    assert stats.tie_band(0.0, "%", 0.03, 0.5) == (pytest.approx(-3.0), pytest.approx(3.0))
    assert stats.tie_band(0.0, "pts", 0.03, 0.5) == (-0.5, 0.5)


def test_verdict_rejects_an_unknown_side_or_kind():
    with pytest.raises(ValueError, match="side"):
        stats.verdict(0.5, 0.9, 1.0, "lower")
    with pytest.raises(ValueError, match="kind"):
        stats.verdict(0.5, 0.9, 1.0, "below", kind="mine")
