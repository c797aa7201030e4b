"""The arbitrator's logic without a network: barrier, drops, late reports, restarts, runs, validation."""

from __future__ import annotations

import dataclasses
import logging
import math
import threading

import pytest

from dynamix.config import ConfigError
from dynamix.metrics.schema import GlobalWindow, WorkerWindow
from dynamix.policies import make_policy
from dynamix.policies.base import BatchSizePolicy, Bounds, Decision
from dynamix.rpc.arbitrator import Arbitrator, PolicyFailure, RunSettings
from dynamix.rpc.validate import MAX_RUNS, FailedPrecondition, InvalidArgument

from helpers.rpc import registration, sample_report


class Recorder(BatchSizePolicy):
    """Doubles every worker's size each window and records what it was shown."""

    name = "recorder"

    def __init__(self) -> None:
        self.seen: list[tuple[list[WorkerWindow], GlobalWindow]] = []

    def decide(self, workers, glob):
        self.seen.append((list(workers), glob))
        return Decision(tuple(self.ctx.bounds.clamp(2 * w.batch_size) for w in workers), lr_scale=1.5)


def start(n: int, policy: BatchSizePolicy | None = None, timeout_s: float = 5.0, **kw) -> Arbitrator:
    arb = Arbitrator(policy or Recorder(), RunSettings(barrier_timeout_s=timeout_s), **kw)
    for r in range(n):
        arb.register(registration(r, n))
    return arb


