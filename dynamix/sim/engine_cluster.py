"""The episode back-end on the real engine: ``torchrun`` workers, decisions through the gRPC arbitrator.

:class:`EngineCluster` offers what :class:`~dynamix.rl.env.DynamixEnv` drives on a
:class:`~dynamix.sim.cluster.VirtualCluster` or a :class:`~dynamix.sim.surrogate.SurrogateCluster`
(``run_window``, ``done``, ``elapsed_s``, ``iteration``), but every window is k real iterations of the
distributed engine (:mod:`dynamix.engine`), with the cluster spec's heterogeneity emulated on this
machine (:mod:`dynamix.engine.hetero`). Select it with ``rl.episodes: engine``
(``dynamix train-policy --set rl.episodes=engine``); the environment imports this module only then, so
grpc and torchrun load only when used.

Control is inverted, as in a deployment: the engine's workers report each window to an arbitrator
(:mod:`dynamix.rpc.arbitrator`, served in this process on a free loopback port) whose policy is a
:class:`BridgePolicy`. Its ``decide`` hands the window to the environment and blocks until the
environment's next ``step`` supplies the batch sizes; every window after the first therefore trains
with exactly the agent's decision (the engine reads sizes only from the arbitrator).

While the learner updates its networks between rollouts the workers wait inside that call. That wait
is not training time: the engine's ``elapsed_s`` sums iteration times only, so the reward and the
episode's time budget do not see it. For the wait to be survivable the run raises the workers' RPC
deadline and the arbitrator's barrier timeout (:data:`ENGINE_OVERRIDES`); with the serving defaults
(2 s and 1 s) a worker would give up during a PPO update and keep its size (fail-open), and that window
would not be the agent's decision. Each episode is one engine run in a fresh folder; an episode that
ends on the time budget before the engine's epochs stops the run (its processes are terminated).
Close the environment when done (``env.close()``; ``train-policy`` does): until then the run's workers
and the arbitrator wait for the next decision. Engine episodes measure real time, so unlike simulated
ones they are not reproducible bit for bit.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Sequence

from dynamix.cluster import ClusterSpec
from dynamix.config import Config, with_overrides
from dynamix.engine.launch import build_torchrun_command, launch_env, prepare, world_size
from dynamix.metrics.schema import GlobalWindow, WorkerWindow
from dynamix.policies.base import BatchSizePolicy, Decision
from dynamix.rpc.arbitrator import Arbitrator, RunSettings
from dynamix.rpc.server import ArbitratorServer

DECISION_WAIT_S = 600.0
"""How long a worker waits for the agent's decision (the longest learner update we allow)."""

ENGINE_OVERRIDES = {
    "arbitrator": {"deadline_s": DECISION_WAIT_S, "barrier_timeout_s": DECISION_WAIT_S, "retries": 0},
    "train": {"checkpoint_every": 10**9},  # an interrupted episode is redone, never resumed
}


class EngineFailed(RuntimeError):
    """The engine run exited or went silent before reporting the window the environment waits for."""


class BridgePolicy(BatchSizePolicy):
    """The arbitrator's policy during RL on the engine: ``decide`` = hand over the window, await sizes."""

    name = "rl-bridge"

    def __init__(self) -> None:
        self.windows: queue.Queue[tuple[list[WorkerWindow], GlobalWindow]] = queue.Queue()
        self.answers: queue.Queue[Decision] = queue.Queue()

    def decide(self, workers: Sequence[WorkerWindow], glob: GlobalWindow) -> Decision:
        self.windows.put((list(workers), glob))
        # queue.Empty after DECISION_WAIT_S becomes a policy failure at the arbitrator: the workers keep their sizes
        return self.answers.get(timeout=DECISION_WAIT_S)


def engine_config(cfg: Config, spec: ClusterSpec, seed: int) -> Config:
    """``cfg`` as one RL episode on the engine runs it: the spec's architecture and size, the run
    seed, no checkpoints, and the long decision wait (module docstring)."""
    arch = spec.architecture
    engine = {"arch": arch.kind, "world_size": spec.n_workers}
    if arch.kind == "ps":
        engine["num_servers"] = arch.num_servers
    return with_overrides(cfg, {**ENGINE_OVERRIDES, "engine": engine,
                                "train": {**ENGINE_OVERRIDES["train"], "seed": seed}})


