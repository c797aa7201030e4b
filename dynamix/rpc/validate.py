"""Checks on what workers send, before anything reaches a policy: ranges, NaN, consistency.

Two kinds of rejection, mirroring gRPC's status codes (the servicer maps them one to one):

- :class:`InvalidArgument`: the message itself is wrong whatever the server's state (a NaN loss, an
  accuracy above 1, a rank outside ``[0, world_size)``, a window index that contradicts the iteration
  count). Retrying the same message cannot succeed.
- :class:`FailedPrecondition`: the message is well formed but does not fit the server's state (an
  unknown session after a restart, an unregistered worker, another run in progress, a stale window).
  The worker re-registers or moves on.

Ranges are declared once in :data:`WORKER_RANGES` / :data:`GLOBAL_RANGES` as ``rng`` metadata and
checked by :func:`dynamix.config.check_value`, so messages read like config errors: they name the
field and the allowed range. Upper bounds are finite so that infinities are rejected too.
"""

from __future__ import annotations

import dataclasses
import math
import operator

from dynamix.config import SEED, ConfigError, check_value, rng
from dynamix.metrics.schema import GlobalWindow, WorkerWindow
from dynamix.policies.base import Bounds

BIG = 1e30  # finite stand-in for "unbounded above": rejects inf
MAX_WORKERS = 4096  # same bound as engine.world_size
MAX_BATCH = 65536  # same bound as batch.max
MAX_RUNS = 64  # runs one arbitrator serves at once: bounds the memory strangers can make it hold
OPTIMIZERS = ("sgd", "adam")


class Rejected(Exception):
    """A request the arbitrator refuses; ``str(exc)`` is the message returned to the caller."""


class InvalidArgument(Rejected):
    """The request is malformed (maps to gRPC INVALID_ARGUMENT)."""


class FailedPrecondition(Rejected):
    """The request does not fit the arbitrator's state (maps to gRPC FAILED_PRECONDITION).

    ``reason`` is one of :data:`REASONS` (the proto's ``RejectReason`` without its prefix), sent to the
    caller as trailing metadata so it knows whether registering again can help.
    """

    REASONS = ("SESSION_UNKNOWN", "RUN_UNKNOWN", "NOT_REGISTERED", "RUN_BUSY", "RUN_INCONSISTENT",
               "WINDOW_STALE", "WINDOW_ABANDONED")
    REREGISTER = frozenset({"SESSION_UNKNOWN", "RUN_UNKNOWN", "NOT_REGISTERED"})
    """Reasons after which registering again lets the same report through."""

    def __init__(self, message: str, reason: str) -> None:
        if reason not in self.REASONS:
            raise ValueError(f"reason = {reason!r} is not allowed: must be one of {self.REASONS}")
        super().__init__(message)
        self.reason = reason


WORKER_RANGES: dict[str, dict] = {
    "iter_time_ms": rng(1e-6, 1e9),
    "compute_ms": rng(0.0, 1e9),
    "comm_ms": rng(0.0, 1e9),
    "wait_ms": rng(0.0, 1e9),
    "throughput_samples_per_s": rng(0.0, 1e12),
    "net_tx_bytes_per_s": rng(0.0, 1e15),
    "net_rx_bytes_per_s": rng(0.0, 1e15),
    "tcp_retrans_per_s": rng(0.0, 1e12),
    "cpu_time_ratio": rng(0.0, float(MAX_WORKERS)),
    "mem_util": rng(0.0, 1.0),
    "loss": rng(0.0, BIG),
    "batch_acc": rng(0.0, 1.0),
    "grad_norm": rng(0.0, BIG),
    "grad_sqnorm": rng(0.0, BIG),
    "sigma_norm": rng(0.0, BIG),
    "sigma2_norm": rng(0.0, BIG),
    "speed": rng(1e-9, 1e9),
    "comm_bytes": rng(0.0, 1e15),
    "compression_ratio": rng(0.0, 1e9),
    "comm_fallbacks": rng(0.0, 1e12),
    "encode_ms": rng(0.0, 1e9),
    "decode_ms": rng(0.0, 1e9),
}
"""Allowed range of every float field of :class:`WorkerWindow` (rank and batch_size are checked
against the run: ``[0, world_size)`` and the run's bounds)."""

