"""The evaluation protocol (``dynamix evaluate``, every experiment): the runs.csv / summary.csv contract,
target accuracy, budgets, caching, the process pool, compare(), per-run readings and seed statistics."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

from dynamix import config
from dynamix.cluster.costmodel import CostModel
from dynamix.metrics.schema import RUNS_COLUMNS
from dynamix.evaluation import stats
from dynamix.evaluation.compare import compare
from dynamix.evaluation.runner import SimTask, evaluate, run_simulations, run_tasks
from dynamix.evaluation.runs import run_summary
from dynamix.evaluation.targets import time_to_target
from helpers.rl import tiny_cost, two_speed

REQUIRED = ["policy", "seed", "time_to_target_s", "final_accuracy", "total_time_s", "target_accuracy"]


@pytest.fixture(scope="module")
def setup():
    cfg = config.load(profile="base", overrides={
        "model": {"name": "mlp", "width": 0.0625},
        "batch": {"min": 8, "max": 64, "initial": 16, "window": 2},
        "train": {"threads": 1, "epochs": 0.04, "eval_every": 2, "eval_samples": 200},
    })
    return cfg, two_speed(), tiny_cost()


def test_evaluate_writes_the_contract_and_derives_the_target(setup, tmp_path):
    cfg, spec, cost = setup
    runs, summary = evaluate([spec], ["static:8", "static:32"], cfg, seeds=2, out_dir=tmp_path, progress=False, cost=cost,
                             budget="epochs")
    on_disk = pd.read_csv(tmp_path / "summary.csv")
    assert set(REQUIRED) <= set(on_disk.columns) and len(on_disk) == 4
    assert list(pd.read_csv(tmp_path / "runs.csv").columns) == ["cluster", *RUNS_COLUMNS]
    best = summary.groupby("policy")["final_accuracy"].mean().max()
    assert summary["target_accuracy"].unique().tolist() == [pytest.approx(cfg.evaluation.target_fraction * best)]
    for _, r in summary.iterrows():
        run = runs[(runs.policy == r.policy) & (runs.seed == r.seed)].drop_duplicates("window")
        assert r.total_time_s == run["elapsed_s"].iloc[-1]
        reached = run[run["test_acc"] >= r.target_accuracy]
        if reached.empty:
            assert math.isnan(r.time_to_target_s)
        else:  # within the window that first reaches the target (interpolated, see the next test)
            i = run.index.get_loc(reached.index[0])
            start = run["elapsed_s"].iloc[i - 1] if i else reached["elapsed_s"].iloc[0]
            assert start <= r.time_to_target_s <= reached["elapsed_s"].iloc[0]
    # same epoch budget: 4x smaller batches take ~4x the iterations
    its = summary.groupby("policy")["iterations"].max()
    assert its["static:8"] >= 3 * its["static:32"]


def _windows(accs, times):
    return pd.DataFrame({"window": range(len(accs)), "elapsed_s": times, "test_acc": accs})


def test_time_to_target_interpolates_the_crossing_within_the_window():
    # 0.30 at 2 s, 0.50 at 3 s: 0.40 is crossed halfway, at 2.5 s, not at the window's end (3 s)
    assert time_to_target(_windows([np.nan, 0.3, 0.5, 0.45], [1, 2, 3, 4]), 0.4) == pytest.approx(2.5)
    assert time_to_target(_windows([0.2, 0.3, 0.5], [1, 2, 3]), 0.45) == pytest.approx(2.75)
    assert time_to_target(_windows([0.2, 0.3, 0.5], [1, 2, 3]), 0.5) == pytest.approx(3.0)  # met exactly at a test
    # met at the first test: no earlier measurement to interpolate from, so that test's time
    assert time_to_target(_windows([np.nan, 0.6, 0.7], [1, 2, 3]), 0.4) == 2
    assert math.isnan(time_to_target(_windows([0.1, 0.2, 0.2], [2, 4, 6]), 0.4))
    # rows are per (window, rank): duplicates of a window count once
    runs = pd.concat([_windows([0.3, 0.5], [2, 4])] * 3).sort_values("window", kind="stable")
    assert time_to_target(runs, 0.4) == pytest.approx(3.0)


def test_unreachable_target_leaves_time_empty_and_cache_reuses_runs(setup, tmp_path):
    cfg, spec, cost = setup
    _, first = evaluate([spec], ["static:16"], cfg, seeds=1, out_dir=tmp_path, target_accuracy=1.0, progress=False, cost=cost)
    assert first["time_to_target_s"].isna().all()
    assert pd.read_csv(tmp_path / "summary.csv", keep_default_na=False)["time_to_target_s"].tolist() == [""]
    cached = sorted((tmp_path / "cache").rglob("*.csv.gz"))
    assert len(cached) == 2  # the time budget's reference run (epoch budget) and the time-budgeted run
    stamps = [p.stat().st_mtime_ns for p in cached]
    _, again = evaluate([spec], ["static:16"], cfg, seeds=1, out_dir=tmp_path, target_accuracy=1.0, progress=False, cost=cost)
    assert [p.stat().st_mtime_ns for p in cached] == stamps  # read back, not re-simulated
    pd.testing.assert_frame_equal(first, again, check_dtype=False)
    # a new calibration (another cost model) changes every virtual time: nothing cached is reused
    slower = dataclasses.replace(cost, c_ms_per_sample=2 * cost.c_ms_per_sample)
    _, recal = evaluate([spec], ["static:16"], cfg, seeds=1, out_dir=tmp_path, target_accuracy=1.0, progress=False,
                        cost=slower)
    assert len(list((tmp_path / "cache").rglob("*.csv.gz"))) == 4
    assert recal["total_time_s"].iloc[0] > first["total_time_s"].iloc[0]


def test_every_finished_run_logs_its_count_and_eta(setup, caplog):
    """The pipeline's log (papermill, where the bar is a widget) shows progress with an ETA."""
    cfg, spec, cost = setup
    tasks = [SimTask(spec, cfg, "static:16", seed) for seed in range(2)]
    with caplog.at_level("INFO", logger="dynamix.evaluation.runner"):
        run_tasks(tasks, desc="sweep", cost=cost)
    lines = [r.getMessage() for r in caplog.records if r.name == "dynamix.evaluation.runner"]
    assert [line.split(",")[0] for line in lines] == ["sweep: 1/2 runs", "sweep: 2/2 runs"]
    assert all(" elapsed, ETA " in line for line in lines) and lines[-1].endswith("ETA 00:00")
    caplog.clear()
    with caplog.at_level("INFO", logger="dynamix.evaluation.runner"):
        run_tasks(tasks, desc="sweep", cost=cost, progress=False)
    assert not [r for r in caplog.records if r.name == "dynamix.evaluation.runner"]


