"""Real bandwidth shaping (``engine.net_mode: netns``): each rank in its own network namespace behind
a ``tc tbf`` veth. The measured synchronisation time matches the ring all-reduce model at the
shaped bandwidth, and no namespace is left behind. Root only; slow (real processes)."""

from __future__ import annotations

import os
import subprocess

import pandas as pd
import pytest

from dynamix import cluster as cluster_mod
from dynamix import config as config_mod
from dynamix.engine import run_local
from dynamix.engine.netns import tbf_args
from dynamix.models import build_model, gradient_bytes


def test_tbf_burst_covers_one_kernel_tick():
    args = tbf_args(10.0)
    assert args[:3] == ["tbf", "rate", "10000.000mbit"]
    assert int(args[args.index("burst") + 1]) >= 10e9 / 8 / 250
    assert int(tbf_args(0.001)[4]) == 32 * 1024


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces and tc need root")
def test_shaped_links_set_the_communication_time(tmp_path):
    bw_gbps = 0.05
    spec = cluster_mod.from_dict({"name": "shaped", "workers": [{"count": 2, "bandwidth_gbps": bw_gbps,
                                                                 "latency_ms": 0.0}]})
    cfg = config_mod.load(profile="smoke", overrides=[
        "model.name=tiny-cnn", "train.max_iters=15", "batch.window=5", "train.eval_every=100",
        "train.eval_samples=200", "engine.net_mode=netns", "train.threads=1"])
    run_local(cfg, spec, "static:32", tmp_path, 2, method="torchrun", timeout_s=600)
    runs = pd.read_csv(tmp_path / "runs.csv")
    steady = runs[runs["window"] >= 1]
    # Ring all-reduce over 2 ranks moves S bytes each way per rank: T = S / bandwidth.
    model_ms = gradient_bytes(build_model("tiny-cnn", 1.0)) / (bw_gbps * 1e9 / 8) * 1e3
    assert 0.8 * model_ms <= steady["comm_ms"].mean() <= 1.6 * model_ms
    assert "dmx" not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
