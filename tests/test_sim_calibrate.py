"""Calibration: the least-squares fit recovers known constants; a real (small) calibration writes a
JSON that load_calibration reads back; a missing one is one line naming the command that makes it,
never a measurement; the CLI commands run end to end."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from dynamix import cli, paths
from dynamix.sim import calibrate as cal_mod


@pytest.fixture
def calibration_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "CALIBRATION", tmp_path / "calibration")
    before = torch.get_num_threads()
    yield tmp_path / "calibration"
    torch.set_num_threads(before)


def test_fit_recovers_known_constants():
    b = np.array([16, 32, 64, 128, 256])
    a, c, r2 = cal_mod.fit_linear(b, 3.0 + 0.75 * b)
    assert (a, c, r2) == pytest.approx((3.0, 0.75, 1.0))
    noisy = 3.0 + 0.75 * b + np.array([0.5, -0.5, 0.3, -0.2, 0.1])
    a, c, r2 = cal_mod.fit_linear(b, noisy)
    assert a == pytest.approx(3.0, abs=1.0) and c == pytest.approx(0.75, abs=0.01) and 0.99 < r2 < 1


def test_constrained_fit_never_returns_negative_constants():
    b = np.array([16, 64, 256])
    a, c, _ = cal_mod.fit_nonnegative(b, np.array([10.0, 9.0, 8.0]))  # noise: time falls with b
    assert (a, c) == pytest.approx((9.0, 0.0))
    a, c, _ = cal_mod.fit_nonnegative(b, -2.0 + 0.5 * b)  # negative intercept: refit through 0
    assert a == 0.0 and c == pytest.approx(float(b.dot(-2.0 + 0.5 * b) / b.dot(b)))
    assert cal_mod.fit_nonnegative(b, 3.0 + 0.5 * b)[:2] == pytest.approx((3.0, 0.5))


def test_calibrate_writes_and_load_reads(calibration_dir):
    cal = cal_mod.calibrate("mlp", width=0.25, batch_sizes=(8, 32), repeats=2, threads=1, out_dir=calibration_dir)
    path = calibration_dir / "mlp-w0.25.json"
    assert path.exists() and cal_mod.calibration_path("mlp", 0.25) == path
    stored = json.loads(path.read_text())
    assert stored["model"] == "mlp" and stored["threads"] == 1
    assert cal.c_ms_per_sample >= 0 and cal.a_ms >= 0 and cal.predict_ms(64) > 0 and len(cal.median_ms) == 2
    assert cal_mod.load_calibration("mlp", 0.25) == cal
    path.write_text(json.dumps({**stored, "processes": 1}))  # a file written by an earlier version
    assert cal_mod.load_calibration("mlp", 0.25) == cal


def test_load_without_a_file_names_the_command_and_measures_nothing(calibration_dir):
    with pytest.raises(cal_mod.CalibrationMissing, match=r"dynamix calibrate --model mlp --width 0.125"):
        cal_mod.load_calibration("mlp", 0.125)
    assert not calibration_dir.exists()


def test_reference_calibrations_record_their_machine_and_command():
    """Every committed reference says where and how it was measured, and loads."""
    refs = sorted(paths.ROOT.joinpath("calibrations").glob("*.json"))
    assert refs
    for path in refs:
        cal = cal_mod.read_calibration(path)
        assert cal.host and cal.command.startswith("dynamix "), path
        assert cal_mod.calibration_path(cal.model, cal.width, path.parent) == path


def test_the_gpu_records_load_and_are_the_numbers_the_usage_guide_gives():
    """docs/expected/gpu: the paper models' calibrations measured by tools/gpu_check.sh on two GPU
    machines (and on one before cuDNN was made deterministic); docs/usage.md's table quotes each."""
    usage = paths.ROOT.joinpath("docs", "usage.md").read_text()
    table = {line.split("|")[1].strip(): line for line in usage.splitlines() if line.startswith("| vgg11")
             or line.startswith("| resnet")}
    records = sorted(paths.ROOT.joinpath("docs", "expected", "gpu").rglob("*.json"))
    assert len(records) == 12
    for path in records:
        cal = cal_mod.read_calibration(path)
        assert cal.device.startswith("cuda") and cal.machine, path
        assert cal.command.startswith("dynamix calibrate"), path
        row = table[cal.model + (", `--amp bf16`" if cal.amp == "bf16" else "")]
        assert f"{cal.a_ms:.2f}, {cal.c_ms_per_sample:.4f}".rstrip("0") in row, (path, row)


@pytest.mark.parametrize("kwargs,field", [
    (dict(batch_sizes=(32, 32)), "batch_sizes"),
    (dict(threads=0), "threads"),
])
def test_bad_calibration_arguments_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        cal_mod.calibrate("mlp", **kwargs)


def test_cli_calibrate_and_simulate(calibration_dir, tmp_path, capsys):
    assert cli.main(["calibrate", "--model", "mlp", "--width", "0.25", "--batch-sizes", "8", "64",
                     "--repeats", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == "mlp"
    out = tmp_path / "sim"
    assert cli.main(["simulate", "--cluster", "clusters/slow-worker-4.yaml", "--policy", "static:8",
                     "--profile", "smoke", "--set", "model.name=mlp", "--set", "model.width=0.25",
                     "--set", "train.max_iters=4", "--set", "batch.window=2", "--set", "batch.min=8",
                     "--set", "batch.initial=8", "--set", "train.threads=1", "--out", str(out),
                     "--no-progress"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["iterations"] == 4 and summary["windows"] == 2
    frame = pd.read_csv(out / "runs.csv")
    assert len(frame) == 8 and set(frame["batch_size"]) == {8}


def test_the_id_model_is_timed_on_interaction_samples():
    times = cal_mod.measure("ncf", 1.0, [4, 8], repeats=1, warmup=0)
    assert len(times) == 2 and all(t[0] > 0 for t in times)
