"""The one interface every batch-size policy implements, and the spec-string registry.

A policy sees, at the end of each window, every worker's :class:`~dynamix.metrics.schema.WorkerWindow`
and the :class:`~dynamix.metrics.schema.GlobalWindow`, and returns each worker's batch size for the
next window (and optionally a learning-rate scale, e.g. AdaScale's gain). The engine, the simulator
and the gRPC arbitrator all drive policies through this interface only.

Policies are named by spec strings, usable from the CLI, ``params.yaml`` and the arbitrator:
``static:64``, ``lbbsp``, ``gns``, ``ramp``, ``dynamix:results/policies/NAME.zip``. The part after the
first ``:`` is the policy's argument. :class:`PolicySpec` is a spec parsed, and the one place that
splits or rewrites one. Implementations register themselves with :func:`register`;
a policy implemented in a higher layer (``dynamix`` lives in :mod:`dynamix.rl.policy`) is registered
by the import path of its factory with :func:`register_lazy` and imported on first use, so this
layer never imports the layers above it.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from dynamix.metrics.schema import GlobalWindow, WorkerWindow


@dataclass(frozen=True)
class Bounds:
    """Allowed per-worker batch sizes: integers in [min, max] (paper: [32, 1024])."""

    min: int = 32
    max: int = 1024

    def clamp(self, b: float) -> int:
        return int(min(self.max, max(self.min, round(b))))

    def global_range(self, n_workers: int) -> tuple[int, int]:
        """The global batches ``n_workers`` workers can hold: [n min, n max]."""
        return n_workers * self.min, n_workers * self.max


def floored_global_batch(batch: int, n_workers: int, per_worker: int) -> int:
    """max(B, N p): a global batch that keeps at least ``per_worker`` samples on each of ``n_workers``
    workers (LB-BSP's ``per_worker``, the agent's residual start m(N), :mod:`dynamix.rl.actions`)."""
    return max(batch, n_workers * per_worker)


def unheld_global_batch(name: str, batch: int, n_workers: int, bounds: Bounds, upto: int = 0) -> str | None:
    """The warning for a policy whose spec asks for a global batch ``batch`` (or, with ``upto``, any in
    [batch, upto]: a trained agent's residual span) that ``n_workers`` workers cannot hold within the
    bounds (it runs at the nearest one they can); None when they can (or ``batch`` is 0: the run's own
    initial batch)."""
    lo, hi = bounds.global_range(n_workers)
    top = max(upto, batch)
    if batch == 0 or (top >= lo and batch <= hi):
        return None
    asked = f"a global batch of {batch}" if top == batch else f"a global batch within [{batch}, {top}]"
    return (f"{name} asks for {asked}, which {n_workers} workers cannot hold within batch.min, batch.max = "
            f"[{bounds.min}, {bounds.max}] (global [{lo}, {hi}]): it runs at {lo if top < lo else hi}")


@dataclass(frozen=True)
class Decision:
    """A policy's answer for the next window."""

    batch_sizes: tuple[int, ...]  # one per worker, in rank order, each within the bounds
    lr_scale: float = 1.0  # multiplies the base learning rate (1.0: unchanged)


def check_decision(decision: Decision, n_workers: int, bounds: Bounds) -> Decision:
    """Reject vectors of the wrong length or outside the bounds: a sampler fed them would misbehave.
    Every backend (engine, simulator) checks each decision it applies."""
    sizes = tuple(int(b) for b in decision.batch_sizes)
    if len(sizes) != n_workers:
        raise ValueError(f"decision.batch_sizes has {len(sizes)} entries: need one per worker ({n_workers})")
    bad = [b for b in sizes if not bounds.min <= b <= bounds.max]
    if bad:
        raise ValueError(f"decision.batch_sizes = {sizes} has {bad} outside [batch.min, batch.max] = "
                         f"[{bounds.min}, {bounds.max}]")
    if not decision.lr_scale > 0:
        raise ValueError(f"decision.lr_scale = {decision.lr_scale} is out of range: must be > 0")
    return Decision(sizes, float(decision.lr_scale))


def check_first_decision(decision: Decision, n_workers: int, bounds: Bounds, dataset_size: int) -> Decision:
    """:func:`check_decision` for the first window, plus its global batch against the training set: a
    user's setting (the spec, ``batch.initial``, the worker count), so a :class:`ConfigError`."""
    from dynamix.config import ConfigError

    try:
        decision = check_decision(decision, n_workers, bounds)
    except ValueError as exc:
        raise ConfigError(f"the policy's first batch sizes: {exc}") from None
    total = sum(decision.batch_sizes)
    if total > dataset_size:
        raise ConfigError(f"global batch {total} ({n_workers} workers at {list(decision.batch_sizes)[:4]}"
                          f"{' ...' if n_workers > 4 else ''}) exceeds the training set ({dataset_size} samples): "
                          "use fewer workers or smaller batches")
    return decision


@dataclass(frozen=True)
class WindowForecast:
    """The coming window's k iterations as they will run at one batch vector: arrays (k, n) of
    true speeds, bandwidths (Gbit/s) and compute times (ms), and (k,) iteration times (ms)."""

    speeds: np.ndarray
    bandwidth_gbps: np.ndarray
    compute_ms: np.ndarray
    iter_ms: np.ndarray


class Foresight(Protocol):
    """A read-only view of the future that only the simulator can offer (it holds the cluster's
    true speeds, bandwidths and scheduled events; :class:`dynamix.sim.foresight.ClusterForesight`).
    Policies that use it are simulator-only (``register(kind, simulator_only=True)``)."""

    @property
    def max_batch(self) -> np.ndarray:
        """Each worker's device memory cap: the simulator holds larger sizes at it."""

    def window(self, batch_sizes: Sequence[int]) -> WindowForecast:
        """The coming window at ``batch_sizes`` (events, stragglers and jitter exactly as they will be drawn)."""

    def compute_ms(self, batch_sizes: np.ndarray, speeds: np.ndarray) -> np.ndarray:
        """The cost model's compute time (ms) of batch(es) at speed(s), broadcast like numpy."""


@dataclass(frozen=True)
class PolicyContext:
    """What a policy is told once, before the first window."""

    n_workers: int
    initial_batch_sizes: tuple[int, ...]
    bounds: Bounds = Bounds()
    actions: tuple[int, ...] = (-100, -25, 0, 25, 100)  # batch-size steps for action-based policies
    window: int = 10  # k, iterations per window
    optimizer: str = "sgd"  # "sgd" or "adam": AdaScale uses r for SGD, r**0.5 for Adam
    dataset_size: int = 50000  # training samples: lets policies reason in epochs
    seed: int = 0
    lr_scaling: str = "none"  # optim.lr_scaling, the backend's LR rule that lr_scale multiplies
    base_batch: int = 128  # optim.base_batch of that rule
    epochs: float = 0.0  # the run's epoch budget, its LR schedule's horizon (train.horizon_epochs); 0: untold
    base_lr: float = 0.0  # optim.lr, the base learning rate; 0: untold


class BatchSizePolicy(ABC):
    """Decides per-worker batch sizes window by window. Stateful; call :meth:`reset` per run."""

    name: str = "policy"

    def reset(self, ctx: PolicyContext) -> None:
        """Start a new run. Subclasses that keep state extend this (and call super)."""
        self.ctx = ctx

    @abstractmethod
    def decide(self, workers: Sequence[WorkerWindow], glob: GlobalWindow) -> Decision:
        """Batch sizes for the next window from the window that just ended."""

    def initial(self, ctx: PolicyContext) -> Decision:
        """Batch sizes for the first window (before any measurement); default: the context's."""
        return Decision(tuple(ctx.bounds.clamp(b) for b in ctx.initial_batch_sizes))

    def foresee(self, view: Foresight) -> None:
        """The simulator offers every policy its :class:`Foresight` before :meth:`reset`; only
        simulator-only policies use it (the default ignores it)."""

    def unmet_request(self, n_workers: int, bounds: Bounds) -> str | None:
        """Why this policy cannot run as its spec asks on ``n_workers`` workers (e.g. a global batch
        outside n x bounds, which it clamps), or None. The simulator logs it; run summaries flag it
        (``clamped``)."""
        return None

    def check_bounds(self, bounds: Any) -> None:
        """Refuse (:class:`~dynamix.config.ConfigError`) a spec whose sizes ``bounds`` (``.min``,
        ``.max``: ``batch`` config or :class:`Bounds`) would reject; policies that clamp need nothing.
        A trained policy (``dynamix:PATH``) also reads the ``batch`` config's ``.actions``."""

    def state_dict(self) -> dict:
        """Plain-data state for checkpoints (restored after :meth:`reset`); stateless policies: {}."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` output; call after :meth:`reset` with the same context."""


def parse_spec_args(kind: str, arg: str, options: type) -> Any:
    """``"refit=20,gain=0.05"`` -> an ``options`` dataclass, validated by :func:`dynamix.config.build`.

    Values are parsed as YAML scalars; unknown keys and out-of-range values raise
    :class:`~dynamix.config.ConfigError` naming ``kind.key`` and the allowed range.
    """
    from dynamix.config import ConfigError, build, parse_yaml

    values: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in arg.split(","))):
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"policy spec {kind}:{arg!r}: {item!r} must look like key=value")
        values[key.strip()] = parse_yaml(raw, f"policy spec {kind}:{arg} ({key.strip()})")
    return build(options, values, prefix=f"policy spec {kind}")


