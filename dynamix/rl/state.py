"""The versioned state spec: what the DYNAMIX agent observes, per worker, at the end of a window.

Paper Sec. III-B: the arbitrator's state for worker i combines network statistics (throughput,
retransmissions), system statistics (CPU-time ratio, memory utilisation), training statistics (mean
batch accuracy, its change, loss, sigma_norm, sigma2_norm), the worker's current batch size and its
iteration time, plus a global state shared by every worker. One shared policy reads each worker's
``[local | global]`` vector and answers for that worker (parameter sharing).

Every feature is defined and normalised below, in :data:`FEATURES` (name, definition, normalisation),
and computed in :meth:`StateBuilder.observe` in the same order. Normalisations are chosen so that a
policy trained on one workload transfers to another: times and throughputs enter as ratios to the
episode's first window (``T_ref``, ``thr_ref``), never in absolute ms or bytes, and every feature is
clipped to a fixed range so an unseen cluster cannot push the network outside what it was trained on.

Three layouts (:data:`SPECS`, selected by ``rl.state``): ``dynamix``, every feature of :data:`FEATURES`
(:data:`STATE_SPEC_VERSION`); ``paper``, the paper's features only (:data:`PAPER_FEATURES`,
``paper-state-v1``); and ``schedule``, the dynamix features then :data:`SCHEDULE_FEATURES` (training
progress, learning-rate phase, noise-scale trend: what a policy needs to follow a batch *schedule*,
``schedule-state-v1``). A spec keeps a subset of the one row computed here, so a feature means the
same in every spec.

Change anything here (a feature, its order, its normalisation) and bump the versions it touches:
policy artifacts record the version and refuse to load under an unknown one (:mod:`dynamix.rl.artifact`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from dynamix.metrics.schema import GlobalWindow, WorkerWindow
from dynamix.policies.base import Bounds

# v2: + busy_rel (is this worker the straggler?); v3: + lb_gap; v4: lb_gap from compute time, not busy time.
# schedule-state-v1 (rl.state: schedule): v4 + g_progress, g_lr_phase, g_noise_trend
STATE_SPEC_VERSION = "dynamix-state-v4"
EPS = 1e-12


@dataclass(frozen=True)
class Feature:
    name: str
    definition: str
    normalisation: str
    low: float
    high: float


FEATURES: tuple[Feature, ...] = (
    # ---- local: the worker's own batch size and iteration time ----
    Feature("batch_log", "b_i, the worker's batch size in the window", "(log2 b_i - log2 b_min) / (log2 b_max - log2 b_min)", 0.0, 1.0),
    Feature("iter_time_rel", "T_i = iter_time_ms (compute + wait + comm)", "log2(T_i / T_ref), T_ref = mean T of the episode's first window", -8.0, 8.0),
    Feature("compute_frac", "compute_ms / iter_time_ms", "as is", 0.0, 1.0),
    Feature("wait_frac", "wait_ms / iter_time_ms: barrier wait, ~0 on the straggler", "as is", 0.0, 1.0),
    Feature("comm_frac", "comm_ms / iter_time_ms", "as is", 0.0, 1.0),
    Feature("busy_rel", "busy_i / max_j busy_j, busy = iter_time_ms - wait_ms: 1 on the straggler",
            "as is", 0.0, 1.0),
    Feature("lb_gap", "log2(b*_i / b_i), b*_i = B r_i / sum_j r_j with r_i = b_i / compute_i: the batch that "
            "equalises compute times, hence busy times, at the current global batch B (LB-BSP's allocation, "
            "Chen et al. SoCC'20; communication is shared, so it is left out of r_i)",
            "as is: > 0 grow, < 0 shrink, 0 balanced", -4.0, 4.0),
    # ---- local: network ----
    Feature("throughput_share", "throughput_i / mean_j throughput_j (samples/s)", "log2 of the ratio", -8.0, 8.0),
    Feature("net_rate", "net_tx_bytes_per_s + net_rx_bytes_per_s", "log2(rate / rate_ref), rate_ref = first window's", -8.0, 8.0),
    Feature("retrans", "tcp_retrans_per_s", "log10(1 + x) / 4", 0.0, 2.0),
    # ---- local: system ----
    Feature("cpu_time_ratio", "process CPU time / wall time over the window", "as is", 0.0, 4.0),
    Feature("mem_util", "resident / (resident + available)", "as is", 0.0, 1.0),
    # ---- local: training ----
    Feature("batch_acc", "A_i, mean training accuracy on the worker's batches", "as is", 0.0, 1.0),
    Feature("acc_change", "dA_i = A_i - A_i of the previous window (0 in the first)", "10 * dA_i", -5.0, 5.0),
    Feature("loss", "mean training loss on the worker's batches", "loss / ln(10) (1.0 = chance on 10 classes)", 0.0, 4.0),
    Feature("sigma_norm", "normalised gradient std (dynamix.metrics.gradstats)", "log10(1 + x) / 2", 0.0, 4.0),
    Feature("sigma2_norm", "normalised gradient variance (dynamix.metrics.gradstats)", "log10(1 + x) / 4", 0.0, 4.0),
    # ---- global: shared by every worker ----
    Feature("g_train_acc", "sample-weighted mean batch accuracy over workers", "as is", 0.0, 1.0),
    Feature("g_throughput", "sum_i throughput_i", "log2(x / thr_ref), thr_ref = first window's", -8.0, 8.0),
    Feature("g_straggler", "max_i compute_ms / mean_i compute_ms", "log2 of the ratio", 0.0, 8.0),
    Feature("g_noise_scale", "B_simple / B: gradient noise scale (McCandlish et al. 2018) over global batch", "log2 of the ratio", -8.0, 8.0),
    Feature("g_batch_log", "B = sum_i b_i", "(log2(B / N) - log2 b_min) / (log2 b_max - log2 b_min)", 0.0, 1.0),
    Feature("g_workers", "N, workers in the cluster", "log2(N) / 5", 0.0, 2.0),
)
FEATURE_NAMES = tuple(f.name for f in FEATURES)
OBS_DIM = len(FEATURES)
OBS_LOW = np.array([f.low for f in FEATURES], dtype=np.float32)
OBS_HIGH = np.array([f.high for f in FEATURES], dtype=np.float32)

LR_OCTAVES = 8.0
"""lr_phase's scale: log2(lr_t / lr_0) / 8 is -0.83 after two decades of step decay (x0.01)."""
NOISE_FAST, NOISE_SLOW = 0.5, 0.125
"""EMA weights of the noise-scale trend: under a steady growth of s (log2 units) per window an EMA of
weight a lags by s (1 - a) / a, so fast - slow settles at s (1/0.125 - 1/0.5) = 6 s."""
NOISE_TREND_GAIN = 1.0 / (1.0 / NOISE_SLOW - 1.0 / NOISE_FAST)

