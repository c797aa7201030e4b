"""train.device / train.amp / train.channels_last: resolution, errors that name the field, the same
runs on cpu and auto, loss scaling that keeps per-worker gradients weighted, and (with a GPU) the
simulator, ``dynamix train`` and calibration on CUDA close to their CPU results."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

from dynamix import cli, config, paths
from dynamix import cluster as clusters
from dynamix.cluster.costmodel import CostModel
from dynamix.config import ConfigError, OptimConfig
from dynamix.data import BatchMaker, GlobalSampler, load_cifar10
from dynamix.engine.launch import run_local
from dynamix.engine.world import spawn_world
from dynamix.engine.worker import Engine, auto_backend, check_gpu_ranks, init_process_group
from dynamix.metrics.gradstats import flat_grad
from dynamix.models import build_model, gradient_bytes
from dynamix.policies.base import make_policy
from dynamix.seeding import seed_everything
from dynamix.sim import calibrate as cal_mod
from dynamix.sim.run import simulate
from dynamix.train.core import LossScaler, Trainer
from dynamix.train.device import check_amp, compute_settings, resolve_device
from dynamix.train.loop import run_training

MODEL = {"name": "tiny-cnn", "width": 0.25}
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def sim_cfg(**train) -> config.Config:
    return config.load(profile="smoke", overrides={
        "model": MODEL, "batch": {"window": 4, "min": 8, "initial": 16},
        "train": {"max_iters": 8, "eval_every": 4, "eval_samples": 200, "threads": 1, **train}})


def sim(data, **train) -> pd.DataFrame:
    cfg = sim_cfg(**train)
    cost = CostModel(5.0, 0.5, gradient_bytes(build_model(**MODEL)))
    return simulate(clusters.load("clusters/slow-worker-4.yaml"), cfg, make_policy("static:16"), seed=0,
                    progress=False, data=data, cost=cost)


def train(tmp_path, name, **train) -> dict:
    cfg = config.load(profile="smoke", overrides={
        "model": MODEL, "train": {"max_iters": 6, "eval_every": 3, "eval_samples": 200, "threads": 1, **train}})
    return run_training(cfg, tmp_path / name, progress=False)


# ------------------------------------------------------------------------------------------------
def test_device_setting_resolves():
    assert resolve_device("cpu") == "cpu"
    expected = f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto") == expected
    assert config.load(profile="base").train.device == "auto"  # the default: CUDA when available
    assert compute_settings(config.load(profile="base", overrides=["train.device=cpu"]).train) == {
        "device": "cpu", "amp": "none", "channels_last": False}


@pytest.mark.parametrize("override, message", [
    ("train.device=gpu", r"train\.device = 'gpu' is not allowed: must be one of 'auto', 'cpu', 'cuda', 'cuda:N'"),
    ("train.device=cuda:x", r"train\.device = 'cuda:x' is not allowed"),
    ("train.amp=fp32", r"train\.amp = 'fp32' is not allowed: must be one of 'none', 'bf16', 'fp16'"),
    ("train.channels_last=3", r"train\.channels_last must be true or false"),
])
def test_bad_values_name_the_field(override, message):
    with pytest.raises(ConfigError, match=message):
        config.load(profile="base", overrides=[override])


def test_mixed_precision_on_the_cpu_is_refused():
    with pytest.raises(ConfigError, match=r"train\.amp = 'bf16' needs a CUDA device, but train\.device resolves to 'cpu'"):
        compute_settings(config.load(profile="base", overrides=["train.device=cpu", "train.amp=bf16"]).train)
    assert check_amp("none", "cpu") == "none"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_without_a_gpu_is_a_one_line_error(tmp_path, capsys):
    with pytest.raises(ConfigError, match=r"train\.device = 'cuda' but torch sees no CUDA device"):
        resolve_device("cuda")
    code = cli.main(["train", "--profile", "smoke", "--set", "train.device=cuda:1", "--out", str(tmp_path / "t"),
                     "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "train.device = 'cuda:1'" in err


def test_bad_device_on_the_command_line_is_one_line(tmp_path, capsys):
    code = cli.main(["simulate", "--cluster", "clusters/slow-worker-4.yaml", "--policy", "static:8",
                     "--profile", "smoke", "--set", "train.device=tpu", "--out", str(tmp_path / "s"), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "train.device = 'tpu' is not allowed" in err


# ------------------------------------------------------------------------------------------------
def test_sim_runs_alike_on_cpu_and_auto(data):
    on_cpu = sim(data, device="cpu")
    auto = sim(data, device="auto")
    assert len(on_cpu) == 8 and on_cpu["train_loss"].notna().all() and np.isfinite(on_cpu["test_acc"]).all()
    if not torch.cuda.is_available():  # auto is the CPU here: the same run, bit for bit
        pd.testing.assert_frame_equal(on_cpu, auto)
    else:
        assert np.isfinite(auto["train_loss"]).all()


def test_train_runs_alike_on_cpu_and_auto(tmp_path):
    a = train(tmp_path, "cpu", device="cpu")
    b = train(tmp_path, "auto", device="auto")
    assert a["device"] == "cpu" and b["device"] == resolve_device("auto")
    assert math.isfinite(a["final_test_loss"]) and 0 <= a["final_test_acc"] <= 1
    rows = [pd.read_csv(tmp_path / n / "iterations.csv") for n in ("cpu", "auto")]
    if not torch.cuda.is_available():
        assert rows[0]["loss"].tolist() == rows[1]["loss"].tolist()
        assert a["final_test_acc"] == b["final_test_acc"]


def test_channels_last_trains_the_same_model_up_to_rounding(data):
    plain = sim(data, device="cpu")
    nhwc = sim(data, device="cpu", channels_last=True)
    assert np.allclose(nhwc["train_loss"], plain["train_loss"], rtol=1e-3)
    assert np.allclose(nhwc["grad_norm"], plain["grad_norm"], rtol=1e-2)


def test_evaluation_in_chunks_equals_one_pass(data):
    torch.manual_seed(0)
    trainer = Trainer(build_model(**MODEL), OptimConfig(), 1)
    x, y = data.test_x[:1000], data.test_y[:1000]
    loss, acc = trainer.evaluate(x, y)
    from dynamix.data.batches import normalise
    with torch.no_grad():
        out = trainer.model.eval()(normalise(x))
    assert acc == float((out.argmax(1) == y).sum()) / 1000
    assert loss == pytest.approx(float(torch.nn.functional.cross_entropy(out, y, reduction="sum")) / 1000, rel=1e-6)


def _engine_step(rank: int, cfg_dict: dict, sizes: tuple[int, ...]) -> dict:
    eng = Engine(config.build(config.Config, cfg_dict), None, initial_sizes=sizes)
    eng.start()
    eng.step(sizes)
    bound = all(p.grad.data_ptr() >= eng.flat.grad.data_ptr() for p in eng.model.parameters())
    out = {"grads": [p.grad.detach().clone().contiguous() for p in eng.model.parameters()], "bound": bound,
           "params": [p.detach().clone().contiguous() for p in eng.model.parameters()]}
    eng.finish()
    return out


def test_engine_with_channels_last_reduces_the_weighted_gradient():
    """NHWC weights keep their gradients in the engine's flat buffers, and the reduced gradient is
    the weighted one of the default layout, up to rounding."""
    cfg = config.load(profile="smoke", overrides={
        "model": MODEL, "data": {"augment": False}, "engine": {"arch": "ring"},
        "train": {"eval_samples": 200, "threads": 1, "channels_last": True, "device": "cpu"}})
    sizes = (16, 48)
    ranks = spawn_world(_engine_step, 2, cfg.to_dict(), sizes)
    data = load_cifar10(cfg.data)
    seed_everything(cfg.train.seed)
    trainer = Trainer(build_model(**MODEL), cfg.optim, 10)
    maker = BatchMaker(data.train_x, data.train_y, False, 0)
    trainer.weighted_gradient([maker(i) for i in GlobalSampler(len(data.train_y), cfg.train.seed).next(list(sizes))],
                              track_local=False)
    for r in ranks:
        assert r["bound"]
        assert max(float((a - p.grad).abs().max()) for a, p in zip(r["grads"], trainer.model.parameters())) <= 1e-4
    assert all(torch.equal(a, b) for a, b in zip(ranks[0]["params"], ranks[1]["params"]))


def test_ranks_that_share_a_gpu_reduce_with_gloo_and_nccl_for_them_is_refused_before_torchrun(
        monkeypatch, tmp_path, capsys):
    """One GPU (faked: the checks read only torch's device count), two ranks. NCCL refuses a shared GPU
    ("Duplicate GPU detected", seen on an H200) only after both ranks started: ``auto`` takes gloo
    there (it reduces CUDA tensors too), and nccl asked for by name is refused by the launch, in one
    line naming the fields, after every other check."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert [auto_backend("auto", n) for n in (1, 2)] == ["nccl", "gloo"]
    assert auto_backend("cuda:0", 2) == auto_backend("cpu", 1) == "gloo"

    def check(ranks: int, *overrides: str) -> None:
        check_gpu_ranks(config.load(profile="smoke", overrides=["model.name=tiny-cnn", *overrides]), ranks)

    for device in ("auto", "cuda", "cuda:0"):
        with pytest.raises(ConfigError) as refused:
            check(2, f"train.device={device}", "engine.backend=nccl")
        assert str(refused.value) == (
            f"engine.backend = 'nccl' runs one rank per GPU: 2 ranks on this node but train.device = "
            f"{device!r} gives 1 GPU(s): use at most 1 rank(s) per node (servers included), or "
            "engine.backend auto or gloo")
        check(2, f"train.device={device}")  # auto
    check(1, "engine.backend=nccl")
    launch = ["launch", "--profile", "smoke", "--set", "model.name=tiny-cnn", "--out", str(tmp_path / "l"),
              "--dry-run"]
    assert cli.main([*launch, "--nproc", "2"]) == 0
    nccl = [*launch, "--set", "engine.backend=nccl"]
    assert cli.main([*nccl, "--nproc", "1"]) == 0
    capsys.readouterr()
    for argv, ranks in ((["--nproc", "2"], 2), (["--nproc", "2", "--arch", "ps"], 3)):  # a server is a rank
        assert cli.main([*nccl, *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and f"{ranks} ranks on this node" in err
    assert cli.main([*nccl, "--nproc", "2", "--arbitrator", "localhost"]) == 2  # other checks come first
    assert "HOST:PORT" in capsys.readouterr().err


@cuda
def test_torchrun_ranks_on_nccl_follow_gloo_on_the_cpu(tmp_path):
    """The engine on CUDA through torchrun, reducing with nccl (one rank per GPU, at most 2): the
    trajectory of the same ranks on the CPU with gloo, up to rounding."""
    n = min(2, torch.cuda.device_count())
    runs = {}
    for device, backend in (("cpu", "gloo"), ("cuda", "nccl")):
        cfg = config.load(profile="smoke", overrides=[
            "model.name=tiny-cnn", "model.width=0.25", "train.max_iters=8", "batch.window=4",
            "train.eval_every=8", "train.eval_samples=200", "train.threads=1", f"train.device={device}",
            f"engine.backend={backend}"])
        summary = run_local(cfg, None, "static:32", tmp_path / device, n, method="torchrun", timeout_s=300)
        runs[device] = summary, pd.read_csv(tmp_path / device / "runs.csv")
    (s_cpu, r_cpu), (s_gpu, r_gpu) = runs["cpu"], runs["cuda"]
    assert s_gpu["iterations"] == s_cpu["iterations"] == 8 and s_gpu["n_workers"] == n
    first = r_cpu["window"] == 0  # before rounding differences compound
    assert np.allclose(r_gpu.loc[first, "loss"], r_cpu.loc[first, "loss"], rtol=1e-3)
    assert np.isfinite(r_gpu["loss"]).all() and abs(s_gpu["final_test_acc"] - s_cpu["final_test_acc"]) <= 0.1


def test_nccl_on_the_cpu_is_refused_before_any_process_group():
    with pytest.raises(ConfigError, match=r"engine\.backend = 'nccl' needs CUDA tensors, but train\.device resolves to 'cpu'"):
        init_process_group("nccl", "cpu")


# ------------------------------------------------------------------------------------------------
def two_workers():
    torch.manual_seed(0)
    x, y = torch.randn(48, 3, 32, 32), torch.randint(0, 10, (48,))
    return [(x[:16], y[:16]), (x[16:], y[16:])]


def test_loss_scaling_keeps_per_worker_gradients_weighted():
    """fp16's loss scale multiplies every gradient by a power of two and divides it back: the
    aggregate sum_i (b_i/B) g_i and each worker's g_i come out as without scaling, bit for bit."""
    results = []
    for scaler in (None, LossScaler(scale=2.0**12)):
        torch.manual_seed(0)
        trainer = Trainer(build_model(**MODEL), OptimConfig(), 1)
        trainer.scaler = scaler
        stats, grads = trainer.weighted_gradient(two_workers())
        results.append((flat_grad(trainer.model).clone(), grads, [s.grad_sqnorm for s in stats]))
    (agg0, g0, sq0), (agg1, g1, sq1) = results
    assert torch.equal(agg0, agg1) and all(torch.equal(a, b) for a, b in zip(g0, g1)) and sq0 == sq1


def test_an_overflowing_step_is_skipped_and_the_scale_backs_off():
    torch.manual_seed(0)
    trainer = Trainer(build_model(**MODEL), OptimConfig(), 10)
    trainer.scaler = LossScaler(scale=2.0**140)  # beyond float32: the gradient overflows
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.weighted_gradient(two_workers(), track_local=False)
    trainer.apply(48)
    assert trainer.skipped_steps == 1 and trainer.scaler.scale == 2.0**139 and trainer.iteration == 1
    assert all(torch.equal(a, p) for a, p in zip(before, trainer.model.parameters()))
    trainer.scaler.scale = 2.0**8
    trainer.weighted_gradient(two_workers(), track_local=False)
    trainer.apply(48)
    assert trainer.skipped_steps == 1 and trainer.scaler.good_steps == 1
    assert not all(torch.equal(a, p) for a, p in zip(before, trainer.model.parameters()))


# ------------------------------------------------------------------------------------------------
@cuda
def test_sim_on_cuda_is_close_to_cpu(data):
    on_cpu, on_gpu = sim(data, device="cpu"), sim(data, device="cuda")
    assert np.isfinite(on_gpu[["train_loss", "test_loss", "grad_norm"]].to_numpy()).all()
    first = on_cpu["window"] == 0  # before rounding differences compound
    assert np.allclose(on_gpu.loc[first, "train_loss"], on_cpu.loc[first, "train_loss"], rtol=1e-3)
    assert np.allclose(on_gpu.loc[first, "grad_norm"], on_cpu.loc[first, "grad_norm"], rtol=1e-2)
    assert (on_gpu["elapsed_s"] == on_cpu["elapsed_s"]).all()  # virtual time is the cost model's


@cuda
@pytest.mark.parametrize("amp", ["none", "bf16", "fp16"])
def test_train_on_cuda_is_close_to_cpu(tmp_path, amp):
    if amp == "bf16" and not torch.cuda.is_bf16_supported():
        pytest.skip("no bf16 on this GPU")
    a = train(tmp_path, "cpu", device="cpu")
    b = train(tmp_path, "gpu", device="cuda", amp=amp)
    assert b["device"].startswith("cuda") and math.isfinite(b["final_test_loss"])
    la = pd.read_csv(tmp_path / "cpu" / "iterations.csv")["loss"]
    lb = pd.read_csv(tmp_path / "gpu" / "iterations.csv")["loss"]
    tol = 1e-3 if amp == "none" else 5e-2
    assert lb.iloc[0] == pytest.approx(la.iloc[0], rel=tol) and np.isfinite(lb).all()
    assert abs(a["final_test_acc"] - b["final_test_acc"]) <= 0.1


@cuda
def test_calibration_on_cuda(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "CALIBRATION", tmp_path / "calibration")
    cal = cal_mod.calibrate("tiny-cnn", 0.25, batch_sizes=(16, 64, 128), repeats=3, device="cuda",
                            out_dir=tmp_path / "calibration")
    assert cal.device.startswith("cuda") and cal.a_ms >= 0 and cal.c_ms_per_sample >= 0
    assert all(math.isfinite(t) and t > 0 for t in cal.median_ms)
    stored = json.loads((tmp_path / "calibration" / "tiny-cnn-w0.25.json").read_text())
    assert stored["device"] == cal.device and stored["machine"] == torch.cuda.get_device_name(0)
    assert cal_mod.load_calibration("tiny-cnn", 0.25) == cal