GLOBAL_RANGES: dict[str, dict] = {
    "window": rng(0, 2**53),
    "iteration": rng(1, 2**53),
    "epoch": rng(0.0, 1e9),
    "elapsed_s": rng(0.0, 1e12),
    "global_batch": rng(1, MAX_BATCH * MAX_WORKERS),
    "lr": rng(0.0, 1e3),
    "train_loss": rng(0.0, BIG),
    "train_acc": rng(0.0, 1.0),
    "agg_grad_sqnorm": rng(0.0, BIG),
    "test_acc": rng(0.0, 1.0),
    "test_loss": rng(0.0, BIG),
}
"""Allowed range of every field of :class:`GlobalWindow` but ``n_workers`` (must equal the run's)."""

NAN_ALLOWED = frozenset({"test_acc", "test_loss"})  # NaN until the first evaluation (schema default)


class _Fast:
    """One pass over a message's fields in C when every value is in range (every report of every window
    comes here): the fields that must not be NaN through ``operator.le`` over their bounds (NaN and
    wrong types fail it), the NaN-allowed ones apart. Any failure sends the message to the slow loop
    of :func:`_check`, which names the field."""

    def __init__(self, ranges: dict[str, dict]) -> None:
        plain = [n for n in ranges if n not in NAN_ALLOWED]
        nan_ok = [n for n in ranges if n in NAN_ALLOWED]
        self.read = operator.attrgetter(*plain)
        self.lo, self.hi = (tuple(ranges[n]["range"][i] for n in plain) for i in (0, 1))
        self.nan = [(operator.attrgetter(n), *ranges[n]["range"]) for n in nan_ok]

    def ok(self, obj: object) -> bool:
        values = self.read(obj)
        if not (all(map(operator.le, self.lo, values)) and all(map(operator.le, values, self.hi))):
            return False
        return all(lo <= v <= hi or v != v for get, lo, hi in self.nan for v in (get(obj),))


_FAST = {id(r): _Fast(r) for r in (WORKER_RANGES, GLOBAL_RANGES)}


def _check(prefix: str, obj: object, ranges: dict[str, dict]) -> None:
    fast = _FAST.get(id(ranges))
    if fast is not None:
        try:
            if fast.ok(obj):
                return
        except TypeError:
            pass  # a value of the wrong type: the loop below names it
    for name, meta in ranges.items():
        value = getattr(obj, name)
        if name in NAN_ALLOWED and isinstance(value, float) and math.isnan(value):
            continue
        try:
            check_value(f"{prefix}.{name}", value, meta)
        except ConfigError as exc:
            raise InvalidArgument(str(exc)) from None


def check_worker(w: WorkerWindow, world_size: int, bounds: Bounds) -> None:
    """Ranges of one worker's window, its rank and batch size against the run."""
    if not 0 <= w.rank < world_size:
        raise InvalidArgument(f"rank = {w.rank} is out of range: must be in [0, {world_size - 1}]")
    if not bounds.min <= w.batch_size <= bounds.max:
        raise InvalidArgument(
            f"worker.batch_size = {w.batch_size} is out of range: must be in [{bounds.min}, {bounds.max}]"
        )
    _check("worker", w, WORKER_RANGES)
    # Jensen: the mean of |g|^2 is at least the square of the mean |g| (both over the same window).
    if w.grad_sqnorm < w.grad_norm**2 * (1 - 1e-6) - 1e-12:
        raise InvalidArgument(
            f"worker.grad_sqnorm = {w.grad_sqnorm!r} is inconsistent: must be >= worker.grad_norm**2 = "
            f"{w.grad_norm**2!r} (mean of squares >= square of mean)"
        )


def check_global(g: GlobalWindow, w: WorkerWindow, world_size: int) -> None:
    """Ranges of one worker's view of the global state, and its consistency with the worker's window."""
    _check("global", g, GLOBAL_RANGES)
    if g.n_workers != world_size:
        raise InvalidArgument(f"global.n_workers = {g.n_workers} is inconsistent: the run has {world_size}")
    if g.iteration < g.window + 1:
        raise InvalidArgument(
            f"global.iteration = {g.iteration} is inconsistent with global.window = {g.window}: "
            f"every window has at least one iteration, so iteration must be >= {g.window + 1}"
        )
    if g.global_batch < w.batch_size:
        raise InvalidArgument(
            f"global.global_batch = {g.global_batch} is inconsistent: smaller than this worker's "
            f"batch_size = {w.batch_size}"
        )


