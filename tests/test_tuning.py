"""The tuned LB-BSP's choice (dynamix/evaluation/tuning.py): geometric mean of per-cluster relative times
to target, unreached runs counted at the longest run on their cluster, the first candidate on a tie."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from dynamix.evaluation import targets, tuning


def table(times: dict[tuple[str, int], list[float]]) -> pd.DataFrame:
    """Rows of a sweep: (cluster, per-worker batch) -> censored times to target over seeds."""
    return pd.DataFrame([
        {"cluster": c, "per_worker_batch": m, "seed": s, "time_to_target_censored_s": t}
        for (c, m), ts in times.items() for s, t in enumerate(ts)
    ])  # fmt: skip


def test_score_is_the_geometric_mean_of_each_clusters_time_relative_to_its_fastest_candidate():
    t = table({("a", 32): [10.0, 12.0], ("a", 64): [22.0, 22.0], ("b", 32): [40.0, 40.0], ("b", 64): [10.0, 10.0]})
    s = tuning.scores(t)
    assert list(s.index) == [32, 64]  # the sweep's order
    assert s[32] == pytest.approx(math.sqrt(1.0 * 4.0))  # a: 11/11, b: 40/10
    assert s[64] == pytest.approx(math.sqrt(2.0 * 1.0))  # a: 22/11, b: 10/10
    assert tuning.choose(t) == 64


def test_the_mean_over_seeds_decides_not_one_lucky_seed():
    t = table({("a", 32): [5.0, 30.0], ("a", 64): [12.0, 12.0]})
    assert tuning.scores(t)[32] == pytest.approx(17.5 / 12.0)
    assert tuning.choose(t) == 64


def test_a_candidate_that_never_reaches_the_target_cannot_win_on_its_shorter_run():
    # runs end at window boundaries: the unreached 32 stopped at 9.5 s, the 64 reached the target at 9.9 s
    t = pd.DataFrame({"cluster": ["a", "a"], "per_worker_batch": [32, 64], "seed": [0, 0],
                      "time_to_target_s": [math.nan, 9.9], "total_time_s": [9.5, 10.0]})
    t["time_to_target_censored_s"] = targets.censored_time(t)
    assert list(t["time_to_target_censored_s"]) == [10.0, 9.9]
    assert tuning.choose(t) == 64


def test_a_tie_goes_to_the_candidate_listed_first():
    t = table({("a", 256): [5.0], ("a", 64): [5.0]})
    assert tuning.choose(t) == 256


def test_global_batch_scales_with_the_clusters_workers():
    assert tuning.lbbsp_spec(64, 6) == "lbbsp:batch=384"
    assert tuning.lbbsp_spec(128, 4) == "lbbsp:batch=512"


def test_an_empty_sweep_is_refused_before_any_run():
    with pytest.raises(ValueError, match="at least one validation cluster"):
        tuning.sweep([], [32, 64], [0])


def test_the_global_rule_holds_one_batch_whatever_the_workers():
    assert tuning.lbbsp_spec(512, 6, "global_batch") == "lbbsp:batch=512"
    assert tuning.lbbsp_spec(512, 8, "global_batch") == tuning.lbbsp_spec(512, 4, "global_batch")
    with pytest.raises(ValueError, match="key = 'total'"):
        tuning.lbbsp_spec(512, 4, "total")


def test_the_global_sweep_is_scored_by_its_global_batches():
    # 4 and 8 workers: 128 per worker is 512 and 1,024 samples; the global sweep compares 512 with 1,024
    t = pd.DataFrame([{"cluster": c, "global_batch": b, "seed": 0, "time_to_target_censored_s": v}
                      for c, b, v in [("n4", 512, 10.0), ("n4", 1024, 12.0), ("n8", 512, 10.0), ("n8", 1024, 30.0)]])
    assert list(tuning.scores(t, "global_batch").index) == [512, 1024]
    assert tuning.choose(t, "global_batch") == 512
