"""A surrogate cluster: the simulator's clock, a fitted model of learning, microseconds per window.

:class:`SurrogateCluster` has :class:`~dynamix.sim.cluster.VirtualCluster`'s interface (``run_window``
returns the same :class:`WorkerWindow` / :class:`GlobalWindow`, ``done``, ``elapsed_s``, ``iteration``)
so every policy, the RL environment (``sim.backend: surrogate``) and ``dynamix evaluate`` run on it
unchanged. What differs:

- learning: no model math. Accuracy, loss and gradient statistics come from a fitted
  :class:`~dynamix.sim.progress.ProgressModel` (its docstring says what it models and leaves out); a
  model that carries a measured accuracy table gives the test accuracy from it instead, at the run's
  epochs and effective global batch (in an RL episode, spread by the run seed's draw);
- time: the same cost model and spec dynamics, computed for the k iterations of a window at once with
  numpy arrays of shape [k, N]: compute t_ij = (a + c b_i) / s_ij (``CostModel.compute_ms``),
  communication T_comm from ``CostModel.comm_ms`` per distinct bandwidth row, and the iteration
  T_j = max(max_i t_ij + (1 - o) T_comm, T_comm) with the counters of :mod:`dynamix.cluster.costmodel`'s
  docstring (a test checks every quantity against ``CostModel.iteration``). Events act exactly as in
  :class:`~dynamix.cluster.dynamics.ClusterDynamics` (a time-triggered one starts at the first
  iteration that begins at or after its time); stragglers and jitter follow the same distributions,
  drawn for iteration t from one stream of the spec's seed in blocks rather than from a generator per
  iteration (which alone costs more than a surrogate window), so a spec's pattern is again the same
  whatever the policy or run seed, but not the simulator's draws.
"""

from __future__ import annotations

import math

import numpy as np

from dynamix.cluster import ClusterSpec
from dynamix.cluster.costmodel import BYTES_PER_MS_PER_GBPS, CostModel
from dynamix.config import Config
from dynamix.seeding import derive_seed
from dynamix.sim.cluster import ClusterClock, calibrated_cost
from dynamix.sim.progress import ProgressModel
from dynamix.train.loop import schedule_progress, total_iterations
from dynamix.train.optim import learning_rate, schedule_factor

DRAW_BLOCK = 256
"""Iterations of straggler and jitter draws made at once (module docstring)."""


