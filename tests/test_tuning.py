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
        tuning.sweeps([], {"per_worker_batch": [32, 64]}, [0])
    with pytest.raises(ValueError, match="at least one validation cluster, one batch size"):
        tuning.sweeps([object()], {"per_worker_batch": [], "global_batch": []}, [0])


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


def _sweep(cluster: str, key: str,
           runs: dict[int, tuple[str, list[tuple[float, float]]]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One sweep on one cluster, seed 0: candidate -> (policy, [(elapsed_s, test_acc) per window])."""
    rows = pd.DataFrame([{"cluster": cluster, "policy": p, "seed": 0, "window": w, "elapsed_s": t, "test_acc": a}
                         for m, (p, tests) in runs.items() for w, (t, a) in enumerate(tests)])
    summary = pd.DataFrame([{"cluster": cluster, "policy": p, key: m, "seed": 0, "final_accuracy": tests[-1][1],
                             "total_time_s": tests[-1][0]} for m, (p, tests) in runs.items()])
    return summary, rows


def test_both_sweeps_read_one_target_and_one_horizon_per_validation_cluster():
    # 32 per worker ends at 0.64 (target 0.95 x 0.64 = 0.608) after 30 s; the global sweep alone ends at
    # most at 0.62 (its own target 0.589), and its 768 crosses 0.589 at 6 s but never 0.608
    per_worker = _sweep("a", "per_worker_batch", {32: ("lbbsp:batch=128", [(10.0, 0.5), (30.0, 0.64)]),
                                                  128: ("lbbsp:batch=512", [(4.0, 0.5), (8.0, 0.62)])})
    glob = _sweep("a", "global_batch", {512: ("lbbsp:batch=512", [(4.0, 0.5), (8.0, 0.62)]),
                                        768: ("lbbsp:batch=768", [(3.0, 0.55), (6.0, 0.60)])})
    pw, gl = tuning.with_targets([per_worker, glob], fraction=0.95)
    assert list(gl["target_accuracy"]) == pytest.approx([0.608, 0.608])
    assert pw["target_accuracy"].iloc[0] == pytest.approx(0.608)
    t768 = gl.set_index("global_batch").loc[768]
    assert math.isnan(t768["time_to_target_s"]) and t768["time_to_target_censored_s"] == 30.0  # the cluster's horizon
    assert tuning.choose(gl, "global_batch") == 512
    # the rule before: the global sweep against its own runs made the 768 that misses the faster one
    (alone,) = tuning.with_targets([glob], fraction=0.95)
    assert alone["target_accuracy"].iloc[0] == pytest.approx(0.589) and tuning.choose(alone, "global_batch") == 768


def test_a_listed_tuned_rule_with_an_empty_sweep_is_refused_naming_the_field(tmp_path):
    from dynamix import config
    from dynamix.config import ConfigError
    from dynamix.experiments.inference import tuned_rules

    cfg = config.load(profile="smoke", overrides={"experiments": {"inference": {"tune_batches": []}}})
    with pytest.raises(ConfigError, match=r"experiments.inference.tune_batches is empty: lbbsp:tuned"):
        tuned_rules(cfg, tmp_path)
