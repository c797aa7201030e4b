"""The RL tests' tiny workload and hand-made windows (tests/test_rl.py, tests/test_rl_signals.py)."""

from __future__ import annotations

from dynamix import config
from dynamix.cluster import ClusterSpec, DeviceProfile, WorkerSpec
from dynamix.cluster.costmodel import CostModel
from dynamix.metrics.schema import GlobalWindow, WorkerWindow
from dynamix.models import build_model, gradient_bytes

ACTIONS = (-8, -2, 0, 2, 8)


def rl_cfg(**rl) -> config.Config:
    """2 workers, batches in [8, 64], windows of 2 iterations, ~4 windows per episode; PPO from scratch
    unless ``warm_start`` is given."""
    over = {
        "model": {"name": "mlp", "width": 0.0625},
        "batch": {"min": 8, "max": 64, "initial": 16, "window": 2, "actions": list(ACTIONS)},
        "train": {"threads": 1, "epochs": 0.03, "eval_every": 4, "eval_samples": 200},
        "rl": {"model": "mlp", "width": 0.0625, "workers": 2, "episode_epochs": 0.025, "n_steps": 4,
               "batch_size": 8, "n_epochs": 1, "timesteps": 16, "net_arch": [16], "warm_start": "none",
               "warm_start_batch": 64, **rl},  # the default 512 exceeds what these bounds allow 2 workers
    }
    return config.load(profile="base", overrides=over)


def two_speed() -> ClusterSpec:
    """Two workers at speeds 1 and 0.25: any balancing rule moves the split."""
    return ClusterSpec(name="two-speed", workers=(WorkerSpec(DeviceProfile("a", 1.0)), WorkerSpec(DeviceProfile("b", 0.25))))


def tiny_cost() -> CostModel:
    """A fixed what-if cost model of :func:`rl_cfg`'s workload (no calibration file is written)."""
    return CostModel(a_ms=1.0, c_ms_per_sample=0.05, gradient_bytes=gradient_bytes(build_model("mlp", 0.0625)))


def worker(rank, b, iter_ms=100.0, compute=60.0, wait=20.0, acc=0.5, **kw) -> WorkerWindow:
    base = dict(rank=rank, batch_size=b, iter_time_ms=iter_ms, compute_ms=compute, comm_ms=iter_ms - compute - wait,
                wait_ms=wait, throughput_samples_per_s=b / iter_ms * 1e3, net_tx_bytes_per_s=1e6,
                net_rx_bytes_per_s=1e6, tcp_retrans_per_s=0.0, cpu_time_ratio=compute / iter_ms, mem_util=0.3,
                loss=1.5, batch_acc=acc, grad_norm=1.0, grad_sqnorm=2.0, sigma_norm=0.5, sigma2_norm=0.25)
    return WorkerWindow(**{**base, **kw})


def glob(workers, agg=1.0, **kw) -> GlobalWindow:
    big = sum(w.batch_size for w in workers)
    base = dict(window=0, iteration=10, epoch=0.1, elapsed_s=1.0, global_batch=big, lr=0.05, train_loss=1.5,
                train_acc=0.5, agg_grad_sqnorm=agg, n_workers=len(workers))
    return GlobalWindow(**{**base, **kw})