Factory = Callable[[str], BatchSizePolicy]
_REGISTRY: dict[str, Factory | str] = {}  # kind -> factory, or "package.module:name" of a factory
_SIMULATOR_ONLY: set[str] = set()  # kinds that read the simulator's Foresight


def register(kind: str, simulator_only: bool = False) -> Callable[[Factory], Factory]:
    """Class or function decorator: ``kind`` is the spec prefix, the factory takes the argument.
    ``simulator_only``: the policy needs the simulator's :class:`Foresight`; real workers (the
    engine, the arbitrator: :func:`make_live_policy`) refuse it."""

    def deco(factory: Factory) -> Factory:
        _REGISTRY[kind] = factory
        if simulator_only:
            _SIMULATOR_ONLY.add(kind)
        return factory

    return deco


def register_lazy(kind: str, target: str) -> None:
    """Register ``kind`` by the import path of its factory, ``"package.module:name"``; the module is
    imported by the first :func:`make_policy` that asks for ``kind`` (in whatever process that is)."""
    module, sep, name = target.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"register_lazy({kind!r}, {target!r}): target must look like 'package.module:name'")
    _REGISTRY[kind] = target


def _factory(kind: str) -> Factory:
    entry = _REGISTRY[kind]
    if isinstance(entry, str):
        module, _, name = entry.partition(":")
        entry = _REGISTRY[kind] = getattr(importlib.import_module(module), name)
    return entry


