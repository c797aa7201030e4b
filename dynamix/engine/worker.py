"""One rank of the distributed engine: the bulk-synchronous training loop with per-worker batch sizes.

Launched by ``torchrun`` (see :mod:`dynamix.engine.launch`) or by :mod:`dynamix.engine.world`; the
process group is initialised from the usual environment (MASTER_ADDR/PORT, RANK, WORLD_SIZE).
Ranks 0..N-1 are workers; in parameter-server mode ranks N..N+S-1 are the S servers.

Iteration t on worker i (batch sizes b fixed within a window of k = ``batch.window`` iterations):

1. its slice of ``GlobalSampler.next(b)`` (every rank computes the same permutation, so no sample is
   used twice in an epoch across workers, for any b);
2. batch construction (normalise, augment), forward + backward on b_i samples into the flat gradient
   buffer (``compute``), then the emulated slowdown (:mod:`dynamix.engine.hetero`);
3. a one-element all-reduce that returns when the slowest worker has finished computing (``wait``,
   the barrier wait for slower peers);
4. the weighted reduction g = sum_i (b_i/B) g_i (:mod:`dynamix.engine.sync`) and the injected network
   floor (``comm``); exactly one optimiser step (ring mode: on the worker, counted in ``compute``, its
   emulated slowdown slept with the next iteration's: the cost model's t_i = (a_m + c_m b_i) / s_i
   covers batch construction, forward, backward and the step, :mod:`dynamix.sim.calibrate`).

At the end of each window every worker closes a :class:`~dynamix.metrics.schema.WorkerWindow`; the
windows are all-gathered, rank 0 appends them to ``runs.csv`` (columns ``RUNS_COLUMNS``,
``backend="engine"``) and the :class:`~dynamix.engine.decisions.DecisionSource` gives the next
window's sizes. The test set is evaluated every ``train.eval_every`` iterations, sharded across
workers (with rank 0's batch-norm statistics broadcast first, so the result is rank 0's model).

Checkpoints (``checkpoint.pt``, atomic) are written at window ends every ``train.checkpoint_every``
iterations and at the end; they hold the model, optimiser state (per server in PS mode), sampler,
every rank's augmentation RNG, the current batch sizes and the policy. Under
``torchrun --max-restarts`` a killed rank makes torchrun restart the group, which resumes from the
checkpoint; ``progress.json`` records the last iteration reached, so ``summary.json`` can report the
iterations lost to each restart.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from tqdm.auto import tqdm

from dynamix import cluster as cluster_mod
from dynamix.comm import Codec
from dynamix.comm.topk import ErrorFeedbackTopK
from dynamix.config import Config, ConfigError
from dynamix.csvlog import append_rows, truncate_rows
from dynamix.data import BatchMaker, GlobalSampler, load_dataset
from dynamix.engine.decisions import DecisionSource, make_source
from dynamix.engine.hetero import Emulator, fit_spec
from dynamix.engine.sync import (FLAG_CHECKPOINT, FlatBuffers, LHCAggregator, LHCPSClient, LHCRingSync,
                                 ParameterServer, PSClient, RingSync)
from dynamix.metrics.schema import RUNS_COLUMNS, GlobalWindow, window_rows
from dynamix.metrics.system import SystemMonitor
from dynamix.metrics.window import WindowAccumulator
from dynamix.models import build_model
from dynamix.policies.base import Bounds, PolicyContext, check_decision, check_first_decision
from dynamix.seeding import derive_seed, seed_everything
from dynamix.train import checkpoint
from dynamix.train.core import Trainer
from dynamix.train.device import compute_settings, resolve_device
from dynamix.train.loop import eval_subset, total_iterations
from dynamix.train.optim import learning_rate

log = logging.getLogger(__name__)

CHECKPOINT = "checkpoint.pt"
RUNS = "runs.csv"
PROGRESS = "progress.json"
SUMMARY = "summary.json"


@dataclass(frozen=True)
class Layout:
    """Which global ranks are workers and which are parameter servers."""

    n_workers: int
    n_servers: int = 0

    def server_rank(self, s: int) -> int:
        return self.n_workers + s

    @classmethod
    def for_world(cls, cfg: Config, world: int) -> "Layout":
        if cfg.engine.arch == "ring":
            return cls(world, 0)
        n = world - cfg.engine.num_servers
        if n < 1:
            raise ValueError(f"engine.num_servers = {cfg.engine.num_servers} leaves no workers in a world of "
                             f"{world} processes: must be at most {world - 1}")
        return cls(n, cfg.engine.num_servers)


def init_process_group(backend: str = "auto", device: str = "auto") -> str:
    """Initialise torch.distributed from the environment; returns this rank's device.

    ``device`` is ``train.device``: on CUDA (``auto`` with a GPU, or ``cuda``) local rank r uses GPU
    r mod (GPU count), ``cuda:N`` pins every rank to GPU N, ``cpu`` keeps the ranks on the CPU even
    when a GPU is present. ``backend`` auto: :func:`auto_backend`.
    """
    dev = resolve_device(device)
    if dev != "cpu" and device in ("auto", "cuda"):
        dev = f"cuda:{int(os.environ.get('LOCAL_RANK', 0)) % torch.cuda.device_count()}"
    if backend == "auto":
        backend = auto_backend(device, int(os.environ.get("LOCAL_WORLD_SIZE", 1)))
    if backend == "nccl" and dev == "cpu":
        raise ConfigError("engine.backend = 'nccl' needs CUDA tensors, but train.device resolves to 'cpu': "
                          "use engine.backend auto or gloo")
    if not dist.is_initialized():
        dist.init_process_group(backend)
    if dev != "cpu":
        torch.cuda.set_device(dev)
    return dev


def _gpus(device: str) -> int:
    """GPUs the ranks of one node spread over under ``train.device`` (0: the CPU)."""
    if resolve_device(device) == "cpu":
        return 0
    return 1 if device.startswith("cuda:") else torch.cuda.device_count()


def auto_backend(device: str, local_ranks: int) -> str:
    """``engine.backend: auto``: nccl when each of a node's ``local_ranks`` has a GPU of its own, else
    gloo (on the CPU; and on CUDA when ranks share a GPU, which NCCL refuses, "Duplicate GPU detected":
    gloo reduces CUDA tensors too, 2 ranks on one H200 in ring and parameter-server mode)."""
    return "nccl" if 0 < local_ranks <= _gpus(device) else "gloo"


def check_gpu_ranks(cfg: Config, local_ranks: int) -> None:
    """``engine.backend: nccl`` runs one rank per GPU: refuse more ranks on a node than it has GPUs,
    before torchrun starts. :func:`init_process_group` places local rank r on GPU r mod (GPU count)
    (every rank on GPU N with ``cuda:N``), so two ranks of the nccl group would share one, which NCCL
    itself refuses only after every rank has started and loaded its data."""
    if cfg.engine.backend != "nccl" or (gpus := _gpus(cfg.train.device)) == 0:
        return  # nccl on the CPU: refused by init_process_group, naming train.device
    if local_ranks > gpus:
        raise ConfigError(f"engine.backend = 'nccl' runs one rank per GPU: {local_ranks} ranks on this node "
                          f"but train.device = {cfg.train.device!r} gives {gpus} GPU(s): use at most {gpus} "
                          "rank(s) per node (servers included), or engine.backend auto or gloo")


def _threads(cfg: Config, world: int) -> int:
    """train.threads, else one thread per process when several share the machine (CPU only)."""
    if cfg.train.threads:
        return cfg.train.threads
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    return 1 if local_world > 1 else torch.get_num_threads()


def check_engine_config(cfg: Config) -> None:
    """Settings the engine refuses (checked by ``dynamix launch`` before torchrun starts, and by every rank)."""
    if cfg.train.max_time_s:
        raise ConfigError(f"train.max_time_s = {cfg.train.max_time_s} is simulator-only: the engine runs "
                          "by train.max_iters or train.epochs (set train.max_time_s=0)")
    if cfg.train.amp == "fp16" and cfg.engine.arch == "ps":
        raise ConfigError("train.amp = 'fp16' skips steps on overflow, which the parameter servers cannot "
                          "see: use engine.arch = ring, or train.amp = bf16 or none")


class Engine:
    """One rank's state and loop. Build with a process group already initialised; :meth:`run` trains."""

    def __init__(self, cfg: Config, out_dir: str | Path | None = None, spec: cluster_mod.ClusterSpec | None = None,
                 policy_spec: str | None = None, arbitrator: str | None = None,
                 initial_sizes: tuple[int, ...] | None = None, run_id: str | None = None,
                 device: str = "cpu", progress: bool = False, collect_metrics: bool = True,
                 metrics_source: str = "auto") -> None:
        self.cfg, self.device, self.progress = cfg, device, progress
        check_engine_config(cfg)
        self.compute = compute_settings(cfg.train, device)
        self.shaped = cfg.engine.net_mode == "netns"
        if self.shaped and os.environ.get("DYNAMIX_NETNS") != "1":
            raise ValueError("engine.net_mode = 'netns' runs ranks in namespaces set up by `dynamix launch` "
                             "(dynamix.engine.netns); start it that way, or use 'inject'")
        self.out = Path(out_dir) if out_dir is not None else None
        if self.out is not None:
            self.out.mkdir(parents=True, exist_ok=True)
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        if cfg.engine.compression == "lhc" and dist.get_backend() == "nccl":
            raise ConfigError("engine.compression = 'lhc' ORs bitmaps, which NCCL cannot reduce: use "
                              "engine.backend gloo (or train.device cpu), or engine.compression none")
        self.layout = Layout.for_world(cfg, self.world)
        n, S = self.layout.n_workers, self.layout.n_servers
        torch.set_num_threads(_threads(cfg, self.world))
        # Collective group creation: every rank, same order.
        self.group = dist.new_group(list(range(n))) if S else None
        self.server_groups = [dist.new_group(list(range(n)) + [self.layout.server_rank(s)]) for s in range(S)]
        self.is_server = self.rank >= n
        # The policy that decides the batch sizes, as recorded in runs.csv and summary.json: with an
        # arbitrator, the one it reports (adopted at registration, :meth:`_adopt_policy`).
        self.arbitrator = arbitrator
        self.policy_spec = f"arbitrator:{arbitrator}" if arbitrator else (policy_spec or cfg.policy.spec)
        self.policies = [] if arbitrator else [self.policy_spec]
        self.run_key = {"run_id": run_id or (self.out.name if self.out else "engine"), "backend": "engine",
                        "policy": self.policy_spec, "seed": cfg.train.seed}
        seed_everything(cfg.train.seed)  # identical initial weights on every rank
        self.model = build_model(cfg.model.name, cfg.model.width).to(device)
        if cfg.train.channels_last:  # before the flat buffers bind .grad (and, for PS, .data)
            self.model = self.model.to(memory_format=torch.channels_last)
        self.state = checkpoint.load(self.out / CHECKPOINT, expect=self._expect()) if self.out else None
        if self.is_server:
            return
        data = load_dataset(cfg.data)
        self.n_train = len(data.train_y)
        self.sampler = GlobalSampler(self.n_train, cfg.train.seed)
        self.maker = BatchMaker(data.train_x, data.train_y, cfg.data.augment and data.augmentable,
                                derive_seed(cfg.train.seed, "worker", self.rank))
        test_idx = eval_subset(len(data.test_y), cfg.train.eval_samples)
        mine = test_idx[self.rank :: n]  # sharded evaluation
        self.test_x, self.test_y = data.test_x[mine], data.test_y[mine]
        self.flat = FlatBuffers(self.model, max(S, 1), params_too=S > 0)
        self.bounds = Bounds(cfg.batch.min, cfg.batch.max)
        self.ctx = PolicyContext(
            n_workers=n, initial_batch_sizes=tuple(initial_sizes or (cfg.batch.initial,) * n), bounds=self.bounds,
            actions=cfg.batch.actions, window=cfg.batch.window, optimizer=cfg.optim.name,
            dataset_size=self.n_train, seed=cfg.train.seed, lr_scaling=cfg.optim.lr_scaling,
            base_batch=cfg.optim.base_batch, epochs=cfg.train.horizon_epochs, base_lr=cfg.optim.lr,
        )
        if len(self.ctx.initial_batch_sizes) != n:
            raise ValueError(f"initial batch sizes {self.ctx.initial_batch_sizes}: need one per worker ({n})")
        self.source: DecisionSource = make_source(policy_spec or cfg.policy.spec, arbitrator, self.rank, self.group,
                                                  **({"cfg": cfg} if arbitrator else {}))
        self.sync = self._make_sync()
        self.topk = ErrorFeedbackTopK(cfg.engine.topk) if cfg.engine.topk else None
        self.collect = collect_metrics
        self.monitor = SystemMonitor(metrics_source, ebpf=cfg.engine.retrans == "ebpf")
        self.acc = WindowAccumulator(self.rank, self.monitor)
        self.emulator = None
        self._undilated_step_s = 0.0  # the last optimiser step's native time, dilated with the next compute
        if spec is not None:
            spec = fit_spec(spec, n)
            self.emulator = Emulator(spec, self.rank, self.flat.nbytes, cfg.engine.arch, max(S, 1),
                                     shaped=self.shaped, collectives=2 if cfg.engine.compression == "lhc" else 1)
        # Seconds spent collecting metrics (gradient statistics, system counters; not the window
        # all-gather, which decisions need anyway) and in iterations: their ratio is the overhead.
        self.metrics_s = 0.0
        self.loop_s = 0.0

    def _codec(self) -> Codec:
        """Same hashes on every rank: seeded by the run's seed."""
        return Codec(derive_seed(self.cfg.train.seed, "lhc"))

    def _make_sync(self) -> Any:
        servers = [self.layout.server_rank(s) for s in range(self.layout.n_servers)]
        if self.cfg.engine.compression == "lhc":
            return (LHCPSClient(self.flat, self._codec(), servers, self.server_groups, self.rank) if servers
                    else LHCRingSync(self.flat, self._codec(), self.group))
        if servers:
            return PSClient(self.flat, servers, self.server_groups, self.rank)
        return RingSync(self.flat, self.group)

    def _expect(self) -> dict:
        return {"config_hash": self.cfg.hash(), "world_size": self.world}

    # ---------------------------------------------------------------------------------------------
    def run(self) -> dict | None:
        """Train to the configured budget; returns the summary on rank 0 (None elsewhere)."""
        if self.is_server:
            self.serve()
            return None
        self.start()
        self.train()
        summary = self._summary() if self.rank == 0 else None
        self.finish()
        return summary

    def serve(self) -> int:
        """Server ranks: hold this rank's parameter shard until the workers send STOP."""
        box = [None]
        dist.broadcast_object_list(box, src=0)  # total iterations, for the lr schedule
        s, st = self.rank - self.layout.n_workers, self.state
        if self.cfg.engine.compression == "lhc":  # an aggregator: the workers hold the optimiser
            numel = FlatBuffers(self.model, self.layout.n_servers).shards[s].numel
            return LHCAggregator(numel, self.rank, self.server_groups[s], self._codec()).serve()
        if st is not None:
            self.model.load_state_dict(st["model"])
        server = ParameterServer(self.model, s, self.layout.n_servers, self.rank, self.server_groups[s],
                                 self.cfg.optim, box[0], st["iteration"] if st else 0, st["opt"][s] if st else None)
        return server.serve()

    def start(self) -> None:
        """Workers: first decision (or resume from the checkpoint); tell the servers the schedule length."""
        self._start_or_resume()
        self._in_window, self._agg_sq_sum = 0, 0.0  # checkpoints are taken at window ends
        dist.broadcast_object_list([self.total_iters], src=0)

    def finish(self) -> None:
        """Workers: release the servers and the decision source."""
        if self.layout.n_servers:
            self.sync.stop()
        self.monitor.close()
        close = getattr(self.source, "close", None)
        if close is not None:
            close()

    def _start_or_resume(self) -> None:
        st = self.state
        self.elapsed_s, self.rows, self.window = 0.0, 0, 0
        self.last_test, self.best_test_acc, self.resumes = (math.nan, math.nan), 0.0, []
        if st is None:
            d = check_first_decision(self.source.initial(self.ctx), self.layout.n_workers, self.bounds, self.n_train)
            self.sizes, self.lr_scale = d.batch_sizes, d.lr_scale
            self._adopt_policy()
            self.total_iters = total_iterations(self.cfg, self.n_train, sum(self.sizes))
            self.trainer = Trainer(self.model, self.cfg.optim, self.total_iters, **self.compute)
            self.last_ckpt = 0
            return
        self.sizes, self.lr_scale = tuple(st["batch_sizes"]), st["lr_scale"]
        if self.arbitrator:
            self.policy_spec = self.run_key["policy"] = st.get("policy", self.policy_spec)
            self.policies = list(st.get("policies", []))
        elif st.get("policy") != self.policy_spec:
            raise ConfigError(f"checkpoint {self.out / CHECKPOINT} was written under policy {st.get('policy')!r}, "
                              f"this run has {self.policy_spec!r}: use another output folder, or start afresh")
        self.total_iters = st["total_iters"]
        self.model.load_state_dict(st["model"])
        self.trainer = Trainer(self.model, self.cfg.optim, self.total_iters, **self.compute)
        if not self.sync.server_steps:
            self.trainer.opt.load_state_dict(st["opt"])
        self.trainer.iteration = self.last_ckpt = st["iteration"]
        self.sampler.load_state_dict(st["sampler"])
        self.maker.load_state_dict(st["makers"][self.rank])
        self.elapsed_s, self.rows, self.window = st["elapsed_s"], st["rows"], st["window"]
        self.last_test, self.best_test_acc = tuple(st["last_test"]), st["best_test_acc"]
        self.resumes = list(st["resumes"])
        policy = getattr(self.source, "policy", None)
        if policy is not None:  # rank 0 of a LocalPolicySource; remote arbitrators keep their own state
            policy.reset(self.ctx)
            policy.load_state_dict(st["policy_state"] or {})
        if self.rank == 0:
            truncate_rows(self.out / RUNS, self.rows)
            reached = self._read_progress()
            self.resumes.append({"from_iteration": st["iteration"], "reached_iteration": reached,
                                 "iterations_lost": max(reached - st["iteration"], 0)})
            log.info("resuming %s from iteration %d (had reached %d)", self.out, st["iteration"], reached)

    # ---------------------------------------------------------------------------------------------
    def done(self) -> bool:
        if self.cfg.train.max_iters:
            return self.trainer.iteration >= self.cfg.train.max_iters
        return self.sampler.epochs_done >= self.cfg.train.epochs

    def _last_after(self, global_batch: int) -> bool:
        """Whether the iteration about to run is the run's last."""
        if self.cfg.train.max_iters:
            return self.trainer.iteration + 1 >= self.cfg.train.max_iters
        return (self.sampler.samples_seen + global_batch) / self.n_train >= self.cfg.train.epochs

    def step(self, sizes: tuple[int, ...], lr_scale: float = 1.0, flags: int = 0) -> dict[str, float]:
        """One bulk-synchronous iteration with batch sizes ``sizes``; returns its measurements."""
        t_start = time.perf_counter()
        it = self.trainer.iteration
        if self.emulator is not None:
            self.emulator.begin(it, self.elapsed_s)
        idx = self.sampler.next(sizes)[self.rank]
        global_batch = int(sum(sizes))
        t0 = time.perf_counter()
        x, y = self.maker(idx)
        self.flat.zero_grad()
        stats = self.trainer.local_gradient(x, y)
        self.trainer.unscale_()  # fp16: the true local gradient before statistics and reduction
        if self.device != "cpu":
            torch.cuda.synchronize()
        compute_s = time.perf_counter() - t0
        if self.emulator is not None:  # with the previous iteration's optimiser step (see below)
            compute_s += self.emulator.dilate(compute_s + self._undilated_step_s)
        wait_s = 0.0
        if self.collect:
            tm = time.perf_counter()
            self.acc.grads.add(self.flat.grad)
            self.metrics_s += time.perf_counter() - tm
            t1 = time.perf_counter()
            dist.all_reduce(torch.zeros(1, device=self.device), group=self.group)  # barrier: wait for peers
            wait_s = time.perf_counter() - t1
        t2 = time.perf_counter()
        if self.topk is not None:  # lossy: the rest waits in the residual
            self.topk(self.flat.grad)
            self.sync.stats.encode_s += time.perf_counter() - t2
        sent_before = self.sync.stats.bytes_sent
        agg_sq = self.sync.reduce(sizes[self.rank] / global_batch, global_batch, lr_scale, flags)
        comm_s = time.perf_counter() - t2
        if self.emulator is not None:
            comm_s += self.emulator.pad_comm(comm_s, self.sync.stats.bytes_sent - sent_before)
        if self.sync.server_steps:
            self.trainer.lr = learning_rate(self.cfg.optim, it, self.total_iters, global_batch, lr_scale)
            self.trainer.iteration += 1
        else:
            t3 = time.perf_counter()
            self.trainer.apply(global_batch, lr_scale)
            # the step is compute too; its dilation is slept with the next iteration's, before the
            # barrier, where the peers wait anyway: sleeping here would start this rank's next compute
            # late, so on shared cores it would compute with fewer peers, faster than the device emulated
            self._undilated_step_s = time.perf_counter() - t3
            compute_s += self._undilated_step_s
        iter_s = time.perf_counter() - t_start
        self.acc.add(iter_s=iter_s, compute_s=compute_s, comm_s=comm_s, wait_s=wait_s, loss=stats.loss,
                     correct=stats.correct, n=stats.n, local_grad=None)
        self.elapsed_s += iter_s
        return {"iter_s": iter_s, "compute_s": compute_s, "comm_s": comm_s, "wait_s": wait_s,
                "agg_grad_sqnorm": agg_sq, "loss": stats.loss, "correct": stats.correct}

    def evaluate(self) -> tuple[float, float]:
        """(loss, accuracy) of rank 0's model on the test subset, sharded over the workers."""
        for b in self.model.buffers():
            dist.broadcast(b, src=0, group=self.group)
        loss, acc = self.trainer.evaluate(self.test_x, self.test_y) if len(self.test_y) else (0.0, 0.0)
        n = len(self.test_y)
        t = torch.tensor([loss * n, acc * n, n], dtype=torch.float64, device=self.device)
        dist.all_reduce(t, group=self.group)
        return float(t[0] / t[2]), float(t[1] / t[2])

    # ---------------------------------------------------------------------------------------------
    def train(self, max_steps: int | None = None) -> int:
        """Iterate until the run's budget is spent, or for at most ``max_steps`` iterations (benchmarks
        interleave engine and baseline this way); returns the iterations run."""
        cfg, n = self.cfg, self.layout.n_workers
        bar = tqdm(total=cfg.train.max_iters or None, initial=self.trainer.iteration, unit="it", mininterval=1.0,
                   disable=not (self.progress and self.rank == 0), desc=f"engine {cfg.engine.arch} N={n}")
        steps = 0
        while not self.done() and (max_steps is None or steps < max_steps):
            t_loop = time.perf_counter()
            last = self._last_after(sum(self.sizes))
            window_end = last or self._in_window + 1 == cfg.batch.window
            ckpt = window_end and self.out is not None and (
                last or self.trainer.iteration + 1 - self.last_ckpt >= cfg.train.checkpoint_every)
            rec = self.step(self.sizes, self.lr_scale, FLAG_CHECKPOINT if ckpt else 0)
            steps += 1
            self._in_window += 1
            self._agg_sq_sum += rec["agg_grad_sqnorm"]
            bar.update(1)
            if self.trainer.iteration % cfg.train.eval_every == 0 or last:
                self.last_test = self.evaluate()
                self.best_test_acc = max(self.best_test_acc, self.last_test[1])
                bar.set_postfix(test_acc=f"{self.last_test[1]:.3f}")
            if window_end:
                self._end_window(self._agg_sq_sum / self._in_window)
                self._in_window, self._agg_sq_sum = 0, 0.0
            if ckpt:
                self._checkpoint()
            self.loop_s += time.perf_counter() - t_loop
        bar.close()
        return steps

    def _end_window(self, agg_grad_sqnorm: float) -> None:
        tm = time.perf_counter()
        speed = self.emulator.speed if self.emulator is not None else 1.0
        mine = self.acc.close(self.sizes[self.rank], speed, system=self.collect, comm=self.sync.stats.take())
        self.metrics_s += time.perf_counter() - tm
        windows: list[Any] = [None] * self.layout.n_workers
        dist.all_gather_object(windows, mine, group=self.group)
        global_batch = sum(self.sizes)
        glob = GlobalWindow(
            window=self.window, iteration=self.trainer.iteration, epoch=self.sampler.epochs_done,
            elapsed_s=self.elapsed_s, global_batch=global_batch, lr=self.trainer.lr,
            train_loss=sum(w.loss * w.batch_size for w in windows) / global_batch,
            train_acc=sum(w.batch_acc * w.batch_size for w in windows) / global_batch,
            agg_grad_sqnorm=agg_grad_sqnorm, test_acc=self.last_test[1], test_loss=self.last_test[0],
            n_workers=self.layout.n_workers,
        )
        if self.rank == 0 and self.out is not None:
            self.rows += append_rows(self.out / RUNS, window_rows(self.run_key, glob, windows), RUNS_COLUMNS)
            (self.out / PROGRESS).write_text(json.dumps({"iteration": self.trainer.iteration}))
        d = check_decision(self.source.decide(self.rank, windows, glob, self.sizes), self.layout.n_workers,
                           self.bounds)
        self.sizes, self.lr_scale = d.batch_sizes, d.lr_scale
        if self.arbitrator:
            self._adopt_policy()
        self.window += 1

    def _adopt_policy(self) -> None:
        """Label the next window's rows with the policy the arbitrator reports, the one that decided its
        sizes. An arbitrator restarted with another policy mid-run is served on (fail-open recovery), so
        the labels follow it window by window and ``summary.json`` lists every policy in ``policies``."""
        reported = getattr(self.source, "policy_name", None)
        if reported and reported != self.policy_spec:
            self.policy_spec = self.run_key["policy"] = reported
            self.policies.append(reported)

    def _checkpoint(self) -> None:
        makers: list[Any] = [None] * self.layout.n_workers
        dist.all_gather_object(makers, self.maker.state_dict(), group=self.group)
        self.last_ckpt = self.trainer.iteration
        if self.rank != 0:
            return
        policy = getattr(self.source, "policy", None)
        state = {
            **self._expect(), "iteration": self.trainer.iteration, "total_iters": self.total_iters,
            "model": self.model.state_dict(),
            "opt": self.sync.server_opt_states if self.sync.server_steps else self.trainer.opt.state_dict(),
            "sampler": self.sampler.state_dict(), "makers": makers, "batch_sizes": list(self.sizes),
            "lr_scale": self.lr_scale, "policy_state": policy.state_dict() if policy is not None else None,
            "policy": self.policy_spec, "policies": self.policies,
            "elapsed_s": self.elapsed_s, "rows": self.rows, "window": self.window,
            "last_test": list(self.last_test), "best_test_acc": self.best_test_acc, "resumes": self.resumes,
        }
        checkpoint.save(self.out / CHECKPOINT, state)

    def _read_progress(self) -> int:
        try:
            return int(json.loads((self.out / PROGRESS).read_text())["iteration"])
        except (OSError, ValueError, KeyError):
            return self.state["iteration"] if self.state else 0

    def _summary(self) -> dict:
        cfg = self.cfg
        summary = {
            "backend": "engine", "arch": cfg.engine.arch, "n_workers": self.layout.n_workers,
            "n_servers": self.layout.n_servers, "policy": self.policy_spec, "policies": self.policies,
            "arbitrator": self.arbitrator,
            "model": cfg.model.name,
            "iterations": self.trainer.iteration, "epochs": self.sampler.epochs_done,
            "final_test_acc": self.last_test[1], "final_test_loss": self.last_test[0],
            "best_test_acc": self.best_test_acc, "train_time_s": self.elapsed_s,
            "samples": self.sampler.samples_seen,
            "throughput_samples_per_s": self.sampler.samples_seen / max(self.elapsed_s, 1e-9),
            "final_batch_sizes": list(self.sizes),
            "metrics_overhead_fraction": self.metrics_s / max(self.loop_s, 1e-9),
            "resumes": self.resumes, "iterations_lost": sum(r["iterations_lost"] for r in self.resumes),
            "config_hash": cfg.hash(), "seed": cfg.train.seed, "run_id": self.run_key["run_id"],
        }
        if self.out is not None:
            (self.out / SUMMARY).write_text(json.dumps(summary, indent=2) + "\n")
        return summary

