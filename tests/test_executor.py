"""Sweeps on Ray (``executor.kind: ray``): the local pool's bytes, no run lost or doubled when a node
dies, resumption from the run cache, one line for a cluster that is not there.

Every cluster here is real and local: a head and worker nodes started as separate ``ray start``
processes on loopback (``tests/helpers/raycluster.py``), stopped by the test.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import pandas as pd
import pytest
import yaml

from dynamix import cli, config, rundir
from dynamix.cluster import ClusterSpec, DeviceProfile, WorkerSpec, to_yaml_dict
from dynamix.evaluation import executor
from dynamix.evaluation.runner import evaluate
from dynamix.rl.learn import train_policy
from helpers.raycluster import LocalRayCluster, free_port
from helpers.rl import rl_cfg, tiny_cost

SPEC = ClusterSpec(name="two-speed", workers=(WorkerSpec(DeviceProfile("a", 1.0)), WorkerSpec(DeviceProfile("b", 0.25))))


def on_ray(cfg: config.Config, address: str) -> config.Config:
    return config.with_overrides(cfg, {"executor": {"kind": "ray", "address": address}})


def outputs(folder) -> dict[str, bytes]:
    return {name: (folder / name).read_bytes() for name in ("runs.csv", "summary.csv")}


def test_executor_settings_change_no_config_hash_and_no_run_identity():
    cfg = config.load(profile="base")
    ray_cfg = on_ray(cfg, "10.0.0.1:6379")
    assert ray_cfg.hash() == cfg.hash()  # stage records, checkpoints and policies carry over
    assert cfg.hash() != config.load(profile="base", overrides=["experiments.jobs=3"]).hash()  # control: a hashed setting

    def ident(c):
        return rundir.identity("evaluate", policy="lbbsp", cluster="c", seed=1, config=c.to_dict())

    assert ident(ray_cfg) == ident(cfg)  # a local evaluation resumes on Ray, and back


@pytest.mark.parametrize("via", ["setting", "env"])
def test_an_unreachable_ray_address_is_one_line_and_exit_2(via, tmp_path, capsys, monkeypatch):
    address = f"{executor.LOOPBACK}:{free_port()}"  # nothing listens there
    sets = ["--set", "executor.kind=ray"]
    if via == "setting":
        sets += ["--set", f"executor.address={address}"]
    else:
        monkeypatch.setenv("RAY_ADDRESS", address)
    status = cli.main(["evaluate", "--profile", "smoke", "--cluster", "clusters/homogeneous-4.yaml", "--policy",
                       "static:64", "--seeds", "1", "--budget", "epochs", "--out", str(tmp_path), "--no-progress", *sets])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1, err
    source = "executor.address" if via == "setting" else "$RAY_ADDRESS"
    assert err[0].startswith(f"dynamix evaluate: error: {source} = '{address}': no Ray cluster answers there")


@pytest.mark.slow  # starts a two-node Ray cluster and trains a policy: ~35 s, in make test-all
def test_a_sweep_on_ray_writes_the_bytes_the_local_pool_writes(tmp_path):
    """Same seeds, same numbers: a trained policy (its files shipped to the node), a rule and a static
    size, with their time budget's reference run, on a head and a worker node of 2 CPUs, against the
    local pool of 2 processes."""
    cfg, cost = rl_cfg(), tiny_cost()
    policy = train_policy(cfg, "tiny", out_dir=tmp_path / "policies", cost=cost, progress=False)
    policies = ["static:8", "lbbsp", f"dynamix:{policy}"]
    evaluate([SPEC], policies, cfg, 2, tmp_path / "local", progress=False, cost=cost, budget="time", jobs=2)
    with LocalRayCluster((2,)) as cluster:
        ray_cfg = on_ray(cfg, cluster.address)
        evaluate([SPEC], policies, ray_cfg, 2, tmp_path / "ray", progress=False, cost=cost, budget="time", jobs=2)
    assert outputs(tmp_path / "ray") == outputs(tmp_path / "local")
    # the driver cached every run it got back from the cluster: 3 policies x 2 seeds + the reference run
    assert len(list((tmp_path / "ray" / "cache").rglob("*.csv.gz"))) == 7


def long_runs() -> config.Config:
    return config.with_overrides(rl_cfg(), {"train": {"epochs": 1.0}})  # ~2 s a run on one core here


def counts(runs: pd.DataFrame, expected: int) -> dict[str, int]:
    """What the fault tests report: runs expected, completed, and duplicated (rows of a run's window
    and rank more than once)."""
    return {"expected": expected, "completed": runs["run_id"].nunique(),
            "duplicated": int(runs.duplicated(["run_id", "window", "rank"]).sum())}


def wait_for_cached(cache, n: int, driver: subprocess.Popen | None = None, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while len(list(cache.rglob("*.csv.gz"))) < n:
        assert time.monotonic() < deadline, "no run finished"
        assert driver is None or driver.poll() is None, f"the driver exited with {driver.returncode}"
        time.sleep(0.1)


@pytest.mark.slow
def test_a_worker_node_killed_mid_sweep_loses_no_run_and_duplicates_none(tmp_path):
    cfg, cost = long_runs(), tiny_cost()
    policies, seeds = ["static:8", "static:16", "lbbsp", "gns"], 2
    evaluate([SPEC], policies, cfg, seeds, tmp_path / "local", progress=False, cost=cost, budget="epochs", jobs=2)
    with LocalRayCluster((1, 1)) as cluster:
        ray_cfg = on_ray(cfg, cluster.address)
        executor.connect(ray_cfg.executor, 1)
        cluster.wait_for_cpus(2)
        result: dict = {}
        sweep = threading.Thread(target=lambda: result.setdefault("runs", evaluate(
            [SPEC], policies, ray_cfg, seeds, tmp_path / "ray", progress=False, cost=cost, budget="epochs")[0]))
        sweep.start()
        wait_for_cached(tmp_path / "ray" / "cache", 1)  # mid-sweep: one run back, one in flight on each node
        cluster.kill_node(1)
        sweep.join(timeout=300)
        assert not sweep.is_alive()
    reported = counts(result["runs"], len(policies) * seeds)
    print("fault test:", reported)
    assert reported == {"expected": 8, "completed": 8, "duplicated": 0}
    assert outputs(tmp_path / "ray") == outputs(tmp_path / "local")  # the retried runs gave the same rows


@pytest.mark.slow
def test_an_interrupted_driver_resumes_from_the_cache(tmp_path):
    """Ctrl-C stops ``dynamix evaluate`` on Ray (exit 130); the same command again simulates only what
    the first did not finish and writes the bytes of an uninterrupted sweep."""
    policies = ["static:8", "static:16", "lbbsp", "gns"]
    sets = ["model.width=0.25", "train.epochs=0.5", "train.eval_every=4", "train.eval_samples=200", "batch.min=8",
            "batch.max=64", "batch.initial=16", "batch.window=2"]
    cfg = config.load(profile="smoke", overrides=sets)
    evaluate([SPEC], policies, cfg, 2, tmp_path / "local", progress=False, budget="epochs", jobs=2)
    spec_file = tmp_path / "two-speed.yaml"
    spec_file.write_text(yaml.safe_dump(to_yaml_dict(SPEC)))
    with LocalRayCluster((2,)) as cluster:
        sets += ["executor.kind=ray", f"executor.address={cluster.address}"]
        command = [sys.executable, "-m", "dynamix.cli", "evaluate", "--profile", "smoke", "--cluster", str(spec_file),
                   *[a for p in policies for a in ("--policy", p)], "--seeds", "2", "--budget", "epochs", "--no-progress",
                   "--out", str(tmp_path / "ray"), *[a for s in sets for a in ("--set", s)]]
        first = subprocess.Popen(command)
        wait_for_cached(tmp_path / "ray" / "cache", 1, first)
        first.send_signal(signal.SIGINT)
        assert first.wait(60) == 130
        done = {p: p.stat().st_mtime_ns for p in (tmp_path / "ray" / "cache").rglob("*.csv.gz")}
        assert 0 < len(done) < 8
        assert subprocess.run(command).returncode == 0
    assert {p: p.stat().st_mtime_ns for p in done} == done  # read back, never simulated again
    assert outputs(tmp_path / "ray") == outputs(tmp_path / "local")
