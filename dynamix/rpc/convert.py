"""Messages of ``dynamix.rpc.v1`` <-> the plain dataclasses the arbitrator and the engine use.

The proto mirrors :mod:`dynamix.metrics.schema` field by field (same names, same units), so the
conversion is generic over the dataclass fields; :func:`check_schema_mirror` (run by the tests)
fails when someone adds a schema field without adding it to the proto.
"""

from __future__ import annotations

import dataclasses
import operator

from dynamix.metrics.schema import GlobalWindow, WorkerWindow
from dynamix.rpc.arbitrator import Answer, Welcome
from dynamix.rpc.v1 import arbitrator_pb2 as pb
from dynamix.rpc.validate import Registration

_WORKER_FIELDS = [f.name for f in dataclasses.fields(WorkerWindow) if f.name != "rank"]
_GLOBAL_FIELDS = [f.name for f in dataclasses.fields(GlobalWindow)]
# the arbitrator converts every report of every window: read the fields in one C call, pass them by position
_read_worker, _read_global = operator.attrgetter(*_WORKER_FIELDS), operator.attrgetter(*_GLOBAL_FIELDS)
assert [f.name for f in dataclasses.fields(WorkerWindow)] == ["rank", *_WORKER_FIELDS]


def _maker(cls: type, names: list[str]):
    """``cls(*values)`` for a frozen dataclass without ``__post_init__``, minus the generated ``__init__``'s
    ``object.__setattr__`` per field: the instance's ``__dict__`` filled in one call (the arbitrator
    builds two such objects per report, and a report's whole handling is a few tens of microseconds)."""
    assert dataclasses.fields(cls) and not hasattr(cls, "__post_init__") and not hasattr(cls, "__slots__")
    new = object.__new__

    def make(values) -> object:
        obj = new(cls)
        obj.__dict__.update(zip(names, values))
        return obj

    return make


_make_worker = _maker(WorkerWindow, ["rank", *_WORKER_FIELDS])
_make_global = _maker(GlobalWindow, _GLOBAL_FIELDS)

OPTIMIZER_TO_PB = {"sgd": pb.OPTIMIZER_SGD, "adam": pb.OPTIMIZER_ADAM}
OPTIMIZER_FROM_PB = {v: k for k, v in OPTIMIZER_TO_PB.items()}


def check_schema_mirror() -> list[str]:
    """Schema fields missing from the proto messages (empty when they mirror each other)."""
    missing = [f"WorkerState.{n}" for n in _WORKER_FIELDS if n not in pb.WorkerState.DESCRIPTOR.fields_by_name]
    missing += [f"GlobalState.{n}" for n in _GLOBAL_FIELDS if n not in pb.GlobalState.DESCRIPTOR.fields_by_name]
    return missing


def worker_to_pb(w: WorkerWindow) -> pb.WorkerState:
    return pb.WorkerState(**{n: getattr(w, n) for n in _WORKER_FIELDS})


def worker_from_pb(rank: int, msg: pb.WorkerState) -> WorkerWindow:
    return _make_worker((rank, *_read_worker(msg)))


def global_to_pb(g: GlobalWindow) -> pb.GlobalState:
    return pb.GlobalState(**{n: getattr(g, n) for n in _GLOBAL_FIELDS})


def global_from_pb(msg: pb.GlobalState) -> GlobalWindow:
    return _make_global(_read_global(msg))


def report_to_pb(session_id: str, run_id: str, w: WorkerWindow, g: GlobalWindow) -> pb.ReportWindowRequest:
    return pb.ReportWindowRequest(
        session_id=session_id, run_id=run_id, rank=w.rank, worker=worker_to_pb(w), global_view=global_to_pb(g)
    )


def report_from_pb(msg: pb.ReportWindowRequest) -> tuple[WorkerWindow, GlobalWindow]:
    return worker_from_pb(msg.rank, msg.worker), global_from_pb(msg.global_view)


def registration_to_pb(r: Registration) -> pb.RegisterRequest:
    return pb.RegisterRequest(
        run_id=r.run_id,
        rank=r.rank,
        world_size=r.world_size,
        initial_batch_sizes=list(r.initial_batch_sizes),
        current_batch_size=r.current_batch_size,
        next_window=r.next_window,
        optimizer=OPTIMIZER_TO_PB.get(r.optimizer, pb.OPTIMIZER_UNSPECIFIED),
        dataset_size_samples=r.dataset_size,
        seed=r.seed,
        device=pb.DeviceInfo(**r.device),
    )


def registration_from_pb(msg: pb.RegisterRequest) -> Registration:
    d = msg.device
    return Registration(
        run_id=msg.run_id,
        rank=msg.rank,
        world_size=msg.world_size,
        initial_batch_sizes=tuple(msg.initial_batch_sizes),
        current_batch_size=msg.current_batch_size,
        next_window=msg.next_window,
        optimizer=OPTIMIZER_FROM_PB.get(msg.optimizer, "unspecified"),
        dataset_size=msg.dataset_size_samples,
        seed=msg.seed,
        device={
            "hostname": d.hostname,
            "pid": d.pid,
            "device_type": d.device_type,
            "num_threads": d.num_threads,
            "speed": d.speed,
        },
    )


def welcome_to_pb(w: Welcome) -> pb.RegisterResponse:
    s = w.settings
    return pb.RegisterResponse(
        session_id=w.session_id,
        window_iters=s.window_iters,
        min_batch_size=s.bounds.min,
        max_batch_size=s.bounds.max,
        actions=list(s.actions),
        policy=w.policy,
        batch_size=w.batch_size,
        lr_scale=w.lr_scale,
        barrier_timeout_s=s.barrier_timeout_s,
    )


def answer_to_pb(a: Answer) -> pb.ReportWindowResponse:
    return pb.ReportWindowResponse(
        window=a.window,
        batch_size=a.batch_size,
        lr_scale=a.lr_scale,
        batch_sizes=list(a.batch_sizes),
        dropped_ranks=list(a.dropped_ranks),
        late=a.late,
    )
