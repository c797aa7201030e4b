"""The engine with lossless homomorphic compression (engine.compression = lhc) on the sparse workloads
(NCF; the LSTM language model).

Tolerance: LHC changes only the float summation order of the gradient (the sketch counters add and
peel values in another order than the dense all-reduce, and parameter-server mode sums in yet another),
a relative difference of ~1e-7 per element and step. Over the test's iterations of SGD with momentum
the loss curves agree to 1e-4 (absolute, on losses ~0.69); a wrong decode would move them by ~1e-2.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from dynamix import config as config_mod
from dynamix.config import Config
from dynamix.engine.launch import run_local
from dynamix.engine.world import spawn_world
from helpers.engine import one_step_rank, reference_gradients

NCF = ["model.name=ncf", "data.dataset=interactions", "data.augment=false", "train.eval_samples=600",
       "train.threads=1", "optim.lr=0.2"]


def ncf_cfg(*extra: str) -> Config:
    return config_mod.load(profile="smoke", overrides=NCF + list(extra))


@pytest.mark.parametrize("arch,nproc", [("ring", 2), pytest.param("ps", 3, marks=pytest.mark.slow)])
def test_one_lhc_step_applies_the_union_batch_gradient(arch, nproc):
    """Unequal batches (weights 1/4, 3/4): the weighted sum survives compression; bytes shrink 5x+.

    lr 0.2 without momentum or decay: the update is 0.2 g exactly, g the union-batch gradient.
    """
    sizes = (16, 48)
    cfg = ncf_cfg(f"engine.arch={arch}", "engine.compression=lhc", "optim.momentum=0.0", "optim.weight_decay=0.0")
    out = spawn_world(one_step_rank, nproc, cfg.to_dict(), sizes)
    _, union = reference_gradients(cfg, sizes)
    for r in out[:2]:
        update = [b - a for b, a in zip(r["before"], r["after"])]
        assert max(float((u / 0.2 - g).abs().max()) for u, g in zip(update, union)) <= 1e-5
        assert r["stats"].bytes_sent < r["stats"].dense_bytes / 5
    assert max(float(g.abs().max()) for g in union) > 1e-3  # the gradient is not trivially zero


@pytest.mark.slow
def test_four_torchrun_workers_follow_the_same_trajectory_with_and_without_lhc(tmp_path):
    common = ["train.max_iters=16", "batch.window=4", "train.eval_every=16", "engine.num_servers=1"]
    runs = {}
    for arch in ("ring", "ps"):
        for comp in ("none", "lhc"):
            cfg = ncf_cfg(f"engine.arch={arch}", f"engine.compression={comp}", *common)
            out = tmp_path / f"{arch}-{comp}"
            runs[arch, comp] = (run_local(cfg, None, "static:32", out, 4, method="torchrun", timeout_s=300),
                                pd.read_csv(out / "runs.csv"))
    for arch in ("ring", "ps"):
        (s_none, r_none), (s_lhc, r_lhc) = runs[arch, "none"], runs[arch, "lhc"]
        assert s_none["iterations"] == s_lhc["iterations"] == 16
        assert (r_none["loss"] - r_lhc["loss"]).abs().max() <= 1e-4
        assert s_none["final_test_loss"] == pytest.approx(s_lhc["final_test_loss"], abs=1e-4)
        assert (r_none["compression_ratio"] == 1.0).all()
        assert (r_lhc["compression_ratio"] > 3.0).all()
        assert (r_lhc["encode_ms"] > 0).all() and (r_lhc["decode_ms"] > 0).all()
    assert runs["ring", "lhc"][0]["final_test_loss"] == pytest.approx(runs["ps", "lhc"][0]["final_test_loss"],
                                                                       abs=1e-4)


@pytest.mark.slow
def test_lstm_lm_follows_the_same_trajectory_with_and_without_lhc(tmp_path):
    """The second sparse workload (sampled-softmax LSTM language model), 4 torchrun ring workers."""
    runs = {}
    for comp in ("none", "lhc"):
        cfg = config_mod.load(profile="smoke", overrides=[
            "model.name=lstm-lm", "data.dataset=tokens", "data.augment=false", "train.eval_samples=600",
            "train.threads=1", "optim.lr=0.5", "train.max_iters=16", "batch.window=4", "train.eval_every=16",
            f"engine.compression={comp}"])
        runs[comp] = (run_local(cfg, None, "static:32", tmp_path / comp, 4, method="torchrun", timeout_s=300),
                      pd.read_csv(tmp_path / comp / "runs.csv"))
    (s_none, r_none), (s_lhc, r_lhc) = runs["none"], runs["lhc"]
    assert s_none["iterations"] == s_lhc["iterations"] == 16
    assert r_none["loss"].iloc[-1] < r_none["loss"].iloc[0]  # it learns
    assert (r_none["loss"] - r_lhc["loss"]).abs().max() <= 1e-4
    assert s_none["final_test_loss"] == pytest.approx(s_lhc["final_test_loss"], abs=1e-4)
    assert (r_lhc["compression_ratio"] > 5.0).all()


@pytest.mark.slow
def test_top_k_with_error_feedback_makes_a_dense_model_sparse_for_lhc():
    """mlp (dense gradients): with engine.topk = 0.01 each worker sends 1 % of its entries (lossy)."""
    cfg = config_mod.load(profile="smoke", overrides=[
        "model.name=mlp", "model.width=0.0625", "data.augment=false", "train.threads=1", "optim.lr=1.0",
        "optim.momentum=0.0", "optim.weight_decay=0.0", "engine.compression=lhc", "engine.topk=0.01"])
    out = spawn_world(one_step_rank, 2, cfg.to_dict(), (16, 48))
    n = sum(p.numel() for p in out[0]["before"])
    update = torch.cat([(b - a).flatten() for b, a in zip(out[0]["before"], out[0]["after"])])
    assert 0 < int((update != 0).sum()) <= 2 * math.ceil(0.01 * (n + 4))  # the flat buffer has 4 control slots
    assert out[0]["stats"].bytes_sent < out[0]["stats"].dense_bytes / 10