AGREED_GLOBAL_FIELDS = ("iteration", "global_batch", "n_workers")
"""Integer global fields every rank must report identically for the same window."""


def check_agreement(g: GlobalWindow, other: GlobalWindow, other_rank: int) -> None:
    """Two ranks' views of the same window must agree on the integer global fields."""
    for name in AGREED_GLOBAL_FIELDS:
        mine, theirs = getattr(g, name), getattr(other, name)
        if mine != theirs:
            raise InvalidArgument(
                f"global.{name} = {mine} is inconsistent with rank {other_rank}'s report for window "
                f"{g.window} ({theirs})"
            )


@dataclasses.dataclass(frozen=True)
class Registration:
    """A worker's request to join a run (the RegisterRequest message as plain data)."""

    run_id: str
    rank: int
    world_size: int
    initial_batch_sizes: tuple[int, ...]
    current_batch_size: int
    next_window: int = 0
    optimizer: str = "sgd"
    dataset_size: int = 50000
    seed: int = 0
    device: dict = dataclasses.field(default_factory=dict)  # informative: hostname, pid, device_type, ...


RUN_FIELDS = ("world_size", "initial_batch_sizes", "optimizer", "dataset_size", "seed")
"""Registration fields fixed by a run's first registration; later registrations must agree."""


def check_registration(r: Registration, bounds: Bounds) -> None:
    """A registration on its own: identifiers, ranges, and initial sizes within the bounds."""
    if not r.run_id or len(r.run_id) > 256 or not r.run_id.isprintable():
        raise InvalidArgument(f"run_id = {r.run_id[:300]!r} is invalid: must be 1-256 printable characters")
    if not 1 <= r.world_size <= MAX_WORKERS:
        raise InvalidArgument(f"world_size = {r.world_size} is out of range: must be in [1, {MAX_WORKERS}]")
    if not 0 <= r.rank < r.world_size:
        raise InvalidArgument(f"rank = {r.rank} is out of range: must be in [0, {r.world_size - 1}]")
    if len(r.initial_batch_sizes) != r.world_size:
        raise InvalidArgument(
            f"initial_batch_sizes has {len(r.initial_batch_sizes)} entries: must have world_size = "
            f"{r.world_size}"
        )
    bad = [i for i, b in enumerate(r.initial_batch_sizes) if not bounds.min <= b <= bounds.max]
    if bad:
        raise InvalidArgument(f"initial_batch_sizes[{bad[0]}] = {r.initial_batch_sizes[bad[0]]} is out of range: "
                              f"must be in [{bounds.min}, {bounds.max}]")
    if not bounds.min <= r.current_batch_size <= bounds.max:
        raise InvalidArgument(
            f"current_batch_size = {r.current_batch_size} is out of range: must be in "
            f"[{bounds.min}, {bounds.max}]"
        )
    if r.optimizer not in OPTIMIZERS:
        raise InvalidArgument(f"optimizer = {r.optimizer!r} is not allowed: must be one of {OPTIMIZERS}")
    _check("registration", r, REGISTRATION_RANGES)
    for name, meta in DEVICE_RANGES.items():
        if name in r.device:
            try:
                check_value(f"device.{name}", r.device[name], meta)
            except (ConfigError, TypeError) as exc:
                raise InvalidArgument(str(exc)) from None


REGISTRATION_RANGES: dict[str, dict] = {
    "next_window": rng(0, 2**53),
    "dataset_size": rng(1, 2**40),
    "seed": SEED,
}
"""Allowed range of the numeric run fields of a :class:`Registration` (the seed: ``train.seed``'s)."""

DEVICE_RANGES: dict[str, dict] = {
    "pid": rng(0, 2**31),
    "num_threads": rng(0, 65536),
    "speed": rng(0.0, 1e9),  # 0: not given (the proto's default)
}
"""Allowed range of the numeric fields of a registration's device info (informative, but logged)."""