def test_compare_ratios_against_static_median_and_baselines():
    rows = []
    for policy, t, acc in [("dynamix:x", 7.0, 0.50), ("static:32", 10.0, 0.51), ("static:64", 20.0, 0.50),
                           ("static:128", np.nan, 0.40), ("lbbsp", 14.0, 0.5), ("gns", 7.0, 0.45)]:
        rows.append({"cluster": "c", "policy": policy, "seed": 0, "time_to_target_s": t, "final_accuracy": acc,
                     "total_time_s": 30.0})
    table = compare(pd.DataFrame(rows), "dynamix:x").iloc[0]
    assert table["median_static_time_s"] == 20.0  # median of 10, 20, >= 30 (never reached: its total time)
    assert table["ratio_vs_median_static"] == pytest.approx(0.35)
    assert table["static_unreached"] == 1 and table["policy_unreached"] == 0
    # when the median static itself never reaches the target, its total time bounds the ratio (not 0)
    rows[2]["time_to_target_s"] = np.nan
    bounded = compare(pd.DataFrame(rows), "dynamix:x").iloc[0]
    assert bounded["median_static_time_s"] == 30.0 and bounded["ratio_vs_median_static"] == pytest.approx(7 / 30)
    assert bounded["static_unreached"] == 2
    assert table["acc_minus_best_static_pts"] == pytest.approx(-1.0)
    assert table["ratio_vs_lbbsp"] == pytest.approx(0.5) and table["ratio_vs_gns"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="not in the summary"):
        compare(pd.DataFrame(rows), "dynamix:y")


