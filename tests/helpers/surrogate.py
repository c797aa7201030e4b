"""A hand-written surrogate of the default workload and a fixed cost model (tests/test_surrogate.py,
tests/test_rl_signals.py): no calibration, no data, no model math."""

from __future__ import annotations

from dynamix import config
from dynamix.cluster.costmodel import CostModel
from dynamix.sim import progress
from dynamix.sim.progress import Curve, ProgressModel

COST = CostModel(a_ms=0.7, c_ms_per_sample=0.18, gradient_bytes=1_644_584)
CURVES = {"test_acc": Curve(0.10, 0.45, 0.4, 1.2, 0.02), "test_loss": Curve(2.3, 1.5, 0.4, 1.0),
          "train_acc": Curve(0.10, 0.42, 0.4, 1.2), "train_loss": Curve(2.3, 1.6, 0.4, 1.0)}


def make_model(cfg: config.Config, noise_scale: float = 1000.0, kappa: float = 1.0) -> ProgressModel:
    return ProgressModel(workload=progress.workload(cfg), n_train=10_000, b_ref=256.0, noise_scale=noise_scale,
                         kappa=kappa, curves=CURVES, grad_p=(0.1, 1.0, 3.0), grad_sqr=(1.0, 0.3, 0.2),
                         grad_trace=(200.0, 250.0, 300.0), sigma2_scale=1.5, grad_spread=0.05)
