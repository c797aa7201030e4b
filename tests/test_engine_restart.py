"""Fault tolerance under the real launcher: SIGKILL one worker mid-run under ``torchrun
--max-restarts 1``; torchrun restarts the group, which resumes from the last checkpoint (not from
scratch) and ends where an uninterrupted run ends. Slow: two launches of real processes."""

from __future__ import annotations

import pandas as pd
import pytest

from dynamix import config as config_mod
from dynamix.engine import run_local

from helpers.engine import kill_rank_under_torchrun

pytestmark = pytest.mark.slow

OVERRIDES = ["model.name=mlp", "model.width=0.0625", "train.max_iters=80", "batch.window=5",
             "train.checkpoint_every=10", "train.eval_every=40", "train.eval_samples=200", "train.threads=1"]


def test_killed_worker_resumes_from_checkpoint_under_torchrun(tmp_path):
    cfg = config_mod.load(profile="smoke", overrides=OVERRIDES)
    reference = run_local(cfg, None, "static:32", tmp_path / "reference", 2, method="spawn")
    run = kill_rank_under_torchrun(cfg, tmp_path / "killed", 2, kill_rank=1, kill_after_iteration=25,
                                   policy_spec="static:32", timeout_s=600)
    assert run["iterations"] == 80
    (resume,) = run["resumes"]
    # Resumed from the last checkpoint before the kill, not from iteration 0.
    assert resume["from_iteration"] >= 20 and resume["from_iteration"] % 10 == 0
    assert resume["from_iteration"] <= run["killed_at_iteration"] <= resume["reached_iteration"]
    assert 0 <= run["iterations_lost"] < 10 + 5
    assert run["final_test_loss"] == pytest.approx(reference["final_test_loss"], abs=1e-6)
    rows = pd.read_csv(tmp_path / "killed" / "runs.csv")
    assert len(rows) == 2 * 80 // 5 and rows.groupby(["window", "rank"]).size().max() == 1