def test_compare_interval_is_paired_by_seed_brackets_the_ratio_and_widens_with_seed_noise():
    def summary(agent_times):
        rows = [{"cluster": "c", "policy": p, "seed": k, "time_to_target_s": t, "final_accuracy": 0.5,
                 "total_time_s": 30.0}
                for p, times in [("dynamix:x", agent_times), ("static:32", [10.0] * 5), ("static:64", [20.0] * 5),
                                 ("static:128", [25.0] * 5)]
                for k, t in enumerate(times)]
        return compare(pd.DataFrame(rows), "dynamix:x", baselines=()).iloc[0]

    steady = summary([14.0] * 5)  # every seed alike: the interval is the point
    assert steady["ratio_ci_low"] == steady["ratio_ci_high"] == pytest.approx(0.7)
    noisy = summary([8.0, 12.0, 14.0, 16.0, 20.0])
    assert noisy["ratio_vs_median_static"] == pytest.approx(0.7)
    assert noisy["ratio_ci_low"] <= 0.7 <= noisy["ratio_ci_high"]
    assert noisy["ratio_ci_low"] < 0.5 and noisy["ratio_ci_high"] > 0.9  # five noisy seeds cannot settle 0.7


def test_time_budget_gives_every_policy_the_reference_runs_clock(setup, tmp_path):
    """--budget time: each run stops at the first iteration past the static:<initial> run's epoch time,
    so a larger-batch policy trains longer in samples but not in time; epochs give it fewer updates."""
    cfg, spec, cost = setup
    _, by_time = evaluate([spec], ["static:16", "static:64"], cfg, seeds=1, out_dir=tmp_path / "t", progress=False,
                          cost=cost, budget="time")
    _, by_epochs = evaluate([spec], ["static:16", "static:64"], cfg, seeds=1, out_dir=tmp_path / "e",
                            progress=False, cost=cost, budget="epochs")
    t, e = by_time.set_index("policy"), by_epochs.set_index("policy")
    budget = t["budget_s"].iloc[0]
    assert t["budget"].unique().tolist() == ["time"] and e["budget_s"].isna().all()
    assert budget == pytest.approx(e.loc["static:16", "total_time_s"])  # the reference run's epoch time
    assert t.loc["static:16", "total_time_s"] == pytest.approx(budget)  # static:16 (= initial) unchanged
    # static:64 is faster per sample: the same epochs take less time, the same time runs more iterations
    assert e.loc["static:64", "total_time_s"] < budget <= t.loc["static:64", "total_time_s"]
    assert t.loc["static:64", "iterations"] > e.loc["static:64", "iterations"]
    with pytest.raises(ValueError, match="budget"):
        evaluate([spec], ["static:16"], cfg, seeds=1, progress=False, cost=cost, budget="forever")


def test_process_pool_returns_the_same_runs_in_task_order(setup, tmp_path):
    """--jobs 2 runs the same tasks in spawned processes: identical rows and summary, in task order."""
    cfg, spec, cost = setup
    args = ([spec], ["static:8", "static:32"], cfg)
    kw = dict(seeds=1, progress=False, cost=cost, budget="epochs")
    runs1, summary1 = evaluate(*args, out_dir=tmp_path / "one", **kw)
    runs2, summary2 = evaluate(*args, out_dir=tmp_path / "two", jobs=2, **kw)
    pd.testing.assert_frame_equal(runs1, runs2)
    pd.testing.assert_frame_equal(summary1, summary2)
    assert summary2["policy"].tolist() == ["static:8", "static:32"]


def test_tasks_that_differ_only_in_their_labels_simulate_once(setup, monkeypatch):
    """A tuned rule whose choice is also a listed policy (lbbsp:tuned-global at lbbsp:batch=512) is one
    simulation, not two racing for one cache file; each task still gets its own labelled rows."""
    from dynamix.evaluation import runner

    cfg, spec, cost = setup
    calls = []
    real = runner.simulate_task
    monkeypatch.setattr(runner, "simulate_task", lambda t, *rest: calls.append(str(t.policy)) or real(t, *rest))
    tasks = [SimTask(spec, cfg, "static:16", 0), SimTask(spec, cfg, "static:16", 0, label="tuned"),
             SimTask(spec, cfg, "static:32", 0)]
    runs = run_simulations(tasks, progress=False, cost=cost)
    assert calls == ["static:16", "static:32"]
    rows = {p: g.drop(columns=["run_id", "policy"]).reset_index(drop=True) for p, g in runs.groupby("policy")}
    assert set(rows) == {"static:16", "tuned", "static:32"}
    pd.testing.assert_frame_equal(rows["static:16"], rows["tuned"])


