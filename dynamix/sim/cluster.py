"""A virtual-time cluster: real learning, modelled time.

Every virtual iteration does what the distributed engine does, in one process: the
:class:`~dynamix.data.GlobalSampler` hands worker i its slice of b_i samples,
:meth:`Trainer.weighted_gradient` leaves g = sum_i (b_i / B) g_i in ``.grad`` (batch norm per worker
batch, as without SyncBN) and :meth:`Trainer.apply` takes one optimiser step. So the accuracy
trajectory is the one the engine would produce; only the clock is simulated, by the
:class:`~dynamix.cluster.costmodel.CostModel` under the spec's :class:`~dynamix.cluster.dynamics.ClusterDynamics`.

A window of k = ``batch.window`` iterations ends in the same :class:`WorkerWindow` /
:class:`GlobalWindow` the engine emits, so a policy cannot tell the backends apart:

    cluster = VirtualCluster(clusters.load("clusters/mixed-gpu.yaml"), cfg)
    while not cluster.done:
        workers, glob = cluster.run_window([64] * cluster.n_workers)

With ``engine.compression = lhc`` every iteration also runs the LHC reduction of the workers' real
gradients in process (:func:`dynamix.comm.reduce_in_process`): its bytes set the cost model's
``wire_fraction`` and one worker's measured encode + decode CPU time on one thread its ``codec_ms``
(CPU, not wall time: another process on a loaded host does not slow the virtual clock; still measured,
so lhc runs are not bit-reproducible), so the clock, the
policies and the DYNAMIX state see the compressed communication of this very gradient.

Differences from the engine, by design: batch-norm running statistics are updated by every worker
batch in turn on the one model (the engine keeps one copy per rank); evaluation does not advance
virtual time.

The model math runs on ``train.device`` (:mod:`dynamix.train.device`); batches are built on the CPU
from the seeded generators and moved there, so the data order and augmentation do not depend on it.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from typing import Sequence

import numpy as np
import torch

from dynamix.cluster import ClusterSpec
from dynamix.cluster.costmodel import CostModel, IterationCost
from dynamix.cluster.dynamics import ClusterDynamics
from dynamix.comm import reduce_in_process
from dynamix.config import Config, ConfigError
from dynamix.data import BatchMaker, Cifar10, GlobalSampler, Interactions, load_dataset
from dynamix.metrics.gradstats import GradientWindowStats, flat_grad
from dynamix.metrics.schema import GlobalWindow, WorkerWindow
from dynamix.models import build_model, gradient_bytes
from dynamix.seeding import derive_seed, seed_everything
from dynamix.sim.calibrate import load_calibration
from dynamix.train.core import Trainer
from dynamix.train.device import compute_settings
from dynamix.train.loop import eval_subset, schedule_progress, total_iterations


def calibrated_cost(cfg: Config) -> CostModel:
    """The cost model of ``cfg.model`` from its reference calibration (:mod:`dynamix.sim.calibrate`)."""
    cal = load_calibration(cfg.model.name, cfg.model.width)
    return CostModel(cal.a_ms, cal.c_ms_per_sample, gradient_bytes(build_model(cfg.model.name, cfg.model.width)),
                     arbitration_ms=cfg.arbitrator.overhead_ms,
                     arbitration_ms_per_worker=cfg.arbitrator.overhead_ms_per_worker)


class ClusterClock:
    """What every virtual-time cluster shares: the spec's workers, the cost model, the device memory
    caps and fixed costs, the budget (:attr:`done`), the iteration cost and the window records
    (:meth:`_windows`). Subclasses supply the learning: :class:`VirtualCluster` runs the real model,
    :mod:`dynamix.sim.surrogate` a fitted model of it."""

    def __init__(self, spec: ClusterSpec, cfg: Config, cost: CostModel) -> None:
        self.spec, self.cfg = spec, cfg
        self.n_workers = spec.n_workers
        self._speeds = np.array([w.device.speed for w in spec.workers], float)
        self._max_batch = np.array([w.device.max_batch for w in spec.workers], np.int64)
        low = np.flatnonzero(self._max_batch < cfg.batch.min)
        if low.size:  # clamped below the policies' bounds, every run would report batches no policy chose
            raise ConfigError(f"cluster {spec.name}: worker {low[0]}'s device max_batch = {self._max_batch[low[0]]} "
                              f"is below batch.min = {cfg.batch.min}: raise max_batch or lower batch.min")
        self._fixed_ms = np.array([w.device.fixed_ms for w in spec.workers], float)
        self._bandwidth = np.array([w.bandwidth_gbps for w in spec.workers], float)
        self._latency = np.array([w.latency_ms for w in spec.workers], float)
        self.cost = cost

    def clamp(self, batch_sizes) -> np.ndarray:
        """Per-worker sizes after the device memory caps (``max_batch``); validates the vector."""
        b = np.asarray(batch_sizes, dtype=np.int64).reshape(-1)
        if b.shape[0] != self.n_workers:
            raise ValueError(f"batch_sizes has {b.shape[0]} entries: need one per worker ({self.n_workers})")
        if (b < 1).any():
            raise ValueError(f"batch_sizes = {b.tolist()} is out of range: every entry must be >= 1")
        return np.minimum(b, self._max_batch)

    @property
    def done(self) -> bool:
        """The training budget is spent: ``train.max_time_s`` virtual seconds (when set), or
        ``train.max_iters`` iterations, else ``train.epochs`` epochs."""
        if self.cfg.train.max_time_s and self.elapsed_s >= self.cfg.train.max_time_s:
            return True
        if self.cfg.train.max_iters:
            return self.iteration >= self.cfg.train.max_iters
        return self.epochs_done >= self.cfg.train.epochs

    def iteration_cost(self, b: np.ndarray, iteration: int, elapsed_s: float, dynamics: ClusterDynamics,
                       cost: CostModel | None = None) -> tuple[IterationCost, np.ndarray, np.ndarray]:
        """Virtual time of iteration ``iteration`` (0-based) starting at ``elapsed_s`` at sizes ``b``:
        the spec's true speeds and bandwidths under ``dynamics``, then ``cost`` (default: the cluster's
        cost model; a compressed iteration passes its own). Returns (cost, speeds, bandwidths in Gbit/s)."""
        speed_f, bw_f = dynamics.factors(iteration, elapsed_s)
        speeds, bandwidth = self._speeds * speed_f, self._bandwidth * bw_f
        model = cost or self.cost
        return (model.iteration(b, speeds, bandwidth, self._latency, self.spec.architecture, self._fixed_ms),
                speeds, bandwidth)

    @property
    def fixed_ms(self) -> np.ndarray:
        """Each worker's device fixed cost per iteration (ms)."""
        return self._fixed_ms.copy()

    @property
    def max_batch(self) -> np.ndarray:
        """Each worker's device memory cap (``max_batch``): :meth:`clamp` holds sizes below it."""
        return self._max_batch.copy()

    def _windows(self, b: np.ndarray, iters: int, sums: dict, comm_sum: float, iter_sum: float,
                 agg_sq_sum: float, lr: float, grads: list[dict]) -> tuple[list[WorkerWindow], GlobalWindow]:
        """Aggregate a window's sums into the schema (means per iteration, rates per second). ``grads``:
        each worker's gradient summary (:meth:`GradientWindowStats.summary`); ``sums`` without
        ``wire``/``encode``/``decode`` (no compression measured) read the cost model's wire bytes and no
        codec time. The subclass provides ``iteration``, ``epochs_done``, ``elapsed_s``, ``window``,
        ``test_acc``, ``test_loss`` and ``_noise``."""
        window_s = iter_sum / 1e3
        iter_ms = iter_sum / iters
        retrans = self._noise.poisson(sums["retrans"])  # segment counts over the window
        mem = self.cost.mem_util(b, self._max_batch)
        per = {k: (sums[k] / iters).tolist() for k in ("compute", "wait", "speed", "loss")}
        acc = (sums["correct"] / (iters * b)).tolist()
        tx, rx = (sums["tx"] / window_s).tolist(), (sums["rx"] / window_s).tolist()
        cpu = (sums["compute"] / iter_sum).tolist()
        # the reduction is the same on every worker: element 0 of the sums
        wire, enc, dec = ((float(sums[k][0]) / iters for k in ("wire", "encode", "decode")) if "wire" in sums
                          else (self.cost.wire_bytes, 0.0, 0.0))
        workers = []
        for i in range(self.n_workers):
            g = grads[i]
            workers.append(WorkerWindow(
                rank=i, batch_size=int(b[i]), iter_time_ms=iter_ms, compute_ms=per["compute"][i],
                comm_ms=comm_sum / iters, wait_ms=per["wait"][i],
                throughput_samples_per_s=float(b[i]) / (iter_ms / 1e3),
                net_tx_bytes_per_s=tx[i], net_rx_bytes_per_s=rx[i],
                tcp_retrans_per_s=float(retrans[i]) / window_s, cpu_time_ratio=cpu[i], mem_util=float(mem[i]),
                loss=per["loss"][i], batch_acc=acc[i], grad_norm=g["grad_norm"], grad_sqnorm=g["grad_sqnorm"],
                sigma_norm=g["sigma_norm"], sigma2_norm=g["sigma2_norm"], speed=per["speed"][i],
                comm_bytes=wire, compression_ratio=self.cost.gradient_bytes / max(wire, 1e-9),
                encode_ms=enc, decode_ms=dec,
            ))
        big_b = int(b.sum())
        glob = GlobalWindow(
            window=self.window, iteration=self.iteration, epoch=self.epochs_done,
            elapsed_s=self.elapsed_s, global_batch=big_b, lr=lr,
            train_loss=float(np.dot(sums["loss"], b)) / (iters * big_b),
            train_acc=float(sums["correct"].sum()) / (iters * big_b),
            agg_grad_sqnorm=agg_sq_sum / iters, test_acc=self.test_acc, test_loss=self.test_loss,
            n_workers=self.n_workers,
        )
        self.window += 1
        arbitration_ms = self.cost.arbitration_window_ms(self.n_workers)
        if arbitration_ms > 0:  # the workers wait for the arbitrator's decision before the next window
            self.elapsed_s += arbitration_ms / 1e3
        return workers, glob


