"""``dynamix pipeline``: a profile's stages in order, resumable over sittings, with their wall times.

The notebooks themselves run in ``tests/test_notebooks.py`` (the smoke pipeline); here papermill is
replaced by a recorder, so what is checked is the orchestration a user relies on across sittings:
an interrupted stage keeps the time it spent, the next sitting carries on from it, completed stages
are skipped, and naming a stage reruns it.
"""

from __future__ import annotations

import pandas as pd
import papermill
import pytest

from dynamix.pipeline import runner
from dynamix.pipeline.runner import STAGES, completed, read_times, record_time, run_pipeline


class FakePapermill:
    """Records the stages executed; raises KeyboardInterrupt on ``interrupt_at`` (a sitting stopped)."""

    def __init__(self, interrupt_at: str | None = None):
        self.ran: list[str] = []
        self.interrupt_at = interrupt_at

    def __call__(self, src, out, parameters, **kw):
        stage = next(s for s in STAGES if f"_{s}." in src)
        self.ran.append(stage)
        assert parameters["profile"] == "smoke"
        if stage == self.interrupt_at:
            raise KeyboardInterrupt("the sitting ends")


@pytest.fixture
def clock(monkeypatch):
    """perf_counter advancing 10 s per call: every stage attempt takes 10 s."""
    ticks = iter(range(0, 10**6, 10))
    monkeypatch.setattr(runner.time, "perf_counter", lambda: float(next(ticks)))


def test_sittings_add_up_and_completed_stages_are_skipped(tmp_path, monkeypatch, clock):
    first = FakePapermill(interrupt_at="inference")
    monkeypatch.setattr(papermill, "execute_notebook", first)
    with pytest.raises(KeyboardInterrupt):
        run_pipeline("smoke", tmp_path)
    assert first.ran == list(STAGES[: STAGES.index("inference") + 1])
    times = read_times(tmp_path).set_index("stage")
    assert not times.loc["inference", "complete"] and times.loc["inference", "seconds"] == 10
    assert times.loc["baselines", "complete"]

    second = FakePapermill()
    monkeypatch.setattr(papermill, "execute_notebook", second)
    run_pipeline("smoke", tmp_path)
    assert second.ran == list(STAGES[STAGES.index("inference"):])  # the finished stages are skipped
    times = read_times(tmp_path).set_index("stage")
    assert times["complete"].all() and list(times.index) == list(STAGES)
    assert times.loc["inference", "seconds"] == 20  # 10 s in each sitting
    assert times.loc["baselines", "seconds"] == 10

    third = FakePapermill()
    monkeypatch.setattr(papermill, "execute_notebook", third)
    run_pipeline("smoke", tmp_path)
    assert third.ran == []
    run_pipeline("smoke", tmp_path, stages=["claims"])  # named: rerun, its time afresh
    assert third.ran == ["claims"] and read_times(tmp_path).set_index("stage").loc["claims", "seconds"] == 10

    # a named stage interrupted, then named again: the second attempt reuses the first's runs, so the
    # stage's time is both attempts'
    monkeypatch.setattr(papermill, "execute_notebook", FakePapermill(interrupt_at="transfer"))
    with pytest.raises(KeyboardInterrupt):
        run_pipeline("smoke", tmp_path, stages=["transfer"])
    monkeypatch.setattr(papermill, "execute_notebook", FakePapermill())
    run_pipeline("smoke", tmp_path, stages=["transfer"])
    times = read_times(tmp_path).set_index("stage")
    assert times.loc["transfer", "complete"] and times.loc["transfer", "seconds"] == 20


def test_a_stage_completed_under_other_settings_runs_again(tmp_path):
    record_time(tmp_path, "baselines", 5.0, "t0", "aaaa", True)
    record_time(tmp_path, "inference", 7.0, "t0", "aaaa", False)
    assert completed(tmp_path, "aaaa") == {"baselines"} and completed(tmp_path, "bbbb") == set()
    table = record_time(tmp_path, "inference", 3.0, "t1", "bbbb", True)  # other settings: no carry-over
    assert table.set_index("stage").loc["inference", "seconds"] == 3.0


def test_rows_written_before_the_completion_column_count_as_complete(tmp_path):
    pd.DataFrame({"stage": ["prepare"], "seconds": [9.1], "started_utc": ["t"]}).to_csv(
        tmp_path / "stage_times.csv", index=False)
    assert read_times(tmp_path)["complete"].tolist() == [True]


def test_the_selection_stage_runs_again_whenever_the_policies_it_chooses_among_were_trained_again(
        tmp_path, monkeypatch, clock):
    first = FakePapermill(interrupt_at="selection")
    monkeypatch.setattr(papermill, "execute_notebook", first)
    with pytest.raises(KeyboardInterrupt):
        run_pipeline("smoke", tmp_path)
    assert first.ran == list(STAGES[: STAGES.index("selection") + 1])  # nothing after the choice ran
    assert STAGES.index("selection") == STAGES.index("policy_training") + 1 < STAGES.index("inference")

    second = FakePapermill()
    monkeypatch.setattr(papermill, "execute_notebook", second)
    run_pipeline("smoke", tmp_path)
    assert second.ran == list(STAGES[STAGES.index("selection"):])
    times = read_times(tmp_path).set_index("stage")
    assert times["complete"].all() and times.loc["selection", "seconds"] == 20  # both sittings' attempts

    for stages, ran in ((None, []),  # everything complete: no choice again
                        (["inference"], ["inference"]),  # the trained policies unchanged: no choice either
                        (["policy_training"], ["policy_training", "selection"])):  # retrained: chosen again
        again = FakePapermill()
        monkeypatch.setattr(papermill, "execute_notebook", again)
        run_pipeline("smoke", tmp_path, stages=stages)
        assert again.ran == ran, stages
    assert read_times(tmp_path).set_index("stage").loc["selection", "seconds"] == 10
