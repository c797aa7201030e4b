"""RemoteDecisionSource on a real gloo world: every rank ends up with the same vector, even when only
some ranks reach the arbitrator (fail-open), and a resumed rank registers with its first report."""

from __future__ import annotations

from dynamix.engine.world import free_port, spawn_world
from dynamix.policies import make_policy
from dynamix.policies.base import PolicyContext
from dynamix.rpc.arbitrator import RunSettings
from dynamix.rpc.client import ClientSettings
from dynamix.rpc.local import local_server
from dynamix.rpc.source import RemoteDecisionSource

from helpers.rpc import sample_report


def _windows(source: RemoteDecisionSource, rank: int, current: tuple[int, ...], windows: range) -> list[tuple]:
    out = []
    for t in windows:
        reports = [sample_report(r, t, current[r], 2, global_batch=sum(current)) for r in range(2)]
        d = source.decide(rank, [w for w, _ in reports], reports[rank][1], current)
        out.append((d.batch_sizes, d.lr_scale))
        current = d.batch_sizes
    return out


def _rank(rank: int, split_targets: list[str], resume_target: str) -> tuple[list, list]:
    ctx = PolicyContext(n_workers=2, initial_batch_sizes=(64, 64))
    fast = ClientSettings(deadline_s=3.0, retries=1, backoff_ms=10.0, reconnect_max_skip=0)
    # 1. rank 1 cannot reach the arbitrator
    split = RemoteDecisionSource(split_targets[rank], rank, run_id="split")
    split.settings = fast
    first = split.initial(ctx)
    split_out = [(first.batch_sizes, first.lr_scale)] + _windows(split, rank, first.batch_sizes, range(0, 2))
    split.close()
    # 2. a resumed engine skips initial(): the source registers with its first report (window 5)
    resumed = RemoteDecisionSource(resume_target, rank, run_id="resumed", ctx=ctx)
    resumed.settings = fast
    resume_out = _windows(resumed, rank, (64, 64), range(5, 7))
    resumed.close()
    return split_out, resume_out


def test_ranks_agree_on_the_vector_under_partial_failure_and_after_a_resume():
    with local_server(make_policy("static:96"), RunSettings(barrier_timeout_s=0.5)) as split, \
            local_server(make_policy("static:128"), RunSettings(barrier_timeout_s=5.0)) as resume:
        unreachable = f"127.0.0.1:{free_port()}"
        results = spawn_world(_rank, 2, [split.target, unreachable], resume.target, timeout_s=180)
        assert resume.arbitrator.decisions == 2
    (split0, resumed0), (split1, resumed1) = results
    assert split0 == split1 and resumed0 == resumed1  # the same full vector on every rank, every window
    # rank 0 gets the arbitrator's 96; rank 1 fails open and keeps its 64
    assert [sizes for sizes, _ in split0] == [(96, 64)] * 3
    assert resumed0 == [((128, 128), 1.0)] * 2