SCHEDULE_FEATURES: tuple[Feature, ...] = (
    # ---- global: where the run is in its schedule (rl.state: schedule) ----
    Feature("g_progress", "epochs done / the run's epoch budget (GlobalWindow.epoch over train.schedule_epochs, "
            "else train.epochs: the learning-rate schedule's horizon)",
            "as is (> 1 once a time-budgeted run passes its nominal epochs)", 0.0, 2.0),
    Feature("g_lr_phase", "lr_t / lr_0: the learning rate at the window's end over optim.lr (warm-up, schedule "
            "decay, batch scaling, a policy's lr_scale)", f"log2(lr_t / lr_0) / {LR_OCTAVES:g}", -1.0, 1.0),
    Feature("g_noise_trend", "the trend of log2 B_simple (the gradient noise scale in samples, not relative to B, "
            "so the agent's own change of B is not a trend): EMA_0.5 - EMA_0.125 over the windows, both "
            "started at the first estimate; windows without an estimate leave them unchanged",
            "(fast - slow) / 6: at a steady growth of s log2 units per window it reads s", -4.0, 4.0),
)
ALL_FEATURES = FEATURES + SCHEDULE_FEATURES
ALL_NAMES = tuple(f.name for f in ALL_FEATURES)
_ALL_LOW = np.array([f.low for f in ALL_FEATURES], dtype=np.float32)
_ALL_HIGH = np.array([f.high for f in ALL_FEATURES], dtype=np.float32)

