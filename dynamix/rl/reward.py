"""The DYNAMIX reward, per worker and per window (paper Sec. III-C).

For SGD::

    r_SGD = A_mean + alpha * max(0, dA) - beta * T_iter - delta * (log2(b) - 5)

and for adaptive optimisers (Adam) additionally ``- eta * (sigma2_norm + sigma_norm)``. For worker i
over the window that just ended, ``A_mean`` is its mean training (batch) accuracy in [0, 1], ``dA``
its change against the previous window (0 in the first), ``b`` its batch size (``log2(b) - 5`` is 0 at
b = 32, the paper's minimum) and ``sigma_norm``/``sigma2_norm`` its normalised gradient std/variance
(:mod:`dynamix.metrics.gradstats`).

The paper leaves T_iter's scale open; ``rl.time_signal`` picks it (:func:`scaled_time`), with
``busy = iter_time_ms - wait_ms`` and ``T_ref_ms`` the mean iteration time of the episode's first
window (so T_iter is dimensionless and transfers between fast and slow clusters):

- ``iteration`` (the paper recipe's): ``iter_time_ms / T_ref_ms``, the synchronous time every worker pays;
- ``imbalance`` (default; not in the paper): ``(max(0, busy_i - max_{j!=i} busy_j) + wait_ms_i) /
  iter_time_ms``: the straggler pays its excess, a waiting worker its idle time; 0 for every worker
  of a balanced cluster at any batch scale.

The worker's own busy time and the straggler's excess alone (a difference reward) were tried and
dropped: PPO learned to cut every batch to the minimum (docs/journal/rl.md, ablation table).

How windows sum into a return (``rl.return_shape``; the paper does not say): ``paper`` sums them over
``rl.episode_epochs`` epochs; ``time`` (default; not in the paper) ends the episode after a fixed
virtual time (:mod:`dynamix.rl.env`) and weights each window by its duration, ``r_w <- (dt_w /
dt_ref) * r_w`` (:func:`time_weighted`), so the return is the time integral of the reward and its
``A_mean`` part the area under accuracy-vs-time, independent of how many windows the time is cut
into. ``target`` (opt-in; not in the paper) replaces the reward by what the evaluation at equal epochs
measures: the episode trains ``rl.episode_epochs`` epochs and ends when the test accuracy reaches the
target; every window costs ``dt_w / dt_ref`` for every worker (:func:`target_parts`), so the return
is minus the time to target in first-window units, and an episode that ends without it pays its whole
time once more (a run that finishes its epochs below the target is not faster, it never arrives).
Why these defaults: docs/rl.md; what the alternatives did: docs/journal/rl.md. Coefficients: ``params.yaml``
``reward:`` (:class:`dynamix.config.RewardConfig`).
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


def _check_window(window_s: float, ref_window_s: float) -> None:
    """A window's duration and the first window's, as both returns read them."""
    if not (window_s >= 0 and ref_window_s > 0):
        raise ValueError(f"window_s = {window_s}, ref_window_s = {ref_window_s}: need window_s >= 0 and ref_window_s > 0")


def time_weighted(parts: RewardParts, window_s: float, ref_window_s: float) -> RewardParts:
    """Every part times ``window_s / ref_window_s`` (``rl.return_shape: time``, module docstring)."""
    _check_window(window_s, ref_window_s)
    w = window_s / ref_window_s
    return RewardParts(*(w * getattr(parts, p) for p in PART_NAMES))


def target_parts(n_workers: int, window_s: float, ref_window_s: float, elapsed_s: float, missed: bool) -> RewardParts:
    """``rl.return_shape: target`` (module docstring): the window's cost ``window_s / ref_window_s`` for
    every worker as the time part, plus ``elapsed_s / ref_window_s`` when the episode ended without the
    target (``missed``); the other parts are zero."""
    _check_window(window_s, ref_window_s)
    cost = (window_s + (elapsed_s if missed else 0.0)) / ref_window_s
    zero = np.zeros(n_workers)
    return RewardParts(acc=zero, gain=zero, time=np.full(n_workers, cost), size=zero, noise=zero)


TIME_SIGNALS = ("iteration", "imbalance")


def scaled_time(workers: Sequence[WorkerWindow], time_signal: str, t_ref_ms: float) -> np.ndarray:
    """Each worker's dimensionless T_iter (module docstring), shape [N]."""
    if time_signal not in TIME_SIGNALS:
        raise ValueError(f"time_signal = {time_signal!r} is not allowed: must be one of {', '.join(map(repr, TIME_SIGNALS))}")
    iter_ms = np.array([w.iter_time_ms for w in workers], dtype=np.float64)
    if time_signal == "iteration":
        return iter_ms / t_ref_ms
    wait = np.array([w.wait_ms for w in workers], dtype=np.float64)
    busy = iter_ms - wait
    excess = np.maximum(0.0, busy - _max_of_others(busy))
    return (excess + wait) / np.maximum(iter_ms, 1e-12)  # imbalance: a fraction of the iteration


def _max_of_others(x: np.ndarray) -> np.ndarray:
    """max_{j != i} x_j for every i (0 for a single worker): the maximum, except the second largest at
    the (first) arg-maximum."""
    if len(x) < 2:
        return np.zeros(len(x))
    top = int(np.argmax(x))
    out = np.full(len(x), x[top])
    out[top] = np.max(np.delete(x, top))
    return out


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