class EngineCluster:
    """One engine run driven window by window (module docstring); call :meth:`close` when done."""

    def __init__(self, spec: ClusterSpec, cfg: Config, seed: int, out_dir: str | os.PathLike | None = None,
                 start_timeout_s: float = 300.0) -> None:
        self.spec, self.n_workers = spec, spec.n_workers
        self.cfg = engine_config(cfg, spec, seed)
        self.out = Path(out_dir) if out_dir is not None else Path(tempfile.mkdtemp(prefix="dynamix-rl-engine-"))
        self.out.mkdir(parents=True, exist_ok=True)
        self.start_timeout_s = start_timeout_s
        self.initial = (cfg.batch.initial,) * self.n_workers
        self.bridge = BridgePolicy()
        self.server = ArbitratorServer(Arbitrator(self.bridge, RunSettings.from_config(self.cfg)), "127.0.0.1", 0)
        cfg_path, spec_path = prepare(self.cfg, self.out, spec)
        cmd = build_torchrun_command(cfg_path, self.out, world_size(self.cfg, self.n_workers), spec_path=spec_path,
                                     arbitrator=self.server.target, initial_sizes=self.initial)
        self.log_path = self.out / "engine.log"
        with open(self.log_path, "w") as log_fh:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(cmd, stdout=log_fh, stderr=subprocess.STDOUT, env=launch_env(),
                                         start_new_session=True)
        self.started = False
        self.elapsed_s, self.iteration, self.epoch = 0.0, 0, 0.0
        self.sizes = self.initial

    @property
    def done(self) -> bool:
        """The engine's own budget is spent (its last window has been reported)."""
        if self.cfg.train.max_iters:
            return self.iteration >= self.cfg.train.max_iters
        return self.epoch >= self.cfg.train.epochs

    def run_window(self, batch_sizes: Sequence[int]) -> tuple[list[WorkerWindow], GlobalWindow]:
        """Train one window at ``batch_sizes`` and return its measurements. The first window runs at
        the launch's initial sizes (the engine starts before any decision)."""
        sizes = tuple(int(b) for b in batch_sizes)
        if not self.started:
            if sizes != self.initial:
                raise ValueError(f"the first engine window runs at the initial sizes {self.initial}, got {sizes}")
            self.started = True
        else:
            if self.done:
                raise EngineFailed("the engine run has finished: no further window")
            self.bridge.answers.put(Decision(sizes))
        workers, glob = self._next_window()
        self.sizes = tuple(w.batch_size for w in workers)
        self.elapsed_s, self.iteration, self.epoch = glob.elapsed_s, glob.iteration, glob.epoch
        return workers, glob

    def _next_window(self) -> tuple[list[WorkerWindow], GlobalWindow]:
        give_up = time.monotonic() + (self.start_timeout_s if self.iteration == 0 else DECISION_WAIT_S)
        while True:
            try:
                return self.bridge.windows.get(timeout=0.2)
            except queue.Empty:
                rc = self.proc.poll()
                if rc is not None:
                    raise EngineFailed(f"the engine exited with code {rc} after iteration {self.iteration}; "
                                       f"its log: {self.log_path}") from None
                if time.monotonic() > give_up:
                    raise EngineFailed(f"no window from the engine for {DECISION_WAIT_S:.0f} s after iteration "
                                       f"{self.iteration}; its log: {self.log_path}") from None

    def close(self, timeout_s: float = 30.0) -> None:
        """Release a worker waiting for a decision, stop the run if it is still going, stop the server."""
        self.bridge.answers.put(Decision(self.sizes))
        if self.proc.poll() is None and not self.done:
            os.killpg(self.proc.pid, signal.SIGTERM)  # the episode ended on its time budget
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.server.stop(grace_s=0)