class SurrogateCluster(ClusterClock):
    """N simulated workers, learning from ``model`` (the one of ``cfg``'s workload: :func:`dynamix.sim.progress.for_config`
    loads and checks it); ``seed`` (default ``train.seed``) fixes the sampling noise of accuracy, loss
    and gradient norms and the counters. ``cost`` as in VirtualCluster. ``seed_spread``: the measured
    table's test accuracy is spread by the seed (an RL episode: it learns that a batch at the target's edge
    misses on some seeds); else its mean (a surrogate run checked against, or standing for, a real one)."""

    def __init__(self, spec: ClusterSpec, cfg: Config, model: ProgressModel, seed: int | None = None,
                 cost: CostModel | None = None, seed_spread: bool = False) -> None:
        super().__init__(spec, cfg, calibrated_cost(cfg) if cost is None else cost)
        self.model, self.seed_spread = model, seed_spread
        self.seed = cfg.train.seed if seed is None else seed
        self.n_train = model.n_train
        self.total_iters = total_iterations(cfg, self.n_train, self.n_workers * cfg.batch.initial)
        n = self.n_workers
        self._masks = []
        for e in spec.events:
            mask = np.zeros(n, bool)
            mask[list(e.workers) if e.workers else slice(None)] = True
            self._masks.append(mask)
        self._random = spec.stragglers.probability > 0 or spec.jitter > 0
        self._events = bool(spec.events)
        self._comm: dict[bytes, float] = {}
        self._lr_varies = cfg.optim.schedule != "constant"
        self.reset()

    def reset(self) -> None:
        """The start of a new run with the same seeds."""
        self._noise = self._learn = np.random.default_rng(derive_seed(self.seed, "surrogate"))  # counters, learning
        self._draw_rng = np.random.default_rng(derive_seed(self.spec.seed, "surrogate-dynamics"))
        self._u = self._z = np.empty((0, self.n_workers))
        self._drawn_from = self._drawn_to = 0  # the draws held: iterations [from, to)
        self._start = [e.at_iteration if e.at_time_s < 0 else None for e in self.spec.events]
        self._timed = any(start is None for start in self._start)  # a time-triggered event is pending
        self.iteration, self.samples, self.progress, self.elapsed_s, self.window = 0, 0, 0.0, 0.0, 0
        self.test_loss, self.test_acc = math.nan, math.nan
        self.log2b_eff = math.nan  # the measured table's effective batch (ProgressModel.effective_log2b)
        self._acc_z = (float(np.random.default_rng(derive_seed(self.seed, "surrogate-accuracy")).standard_normal())
                       if self.seed_spread else 0.0)  # the run seed's place in the table's spread

    @property
    def epochs_done(self) -> float:
        return self.samples / self.n_train

    # ---- time ---------------------------------------------------------------------------------------
    def _speed_bandwidth(self, first: int, k: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Speed factors [k, N] of iterations first..first+k-1 and bandwidth factors (None: all 1), the
        events with a known start only."""
        n = self.n_workers
        speed, bw = np.ones((k, n)), None
        if self._events:
            its = np.arange(first, first + k)
            for e, mask, start in zip(self.spec.events, self._masks, self._start):
                if start is None or start >= first + k or (e.duration_iterations and start + e.duration_iterations <= first):
                    continue
                on = (its >= start) & ((e.duration_iterations == 0) | (its < start + e.duration_iterations))
                if e.kind == "slowdown":
                    speed[np.ix_(on, mask)] *= e.factor
                else:
                    bw = np.ones((k, n)) if bw is None else bw
                    bw[np.ix_(on, mask)] *= e.factor
        if self._random:
            while self._drawn_to < first + k:  # iterations only move forward: keep [first, ...) and draw on
                keep = slice(first - self._drawn_from, None)
                self._u = np.concatenate((self._u[keep], self._draw_rng.random((DRAW_BLOCK, n))))
                self._z = np.concatenate((self._z[keep], self._draw_rng.standard_normal((DRAW_BLOCK, n))))
                self._drawn_from, self._drawn_to = first, self._drawn_to + DRAW_BLOCK
            rows = slice(first - self._drawn_from, first - self._drawn_from + k)
            st, sigma = self.spec.stragglers, self.spec.jitter
            speed *= np.where(self._u[rows] < st.probability, st.factor, 1.0)
            speed /= np.exp(sigma * self._z[rows] - 0.5 * sigma * sigma)
        return speed, bw

    def _times(self, b: np.ndarray, first: int, k: int) -> dict:
        """The cost model's times of iterations first..first+k-1 at batches ``b`` (arrays [k, N] or [k])."""
        while True:
            speed_f, bw_f = self._speed_bandwidth(first, k)
            speeds = self._speeds * speed_f
            compute = self.cost.compute_ms(b, speeds, self._fixed_ms)
            t_max = compute.max(axis=1)
            if bw_f is None:
                bw = self._bandwidth
                comm = self._comm_ms(bw)
            else:
                bw = self._bandwidth * bw_f
                comm = np.array([self._comm_ms(row) for row in bw])
            iter_ms = np.maximum(t_max + (1.0 - self.spec.architecture.overlap) * comm, comm)
            starts = self.elapsed_s + np.concatenate(([0.0], np.cumsum(iter_ms[:-1]) / 1e3))
            if not (self._timed and self._trigger(first, starts)):
                break  # no time-triggered event started inside these iterations: the times stand
        return {"speeds": speeds, "compute": compute, "t_max": t_max, "bw": bw, "iter_ms": iter_ms, "starts": starts}

    def _comm_ms(self, bandwidth: np.ndarray) -> float:
        """``CostModel.comm_ms`` at these link bandwidths, remembered (a window has one or two distinct rows)."""
        key = bandwidth.tobytes()
        comm = self._comm.get(key)
        if comm is None:
            comm = self._comm[key] = self.cost.comm_ms(bandwidth, self._latency, self.spec.architecture)
        return comm

    def _trigger(self, first: int, starts: np.ndarray) -> bool:
        """Start every pending time-triggered event at the first iteration beginning at or after its
        time; True when one started (the times must then be recomputed)."""
        started = False
        for k, e in enumerate(self.spec.events):
            if self._start[k] is None:
                hit = np.flatnonzero(starts >= e.at_time_s)
                if len(hit):
                    self._start[k] = first + int(hit[0])
                    started = True
        self._timed = any(start is None for start in self._start)
        return started

    def _counters(self, t: dict, n: int) -> dict:
        """Per-worker sums over the window's first ``n`` iterations (the keys :meth:`_windows` reads)."""
        arch, big_n = self.spec.architecture, self.n_workers
        traffic = self.cost.traffic_bytes(big_n, arch)
        bw = t["bw"] if t["bw"].ndim == 1 else t["bw"][:n]
        busy = traffic / (bw * BYTES_PER_MS_PER_GBPS)
        if arch.kind == "ps" and big_n > 1:
            server = big_n * self.cost.wire_bytes / (arch.num_servers * arch.server_bandwidth_gbps
                                                         * BYTES_PER_MS_PER_GBPS)
            busy = np.maximum(busy, server)
        iter_ms = t["iter_ms"][:n, None]
        util = np.minimum(busy / iter_ms, 1.0)  # iter_ms > 0: every iteration computes (a_m + c_m > 0)
        retrans = self.cost.loss_probability(util) * traffic / self.cost.mss_bytes
        compute = t["compute"][:n]
        tx = np.full(big_n, traffic * n)
        return {"compute": compute.sum(0), "wait": (t["t_max"][:n, None] - compute).sum(0), "tx": tx, "rx": tx.copy(),
                "retrans": retrans.sum(0), "speed": t["speeds"][:n].sum(0)}

    def _length(self, k: int, big_b: int, starts: np.ndarray) -> int:
        """Iterations of this window before the budget ends (``done`` is checked before each)."""
        train = self.cfg.train
        if train.max_iters:
            k = min(k, train.max_iters - self.iteration)
        else:
            k = min(k, math.ceil((train.epochs * self.n_train - self.samples) / big_b))
        if train.max_time_s:
            k = min(k, int(np.count_nonzero(starts[:k] < train.max_time_s)))
        return max(k, 1)

    # ---- learning -----------------------------------------------------------------------------------
    def _learning_rates(self, first: int, n: int, big_b: int, lr_scale: float) -> np.ndarray:
        """lr_t of iterations first..first+n-1 as :meth:`Trainer.apply` would set them (computed once when
        they cannot vary: a constant schedule past the warm-up, no time budget)."""
        cfg = self.cfg
        if not self._lr_varies and first + 1 >= cfg.optim.warmup_iters:
            return np.full(n, learning_rate(cfg.optim, first, self.total_iters, big_b, lr_scale))
        return np.array([learning_rate(cfg.optim, first + j, self.total_iters, big_b, lr_scale,
                                       schedule_progress(cfg.train, first + j,
                                                         (self.samples + big_b * (j + 1)) / self.n_train))
                         for j in range(n)])

    def run_window(self, batch_sizes, lr_scale: float = 1.0):
        """k = ``batch.window`` iterations (fewer if the budget ends first) at ``batch_sizes``."""
        if self.done:
            raise RuntimeError("run_window called after the training budget was spent (check .done)")
        b = self.clamp(batch_sizes)
        big_b = int(b.sum())
        samples_before = self.samples
        k = self.cfg.batch.window
        t = self._times(b, self.iteration, k)
        n = self._length(k, big_b, t["starts"])
        lrs = self._learning_rates(self.iteration, n, big_b, lr_scale)
        m = self.model
        factor = schedule_factor(self.cfg.optim, lrs, big_b) if m.measured else None  # the table's clock
        p_after = self.progress + np.cumsum(m.step_progress(big_b, lrs / self.cfg.optim.lr))
        p_before = np.concatenate([[self.progress], p_after[:-1]])
        sums = self._counters(t, n)
        self.iteration += n
        self.samples += n * big_b
        self.elapsed_s += float(t["iter_ms"][:n].sum()) / 1e3
        self.progress = float(p_after[-1])
        tau = m.temperature(big_b, sum(lrs.tolist()) / (n * self.cfg.optim.lr))
        every = self.cfg.train.eval_every
        last_test = (self.iteration // every) * every  # the last tested iteration up to now
        if last_test > self.iteration - n or self.done:  # as the simulator: every eval_every iterations, and at the end
            tested = n if self.done else last_test - (self.iteration - n)  # iterations of this window before the test
            p_test = float(p_after[tested - 1])
            if m.measured:  # the table at the run's effective batch, its seed z spreads away from the mean
                at_epochs = (samples_before + tested * big_b) / self.n_train
                log2b = m.effective_log2b(self.log2b_eff, math.log2(big_b), float(factor[:tested].sum()) * big_b / self.n_train)
                spread = self._acc_z * m.table_spread(at_epochs, log2b) if self._acc_z else 0.0
                self.test_acc = min(max(m.table_accuracy(at_epochs, log2b) + spread, 0.0), 1.0)
            else:
                self.test_acc = m.curves["test_acc"](p_test, tau)
            self.test_loss = m.curves["test_loss"](p_test, tau)
        if m.measured:
            self.log2b_eff = m.effective_log2b(self.log2b_eff, math.log2(big_b), float(factor.sum()) * big_b / self.n_train)
        # training accuracy and loss: means over the window of the model before each step, with the
        # sampling noise of n * b_i samples
        p_mid = sum(p_before.tolist()) / n
        draws = n * b
        acc = min(max(m.curves["train_acc"](p_mid, tau), 0.0), 1.0)
        loss = max(m.curves["train_loss"](p_mid, tau), 0.0)
        z = self._learn.standard_normal((4, self.n_workers))
        accs = np.minimum(np.maximum(acc + z[0] * np.sqrt(acc * (1.0 - acc) / draws), 0.0), 1.0)
        losses = np.maximum(loss * (1.0 + z[1] / np.sqrt(draws)), 0.0)
        sums["correct"] = accs * draws
        sums["loss"] = losses * n
        # gradient statistics from the fitted moments, scattered as the measured ones
        sqr, trace = m.moments(p_mid)
        sp = m.grad_spread
        local = (sqr + trace / b) * np.exp(sp * z[2] - 0.5 * sp * sp)
        agg = (sqr + trace / big_b) * math.exp(sp * float(z[3, 0]) - 0.5 * sp * sp)
        s2 = m.sigma2_norm(sqr, trace, b, n)
        grads = [{"grad_norm": math.sqrt(g), "grad_sqnorm": g, "sigma_norm": math.sqrt(v), "sigma2_norm": v}
                 for g, v in zip(local.tolist(), s2.tolist())]
        comm_sum = float((t["iter_ms"][:n] - t["t_max"][:n]).sum())
        return self._windows(b, n, sums, comm_sum, float(t["iter_ms"][:n].sum()), agg * n, float(lrs[-1]), grads)