TRAINED = "dynamix"
"""The kind of a trained policy (:mod:`dynamix.rl.policy`), whose argument is its artifact's path."""


@dataclass(frozen=True)
class PolicySpec:
    """A policy spec string parsed once: ``kind``, a registered policy, and ``arg``, the text after the
    first ``:`` exactly as written ("" for none). ``str()`` gives the spec back as written, so run ids,
    cache keys and labels read the same text whether they start from the string or from this."""

    kind: str
    arg: str = ""

    @classmethod
    def parse(cls, text: str | PolicySpec) -> PolicySpec:
        """``text`` as a spec (one already parsed is returned as is). An unknown kind or an empty argument
        after ``:`` is a :class:`~dynamix.config.ConfigError` naming the spec and the allowed forms; the
        argument itself is checked by the policy that reads it (:func:`make_policy`)."""
        if isinstance(text, PolicySpec):
            return text
        import dynamix.policies  # noqa: F401  (registers the built-in policies)
        from dynamix.config import ConfigError

        kind, sep, arg = text.partition(":")
        if kind not in _REGISTRY:
            raise ConfigError(f"policy spec {text!r}: unknown policy {kind!r}: must be one of "
                              f"{', '.join(sorted(_REGISTRY))}")
        if sep and not arg.strip():
            raise ConfigError(f"policy spec {text!r}: the argument after ':' is empty: write {kind!r} or {kind}:ARG")
        return cls(kind, arg)

    @classmethod
    def trained(cls, path: Any) -> PolicySpec:
        """``dynamix:PATH``, the trained policy whose artifact is ``path``."""
        return cls(TRAINED, str(path))

    def __str__(self) -> str:
        return f"{self.kind}:{self.arg}" if self.arg else self.kind

    @property
    def path(self) -> str | None:
        """A trained policy's artifact (the argument of ``dynamix:PATH``); None for a rule."""
        return self.arg if self.kind == TRAINED else None

    @property
    def label(self) -> str:
        """Short legend label: a trained policy's kind alone (``dynamix``, whatever its path), any other
        spec as written."""
        return self.kind if self.kind == TRAINED else str(self)


def make_policy(spec: str | PolicySpec, bounds: Any = None) -> BatchSizePolicy:
    """Build a policy from its spec, e.g. ``static:64`` or ``dynamix:results/policies/x.zip``; with
    ``bounds`` (``batch`` config), also refuse sizes outside ``[bounds.min, bounds.max]``. A trained
    policy reads its artifact here, so a caller running one spec many times makes it once (policies
    start afresh at every :meth:`BatchSizePolicy.reset`)."""
    spec = PolicySpec.parse(spec)
    policy = _factory(spec.kind)(spec.arg)
    if bounds is not None:
        policy.check_bounds(bounds)
    return policy


def check_live(spec: str | PolicySpec) -> None:
    """Refuse a simulator-only policy where real workers would follow it (engine, arbitrator)."""
    spec = PolicySpec.parse(spec)
    if spec.kind in _SIMULATOR_ONLY:
        from dynamix.config import ConfigError

        raise ConfigError(f"policy spec {str(spec)!r}: {spec.kind} reads the simulator's true future speeds, "
                          "bandwidths and events, so it runs only in the simulator (dynamix simulate, dynamix "
                          "evaluate), not on the engine or the arbitrator")


def make_live_policy(spec: str | PolicySpec, **kwargs: Any) -> BatchSizePolicy:
    """:func:`make_policy` for real workers: every engine and arbitrator policy is made here, so
    :func:`check_live` refuses simulator-only policies in one place."""
    spec = PolicySpec.parse(spec)
    check_live(spec)
    return make_policy(spec, **kwargs)


def known_policies() -> list[str]:
    import dynamix.policies  # noqa: F401

    return sorted(_REGISTRY)
