"""The arbitrator's logic in plain Python: runs, registration, the per-window barrier, policy calls.

The paper's arbitrator is one centralized agent that, every k iterations, reads all workers' states
and sets every worker's batch size (Sec. III-B). Here that agent is any
:class:`~dynamix.policies.base.BatchSizePolicy` and this module is the part that turns independent,
concurrent, possibly late or malformed worker reports into one ``policy.decide(workers, glob)`` call
per window. The gRPC servicer (:mod:`dynamix.rpc.server`) only converts messages and delegates here,
so everything below is testable without a network.

Window barrier (one per window ``t``): it opens with the first report for ``t`` and closes when every
*expected* rank (all ranks of the run except those that left or were dropped earlier and have not
reported since) has reported ``t``, or when ``barrier_timeout_s`` has passed since it opened. Ranks
missing at the timeout are dropped from that window (logged) and stop being waited for until they
report again, so a dead worker costs one timeout, not one per window. A dropped rank is presented to
the policy by its most recent earlier report (its batch size updated); if it never reported, the policy
is not called for that window and everyone keeps their current size. A report never holds a thread
while it waits: :meth:`Arbitrator.submit` records it and returns a :class:`Pending` that
:meth:`Arbitrator.collect` answers once the barrier closes (the asyncio server awaits one future per
barrier); :meth:`Arbitrator.report` is the blocking form of the two for threads.

Runs: the arbitrator serves up to :data:`MAX_RUNS` runs at once, each with its own copy of the policy
(the first run takes the policy object itself), keyed by run id. A run whose workers all left, or
that was silent for ``idle_run_timeout_s``, makes room for a new one. A registration that names a
live run with another world size is refused (it is another job reusing the id), never a reset.

Restarts: every process start draws a new ``session_id``; a report carrying another session is
refused with FAILED_PRECONDITION, the worker re-registers (saying which window comes next and its
current size) and training continues. Without a :class:`~dynamix.rpc.snapshots.PolicyStateStore` the
policy starts cold for the re-registered run; with one, its state after the last decision is restored.
The other way round, when the *workers* restart: a registration saying "next window 0" for a run that
already decided windows starts that run afresh (policy reset); one saying "next window w" with w at
or before the last decided window rewinds the run to w (training resumed from a checkpoint; the
policy keeps its state).

RL training mode: pass ``on_decision``, called as ``on_decision(workers, glob,
decision)`` after every decision in window order; the learner builds transitions from it. Exceptions
in the hook are logged and never reach workers.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
import numbers
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Sequence

from dynamix.config import Config
from dynamix.metrics.schema import GlobalWindow, WorkerWindow
from dynamix.policies.base import BatchSizePolicy, Bounds, Decision, PolicyContext
from dynamix.rpc.snapshots import PolicyStateStore
from dynamix.rpc.validate import (
    MAX_RUNS,
    RUN_FIELDS,
    FailedPrecondition,
    InvalidArgument,
    Registration,
    check_agreement,
    check_global,
    check_registration,
    check_worker,
)

log = logging.getLogger(__name__)

OnDecision = Callable[[Sequence[WorkerWindow], GlobalWindow, Decision], None]

class PolicyFailure(Exception):
    """The policy raised or returned an invalid decision (maps to gRPC INTERNAL); workers fail open."""


@dataclass(frozen=True)
class RunSettings:
    """What the arbitrator imposes on every run (sent to workers at registration)."""

    bounds: Bounds = Bounds()
    actions: tuple[int, ...] = (-100, -25, 0, 25, 100)
    window_iters: int = 10  # k
    barrier_timeout_s: float = 1.0
    idle_run_timeout_s: float = 60.0  # a run silent this long may be replaced by a new run
    # the workers' LR rule (optim.lr_scaling, optim.base_batch) that a decision's lr_scale multiplies;
    # from the arbitrator's config, not sent to the workers
    lr_scaling: str = "none"
    base_batch: int = 128
    # the run's epoch budget (train.horizon_epochs) and base lr (optim.lr), which a policy observing its
    # schedule divides by; from the arbitrator's config, not sent to the workers (0: untold)
    epochs: float = 0.0
    base_lr: float = 0.0

    @classmethod
    def from_config(cls, cfg: Config) -> "RunSettings":
        return cls(
            bounds=Bounds(cfg.batch.min, cfg.batch.max),
            actions=tuple(cfg.batch.actions),
            window_iters=cfg.batch.window,
            barrier_timeout_s=cfg.arbitrator.barrier_timeout_s,
            idle_run_timeout_s=cfg.arbitrator.idle_run_timeout_s,
            lr_scaling=cfg.optim.lr_scaling,
            base_batch=cfg.optim.base_batch,
            epochs=cfg.train.horizon_epochs,
            base_lr=cfg.optim.lr,
        )


@dataclass(frozen=True)
class Welcome:
    """The answer to a registration."""

    session_id: str
    settings: RunSettings
    policy: str
    batch_size: int  # this worker's size until its next decision
    lr_scale: float


@dataclass(frozen=True)
class Answer:
    """The answer to one window report."""

    window: int  # the reported window
    batch_size: int  # the reporter's size for the next window
    lr_scale: float
    batch_sizes: tuple[int, ...]  # the whole decision, rank order
    dropped_ranks: tuple[int, ...]  # ranks the barrier timed out on
    late: bool  # the reporter missed the barrier; it gets the decision made without it


@dataclass
class _Outcome:
    window: int
    decision: Decision | None  # None: the policy failed (error holds why)
    participants: frozenset[int]
    dropped: tuple[int, ...]
    error: str = ""


@dataclass(eq=False)
class _Barrier:
    window: int
    deadline: float  # clock time at which missing ranks are dropped
    reports: dict[int, tuple[WorkerWindow, GlobalWindow]] = field(default_factory=dict)
    outcome: _Outcome | None = None
    abandoned: bool = False  # the run restarted or rewound while it was open
    listeners: list[Callable[[], None]] = field(default_factory=list)  # called once when it closes

    def close(self) -> None:
        """Wake whoever waits on this barrier (outcome set, or abandoned)."""
        listeners, self.listeners = self.listeners, []
        for wake in listeners:
            wake()


@dataclass
class _Run:
    reg: Registration  # the first registration: fixes the run-wide fields
    ctx: PolicyContext
    policy: BatchSizePolicy
    sizes: list[int]  # current batch size per rank
    registered: set[int] = field(default_factory=set)
    left: set[int] = field(default_factory=set)
    inactive: set[int] = field(default_factory=set)  # dropped and silent since: not waited for
    last_report: dict[int, WorkerWindow] = field(default_factory=dict)
    last_window: int = -1  # last decided window
    last_outcome: _Outcome | None = None
    pending: _Barrier | None = None
    last_activity: float = 0.0

    @property
    def run_id(self) -> str:
        return self.reg.run_id

    def expected(self) -> set[int]:
        return set(range(self.reg.world_size)) - self.left - self.inactive

    def complete(self, barrier: _Barrier) -> bool:
        """Every expected rank has reported: counted, not set-built, as it runs on every report."""
        absent = self.left | self.inactive
        reported = len(barrier.reports) - sum(r in barrier.reports for r in absent)
        return reported >= self.reg.world_size - len(absent)


@dataclass(frozen=True)
class Pending:
    """A report waiting at its window's barrier: pass it to :meth:`Arbitrator.collect`."""

    run: _Run
    barrier: _Barrier
    rank: int

    @property
    def deadline(self) -> float:
        return self.barrier.deadline


