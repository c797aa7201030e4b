"""Per-worker iteration-time models fitted online from the windows a policy observes.

Each worker's compute time per iteration is modelled as affine in its batch size (the model
:mod:`dynamix.policies.allocation` balances):

    t_i(b) = a_i + c_i * b        a_i: fixed cost per iteration [ms], c_i: cost per sample [ms].

The fit is a weighted least-squares regression over the worker's last ``history`` windows, window
age ``k`` (0 = newest) weighted by ``decay**k``, so a worker that slows down mid-run (a spec event,
a co-located job) is re-estimated within a few windows. While the observed batch sizes span less
than ``min_spread`` (relative), the intercept is not identifiable and the model falls back to
proportional time, a_i = 0 and c_i = sum_k w_k t_k / sum_k w_k b_k: the inverse of an exponentially
weighted average speed b/t, which is LB-BSP's "EWMA of b_i / t_i" (Chen et al., SoCC'20). A fit with
a negative intercept is refitted through the origin; one with a non-positive slope falls back too.

Synchronisation (``comm_ms``) does not depend on the split of a fixed global batch across workers
and, for a ring or parameter server, hardly on the batch at all; it is tracked as a weighted mean
and added to the predicted iteration time, T(b) = max_i t_i(b_i) + comm.
"""

from __future__ import annotations

from collections import deque
from typing import Sequence

import numpy as np

from dynamix.metrics.schema import WorkerWindow
from dynamix.policies.allocation import balance

MIN_C_MS = 1e-9  # floor on the per-sample cost, keeps allocation well defined for degenerate input


class WorkerTimeModel:
    """Online affine fit t = a + c*b for one worker from (batch size, compute ms) window means."""

    def __init__(self, history: int = 8, decay: float = 0.7, min_spread: float = 0.1) -> None:
        self.obs: deque[tuple[float, float]] = deque(maxlen=history)
        self.decay = decay
        self.min_spread = min_spread

    def observe(self, batch_size: float, compute_ms: float) -> None:
        if batch_size > 0 and np.isfinite(compute_ms) and compute_ms > 0:
            self.obs.append((float(batch_size), float(compute_ms)))

    @property
    def ready(self) -> bool:
        return len(self.obs) > 0

    def fit(self) -> tuple[float, float]:
        """(a_i [ms], c_i [ms/sample]) from the weighted observations."""
        if not self.obs:
            raise ValueError("WorkerTimeModel.fit: no observations yet")
        b = np.array([o[0] for o in self.obs])
        t = np.array([o[1] for o in self.obs])
        w = self.decay ** np.arange(len(b) - 1, -1, -1, dtype=np.float64)
        proportional = (0.0, max(float((w * t).sum() / (w * b).sum()), MIN_C_MS))
        if b.max() < (1.0 + self.min_spread) * b.min():
            return proportional
        bm, tm = (w * b).sum() / w.sum(), (w * t).sum() / w.sum()
        c = float((w * (b - bm) * (t - tm)).sum() / (w * (b - bm) ** 2).sum())
        a = float(tm - c * bm)
        if c <= 0:
            return proportional
        if a < 0:  # refit through the origin: min sum w (t - c b)^2
            return 0.0, max(float((w * t * b).sum() / (w * b * b).sum()), MIN_C_MS)
        return a, c

    def state_dict(self) -> dict:
        return {"obs": list(self.obs)}

    def load_state_dict(self, state: dict) -> None:
        self.obs.clear()
        self.obs.extend(tuple(o) for o in state["obs"])


class ClusterTimeModel:
    """All workers' time models plus the synchronisation overhead; predicts iteration times."""

    def __init__(self, n_workers: int, history: int = 8, decay: float = 0.7) -> None:
        self.workers = [WorkerTimeModel(history, decay) for _ in range(n_workers)]
        self.decay = decay
        self._comm_num = 0.0
        self._comm_den = 0.0

    def observe(self, windows: Sequence[WorkerWindow]) -> None:
        if len(windows) != len(self.workers):
            raise ValueError(
                f"ClusterTimeModel: got {len(windows)} worker windows, expected {len(self.workers)}"
            )
        for model, w in zip(self.workers, windows):
            model.observe(w.batch_size, w.compute_ms)
        comm = float(np.mean([w.comm_ms for w in windows]))
        if np.isfinite(comm):
            self._comm_num = self.decay * self._comm_num + comm
            self._comm_den = self.decay * self._comm_den + 1.0

    @property
    def ready(self) -> bool:
        return all(m.ready for m in self.workers)

    @property
    def comm_ms(self) -> float:
        return self._comm_num / self._comm_den if self._comm_den else 0.0

    def params(self) -> tuple[np.ndarray, np.ndarray]:
        """Arrays (a [ms], c [ms/sample]) in rank order."""
        fits = [m.fit() for m in self.workers]
        return np.array([f[0] for f in fits]), np.array([f[1] for f in fits])

    def iter_ms(self, batch_sizes: Sequence[float]) -> float:
        """Predicted iteration time [ms] for a given split: max_i (a_i + c_i b_i) + comm."""
        a, c = self.params()
        return float(np.max(a + c * np.asarray(batch_sizes, dtype=np.float64))) + self.comm_ms

    def balanced_iter_ms(self, global_batch: float, lo: int, hi: int) -> float:
        """Predicted iteration time [ms] of the best split of ``global_batch`` (T* + comm)."""
        a, c = self.params()
        _, x = balance(global_batch, a, c, lo, hi)
        return float(np.max(a + c * x)) + self.comm_ms

    def state_dict(self) -> dict:
        return {
            "workers": [m.state_dict() for m in self.workers],
            "comm": [self._comm_num, self._comm_den],
        }

    def load_state_dict(self, state: dict) -> None:
        for m, s in zip(self.workers, state["workers"]):
            m.load_state_dict(s)
        self._comm_num, self._comm_den = state["comm"]