PAPER_FEATURES = ("batch_log", "iter_time_rel", "net_rate", "retrans", "cpu_time_ratio", "mem_util", "batch_acc",
                  "acc_change", "loss", "sigma_norm", "sigma2_norm", "g_train_acc", "g_batch_log", "g_workers")
"""The paper's state (Sec. III-B): batch size and iteration time; network throughput (bytes/s) and
retransmissions; CPU-time ratio and memory; training accuracy, its change, loss, normalised gradient
std and variance; and as the global state the aggregates of those (global batch, mean training
accuracy) and N. Left out, as ours: the compute/wait/communication split, ``busy_rel``, ``lb_gap``,
``throughput_share`` and the straggler and noise-scale aggregates."""


@dataclass(frozen=True)
class StateSpec:
    """One observation layout: the version a policy artifact records and the features it keeps, a
    subset of :data:`FEATURES` in their order (``rl.state`` names one of :data:`SPECS`)."""

    name: str
    version: str
    features: tuple[Feature, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.features)

    @property
    def obs_dim(self) -> int:
        return len(self.features)

    @property
    def low(self) -> np.ndarray:
        return np.array([f.low for f in self.features], dtype=np.float32)

    @property
    def high(self) -> np.ndarray:
        return np.array([f.high for f in self.features], dtype=np.float32)

    @property
    def columns(self) -> np.ndarray:
        """Indices of this spec's features in the full row :meth:`StateBuilder.observe` computes."""
        return np.array([ALL_NAMES.index(n) for n in self.names], dtype=np.int64)

    @property
    def schedule(self) -> bool:
        """Whether it observes :data:`SCHEDULE_FEATURES` (then the builder needs the run's epochs and lr)."""
        return any(f in SCHEDULE_FEATURES for f in self.features)


SPECS: dict[str, StateSpec] = {
    "dynamix": StateSpec("dynamix", STATE_SPEC_VERSION, FEATURES),
    "paper": StateSpec("paper", "paper-state-v1", tuple(f for f in FEATURES if f.name in PAPER_FEATURES)),
    "schedule": StateSpec("schedule", "schedule-state-v1", ALL_FEATURES),
}


def spec_for_version(version: str) -> StateSpec | None:
    """The spec a policy artifact's ``state_spec_version`` names; None for one this code cannot observe."""
    return next((s for s in SPECS.values() if s.version == version), None)


def _log2_ratio(x: float, ref: float) -> float:
    return math.log2(max(x, EPS) / max(ref, EPS))


def noise_scale(workers: Sequence[WorkerWindow], glob: GlobalWindow) -> float:
    """B_simple = tr(Sigma) / |G|^2 from small-batch and large-batch squared gradient norms.

    McCandlish et al. 2018, App. A.1: with |g_b|^2 measured at batch b and |g_B|^2 at B > b,
    |G|^2 ~ (B |g_B|^2 - b |g_b|^2) / (B - b) and tr(Sigma) ~ (|g_b|^2 - |g_B|^2) / (1/b - 1/B).
    Here b is the mean worker batch with |g_b|^2 the mean local |g_i|^2, and B the global batch with
    the aggregated |g|^2. Returns NaN when the estimate is not positive (one worker, or noise).
    """
    n = len(workers)
    big = float(glob.global_batch)
    small = big / max(n, 1)
    if n < 2 or big <= small:
        return math.nan
    g_small = float(np.mean([w.grad_sqnorm for w in workers]))
    g_big = float(glob.agg_grad_sqnorm)
    g2 = (big * g_big - small * g_small) / (big - small)
    tr = (g_small - g_big) / (1.0 / small - 1.0 / big)
    if not (g2 > 0 and tr > 0):
        return math.nan
    return tr / g2