def report_all(arb: Arbitrator, window: int, sizes: list[int], ranks=None) -> dict:
    """Every rank in ``ranks`` reports ``window`` concurrently; returns rank -> Answer or exception."""
    n = len(sizes)
    out: dict = {}

    def one(r: int) -> None:
        w, g = sample_report(r, window, sizes[r], n, global_batch=sum(sizes))
        try:
            out[r] = arb.report(arb.session_id, "test-run", w, g)
        except Exception as exc:  # recorded for the assertion
            out[r] = exc

    threads = [threading.Thread(target=one, args=(r,)) for r in (range(n) if ranks is None else ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_barrier_calls_policy_once_per_window_with_every_worker_in_rank_order():
    policy = Recorder()
    arb = start(3, policy)
    sizes = [64, 64, 64]
    for t in range(4):
        out = report_all(arb, t, sizes)
        answers = [out[r] for r in range(3)]
        assert {a.batch_sizes for a in answers} == {tuple(min(1024, 2 * s) for s in sizes)}
        assert [a.batch_size for a in answers] == list(answers[0].batch_sizes)
        assert all(a.lr_scale == 1.5 and a.window == t and not a.late and a.dropped_ranks == () for a in answers)
        sizes = list(answers[0].batch_sizes)
    assert len(policy.seen) == 4
    for t, (workers, glob) in enumerate(policy.seen):
        assert [w.rank for w in workers] == [0, 1, 2]
        assert glob.window == t and glob.n_workers == 3
    assert [w.batch_size for w in policy.seen[-1][0]] == [512, 512, 512]


def test_dead_worker_is_dropped_once_logged_and_not_waited_for_again(caplog):
    arb = start(2, timeout_s=0.2)
    report_all(arb, 0, [64, 64])  # both report once: rank 1 has a report to carry forward
    with caplog.at_level(logging.WARNING, logger="dynamix.rpc.arbitrator"):
        out = report_all(arb, 1, [128, 128], ranks=[0])
    assert out[0].dropped_ranks == (1,)
    assert out[0].batch_sizes == (256, 256)  # rank 1 shown to the policy with its current size
    assert any("without rank(s) [1]" in r.getMessage() for r in caplog.records)
    out = report_all(arb, 2, [256, 256], ranks=[0])
    assert out[0].dropped_ranks == ()  # not expected any more: no second timeout
    # the dead worker comes back: it is expected again from then on
    back = report_all(arb, 3, [512, 512])
    assert back[0].batch_sizes == back[1].batch_sizes == (1024, 1024)


def test_late_report_gets_the_decision_made_without_it():
    arb = start(2, timeout_s=0.2)
    report_all(arb, 0, [64, 64])
    first = report_all(arb, 1, [128, 128], ranks=[0])[0]
    late = report_all(arb, 1, [128, 128], ranks=[1])[1]
    assert late.late and late.batch_sizes == first.batch_sizes and late.batch_size == first.batch_sizes[1]
    again = report_all(arb, 1, [128, 128], ranks=[0])[0]  # a retry of an included report: same answer
    assert again == first


def test_worker_that_never_reported_keeps_sizes_instead_of_inventing_its_state():
    policy = Recorder()
    arb = start(2, policy, timeout_s=0.1)
    out = report_all(arb, 0, [64, 64], ranks=[0])
    assert out[0].dropped_ranks == (1,) and out[0].batch_sizes == (64, 64)
    assert policy.seen == []


def test_restart_refuses_old_session_then_resumes_after_reregistration():
    old = start(2)
    report_all(old, 0, [64, 64])
    new = Arbitrator(Recorder(), RunSettings(barrier_timeout_s=5.0))
    w, g = sample_report(0, 1, 128, 2, global_batch=256)
    with pytest.raises(FailedPrecondition, match="register again") as err:
        new.report(old.session_id, "test-run", w, g)
    assert err.value.reason == "SESSION_UNKNOWN"
    for r in range(2):
        welcome = new.register(dataclasses.replace(registration(r, 2), next_window=1, current_batch_size=128))
        assert welcome.batch_size == 128  # keeps its current size, not the run's initial one
    out = report_all(new, 1, [128, 128])
    assert out[0].batch_sizes == (256, 256)
    w, g = sample_report(0, 0, 128, 2, global_batch=256)
    with pytest.raises(FailedPrecondition, match="stale") as err:
        new.report(new.session_id, "test-run", w, g)
    assert err.value.reason == "WINDOW_STALE"


def test_runs_at_once_each_with_its_own_policy_up_to_the_limit_then_busy_until_one_ends():
    arb = start(2)
    for i in range(1, MAX_RUNS):
        arb.register(registration(0, 1, run_id=f"other-{i}"))
    w, g = sample_report(0, 0, 64, 1)
    assert arb.report(arb.session_id, "other-1", w, g).batch_sizes == (128,)  # decided without test-run's ranks
    assert report_all(arb, 0, [64, 64])[0].batch_sizes == (128, 128)
    assert len(arb.policy.seen) == 1  # the first run's policy saw only its own windows
    with pytest.raises(FailedPrecondition, match=f"serving {MAX_RUNS} runs") as err:
        arb.register(registration(0, 2, run_id="one-too-many"))
    assert err.value.reason == "RUN_BUSY"
    assert arb.leave(arb.session_id, "test-run", 0) == 1
    assert arb.leave(arb.session_id, "test-run", 1) == 0
    assert arb.register(registration(0, 1, run_id="one-too-many")).batch_size == 64


def test_a_live_run_id_with_another_world_size_is_refused_not_reset():
    policy = Recorder()
    arb = start(2, policy)
    report_all(arb, 0, [64, 64])
    with pytest.raises(FailedPrecondition, match="world_size = 3 is inconsistent with run 'test-run'") as err:
        arb.register(registration(0, 3))  # another job reusing the id, from window 0
    assert err.value.reason == "RUN_INCONSISTENT"
    assert report_all(arb, 1, [128, 128])[1].batch_sizes == (256, 256)  # the run and its ranks go on
    assert [glob.window for _, glob in policy.seen] == [0, 1]


def test_a_policy_the_settings_cannot_run_is_refused_before_any_worker_registers():
    class Picky(Recorder):
        def reset(self, ctx):
            super().reset(ctx)
            if ctx.bounds.max != 512:
                raise ConfigError(f"picky: trained for batch bounds [32, 512], this run has {ctx.bounds}")

    with pytest.raises(ConfigError, match="trained for batch bounds"):
        Arbitrator(Picky(), RunSettings()).check_policy()
    Arbitrator(Picky(), RunSettings(bounds=Bounds(32, 512))).check_policy()


def test_registration_must_agree_with_the_run():
    arb = start(1)
    with pytest.raises(FailedPrecondition, match="world_size = 3 is inconsistent"):
        arb.register(registration(1, 3))
    with pytest.raises(InvalidArgument, match=r"initial_batch_sizes\[0\] = 2000 is out of range"):
        arb.register(registration(0, 1, initial=2000))


def test_on_decision_hook_sees_every_decision_and_its_failures_do_not_reach_workers():
    seen = []

    def hook(workers, glob, decision):
        seen.append((len(workers), glob.window, decision.batch_sizes))
        raise RuntimeError("learner hiccup")

    arb = start(2, on_decision=hook)
    out = report_all(arb, 0, [64, 64])
    assert out[0].batch_sizes == (128, 128)
    assert seen == [(2, 0, (128, 128))]


class Broken(BatchSizePolicy):
    name = "broken"

    def __init__(self, answer) -> None:
        self.answer = answer

    def decide(self, workers, glob):
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.mark.parametrize("answer", [ZeroDivisionError("boom"), Decision((64,)), Decision((64, 5000)),
                                    Decision((64, 64), lr_scale=math.nan)])
def test_policy_bugs_become_errors_for_that_window_only(answer):
    arb = start(2, Broken(answer))
    out = report_all(arb, 0, [64, 64])
    assert all(isinstance(out[r], PolicyFailure) for r in range(2))
    arb.policy.answer = Decision((96, 96))
    assert report_all(arb, 1, [64, 64])[0].batch_sizes == (96, 96)


W_OK, G_OK = sample_report(0, 0, 64, 2, global_batch=128)
CORRUPT = [
    ("worker", {"loss": math.nan}, "worker.loss is NaN"),
    ("worker", {"batch_acc": 1.5}, "worker.batch_acc = 1.5 is out of range"),
    ("worker", {"mem_util": -0.1}, "worker.mem_util"),
    ("worker", {"iter_time_ms": math.inf}, "worker.iter_time_ms"),
    ("worker", {"iter_time_ms": 0.0}, "worker.iter_time_ms"),
    ("worker", {"batch_size": 16}, r"worker.batch_size = 16 is out of range: must be in \[32, 1024\]"),
    ("worker", {"rank": 2}, r"rank = 2 is out of range: must be in \[0, 1\]"),
    ("worker", {"grad_sqnorm": 1.0, "grad_norm": 2.0}, "grad_sqnorm = 1.0 is inconsistent"),
    ("global", {"train_acc": -1.0}, "global.train_acc"),
    ("global", {"test_acc": 2.0}, "global.test_acc"),
    ("global", {"n_workers": 3}, "global.n_workers = 3 is inconsistent"),
    ("global", {"iteration": 0}, "global.iteration"),
    ("global", {"window": 5, "iteration": 3}, "inconsistent with global.window = 5"),
    ("global", {"global_batch": 10}, "global.global_batch = 10 is inconsistent"),
]


@pytest.mark.parametrize("part,change,message", CORRUPT)
def test_malformed_reports_are_invalid_arguments_naming_the_field(part, change, message):
    arb = start(2)
    w = dataclasses.replace(W_OK, **change) if part == "worker" else W_OK
    g = dataclasses.replace(G_OK, **change) if part == "global" else G_OK
    with pytest.raises(InvalidArgument, match=message):
        arb.report(arb.session_id, "test-run", w, g)


def test_ranks_must_agree_on_the_window_they_report():
    arb = start(2, timeout_s=0.3)
    w0, g0 = sample_report(0, 0, 64, 2, global_batch=128)
    t = threading.Thread(target=arb.report, args=(arb.session_id, "test-run", w0, g0))
    t.start()
    w1, g1 = sample_report(1, 0, 64, 2, global_batch=128)
    g1 = dataclasses.replace(g1, iteration=g1.iteration + 1)
    try:
        with pytest.raises(InvalidArgument, match="inconsistent with rank 0's report"):
            arb.report(arb.session_id, "test-run", w1, g1)
    finally:
        t.join()


def test_unknown_worker_and_run_are_failed_preconditions():
    arb = Arbitrator(make_policy("static:64"), RunSettings())
    arb.register(registration(0, 2))
    w, g = sample_report(1, 0, 64, 2)
    with pytest.raises(FailedPrecondition, match="rank 1 is not registered"):
        arb.report(arb.session_id, "test-run", w, g)
    with pytest.raises(FailedPrecondition, match="not the current run"):
        arb.report(arb.session_id, "nope", w, g)


def test_workers_restarting_the_same_run_reset_it_and_resuming_from_a_checkpoint_rewinds_it():
    policy = Recorder()
    arb = start(2, policy)
    for t in range(3):
        report_all(arb, t, [64, 64])
    arb.register(dataclasses.replace(registration(0, 2), next_window=1, current_batch_size=128))  # resumed
    assert report_all(arb, 1, [128, 128])[0].batch_sizes == (256, 256)  # window 1 decided again
    assert len(policy.seen) == 4
    for r in range(2):  # a fresh start of the same run id: window 0 is accepted again
        arb.register(registration(r, 2))
    assert report_all(arb, 0, [64, 64])[1].batch_sizes == (128, 128)
    assert [glob.window for _, glob in policy.seen] == [0, 1, 2, 1, 0]


class Counting(Recorder):
    """A stateful policy: counts its decisions; the count is its checkpointable state."""

    name = "counting"

    def reset(self, ctx):
        super().reset(ctx)
        self.count = 0

    def decide(self, workers, glob):
        self.count += 1
        return Decision(tuple(32 + self.count for _ in workers))

    def state_dict(self):
        return {"count": self.count}

    def load_state_dict(self, state):
        self.count = state["count"]


def test_policy_state_survives_an_arbitrator_restart_with_a_store(tmp_path):
    from dynamix.rpc.snapshots import PolicyStateStore

    store = PolicyStateStore(tmp_path / "policy.pt")
    arb = start(2, Counting(), store=store)
    for t in range(3):
        report_all(arb, t, [64, 64])
    store.close()  # the process dies after its last write
    restarted = Arbitrator(Counting(), RunSettings(barrier_timeout_s=5.0), store=PolicyStateStore(tmp_path / "policy.pt"))
    for r in range(2):
        restarted.register(dataclasses.replace(registration(r, 2), next_window=3, current_batch_size=35))
    assert report_all(restarted, 3, [35, 35])[0].batch_sizes == (36, 36)  # 4th decision, not a cold 1st
    cold = Arbitrator(Counting(), RunSettings(barrier_timeout_s=5.0))
    for r in range(2):
        cold.register(dataclasses.replace(registration(r, 2), next_window=3, current_batch_size=35))
    assert report_all(cold, 3, [35, 35])[0].batch_sizes == (33, 33)  # control: without a store it starts over


class Payload:
    """Unpickling this creates ``marker``: the code a crafted state file would run."""

    def __init__(self, marker) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def test_a_state_file_is_read_as_data_and_one_the_arbitrator_did_not_write_is_refused(tmp_path):
    import torch

    from dynamix.errors import InputFileError
    from dynamix.rpc.snapshots import PolicyStateStore

    marker = tmp_path / "payload-ran"
    crafted, notes = tmp_path / "state.pt", tmp_path / "notes.txt"
    torch.save({"run_id": "test-run", "world_size": 2, "policy": "counting", "state": Payload(marker)}, crafted)
    notes.write_text("my notes\n")
    for path in (crafted, notes):
        before = path.read_bytes()
        with pytest.raises(InputFileError, match="is not an arbitrator state file"):
            arb = Arbitrator(Counting(), RunSettings(), store=PolicyStateStore(path))
            arb.register(dataclasses.replace(registration(0, 2), next_window=3, current_batch_size=35))
        assert path.read_bytes() == before
    assert not marker.exists()
