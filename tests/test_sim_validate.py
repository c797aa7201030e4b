"""validate-sim: the comparison row follows from the recorded runs, and a mis-calibrated cost model is
reported out of tolerance. How close the calibrated simulator comes on this machine is a timing
measurement: ``benchmarks/bench_sim_validate.py``, never asserted here."""

from __future__ import annotations

import pandas as pd
import pytest

from dynamix import cluster as clusters
from dynamix import config
from dynamix.cluster.costmodel import CostModel
from dynamix.models import build_model, gradient_bytes
from dynamix.policies.base import make_policy
from dynamix.sim.run import simulate
from dynamix.evaluation.validate_sim import (TOLERANCE_PCT, Case, Measurement, case_config, compare_case, default_cases,
                                  validate)

ITERS, WINDOW = 8, 4


def _cfg():
    return config.load(profile="smoke", overrides={"model": {"name": "tiny-cnn", "width": 0.5}})


def _slow2() -> clusters.ClusterSpec:
    return clusters.from_dict({"name": "slow-2", "workers": [{"count": 1}, {"count": 1, "device": "half"}]})


def _steady_mean(runs_csv, column: str, rank: int | None = None) -> float:
    """Mean of ``column`` over the windows after the first (the warm-up), from a recorded runs.csv."""
    frame = pd.read_csv(runs_csv)
    frame = frame[frame["window"] >= 1]
    if rank is not None:
        frame = frame[frame["rank"] == rank]
    return float(frame[column].mean())


def scaled(cost: CostModel, k: float) -> CostModel:
    return CostModel(cost.a_ms * k, cost.c_ms_per_sample * k, cost.gradient_bytes)


def test_default_cases_cover_two_and_four_workers_with_a_slow_one():
    cases = default_cases(64)
    assert sorted({c.spec.n_workers for c in cases}) == [2, 4]
    for n in (2, 4):
        speeds = [min(c.spec.speeds) for c in cases if c.spec.n_workers == n]
        assert 1.0 in speeds and any(s < 1 for s in speeds)


def test_row_is_computed_from_the_recorded_runs_and_a_miscalibrated_model_is_out_of_tolerance(tmp_path):
    """The "engine" here is a simulator run with a known cost model (the same runs.csv schema), so the
    truth is exact: the right model predicts it with no error, a model 3x too slow or too fast is out
    of tolerance, and every number of the row is read back from the two runs.csv files."""
    cfg = _cfg()
    case = Case("slow-2", _slow2(), 32)
    ccfg = case_config(cfg, case, ITERS, WINDOW)
    true = CostModel(2.0, 0.5, gradient_bytes(build_model(ccfg.model.name, ccfg.model.width)))
    engine_dir = tmp_path / "engine"
    simulate(case.spec, ccfg, make_policy("static:32"), ccfg.train.seed, out_dir=engine_dir, progress=False,
             cost=true)
    calibration = (true.a_ms, true.c_ms_per_sample, 0.0)  # (a, c, host jitter), before and after
    measured = Measurement(engine_dir, calibration, calibration)

    exact = compare_case(cfg, case, tmp_path / "exact", measured, ITERS, WINDOW, cost=true)
    assert exact["error_pct"] == pytest.approx(0.0, abs=1e-9) and exact["within_tolerance"]
    assert exact["tolerance_pct"] == TOLERANCE_PCT

    for k, sign in ((3.0, 1), (1 / 3, -1)):
        row = compare_case(cfg, case, tmp_path / f"x{k:.2f}", measured, ITERS, WINDOW, cost=scaled(true, k))
        meas = _steady_mean(engine_dir / "runs.csv", "iter_time_ms")
        pred = _steady_mean(tmp_path / f"x{k:.2f}" / "sim" / "slow-2" / "runs.csv", "iter_time_ms")
        assert row["measured_iter_ms"] == pytest.approx(meas)
        assert row["predicted_iter_ms"] == pytest.approx(pred)
        assert row["error_pct"] == pytest.approx(100 * (pred - meas) / meas)
        assert sign * row["error_pct"] > TOLERANCE_PCT and not row["within_tolerance"]
        slowest = _steady_mean(engine_dir / "runs.csv", "compute_ms", rank=1)  # rank 1: the half-speed worker
        assert row["measured_slowest_compute_ms"] == pytest.approx(slowest)


@pytest.mark.slow
def test_validation_against_the_engine_writes_the_runs_it_compares(tmp_path):
    """The real thing on a small case: engine calibrations at b/2 and 2b, the engine run, the simulator
    run; the row is recomputed from the recorded engine and simulator runs."""
    cfg = _cfg()
    table = validate(cfg, tmp_path, [Case("slow-2", _slow2(), 32)], iters=ITERS, window=WINDOW)
    assert list(table["case"]) == ["slow-2"]
    row = table.iloc[0]
    meas = _steady_mean(tmp_path / "engine" / "slow-2" / "runs.csv", "iter_time_ms")
    pred = _steady_mean(tmp_path / "sim" / "slow-2" / "runs.csv", "iter_time_ms")
    assert row["error_pct"] == pytest.approx(100 * (pred - meas) / meas)
    assert bool(row["within_tolerance"]) == (abs(row["error_pct"]) <= TOLERANCE_PCT)
    eng = pd.read_csv(tmp_path / "engine" / "slow-2" / "runs.csv")
    sim = pd.read_csv(tmp_path / "sim" / "slow-2" / "runs.csv")
    assert list(eng.columns) == list(sim.columns)
    assert set(eng["backend"]) == {"engine"} and set(sim["backend"]) == {"sim"}
    assert (tmp_path / "validation.csv").exists()
    # calibrated by the engine at b/2 and 2b on the homogeneous spec of the same size, never at b
    assert row["calibration_batch_sizes"] == "16,64"
    for when in ("before", "after"):
        for b in (16, 64):
            cal = pd.read_csv(tmp_path / "calibration" / "slow-2" / when / f"b{b}" / "runs.csv")
            assert set(cal["batch_size"]) == {b} and set(cal["speed"]) == {1.0}
    assert row["calibration_c_ms_per_sample"] > 0