# --------------------------------------------------------------------------------------------
# Per-run readings and statistics over seeds
# --------------------------------------------------------------------------------------------


def _runs(accs, times, batch=128, seed=0, rid="r"):
    rows = []
    for w, (a, t) in enumerate(zip(accs, times)):
        for rank in range(2):
            rows.append({"run_id": rid, "policy": "p", "seed": seed, "window": w, "iteration": 10 * (w + 1),
                         "elapsed_s": t, "test_acc": a, "global_batch": batch, "throughput_samples_per_s": 1.0,
                         "epoch": 0.1 * w, "iter_time_ms": 1.0, "rank": rank})  # fmt: skip
    return pd.DataFrame(rows)


def test_run_summary_final_accuracy_time_and_throughput():
    runs = pd.concat([_runs([np.nan, 0.3, 0.5, 0.45], [1, 2, 3, 4], rid="x"),
                      _runs([0.1, 0.2, 0.2, np.nan], [2, 4, 6, 8], seed=1, rid="y")])  # fmt: skip
    s = run_summary(runs, ["policy"]).set_index("run_id")
    assert s.loc["x", "final_accuracy"] == pytest.approx(0.45)
    assert s.loc["y", "final_accuracy"] == pytest.approx(0.2)  # the last test evaluated
    assert s.loc["x", "total_time_s"] == 4 and s.loc["y", "seed"] == 1
    # 4 windows x 10 iterations x 128 samples over 4 s
    assert s.loc["x", "throughput_samples_per_s"] == pytest.approx(4 * 10 * 128 / 4)


def test_aggregate_groups_and_counts_missing_values_as_not_reached():
    df = pd.DataFrame({
        "policy": ["a"] * 4 + ["b"] * 4,
        "t": [1.0, 2.0, 3.0, np.nan, 10.0, 10.0, 10.0, 10.0],
    })  # fmt: skip
    agg = stats.aggregate(df, ["policy"], ["t"], 0.95).set_index("policy")
    assert agg.loc["a", "t"] == pytest.approx(2.0)
    assert agg.loc["a", "t_reached"] == pytest.approx(0.75)
    assert agg.loc["b", "t_lo"] == agg.loc["b", "t_hi"] == pytest.approx(10.0)
    assert list(agg["n_seeds"]) == [4, 4]


def test_paired_values_line_up_by_seed():
    per_run = pd.DataFrame({"cluster": ["c"] * 4, "policy": ["a", "b", "a", "b"], "seed": [0, 0, 1, 1],
                            "t": [2.0, 4.0, 3.0, 9.0]})
    t = stats.paired(per_run, per_run["t"], ["cluster"])
    assert (t["a"] / t["b"]).tolist() == [0.5, pytest.approx(1 / 3)]  # per seed, never across seeds


def test_late_gain_is_the_smoothed_gain_over_the_last_fifth():
    from dynamix.evaluation.runs import late_gain_pts

    acc = [0.30 + 0.02 * w for w in range(16)] + [0.62] * 4  # climbs for 16 windows, then flat
    run = pd.DataFrame({"window": range(20), "iteration": [10 * (w + 1) for w in range(20)], "test_acc": acc})
    # last fifth: after iteration 160 (window 15); the 3 tests up to it average 0.58, the last 3 0.62
    assert late_gain_pts(run) == pytest.approx(4.0)
    flat = run.assign(test_acc=0.62)
    assert late_gain_pts(flat) == pytest.approx(0.0)
    assert math.isnan(late_gain_pts(run.head(5)))  # too few tests to tell


def test_the_floors_cost_is_the_time_a_balance_free_of_it_would_save():
    from dynamix.evaluation.runs import floor_cost

    # window 0: balanced (both 10 ms); window 1: worker 1 slowed 4x and held at the floor of 32
    run = pd.DataFrame({"window": [0, 0, 1, 1], "rank": [0, 1, 0, 1], "batch_size": [64, 64, 96, 32],
                        "compute_ms": [10.0, 10.0, 15.0, 20.0], "wait_ms": [0.0, 0.0, 5.0, 0.0],
                        "iter_time_ms": [12.0, 12.0, 22.0, 22.0]})
    cost = floor_cost(run, floor=32)
    # window 1: rates 6.4 and 1.6 samples/ms, so 128 samples balance at 16 ms; the slowest took 20 ms
    assert cost["floored"] == 0.5 and cost["lost"] == pytest.approx(4.0 / 34.0)
    assert cost["wait"] == pytest.approx(5.0 / 68.0)
    assert floor_cost(run[run["window"] == 0], floor=32) == {"floored": 0.0, "lost": 0.0, "wait": 0.0}