class StateBuilder:
    """Turns (workers, global) windows into per-worker observations, shape [N, spec.obs_dim], float32:
    the one place training (:mod:`dynamix.rl.env`) and inference (:mod:`dynamix.rl.policy`) build what
    the network reads.

    ``spec`` (a :data:`SPECS` key or a :class:`StateSpec`) picks the layout: every feature is computed
    and the spec's columns kept, so a feature means the same in every spec. ``epochs`` (the run's epoch
    budget, the learning-rate schedule's horizon) and ``base_lr`` (``optim.lr``) are what the schedule
    features divide by; a spec that observes them refuses to build without them.

    Stateful across one run: it remembers the first window's references (``T_ref``, ``thr_ref``,
    ``rate_ref``), each worker's previous accuracy for ``acc_change`` and the noise-scale EMAs. Call
    :meth:`reset` per run; :meth:`state_dict` is all of it as plain data.
    """

    def __init__(self, bounds: Bounds, spec: str | StateSpec = "dynamix", epochs: float = 0.0,
                 base_lr: float = 0.0) -> None:
        if isinstance(spec, str):
            if spec not in SPECS:
                raise ValueError(f"state spec {spec!r} is unknown: must be one of {', '.join(map(repr, SPECS))}")
            spec = SPECS[spec]
        if spec.schedule and not (epochs > 0 and base_lr > 0):
            raise ValueError(f"state spec {spec.name!r} observes training progress and the learning-rate phase: "
                             f"it needs the run's epoch budget and base lr (> 0), got epochs = {epochs}, "
                             f"base_lr = {base_lr}")
        self.spec = spec
        self.epochs, self.base_lr = float(epochs), float(base_lr)
        self._columns = None if spec.features == FEATURES else spec.columns
        self._schedule_on = spec.schedule  # compares every feature: once, not per window
        self.bounds = bounds
        self._lb_lo = math.log2(bounds.min)
        self._lb_span = max(math.log2(bounds.max) - self._lb_lo, EPS)
        self.reset()

    def reset(self) -> None:
        self.t_ref_ms: float | None = None
        self.thr_ref: float | None = None
        self.rate_ref: float | None = None
        self.prev_acc: np.ndarray | None = None
        self.noise_ema: tuple[float, float] | None = None  # (fast, slow) EMAs of log2 B_simple

    def state_dict(self) -> dict:
        """Everything :meth:`reset` clears, as plain data (the arbitrator persists it)."""
        return {"t_ref_ms": self.t_ref_ms, "thr_ref": self.thr_ref, "rate_ref": self.rate_ref,
                "prev_acc": None if self.prev_acc is None else self.prev_acc.tolist(),
                "noise_ema": None if self.noise_ema is None else list(self.noise_ema)}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`; keys it lacks (a state written before they existed) reset."""
        self.reset()
        self.t_ref_ms, self.thr_ref, self.rate_ref = state["t_ref_ms"], state["thr_ref"], state["rate_ref"]
        if state.get("prev_acc") is not None:
            self.prev_acc = np.asarray(state["prev_acc"], dtype=np.float64)
        if state.get("noise_ema") is not None:
            self.noise_ema = tuple(float(x) for x in state["noise_ema"])

    def _schedule(self, workers: Sequence[WorkerWindow], glob: GlobalWindow) -> list[float]:
        """g_progress, g_lr_phase, g_noise_trend (:data:`SCHEDULE_FEATURES`); advances the noise EMAs."""
        ns = noise_scale(workers, glob)
        trend = 0.0
        if not math.isnan(ns):
            x = math.log2(max(ns, EPS))
            fast, slow = (x, x) if self.noise_ema is None else self.noise_ema
            fast += NOISE_FAST * (x - fast)
            slow += NOISE_SLOW * (x - slow)
            self.noise_ema = (fast, slow)
            trend = (fast - slow) * NOISE_TREND_GAIN
        elif self.noise_ema is not None:
            trend = (self.noise_ema[0] - self.noise_ema[1]) * NOISE_TREND_GAIN
        return [glob.epoch / self.epochs, _log2_ratio(glob.lr, self.base_lr) / LR_OCTAVES, trend]

    def acc_change(self, workers: Sequence[WorkerWindow]) -> np.ndarray:
        """dA_i against the previous window (0 in the first); does not advance the state."""
        acc = np.array([w.batch_acc for w in workers], dtype=np.float64)
        if self.prev_acc is None or len(self.prev_acc) != len(acc):
            return np.zeros_like(acc)
        return acc - self.prev_acc

    def observe(self, workers: Sequence[WorkerWindow], glob: GlobalWindow) -> np.ndarray:
        n = len(workers)
        iter_ms = np.array([w.iter_time_ms for w in workers], dtype=np.float64)
        thr = np.array([w.throughput_samples_per_s for w in workers], dtype=np.float64)
        rate = np.array([w.net_tx_bytes_per_s + w.net_rx_bytes_per_s for w in workers], dtype=np.float64)
        compute = np.array([w.compute_ms for w in workers], dtype=np.float64)
        busy = iter_ms - np.array([w.wait_ms for w in workers], dtype=np.float64)
        busy_max = max(float(np.max(busy)), EPS)
        b = np.array([w.batch_size for w in workers], dtype=np.float64)
        # LB-BSP's split: samples per ms of the worker's own compute, not of its busy time. Communication
        # is shared: adding the same constant to every time shrinks the gap by about compute/busy, and on
        # a parameter server the smallest step then overshoots it, so the teacher stops half-balanced.
        speed = b / np.maximum(compute, EPS)
        lb_target = float(np.sum(b)) * speed / max(float(np.sum(speed)), EPS)
        if self.t_ref_ms is None:
            self.t_ref_ms = float(np.mean(iter_ms))
            self.thr_ref = float(np.sum(thr))
            self.rate_ref = float(np.mean(rate))
        d_acc = self.acc_change(workers)
        mean_thr = float(np.mean(thr))
        ns = noise_scale(workers, glob)
        g = [
            glob.train_acc,
            _log2_ratio(float(np.sum(thr)), self.thr_ref),
            _log2_ratio(float(np.max(compute)), float(np.mean(compute))),
            0.0 if math.isnan(ns) else _log2_ratio(ns, glob.global_batch),
            (math.log2(max(glob.global_batch / max(n, 1), EPS)) - self._lb_lo) / self._lb_span,
            math.log2(max(n, 1)) / 5.0,
        ]
        rows = []
        for i, w in enumerate(workers):
            t = max(w.iter_time_ms, EPS)
            rows.append([
                (math.log2(w.batch_size) - self._lb_lo) / self._lb_span,
                _log2_ratio(w.iter_time_ms, self.t_ref_ms),
                w.compute_ms / t,
                w.wait_ms / t,
                w.comm_ms / t,
                busy[i] / busy_max,
                _log2_ratio(lb_target[i], b[i]),
                _log2_ratio(w.throughput_samples_per_s, mean_thr),
                _log2_ratio(rate[i], self.rate_ref) if self.rate_ref > 0 else 0.0,
                math.log10(1.0 + max(w.tcp_retrans_per_s, 0.0)) / 4.0,
                w.cpu_time_ratio,
                w.mem_util,
                w.batch_acc,
                10.0 * d_acc[i],
                w.loss / math.log(10.0),
                math.log10(1.0 + max(w.sigma_norm, 0.0)) / 2.0,
                math.log10(1.0 + max(w.sigma2_norm, 0.0)) / 4.0,
                *g,
            ])
        obs = np.nan_to_num(np.asarray(rows, dtype=np.float64), nan=0.0, posinf=0.0, neginf=0.0)
        self.prev_acc = np.array([w.batch_acc for w in workers], dtype=np.float64)
        obs = np.clip(obs, OBS_LOW, OBS_HIGH).astype(np.float32)
        if self._schedule_on:
            extra = np.nan_to_num(np.asarray(self._schedule(workers, glob), dtype=np.float64), nan=0.0,
                                  posinf=0.0, neginf=0.0)
            extra = np.clip(extra, _ALL_LOW[OBS_DIM:], _ALL_HIGH[OBS_DIM:]).astype(np.float32)
            obs = np.concatenate([obs, np.tile(extra, (n, 1))], axis=1)
        return obs if self._columns is None else obs[:, self._columns]


def apply_actions(batch_sizes: Sequence[int], actions: Sequence[int], steps: Sequence[int],
                  bounds: Bounds) -> tuple[int, ...]:
    """b_i <- clamp(b_i + steps[a_i], bounds): the paper's Discrete(5) action, one per worker."""
    if len(batch_sizes) != len(actions):
        raise ValueError(f"got {len(actions)} actions for {len(batch_sizes)} workers")
    out = []
    for b, a in zip(batch_sizes, actions):
        a = int(a)
        if not 0 <= a < len(steps):
            raise ValueError(f"action {a} is out of range: must be in [0, {len(steps) - 1}]")
        out.append(bounds.clamp(b + steps[a]))
    return tuple(out)
