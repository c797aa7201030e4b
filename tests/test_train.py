"""Trainer core: weighted gradients, learning-rate rule, determinism, atomic checkpoints, resume."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from dynamix import config
from dynamix.config import OptimConfig
from dynamix.metrics.gradstats import flat_grad
from dynamix.models import build_model
from dynamix.train import checkpoint
from dynamix.train.core import Trainer
from dynamix.train.loop import run_training
from dynamix.train.optim import learning_rate


def test_weighted_gradient_equals_union_batch_gradient():
    torch.manual_seed(0)
    model = build_model("tiny-cnn", 0.25).eval()  # eval: BN uses running stats, so batches are separable
    model.train = lambda mode=True: model  # keep eval-mode BN inside Trainer.local_gradient
    trainer = Trainer(model, OptimConfig(), total_iters=1)
    x, y = torch.randn(64, 3, 32, 32), torch.randint(0, 10, (64,))
    stats, grads = trainer.weighted_gradient([(x[:16], y[:16]), (x[16:], y[16:])])
    weighted = flat_grad(model).clone()
    (union,), _ = trainer.weighted_gradient([(x, y)])
    assert (weighted - flat_grad(model)).abs().max() <= 1e-6
    assert [s.n for s in stats] == [16, 48]
    # per-worker gradients recombine with weights b_i / B, and their squared norms are reported
    assert (0.25 * grads[0] + 0.75 * grads[1] - weighted).abs().max() <= 1e-6
    assert stats[0].grad_sqnorm == pytest.approx(float(grads[0].dot(grads[0])), rel=1e-6)


@pytest.mark.parametrize(
    "kw, t, batch, expected",
    [
        ({}, 5, 64, 0.1),
        ({"lr_scaling": "linear", "base_batch": 64}, 0, 256, 0.4),
        ({"lr_scaling": "sqrt", "base_batch": 64}, 0, 256, 0.2),
        ({"schedule": "step", "step_every_iters": 10}, 25, 64, 0.001),
        ({"schedule": "cosine"}, 50, 64, 0.05),
        ({"warmup_iters": 10}, 4, 64, 0.05),
    ],
)
def test_learning_rate_rule(kw, t, batch, expected):
    cfg = OptimConfig(lr=0.1, **kw)
    assert learning_rate(cfg, t, 100, batch) == pytest.approx(expected)
    assert learning_rate(cfg, t, 100, batch, lr_scale=2.0) == pytest.approx(2 * expected)


def test_schedule_follows_the_runs_own_epochs_never_the_time_budget():
    from dynamix.train.loop import schedule_progress

    train = config.TrainConfig(epochs=40.0, max_time_s=100.0, schedule_epochs=10.0)
    assert schedule_progress(train, 500, 5.0) == pytest.approx(0.5)  # 5 of the schedule's 10 epochs
    assert schedule_progress(train, 900, 25.0) == 1.0  # past the horizon: the final learning rate
    assert schedule_progress(config.TrainConfig(epochs=4.0), 10, 1.0) == pytest.approx(0.25)  # 0: epochs
    assert schedule_progress(config.TrainConfig(max_iters=200), 50, 3.0) == pytest.approx(0.25)


def test_cosine_follows_the_progress_when_given():
    """A run whose batches grow takes fewer iterations than T: the schedule follows its progress."""
    cfg = OptimConfig(lr=0.1, schedule="cosine")
    assert learning_rate(cfg, 10, 100, 64, progress=0.5) == pytest.approx(0.05)
    assert learning_rate(cfg, 10, 100, 64, progress=1.0) == pytest.approx(0.0, abs=1e-12)
    assert learning_rate(cfg, 10, 100, 64, progress=1.7) == pytest.approx(0.0, abs=1e-12)  # clipped to [0, 1]
    assert learning_rate(cfg, 10, 100, 64) == pytest.approx(0.05 * (1 + math.cos(math.pi * 0.1)))  # t / T
    assert learning_rate(OptimConfig(lr=0.1), 10, 100, 64, progress=0.9) == pytest.approx(0.1)  # constant
    multi = OptimConfig(lr=0.1, schedule="multistep", milestones=(0.5, 0.75))
    assert [learning_rate(multi, 0, 100, 64, progress=p) for p in (0.49, 0.5, 0.74, 0.75, 1.0)] == pytest.approx(
        [0.1, 0.01, 0.01, 0.001, 0.001])
    assert learning_rate(multi, 80, 100, 64) == pytest.approx(0.001)  # without progress: t / T


def weights(path) -> torch.Tensor:
    state = checkpoint.load(path)
    return torch.cat([v.flatten().float() for v in state["trainer"]["model"].values()])


def smoke(tmp_path, name, **train) -> tuple[dict, config.Config]:
    cfg = config.load(profile="smoke", overrides={
        "model": {"name": "tiny-cnn", "width": 0.25},
        "train": {"max_iters": 12, "eval_every": 6, "checkpoint_every": 4, "threads": 1, **train},
    })
    return run_training(cfg, tmp_path / name, progress=False), cfg


def test_same_seed_same_weights_different_seed_differs(tmp_path):
    smoke(tmp_path, "a")
    smoke(tmp_path, "b")
    smoke(tmp_path, "c", seed=1)
    wa, wb, wc = (weights(tmp_path / n / "checkpoint.pt") for n in "abc")
    assert torch.equal(wa, wb)
    assert not torch.allclose(wa, wc)


def test_outputs_follow_the_documented_schema(tmp_path):
    summary, _ = smoke(tmp_path, "a")
    import pandas as pd

    from dynamix.train.loop import ITER_COLUMNS

    df = pd.read_csv(tmp_path / "a" / "iterations.csv")
    assert list(df.columns) == ITER_COLUMNS
    assert df["iteration"].tolist() == list(range(1, 13))
    assert df["test_acc"].notna().sum() == 2  # iterations 6 and 12
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["iterations"] == 12
    assert 0.0 <= summary["final_test_acc"] <= 1.0


def test_corrupt_or_foreign_checkpoint_is_refused(tmp_path):
    _, cfg = smoke(tmp_path, "a")
    path = tmp_path / "a" / "checkpoint.pt"
    with pytest.raises(checkpoint.CheckpointError, match="has config_hash"):
        checkpoint.load(path, expect={"config_hash": "something-else"})
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(checkpoint.CheckpointError, match="unreadable"):
        run_training(cfg, tmp_path / "a", progress=False)


def test_killed_run_resumes_to_the_same_weights(tmp_path):
    """SIGKILL a real `dynamix train` process after its first checkpoint, rerun, compare weights."""
    args = [sys.executable, "-m", "dynamix.cli", "train", "--profile", "smoke", "--no-progress",
            "--model", "tiny-cnn", "--width", "0.25", "--batch-size", "32",
            "--set", "train.max_iters=80", "--set", "train.checkpoint_every=10", "--set", "train.threads=1"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    killed = tmp_path / "killed"
    proc = subprocess.Popen(args + ["--out", str(killed)], env=env, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not (killed / "checkpoint.pt").exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = checkpoint.load(killed / "checkpoint.pt")["trainer"]["iteration"]
    assert done_before < 80, "the run finished before it could be killed; lengthen it"
    subprocess.run(args + ["--out", str(killed)], env=env, check=True, capture_output=True)
    subprocess.run(args + ["--out", str(tmp_path / "whole")], env=env, check=True, capture_output=True)
    assert torch.equal(weights(killed / "checkpoint.pt"), weights(tmp_path / "whole" / "checkpoint.pt"))
    import pandas as pd

    rows = pd.read_csv(killed / "iterations.csv")
    assert rows["iteration"].tolist() == list(range(1, 81))  # no lost or duplicated rows


@pytest.mark.slow
def test_tiny_cnn_reaches_40_percent_on_the_embedded_subset(tmp_path):
    cfg = config.load(profile="default", overrides={"model": {"name": "tiny-cnn"}, "train": {"epochs": 5, "batch_size": 64}})
    summary = run_training(cfg, tmp_path / "run", progress=False)
    assert summary["final_test_acc"] >= 0.40
