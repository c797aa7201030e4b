"""A tiny closed-loop cluster with known ground truth, for testing and benchmarking policies.

Two parts, both small enough for unit tests:

* :class:`LinearRegressionProblem`: least squares y = x.w* + eps, x ~ N(0, I_d), eps ~ N(0, s^2),
  loss 0.5 (x.w - y)^2. At parameters w (delta = w - w*) the per-sample gradient is
  g = x (x.delta - eps), so G = delta and, by Isserlis' theorem E[(x.delta)^2 |x|^2] = (d+2)|delta|^2,

      E|g|^2 = (d+2)|delta|^2 + s^2 d,   tr(Sigma) = E|g|^2 - |G|^2 = (d+1)|delta|^2 + s^2 d,
      B_simple = tr(Sigma)/|G|^2 = (d+1) + s^2 d / |delta|^2,

  a noise scale known in closed form that grows as SGD approaches w*.
* :class:`SyntheticCluster`: N workers with affine compute times t_i = (a_i + c_i b_i) x lognormal
  jitter, a constant synchronisation time, and real mini-batch gradients of the regression problem,
  emitting the same :class:`~dynamix.metrics.schema.WorkerWindow`/`GlobalWindow` as the engine and
  simulator. It takes one SGD step per iteration on the weighted aggregate sum_i (b_i/B) g_i.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from dynamix.metrics.schema import GlobalWindow, WorkerWindow


@dataclass
class LinearRegressionProblem:
    dim: int = 20
    noise_std: float = 1.0
    seed: int = 0
    w_star: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.w_star = np.random.default_rng(self.seed).normal(size=self.dim)

    def mean_gradient(self, w: np.ndarray, n: int, gen: np.random.Generator) -> np.ndarray:
        """Mean gradient over n fresh samples at parameters w, shape [dim]."""
        x = gen.normal(size=(n, self.dim))
        eps = gen.normal(scale=self.noise_std, size=n)
        residual = x @ (w - self.w_star) - eps
        return x.T @ residual / n

    def grad_sqr(self, w: np.ndarray) -> float:
        """|G|^2 = |w - w*|^2."""
        d = w - self.w_star
        return float(d @ d)

    def trace(self, w: np.ndarray) -> float:
        """tr(Sigma) = (d+1)|delta|^2 + s^2 d."""
        return (self.dim + 1) * self.grad_sqr(w) + self.noise_std**2 * self.dim

    def noise_scale(self, w: np.ndarray) -> float:
        """B_simple = tr(Sigma)/|G|^2."""
        return self.trace(w) / self.grad_sqr(w)


class SyntheticCluster:
    """N simulated workers on a linear-regression problem; one window = ``window`` SGD iterations."""

    def __init__(
        self,
        a_ms: Sequence[float],
        c_ms: Sequence[float],
        comm_ms: float = 0.0,
        problem: LinearRegressionProblem | None = None,
        lr: float = 0.0,
        window: int = 10,
        jitter: float = 0.0,
        seed: int = 0,
        w0: np.ndarray | None = None,
    ) -> None:
        self.a = np.asarray(a_ms, dtype=np.float64)
        self.c = np.asarray(c_ms, dtype=np.float64)
        self.comm_ms = comm_ms
        self.problem = problem or LinearRegressionProblem()
        self.lr = lr
        self.window = window
        self.jitter = jitter
        self.gen = np.random.default_rng(seed)
        self.w = self.problem.w_star + (w0 if w0 is not None else np.ones(self.problem.dim))
        self.iteration = 0
        self.windows = 0
        self.samples = 0
        self.elapsed_s = 0.0

    @property
    def n_workers(self) -> int:
        return len(self.a)

    def run_window(self, batch_sizes: Sequence[int], lr_scale: float = 1.0) -> tuple[list[WorkerWindow], GlobalWindow]:
        b = np.asarray(batch_sizes, dtype=np.int64)
        n, total = len(b), int(b.sum())
        compute = np.zeros(n)
        iter_ms = 0.0
        local_sq = np.zeros(n)
        agg_sq = 0.0
        for _ in range(self.window):
            t = (self.a + self.c * b) * np.exp(self.jitter * self.gen.normal(size=n))
            compute += t
            iter_ms += float(t.max()) + self.comm_ms
            grads = [self.problem.mean_gradient(self.w, int(bi), self.gen) for bi in b]
            agg = sum((bi / total) * g for bi, g in zip(b, grads))
            local_sq += np.array([g @ g for g in grads])
            agg_sq += float(agg @ agg)
            self.w = self.w - self.lr * lr_scale * agg
            self.iteration += 1
            self.samples += total
        k = self.window
        compute, iter_ms, local_sq, agg_sq = compute / k, iter_ms / k, local_sq / k, agg_sq / k
        self.elapsed_s += iter_ms * k / 1000.0
        workers = [
            WorkerWindow(
                rank=i, batch_size=int(b[i]), iter_time_ms=iter_ms, compute_ms=float(compute[i]),
                comm_ms=self.comm_ms, wait_ms=iter_ms - self.comm_ms - float(compute[i]),
                throughput_samples_per_s=1000.0 * float(b[i]) / iter_ms, net_tx_bytes_per_s=0.0,
                net_rx_bytes_per_s=0.0, tcp_retrans_per_s=0.0, cpu_time_ratio=float(compute[i]) / iter_ms,
                mem_util=0.0, loss=0.0, batch_acc=0.0, grad_norm=float(np.sqrt(local_sq[i])),
                grad_sqnorm=float(local_sq[i]), sigma_norm=0.0, sigma2_norm=0.0,
            )
            for i in range(n)
        ]
        glob = GlobalWindow(
            window=self.windows, iteration=self.iteration, epoch=0.0, elapsed_s=self.elapsed_s,
            global_batch=total, lr=self.lr * lr_scale, train_loss=0.0, train_acc=0.0,
            agg_grad_sqnorm=agg_sq, n_workers=n,
        )
        self.windows += 1
        return workers, glob


def drive(policy, cluster: SyntheticCluster, ctx, n_windows: int) -> list[tuple[tuple[int, ...], float, float]]:
    """Run ``policy`` in closed loop on ``cluster`` for ``n_windows``; per window returns
    (batch sizes used, mean iteration time [ms], lr_scale used)."""
    policy.reset(ctx)
    decision = policy.initial(ctx)
    history = []
    for _ in range(n_windows):
        workers, glob = cluster.run_window(decision.batch_sizes, decision.lr_scale)
        history.append((decision.batch_sizes, workers[0].iter_time_ms, decision.lr_scale))
        decision = policy.decide(workers, glob)
    return history
