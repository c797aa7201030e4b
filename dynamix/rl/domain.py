"""Domain randomisation: the distribution of training clusters the agent learns on.

Each training episode draws a fresh :class:`~dynamix.cluster.ClusterSpec` so the policy learns
behaviour that holds across clusters rather than memorising one (Tobin et al. 2017). With ``rl``
the section of ``params.yaml``, every worker of a ``rl.workers``-worker cluster (or a count drawn per
episode from ``rl.workers_range``, :func:`draw_workers`) gets, independently:

- speed ~ log-uniform(``rl.speed``) (relative to the calibrated reference machine);
- bandwidth ~ log-uniform(``rl.bandwidth_gbps``), latency ~ uniform(``rl.latency_ms``);

- fixed cost per iteration ~ uniform(``rl.fixed_ms``) ms, not scaled by speed (accelerator-class
  devices whose throughput rises with the batch, ``DeviceProfile.fixed_ms``; drawn only when the range
  is not [0, 0], so a config without it samples exactly the clusters it sampled before);

and the cluster: ring (overlapping ~ uniform(``rl.overlap``) of its communication with the backward
pass, drawn likewise only for a non-zero range), or with probability ``rl.ps_probability`` a parameter
server whose bandwidth is drawn like a link's; straggler probability ~ uniform(``rl.straggler_probability``) with factor
~ uniform(0.2, 0.5); jitter ~ uniform(``rl.jitter``); and with probability ``rl.event_probability`` one
event (slowdown by 0.2-0.6, or bandwidth drop by 0.05-0.5) on one random worker, starting at a
uniform iteration of the first ``horizon_iters`` and lasting to the end or a random duration.

Held-out evaluation clusters (``clusters/heldout/*.yaml``) are hand-written and never drawn here.
:func:`sample_set` draws a *validation* set from the same distribution on a seed stream training
never uses (``dynamix sample-clusters``): many draws estimate how a policy does on the distribution
it was trained for better than a few hand-made clusters do (docs/journal/rl.md).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np

from dynamix.cluster import Architecture, ClusterSpec, DeviceProfile, Event, Stragglers, WorkerSpec
from dynamix.config import ConfigError, RLConfig


def _range(rl: RLConfig, name: str) -> tuple[float, float]:
    value = getattr(rl, name)
    if len(value) != 2 or value[0] > value[1]:
        raise ConfigError(f"rl.{name} = {list(value)} must be a pair [low, high] with low <= high")
    return float(value[0]), float(value[1])


def _log_uniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def draw_workers(rl: RLConfig, rng: np.random.Generator) -> int:
    """An episode's worker count: ``rl.workers``, or log-uniform over ``rl.workers_range`` rounded to an
    integer, so each octave of cluster sizes (2-4, 4-8, ..., 16-32) gets as many episodes; nothing is
    drawn from ``rng`` without a range, so configs without one sample the clusters they sampled before."""
    if not rl.workers_range:
        return rl.workers
    lo, hi = rl.workers_range
    return int(min(max(round(_log_uniform(rng, lo, hi)), lo), hi))


def sample_cluster(rl: RLConfig, rng: np.random.Generator, horizon_iters: int, name: str = "train",
                   n_workers: int | None = None) -> ClusterSpec:
    """One random training cluster of ``n_workers`` workers (default ``rl.workers``); ``rng`` fully
    determines it (seeded by the caller)."""
    for field_name in ("speed", "bandwidth_gbps", "latency_ms", "straggler_probability", "jitter", "fixed_ms", "overlap"):
        _range(rl, field_name)
    n = rl.workers if n_workers is None else n_workers
    fixed = _range(rl, "fixed_ms")
    overlap = _range(rl, "overlap")

    def worker(i: int) -> WorkerSpec:
        speed = round(_log_uniform(rng, *_range(rl, "speed")), 4)
        bandwidth = round(_log_uniform(rng, *_range(rl, "bandwidth_gbps")), 4)
        latency = round(float(rng.uniform(*_range(rl, "latency_ms"))), 4)
        fixed_ms = round(float(rng.uniform(*fixed)), 4) if fixed[1] > 0 else 0.0
        return WorkerSpec(DeviceProfile(f"w{i}", speed, fixed_ms=fixed_ms), bandwidth, latency)

    workers = tuple(worker(i) for i in range(n))
    if rng.uniform() < rl.ps_probability:
        arch = Architecture("ps", 1, round(_log_uniform(rng, *_range(rl, "bandwidth_gbps")), 4))
    else:
        arch = Architecture("ring", overlap=round(float(rng.uniform(*overlap)), 4) if overlap[1] > 0 else 0.0)
    events: tuple[Event, ...] = ()
    if rng.uniform() < rl.event_probability:
        kind = "slowdown" if rng.uniform() < 0.5 else "bandwidth"
        factor = rng.uniform(0.2, 0.6) if kind == "slowdown" else rng.uniform(0.05, 0.5)
        duration = 0 if rng.uniform() < 0.5 else int(rng.integers(1, max(2, horizon_iters)))
        events = (Event(kind=kind, at_iteration=int(rng.integers(0, max(1, horizon_iters))),
                        workers=(int(rng.integers(0, n)),), factor=round(float(factor), 4),
                        duration_iterations=duration),)
    stragglers = Stragglers(round(float(rng.uniform(*_range(rl, "straggler_probability"))), 4),
                            round(float(rng.uniform(0.2, 0.5)), 4))
    return ClusterSpec(
        name=name, seed=int(rng.integers(0, 2**31 - 1)), architecture=arch, workers=workers,
        events=events, stragglers=stragglers, jitter=round(float(rng.uniform(*_range(rl, "jitter"))), 4),
    )


HELD_ASIDE = 0x5A1D
"""Second word of :func:`sample_set`'s seed sequence: training seeds its episodes from a single
integer (gymnasium's ``np_random(seed)``), so ``SeedSequence([seed, HELD_ASIDE])`` is another stream."""


def horizon_iters(epochs: float, n_train: int, n_workers: int, batch: float) -> int:
    """Iterations of a run of ``epochs`` epochs at per-worker batch ``batch``: the window events start in."""
    return max(1, int(epochs * n_train / (n_workers * batch)))


def sample_set(rl: RLConfig, n: int, seed: int, workers: Sequence[int], epochs: float, n_train: int,
               batch: int, prefix: str = "rand") -> list[ClusterSpec]:
    """``n`` clusters from the training distribution, named ``{prefix}-{i:02d}-{N}w``; the i-th has
    ``workers[i % len(workers)]`` workers and its events start within the first ``epochs`` epochs."""
    if n < 1:
        raise ConfigError(f"n = {n} clusters: must be >= 1")
    if not workers or min(workers) < 1:
        raise ConfigError(f"workers = {list(workers)}: each count must be >= 1")
    rng = np.random.default_rng([seed, HELD_ASIDE])
    specs = []
    for i in range(n):
        k = workers[i % len(workers)]
        specs.append(sample_cluster(dataclasses.replace(rl, workers=k), rng,
                                    horizon_iters(epochs, n_train, k, batch), name=f"{prefix}-{i:02d}-{k}w"))
    return specs