class Arbitrator:
    """Thread-safe: every public method may be called concurrently. :meth:`submit` and :meth:`collect`
    never block (the asyncio server's path); :meth:`report` blocks its caller at the window barrier
    (at most ``barrier_timeout_s``). Policies are called under the lock, once per window, in window order.
    """

    def __init__(
        self,
        policy: BatchSizePolicy,
        settings: RunSettings = RunSettings(),
        on_decision: OnDecision | None = None,
        clock: Callable[[], float] = time.monotonic,
        store: PolicyStateStore | None = None,
    ) -> None:
        self.policy = policy
        self.settings = settings
        self.on_decision = on_decision
        self.store = store
        self.clock = clock
        self.session_id = uuid.uuid4().hex
        self._cond = threading.Condition()
        self._runs: dict[str, _Run] = {}
        self.decisions = 0  # windows decided since this arbitrator started (for logs and tests)

    def check_policy(self) -> None:
        """Start the policy on a two-worker probe run of these settings, so that a policy this server
        cannot run (an artifact trained for other bounds or actions) is refused before any worker
        registers; raises what the policy raises, or :class:`PolicyFailure` for an invalid first decision."""
        size = self.settings.bounds.clamp(self.settings.base_batch)
        reg = Registration(run_id="probe", rank=0, world_size=2, initial_batch_sizes=(size, size),
                           current_batch_size=size)
        with self._cond:
            ctx = self._context(reg)
            self.policy.reset(ctx)
            self._checked(self.policy, self.policy.initial(ctx), reg.world_size)

    # ----------------------------------------------------------------------------------------
    # Registration
    # ----------------------------------------------------------------------------------------

    def register(self, reg: Registration) -> Welcome:
        """Join (or re-join) a run; the first registration of a run resets its policy."""
        check_registration(reg, self.settings.bounds)
        with self._cond:
            now = self.clock()
            run = self._runs.get(reg.run_id)
            if run is not None and reg.world_size != run.reg.world_size and self._replaceable(run, now):
                run = None  # the id of an ended run, taken by a new job
            if run is None:
                run = self._start_run(reg, now)
            elif reg.world_size != run.reg.world_size:
                raise FailedPrecondition(
                    f"world_size = {reg.world_size} is inconsistent with run {run.run_id!r}, which has "
                    f"{run.reg.world_size} (ranks {_ranks(run.registered)} registered): another job needs "
                    f"another run id, or this run to end ({self.settings.idle_run_timeout_s} s of silence "
                    "or all its workers leave)", "RUN_INCONSISTENT")
            elif reg.next_window == 0 and run.last_window >= 0:
                log.warning("run %s starts again from window 0 (was at window %d): resetting it",
                            reg.run_id, run.last_window)
                run = self._start_run(reg, now)
            else:
                # a worker re-joining mid-run (after our restart, or its own) may not know the run's
                # first-window sizes; only a fresh worker must agree on every run-wide field
                for name in RUN_FIELDS if reg.next_window == 0 else ():
                    mine, theirs = getattr(reg, name), getattr(run.reg, name)
                    if mine != theirs:
                        raise FailedPrecondition(
                            f"{name} = {mine!r} is inconsistent with run {run.run_id!r}, which has {theirs!r}",
                            "RUN_INCONSISTENT",
                        )
                if 0 < reg.next_window <= run.last_window:
                    log.warning("run %s rewinds to window %d (was at %d): resumed from a checkpoint?",
                                reg.run_id, reg.next_window, run.last_window)
                    run.last_window, run.last_outcome = reg.next_window - 1, None
                    self._abandon(run)
            run.registered.add(reg.rank)
            run.left.discard(reg.rank)
            run.inactive.discard(reg.rank)
            run.last_activity = now
            if reg.next_window > 0:
                run.sizes[reg.rank] = reg.current_batch_size
            log.info(
                "run %s: rank %d/%d registered (next window %d, batch %d, device %s)",
                reg.run_id, reg.rank, reg.world_size, reg.next_window, run.sizes[reg.rank], reg.device,
            )
            return Welcome(
                session_id=self.session_id,
                settings=self.settings,
                policy=run.policy.name,
                batch_size=run.sizes[reg.rank],
                lr_scale=1.0,
            )

    def _replaceable(self, run: _Run, now: float) -> bool:
        everyone_left = not run.registered
        idle = now - run.last_activity >= self.settings.idle_run_timeout_s
        return everyone_left or idle

    def _context(self, reg: Registration) -> PolicyContext:
        s = self.settings
        return PolicyContext(
            n_workers=reg.world_size,
            initial_batch_sizes=tuple(reg.initial_batch_sizes),
            bounds=s.bounds,
            actions=s.actions,
            window=s.window_iters,
            optimizer=reg.optimizer,
            dataset_size=reg.dataset_size,
            seed=reg.seed,
            lr_scaling=s.lr_scaling,
            base_batch=s.base_batch,
            epochs=s.epochs,
            base_lr=s.base_lr,
        )

    def _start_run(self, reg: Registration, now: float) -> _Run:
        old = self._runs.get(reg.run_id)
        policy = old.policy if old is not None else self._room_for(reg.run_id, now)
        ctx = self._context(reg)
        policy.reset(ctx)
        initial = self._checked(policy, policy.initial(ctx), reg.world_size)
        sizes = list(initial.batch_sizes)
        saved = self.store.load(reg.run_id) if self.store is not None and reg.next_window > 0 else None
        if saved is not None and (saved["world_size"], saved["policy"]) == (reg.world_size, policy.name):
            ctx = saved["ctx"]
            policy.reset(ctx)
            policy.load_state_dict(saved["policy_state"])
            sizes = list(saved["sizes"])
            log.info("run %s: policy state restored from window %d (%s)", reg.run_id, saved["window"],
                     self.store.path)
        run = _Run(reg=reg, ctx=ctx, policy=policy, sizes=sizes, last_window=reg.next_window - 1, last_activity=now)
        if old is not None:
            self._abandon(old)  # reports waiting in the old run's barrier give up
        self._runs[reg.run_id] = run
        log.info("run %s started: %d workers, policy %s, initial sizes %s%s",
                 reg.run_id, reg.world_size, policy.name, initial.batch_sizes[:8],
                 " ..." if reg.world_size > 8 else "")
        return run

    def _room_for(self, run_id: str, now: float) -> BatchSizePolicy:
        """Make room for the new run ``run_id`` and return its policy: the arbitrator's own when no
        other run holds it, else a copy. Runs all of whose workers left make way at once; idle runs
        only when :data:`MAX_RUNS` are held."""
        for rid in [rid for rid, r in self._runs.items() if not r.registered
                    or (len(self._runs) >= MAX_RUNS and self._replaceable(r, now))]:
            log.info("run %s ends (%s)", rid, "its workers left" if not self._runs[rid].registered else "idle")
            self._evict(rid)
        if len(self._runs) >= MAX_RUNS:
            raise FailedPrecondition(
                f"the arbitrator is serving {len(self._runs)} runs, its limit; run {run_id!r} may start when "
                f"one ends (its workers leave, or {self.settings.idle_run_timeout_s} s of silence)", "RUN_BUSY")
        if all(r.policy is not self.policy for r in self._runs.values()):
            return self.policy
        try:
            return copy.deepcopy(self.policy)
        except Exception as exc:  # a policy bound to one learner (RL training) serves one run at a time
            raise FailedPrecondition(
                f"the arbitrator is serving run(s) {_ranks(self._runs)} and policy {self.policy.name} cannot "
                f"serve another at once ({type(exc).__name__}); run {run_id!r} may start when they end",
                "RUN_BUSY") from None

    def _evict(self, run_id: str) -> None:
        self._abandon(self._runs.pop(run_id))
        if self.store is not None:
            self.store.forget(run_id)

    def _abandon(self, run: _Run) -> None:
        """Close ``run``'s open window without a decision: its waiting reports get WINDOW_ABANDONED."""
        barrier, run.pending = run.pending, None
        if barrier is not None:
            barrier.abandoned = True
            barrier.close()
        self._cond.notify_all()

    def _checked(self, policy: BatchSizePolicy, decision: Decision, n: int) -> Decision:
        b = self.settings.bounds
        sizes = tuple(decision.batch_sizes)
        integral = all(isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in sizes)
        if len(sizes) != n or not integral or any(not b.min <= x <= b.max for x in sizes):
            shown = f"{sizes[:8]}{' ...' if len(sizes) > 8 else ''}"
            raise PolicyFailure(
                f"policy {policy.name} returned batch sizes {shown}: need {n} integers in [{b.min}, {b.max}]"
            )
        if not (math.isfinite(decision.lr_scale) and decision.lr_scale > 0):
            raise PolicyFailure(f"policy {policy.name} returned lr_scale {decision.lr_scale}: need > 0")
        return Decision(tuple(int(x) for x in sizes), float(decision.lr_scale))

    def _run_for(self, session_id: str, run_id: str, rank: int) -> _Run:
        if session_id != self.session_id:
            raise FailedPrecondition(
                f"session_id {session_id[:64]!r} is not this arbitrator's session (it restarted or "
                f"never saw this worker): register again", "SESSION_UNKNOWN"
            )
        run = self._runs.get(run_id)
        if run is None:
            raise FailedPrecondition(f"run_id {run_id[:300]!r} is not the current run of any worker here "
                                     f"({len(self._runs)} run(s) served): register", "RUN_UNKNOWN")
        if not 0 <= rank < run.reg.world_size:
            raise InvalidArgument(f"rank = {rank} is out of range: must be in [0, {run.reg.world_size - 1}]")
        if rank not in run.registered:
            raise FailedPrecondition(f"rank {rank} is not registered in run {run_id!r}: register first",
                                     "NOT_REGISTERED")
        return run

    # ----------------------------------------------------------------------------------------
    # Window reports
    # ----------------------------------------------------------------------------------------

    def report(self, session_id: str, run_id: str, worker: WorkerWindow, glob: GlobalWindow) -> Answer:
        """Record ``worker``'s window ``glob.window``; block at the barrier; return its next size."""
        pending = self.submit(session_id, run_id, worker, glob)
        if isinstance(pending, Answer):
            return pending
        with self._cond:
            while (answer := self._collect(pending)) is None:
                self._cond.wait(pending.deadline - self.clock())
            return answer

    def submit(self, session_id: str, run_id: str, worker: WorkerWindow, glob: GlobalWindow) -> Answer | Pending:
        """Record ``worker``'s window ``glob.window`` without waiting: its :class:`Answer` when the window
        was already decided (a retry, or a late rank), else a :class:`Pending` for :meth:`collect`."""
        rank = worker.rank
        with self._cond:
            run = self._run_for(session_id, run_id, rank)
            check_worker(worker, run.reg.world_size, self.settings.bounds)
            check_global(glob, worker, run.reg.world_size)
            now = run.last_activity = self.clock()
            t = glob.window
            if t < run.last_window:
                raise FailedPrecondition(
                    f"window {t} is stale: window {run.last_window} of run {run_id!r} is already decided",
                    "WINDOW_STALE",
                )
            if t == run.last_window:
                return self._replay(run, rank, t)
            barrier = run.pending
            if barrier is not None and barrier.window < t:
                log.warning("run %s: rank %d reported window %d while window %d was open; closing it",
                            run_id, rank, t, barrier.window)
                self._finalize(run, barrier)
                barrier = None
            if barrier is None:
                barrier = run.pending = _Barrier(t, now + self.settings.barrier_timeout_s)
            for other, (_, other_glob) in barrier.reports.items():
                if other != rank:
                    check_agreement(glob, other_glob, other)
                    break
            barrier.reports[rank] = (worker, glob)
            run.inactive.discard(rank)
            run.sizes[rank] = worker.batch_size
            if run.complete(barrier):
                self._finalize(run, barrier)
            return Pending(run, barrier, rank)

    def collect(self, pending: Pending) -> Answer | None:
        """``pending``'s answer once its barrier closed (closing it if its deadline passed), else None.
        Raises FAILED_PRECONDITION when the run restarted or rewound meanwhile."""
        with self._cond:
            return self._collect(pending)

    def when_closed(self, pending: Pending, wake: Callable[[], None]) -> None:
        """Call ``wake()`` once ``pending``'s barrier closes or is abandoned (at once if it has; else
        from the thread that closes it, under the arbitrator's lock: ``wake`` must only signal)."""
        with self._cond:
            barrier = pending.barrier
            if barrier.outcome is None and not barrier.abandoned:
                barrier.listeners.append(wake)
                return
        wake()

    def _collect(self, pending: Pending) -> Answer | None:
        run, barrier = pending.run, pending.barrier
        if barrier.outcome is None:
            if barrier.abandoned:
                raise FailedPrecondition(f"window {barrier.window} was abandoned: the run restarted or rewound",
                                         "WINDOW_ABANDONED")
            if self.clock() < barrier.deadline:
                return None
            self._finalize(run, barrier)
        return self._answer(barrier.outcome, pending.rank, late=False)

    def _replay(self, run: _Run, rank: int, t: int) -> Answer:
        """A report for the window just decided: a retry (same answer) or a late rank (told so)."""
        outcome = run.last_outcome
        if outcome is None:  # re-registered run: windows before next_window were decided elsewhere
            raise FailedPrecondition(f"window {t} was decided before the arbitrator restarted", "WINDOW_STALE")
        late = rank not in outcome.participants
        if late:
            run.inactive.discard(rank)
            log.info("run %s: rank %d late for window %d; sending the decision made without it",
                     run.run_id, rank, t)
        return self._answer(outcome, rank, late=late)

    def _answer(self, outcome: _Outcome, rank: int, late: bool) -> Answer:
        if outcome.decision is None:
            raise PolicyFailure(outcome.error)
        d = outcome.decision
        return Answer(outcome.window, d.batch_sizes[rank], d.lr_scale, d.batch_sizes, outcome.dropped, late)

    def _finalize(self, run: _Run, barrier: _Barrier) -> None:
        """Close ``barrier``: drop missing ranks, call the policy once for all workers, wake every waiting reporter."""
        n = run.reg.world_size
        present = barrier.reports
        dropped = tuple(sorted(run.expected() - present.keys()))
        if dropped:
            log.warning("run %s: window %d closed without rank(s) %s (barrier timeout %.3g s); dropped",
                        run.run_id, barrier.window, _ranks(dropped), self.settings.barrier_timeout_s)
            run.inactive.update(dropped)
        for r, (w, _) in present.items():
            run.last_report[r] = w
        workers = [
            run.last_report[r] if r in present else dataclasses.replace(run.last_report[r], batch_size=run.sizes[r])
            for r in range(n)
            if r in run.last_report
        ]
        first_view = present[min(present)][1]
        glob = dataclasses.replace(first_view, n_workers=n)
        outcome = _Outcome(barrier.window, None, frozenset(present), dropped)
        policy = run.policy
        if len(workers) < n:
            never = sorted(set(range(n)) - set(run.last_report))
            log.warning("run %s: no report ever from rank(s) %s; window %d keeps current sizes",
                        run.run_id, _ranks(never), barrier.window)
            outcome.decision = Decision(tuple(run.sizes))
        else:
            try:
                outcome.decision = self._checked(policy, policy.decide(workers, glob), n)
            except Exception as exc:  # a policy bug must not take the service down
                log.exception("run %s: policy %s failed on window %d", run.run_id, policy.name, barrier.window)
                outcome.error = f"policy {policy.name} failed on window {barrier.window}: {exc}"
            if outcome.decision is not None and self.on_decision is not None:
                try:
                    self.on_decision(workers, glob, outcome.decision)
                except Exception:
                    log.exception("run %s: on_decision hook failed on window %d", run.run_id, barrier.window)
        if outcome.decision is not None:
            run.sizes = list(outcome.decision.batch_sizes)
            self.decisions += 1
            if self.store is not None:
                self.store.put(run.run_id, {
                    "world_size": n, "policy": policy.name, "ctx": run.ctx, "window": barrier.window,
                    "sizes": tuple(run.sizes), "policy_state": copy.deepcopy(policy.state_dict()),
                })
            log.debug("run %s: window %d -> %s", run.run_id, barrier.window, outcome.decision.batch_sizes)
        barrier.outcome = outcome
        run.last_outcome = outcome
        run.last_window = barrier.window
        run.pending = None
        barrier.close()
        self._cond.notify_all()

    # ----------------------------------------------------------------------------------------
    # Leaving
    # ----------------------------------------------------------------------------------------

    def leave(self, session_id: str, run_id: str, rank: int) -> int:
        """``rank`` is done; returns how many workers of the run remain registered."""
        with self._cond:
            run = self._run_for(session_id, run_id, rank)
            run.registered.discard(rank)
            run.left.add(rank)
            run.last_activity = self.clock()
            barrier = run.pending
            if barrier is not None and barrier.reports and run.complete(barrier):
                self._finalize(run, barrier)
            log.info("run %s: rank %d left (%d remain)", run_id, rank, len(run.registered))
            return len(run.registered)


def _ranks(items) -> str:
    """A list for a log line or message, cut after 16 entries (a 1,024-worker run stays one line)."""
    items = sorted(items)
    return f"{items[:16]}{f' and {len(items) - 16} more' if len(items) > 16 else ''}"
