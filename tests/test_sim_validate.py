"""validate-sim end to end on a small case: the engine and the simulator both run the same spec and
the table compares them (timing thresholds are reported by `dynamix validate-sim`, never asserted)."""

from __future__ import annotations

import pandas as pd
import pytest

from dynamix import cluster as clusters
from dynamix import config
from dynamix.sim.validate import Case, default_cases, validate


def test_default_cases_cover_two_and_four_workers_with_a_slow_one():
    cases = default_cases(64)
    assert sorted({c.spec.n_workers for c in cases}) == [2, 4]
    for n in (2, 4):
        speeds = [min(c.spec.speeds) for c in cases if c.spec.n_workers == n]
        assert 1.0 in speeds and any(s < 1 for s in speeds)


@pytest.mark.slow
def test_validation_table_compares_engine_and_simulator(tmp_path):
    cfg = config.load(profile="smoke", overrides={"model": {"name": "tiny-cnn", "width": 0.5}})
    slow = clusters.from_dict({"name": "slow-2", "workers": [{"count": 1}, {"count": 1, "device": "half"}]})
    table = validate(cfg, tmp_path, [Case("slow-2", slow, 32)], iters=8, window=4)
    assert list(table["case"]) == ["slow-2"]
    row = table.iloc[0]
    assert row["measured_iter_ms"] > 0 and row["predicted_iter_ms"] > 0
    assert row["error_pct"] == pytest.approx(100 * (row["predicted_iter_ms"] / row["measured_iter_ms"] - 1))
    # the slow worker computes for longer than the iteration's fastest worker, in both backends
    assert row["measured_slowest_compute_ms"] > 0 and row["predicted_slowest_compute_ms"] > 0
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
