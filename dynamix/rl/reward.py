"""The DYNAMIX reward, per worker and per window (paper Sec. III-C).

For SGD::

    r_SGD = A_mean + alpha * max(0, dA) - beta * T_iter - delta * (log2(b) - 5)

and for adaptive optimisers (Adam) additionally ``- eta * (sigma2_norm + sigma_norm)``, where for
worker i over the window that just ended:

- ``A_mean`` is the worker's mean training (batch) accuracy, in [0, 1];
- ``dA`` is its change against the previous window (0 in the first window);
- ``b`` is the worker's batch size (``log2(b) - 5`` is 0 at b = 32, the paper's minimum);
- ``sigma_norm``/``sigma2_norm`` are the worker's normalised gradient std/variance
  (:mod:`dynamix.metrics.gradstats`).

**How T_iter is scaled** (the paper leaves it open): ``T_iter = iter_time_ms / T_ref_ms``, the
worker's iteration time (compute + barrier wait + communication: what the cluster actually pays per
step) divided by the mean iteration time of the episode's first window, which runs at the initial
batch sizes. So T_iter = 1 at the start of every episode, is dimensionless, and means the same on a
fast GPU cluster and a slow CPU one; that keeps ``beta`` meaningful across workloads and lets a
policy transfer. Because iterations are synchronous, a straggler raises every worker's T_iter, so
shrinking the straggler's batch is rewarded on all workers (``rl.time_signal: iteration``). That
shared signal gives a worker's own action little credit (its batch moves T only when it is the
straggler): in our 6144-transition PPO runs on 2 shared cores the policy did not move away from its
initial batch. ``rl.time_signal: busy`` is ``T_iter = (iter_time_ms - wait_ms) / T_ref_ms``: the
worker's own compute and communication, without the barrier wait, which its own batch size drives
directly; with it (and the ``paper`` return below) PPO learned only to cut every batch to the minimum.

``rl.time_signal: marginal`` is a difference reward (Wolpert & Tumer 2002): the worker pays only
the part of the synchronous iteration it alone causes, ``T_iter = max(0, busy_i - max_{j!=i}
busy_j) / T_ref_ms`` with ``busy = iter_time_ms - wait_ms``. The straggler pays its excess over the
second slowest worker (shrinking it shortens everyone's iteration); a worker that waits at the
barrier pays nothing (its batch does not set the pace), so load balancing has a sharp per-worker
credit, and cutting every batch to the minimum is not rewarded for its own sake.

``rl.time_signal: imbalance`` adds the other side of the barrier: a worker that waits leaves
capacity unused, so it pays its wait, and the straggler its excess over the second slowest, both as a
fraction of the iteration, ``T_iter = (max(0, busy_i - max_{j!=i} busy_j) + wait_ms_i) /
iter_time_ms``. It is 0 for every worker of a balanced cluster at any batch scale, so it asks each
worker to move towards balance (straggler down, idle workers up) and leaves the overall scale to the
accuracy and batch-size terms. (``marginal`` in ms / T_ref also shrinks as all batches shrink: in our
runs that alone drove every batch to the minimum.) ``imbalance`` with the ``time`` return is the
default: on the randomised training clusters its return ranks a load-balancing rule above keeping or
cutting every batch, which the paper-shaped busy-time return did not (docs/rl.md).

**Summing windows into a return** (``rl.return_shape``; the paper does not say how episodes end or
whether windows are weighted). ``paper``: an episode is ``rl.episode_epochs`` epochs and the return
is the plain sum of per-window rewards. With a fixed epoch budget, smaller batches mean more windows
and hence more positive ``A_mean`` terms, so that return favours small batches whatever they cost
in time. ``time``: an episode is a fixed virtual-time budget (:mod:`dynamix.rl.env`) and every
window's reward is weighted by its duration relative to the first window's,
``r_w <- (dt_w / dt_ref) * r_w`` (:func:`time_weighted`). The return is then the time integral of
the paper's reward read as a rate per reference window, so its ``A_mean`` part is the area under the
accuracy-vs-time curve: exactly what "reach the target accuracy sooner" maximises. A constant reward
rate gives the same return however many windows the budget is cut into.

The coefficients live in ``params.yaml`` ``reward:`` (:class:`dynamix.config.RewardConfig`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from dynamix.config import RewardConfig
from dynamix.metrics.schema import WorkerWindow

PART_NAMES = ("acc", "gain", "time", "size", "noise")
"""Reward parts, in the order they are logged: r = acc + gain - time - size - noise."""


@dataclass(frozen=True)
class RewardParts:
    """Each term of r for every worker, arrays of shape [N] (penalties stored as positive numbers)."""

    acc: np.ndarray  # A_mean
    gain: np.ndarray  # alpha * max(0, dA)
    time: np.ndarray  # beta * T_iter (scaled, see module docstring)
    size: np.ndarray  # delta * (log2 b - 5)
    noise: np.ndarray  # eta * (sigma2_norm + sigma_norm); zeros for SGD

    @property
    def total(self) -> np.ndarray:
        return self.acc + self.gain - self.time - self.size - self.noise


def time_weighted(parts: RewardParts, window_s: float, ref_window_s: float) -> RewardParts:
    """Every part times ``window_s / ref_window_s`` (``rl.return_shape: time``, module docstring)."""
    if not (window_s >= 0 and ref_window_s > 0):
        raise ValueError(f"window_s = {window_s}, ref_window_s = {ref_window_s}: need window_s >= 0 and ref_window_s > 0")
    w = window_s / ref_window_s
    return RewardParts(*(w * getattr(parts, p) for p in PART_NAMES))


TIME_SIGNALS = ("iteration", "busy", "marginal", "imbalance")


def scaled_time(workers: Sequence[WorkerWindow], time_signal: str, t_ref_ms: float) -> np.ndarray:
    """Each worker's dimensionless T_iter (module docstring), shape [N]."""
    if time_signal not in TIME_SIGNALS:
        raise ValueError(f"time_signal = {time_signal!r} is not allowed: must be one of {', '.join(map(repr, TIME_SIGNALS))}")
    iter_ms = np.array([w.iter_time_ms for w in workers], dtype=np.float64)
    if time_signal == "iteration":
        return iter_ms / t_ref_ms
    wait = np.array([w.wait_ms for w in workers], dtype=np.float64)
    busy = iter_ms - wait
    if time_signal == "busy":
        return busy / t_ref_ms
    others = np.array([np.max(np.delete(busy, i)) if len(busy) > 1 else 0.0 for i in range(len(busy))])
    excess = np.maximum(0.0, busy - others)
    if time_signal == "marginal":
        return excess / t_ref_ms
    return (excess + wait) / np.maximum(iter_ms, 1e-12)  # imbalance: a fraction of the iteration


def worker_rewards(workers: Sequence[WorkerWindow], acc_change: np.ndarray, t_ref_ms: float,
                   coeffs: RewardConfig, optimizer: str, time_signal: str = "iteration") -> RewardParts:
    """The reward of every worker for one window; ``acc_change`` is dA_i, ``t_ref_ms`` the scale,
    ``time_signal`` which time T_iter is (module docstring)."""
    if not t_ref_ms > 0:
        raise ValueError(f"t_ref_ms = {t_ref_ms} is out of range: must be > 0")
    acc = np.array([w.batch_acc for w in workers], dtype=np.float64)
    t_iter = scaled_time(workers, time_signal, t_ref_ms)
    size = np.array([math.log2(w.batch_size) - 5.0 for w in workers], dtype=np.float64)
    if optimizer == "adam":
        noise = coeffs.eta * np.array([w.sigma2_norm + w.sigma_norm for w in workers], dtype=np.float64)
    else:
        noise = np.zeros(len(workers))
    return RewardParts(
        acc=acc,
        gain=coeffs.alpha * np.maximum(0.0, np.asarray(acc_change, dtype=np.float64)),
        time=coeffs.beta * t_iter,
        size=coeffs.delta * size,
        noise=noise,
    )