class VirtualCluster(ClusterClock):
    """N simulated workers training one real model; ``run_window`` advances k iterations.

    ``seed`` (default ``cfg.train.seed``) fixes model initialisation, data order, augmentation and
    counter noise; the spec's own seed fixes stragglers and jitter. ``cost`` overrides the calibrated
    cost model (tests, what-if studies).
    """

    def __init__(self, spec: ClusterSpec, cfg: Config, data: Cifar10 | Interactions | None = None, seed: int | None = None,
                 cost: CostModel | None = None) -> None:
        super().__init__(spec, cfg, calibrated_cost(cfg) if cost is None else cost)
        self.seed = cfg.train.seed if seed is None else seed
        self.data = load_dataset(cfg.data) if data is None else data
        self._lhc_seed = derive_seed(self.seed, "lhc") if cfg.engine.compression == "lhc" else None
        self.dynamics = ClusterDynamics(spec)
        self.compute = compute_settings(cfg.train)  # device, amp, channels_last (validated once)
        self.n_train = len(self.data.train_y)
        self.total_iters = total_iterations(cfg, self.n_train, self.n_workers * cfg.batch.initial)
        test_idx = eval_subset(len(self.data.test_y), cfg.train.eval_samples)
        self._test_x, self._test_y = self.data.test_x[test_idx], self.data.test_y[test_idx]
        self.reset()

    # ------------------------------------------------------------------------------------------------
    def reset(self) -> None:
        """Fresh model, data order and clock: the start of a new run with the same seeds."""
        seed_everything(self.seed)
        model = build_model(self.cfg.model.name, self.cfg.model.width)
        self.trainer = Trainer(model, self.cfg.optim, self.total_iters, **self.compute)
        self.sampler = GlobalSampler(len(self.data.train_y), self.seed)
        self.maker = BatchMaker(self.data.train_x, self.data.train_y, self.cfg.data.augment and self.data.augmentable,
                                self.seed)
        self.dynamics.reset()
        self._noise = np.random.default_rng(derive_seed(self.seed, "sim-counters"))
        self._gstats = [GradientWindowStats() for _ in range(self.n_workers)]
        self.elapsed_s = 0.0
        self.window = 0
        self.test_loss, self.test_acc = math.nan, math.nan

    def fork(self, riders: Sequence[object] = ()) -> tuple["VirtualCluster", list]:
        """A copy of this cluster mid-run that runs on exactly as this one would (model, optimiser, data
        order, augmentation, dynamics, clock and counter noise are copied), and copies of ``riders``
        (policies whose foresight reads this cluster) that read the copy (:mod:`dynamix.sim.fork`). The
        data set and the run's settings are shared, not copied: nothing writes them."""
        shared = (self.data, self._test_x, self._test_y, self.maker.x, self.maker.y, self.spec, self.cfg, self.cost)
        twin, copies = copy.deepcopy((self, list(riders)), {id(x): x for x in shared})
        return twin, copies

    @property
    def iteration(self) -> int:
        return self.trainer.iteration

    @property
    def epochs_done(self) -> float:
        return self.sampler.epochs_done

    def _compressed_cost(self, grads: list) -> tuple[CostModel, float, float]:
        """The cost model of this iteration's LHC reduction (its bytes, one worker's codec time), and
        that worker's encode and decode ms. The codec runs on the CPU whatever ``train.device``: its
        peeling decoder is many small dependent steps, 49-77 ms per iteration as CUDA kernels on an
        H200 against 1.5 ms on one thread of a 2-core Xeon (ncf, 4 workers). It runs on one torch thread,
        as each engine rank does, timed by this thread's CPU time: the process's would count the model
        math's OpenMP threads still spinning after the backward pass, 2x the codec's time at torch's
        default threads on 2 cores, and 77 ms per iteration against one thread's 2.7 ms on a 16-core host.
        Only its time and bytes are read, so the thread count changes no other number."""
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            _, codec = reduce_in_process([g.cpu() for g in grads], self._lhc_seed, clock=time.thread_time)
        finally:
            torch.set_num_threads(threads)
        st = codec.stats
        enc, dec = 1e3 * st.encode_s, 1e3 * st.decode_s
        cost = dataclasses.replace(self.cost, wire_fraction=max(st.bytes_sent / max(st.dense_bytes, 1), 1e-9),
                                   codec_ms=enc + dec, collectives=2)
        return cost, enc, dec

    def evaluate(self) -> tuple[float, float]:
        """(test loss, test accuracy) on the ``train.eval_samples`` subset; remembered for the window."""
        self.test_loss, self.test_acc = self.trainer.evaluate(self._test_x, self._test_y)
        return self.test_loss, self.test_acc

    # ------------------------------------------------------------------------------------------------
    def run_window(self, batch_sizes, lr_scale: float = 1.0) -> tuple[list[WorkerWindow], GlobalWindow]:
        """Run k = ``batch.window`` real iterations (fewer if the budget ends first) at ``batch_sizes``."""
        b = self.clamp(batch_sizes)
        sizes = b.tolist()
        n, big_b = self.n_workers, int(b.sum())
        for g in self._gstats:
            g.reset()
        keys = ("compute", "wait", "tx", "rx", "retrans", "speed", "loss", "correct", "wire", "encode", "decode")
        sums = {k: np.zeros(n) for k in keys}
        comm_sum = iter_sum = agg_sq_sum = 0.0
        iters = 0
        eval_every = self.cfg.train.eval_every
        while iters < self.cfg.batch.window and not self.done:
            # real learning: the engine's weighted gradient over the workers' slices, one step
            batches = [self.maker(idx) for idx in self.sampler.next(sizes)]
            stats, grads = self.trainer.weighted_gradient(batches, track_local=True)
            agg = flat_grad(self.trainer.model)
            agg_sq = float(agg.dot(agg))
            # an fp16 overflow (the step is skipped, the loss scale halves) leaves no gradient statistics
            keep = self.trainer.scaler is None or math.isfinite(agg_sq)
            agg_sq_sum += agg_sq if keep else 0.0
            for i, (s, g) in enumerate(zip(stats, grads)):
                if keep:
                    self._gstats[i].add(g)
                sums["loss"][i] += s.loss
                sums["correct"][i] += s.correct
            cost_model = self.cost
            if self._lhc_seed is not None:
                cost_model, encode_ms, decode_ms = self._compressed_cost(grads)
                sums["encode"] += encode_ms
                sums["decode"] += decode_ms
            sums["wire"] += cost_model.wire_bytes
            del grads, agg
            progress = schedule_progress(self.cfg.train, self.trainer.iteration, self.sampler.epochs_done)
            lr = self.trainer.apply(big_b, lr_scale, progress)
            cost, speeds, _ = self.iteration_cost(b, self.trainer.iteration - 1, self.elapsed_s, self.dynamics,
                                                  cost_model)
            self.elapsed_s += cost.iter_ms / 1e3
            sums["compute"] += cost.compute_ms
            sums["wait"] += cost.wait_ms
            sums["tx"] += cost.tx_bytes
            sums["rx"] += cost.rx_bytes
            sums["retrans"] += cost.expected_retrans
            sums["speed"] += speeds
            comm_sum += cost.comm_ms
            iter_sum += cost.iter_ms
            iters += 1
            if self.trainer.iteration % eval_every == 0 or self.done:  # as the engine: and at the end
                self.evaluate()
        if iters == 0:
            raise RuntimeError("run_window called after the training budget was spent (check .done)")
        return self._windows(b, iters, sums, comm_sum, iter_sum, agg_sq_sum, lr,
                             [g.summary() for g in self._gstats])