def test_sim2real_ratios_are_per_backend_and_paired_by_seed():
    from dynamix.evaluation.sim2real import ratios

    rows = []
    for backend, scale in (("engine", 2.0), ("sim", 1.0)):
        for seed in range(3):
            for policy, t in (("static:32", 10.0), ("static:64", 8.0), ("static:128", 12.0), ("lbbsp", 6.0),
                              ("dynamix", 4.0 + seed)):
                rows.append({"backend": backend, "policy": policy, "seed": seed, "time_to_target_s": scale * t,
                             "total_time_s": 100.0})
    table = ratios(pd.DataFrame(rows), "dynamix")
    got = table.set_index(["backend", "reference"])["estimate"]
    # per seed: dynamix / median(10, 8, 12) = (4, 5, 6) / 10; / lbbsp = (4, 5, 6) / 6; the scale cancels
    gm = float(np.exp(np.mean(np.log([0.4, 0.5, 0.6]))))  # the geometric mean of the per-seed ratios
    assert got[("engine", "median static")] == pytest.approx(gm) and got[("sim", "median static")] == pytest.approx(gm)
    assert got[("engine", "lbbsp")] == pytest.approx(gm * 10 / 6)
    assert set(table["reference"]) == {"median static", "lbbsp"} and (table["n_seeds"] == 3).all()
    assert (table["ci_lo"] <= table["estimate"]).all() and (table["estimate"] <= table["ci_hi"]).all()


def test_sim_key_separates_compressed_runs_and_keeps_the_keys_of_earlier_settings():
    from dynamix.evaluation.cache import sim_key

    cost = CostModel(1.0, 0.5, 1234)
    sim = ["sim.backend=math"]  # the cpu profile trains its agent on the surrogate; its experiments run the model math
    cfg = config.load(profile="cpu", overrides=sim)
    assert sim_key(cfg, cost) == "5030c7c250be"  # the key from before compression and data sets existed
    lhc = config.load(profile="cpu", overrides=[*sim, "engine.compression=lhc"])
    ncf = config.load(profile="cpu", overrides=[*sim, "data.dataset=interactions"])
    keys = {sim_key(cfg, cost), sim_key(lhc, cost), sim_key(ncf, cost),
            sim_key(cfg, dataclasses.replace(cost, wire_fraction=0.5))}
    assert len(keys) == 4


def test_a_policy_asking_for_a_batch_the_cluster_cannot_hold_is_flagged_and_logged(setup, tmp_path, caplog):
    """2 workers with batch.min = 8 hold no global batch below 16: lbbsp:batch=8 runs at 16, and says so."""
    cfg, spec, cost = setup
    with caplog.at_level("WARNING", logger="dynamix.sim.run"):
        runs, summary = evaluate([spec], ["static:8", "lbbsp:batch=8"], cfg, seeds=1, out_dir=tmp_path,
                                 progress=False, cost=cost, budget="epochs")
    flags = pd.read_csv(tmp_path / "summary.csv").set_index("policy")["clamped"]
    assert flags.to_dict() == {"static:8": False, "lbbsp:batch=8": True}
    assert set(runs.loc[runs["policy"] == "lbbsp:batch=8", "global_batch"]) == {16}
    assert any("lbbsp:batch=8 asks for a global batch of 8" in r.getMessage() and "it runs at 16" in r.getMessage()
               for r in caplog.records)
    # the experiments' runs.csv rows carry the flag, and so do their per-run summaries
    tasks = [SimTask(spec, cfg, p, 0) for p in ("static:8", "lbbsp:batch=8")]
    rows = run_simulations(tasks, cost=cost, cache=tmp_path / "cache", progress=False)
    assert rows.groupby("policy")["clamped"].all().to_dict() == {"static:8": False, "lbbsp:batch=8": True}
    per_run = run_summary(rows, ["policy"]).set_index("policy")
    assert per_run["clamped"].to_dict() == {"static:8": False, "lbbsp:batch=8": True}
