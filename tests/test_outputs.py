"""A run's output folder holds one run and nothing is written outside it.

Each data class a user can lose: a run spliced onto another's checkpoint, a run labelled with a
policy that did not decide its batch sizes, a run overwritten by another, and writes outside
``--out`` (into the repository's tracked files or ``results/``)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from dynamix import cli, config, paths
from dynamix.engine.launch import run_local
from dynamix.policies import make_policy
from dynamix.rpc.arbitrator import RunSettings
from dynamix.rpc.local import local_server

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SETS = ["model.name=mlp", "model.width=0.25", "train.max_iters=4", "batch.window=2", "train.threads=1",
        "train.eval_samples=100"]
"""Seconds-long runs: the quarter-width MLP (a committed reference calibration), 4 iterations."""
TINY = ["--profile", "smoke", *[a for s in SETS for a in ("--set", s)], "--no-progress"]

SIM = ["simulate", "--cluster", "clusters/slow-worker-4.yaml", *TINY]


def run_cli(capsys, argv: list[str]) -> tuple[int, list[str]]:
    """``dynamix ARGV`` in-process: exit status and the lines it wrote to stderr."""
    capsys.readouterr()
    rc = cli.main(argv)
    return rc, capsys.readouterr().err.strip().splitlines()


def run_status(out: Path) -> str:
    """``running`` (interrupted) or ``complete``: what ``OUT/run.json`` records."""
    return json.loads((out / "run.json").read_text())["status"]


def one_error(rc: int, err: list[str], *fragments: str) -> None:
    assert rc == 2 and len(err) == 1 and "error:" in err[0], err
    assert all(f in err[0] for f in fragments), err


# ------------------------------------------------------------------------------------------------
# Overwritten runs


def test_a_different_simulation_into_a_folder_holding_one_is_refused(tmp_path, capsys):
    out = tmp_path / "sim"
    assert run_cli(capsys, [*SIM, "--policy", "static:32", "--out", str(out)])[0] == 0
    first = (out / "runs.csv").read_bytes()
    rc, err = run_cli(capsys, [*SIM, "--policy", "static:64", "--out", str(out)])
    one_error(rc, err, "holds another run", "policy: static:32 there, static:64 here", "--force")
    assert (out / "runs.csv").read_bytes() == first
    rc, err = run_cli(capsys, [*SIM, "--policy", "static:32", "--set", "optim.lr=0.1", "--out", str(out)])
    one_error(rc, err, "optim.lr: 0.05 there, 0.1 here")
    assert run_cli(capsys, [*SIM, "--policy", "static:32", "--out", str(out)])[0] == 0  # the same run: again
    assert (out / "runs.csv").read_bytes() == first
    assert run_cli(capsys, [*SIM, "--policy", "static:64", "--out", str(out), "--force"])[0] == 0
    assert set(pd.read_csv(out / "runs.csv")["batch_size"]) == {64}
    assert run_status(out) == "complete"


def test_a_run_recorded_before_its_settings_moved_resumes(tmp_path, capsys):
    """A run.json written when rl held the simulator's and the evaluation's settings (rl.backend,
    rl.target_fraction, ...; config.HASH_MOVED) records the same run as the new layout: it resumes, while
    a recorded value that differs is still another run."""
    out = tmp_path / "sim"
    assert run_cli(capsys, [*SIM, "--policy", "static:32", "--out", str(out)])[0] == 0
    first = (out / "runs.csv").read_bytes()
    record = json.loads((out / "run.json").read_text())
    flat = record["identity"]["config"]
    for new, old in (("sim.surrogate", "rl.surrogate"), ("sim.learning", "rl.learning"),
                     ("evaluation.target_accuracy", "rl.target_accuracy"),
                     ("evaluation.target_fraction", "rl.target_fraction"), ("evaluation.budget", "rl.eval_budget")):
        flat[old] = flat.pop(new)
    assert flat.pop("sim.backend") == "math"
    flat["rl.backend"] = "sim"
    (out / "run.json").write_text(json.dumps(record))
    assert run_cli(capsys, [*SIM, "--policy", "static:32", "--out", str(out)])[0] == 0
    assert (out / "runs.csv").read_bytes() == first
    assert "sim.backend" in json.loads((out / "run.json").read_text())["identity"]["config"]
    flat["rl.target_fraction"] = 0.5
    (out / "run.json").write_text(json.dumps(record))
    rc, err = run_cli(capsys, [*SIM, "--policy", "static:32", "--out", str(out)])
    one_error(rc, err, "evaluation.target_fraction: 0.5 there, 0.9 here")


def test_launch_and_evaluate_refuse_a_folder_holding_a_simulation(tmp_path, capsys):
    out = tmp_path / "sim"
    assert run_cli(capsys, [*SIM, "--policy", "static:32", "--out", str(out)])[0] == 0
    first = (out / "runs.csv").read_bytes()
    rc, err = run_cli(capsys, ["launch", "--policy", "static:32", "--nproc", "2", *TINY[:-1], "--out", str(out)])
    one_error(rc, err, "command: simulate there, launch here")
    rc, err = run_cli(capsys, ["evaluate", "--cluster", "clusters/slow-worker-4.yaml", "--policy", "static:32",
                               "--seeds", "1", *TINY, "--out", str(out)])
    one_error(rc, err, "command: simulate there, evaluate here")
    assert (out / "runs.csv").read_bytes() == first and not (out / "summary.csv").exists()


def test_outputs_without_a_run_record_are_not_overwritten(tmp_path, capsys):
    (tmp_path / "runs.csv").write_text("someone's results\n")
    rc, err = run_cli(capsys, [*SIM, "--policy", "static:32", "--out", str(tmp_path)])
    one_error(rc, err, "runs.csv", "no run record")
    assert (tmp_path / "runs.csv").read_text() == "someone's results\n"


@pytest.mark.parametrize("argv", [
    SIM, ["evaluate", "--cluster", "clusters/slow-worker-4.yaml", "--policy", "static:64"], ["train"], ["launch"],
    ["calibrate", "--model", "mlp"], ["run", "baselines"], ["sim2real"], ["train-policy"], ["validate-sim"],
    ["sample-clusters"]], ids=lambda argv: argv[0])
@pytest.mark.parametrize("out", ["", "  "])
def test_an_empty_out_is_refused(capsys, argv, out):
    """``--out ""`` would write into the working directory or the repository root."""
    one_error(*run_cli(capsys, [*argv, "--out", out]), "--out is empty")


# ------------------------------------------------------------------------------------------------
# Spliced runs


@pytest.mark.slow  # two torchrun launches' worth of start-up: ~25 s on 2 shared cores
def test_launch_refuses_to_resume_a_run_under_another_policy(tmp_path, capsys):
    """A launch started again with another policy would resume the first run's checkpoint and relabel
    it: refused before torchrun starts, naming the policy, and the first run's files are untouched."""
    out = tmp_path / "run"
    launch = ["launch", "--cluster", "none", "--nproc", "2", *TINY[:-1], "--out", str(out)]
    assert run_cli(capsys, [*launch, "--policy", "static:64"])[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    rc, err = run_cli(capsys, [*launch, "--policy", "static:128"])
    one_error(rc, err, "policy: static:64 there, static:128 here")
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert json.loads((out / "summary.json").read_text())["policy"] == "static:64"


def test_launch_refuses_a_recorded_run_of_another_policy_before_torchrun(tmp_path, capsys):
    """The same refusal in the default tier: the folder as an interrupted ``launch --policy static:64``
    leaves it (its record and a checkpoint); nothing there is touched."""
    from dynamix import rundir

    out = tmp_path / "run"
    cfg = config.load(profile="smoke", overrides=SETS)
    rundir.claim(out, rundir.identity("launch", policy="static:64", cluster="none", seed=0, config=cfg.to_dict(),
                                      nproc=2, nnodes=1, initial=None))
    (out / "checkpoint.pt").write_bytes(b"the first run's checkpoint")
    rc, err = run_cli(capsys, ["launch", "--policy", "static:128", "--cluster", "none", "--nproc", "2", *TINY[:-1],
                               "--out", str(out)])
    one_error(rc, err, "policy: static:64 there, static:128 here")
    assert (out / "checkpoint.pt").read_bytes() == b"the first run's checkpoint"


# ------------------------------------------------------------------------------------------------
# Mislabelled runs


def test_an_arbitrator_run_records_the_arbitrators_policy(tmp_path):
    """With an arbitrator the batch sizes are its policy's, whatever the local policy.spec says."""
    cfg = config.load(profile="smoke", overrides=[*SETS, "policy.spec=static:64"])
    with local_server(make_policy("static:128"), RunSettings.from_config(cfg)) as server:
        summary = run_local(cfg, None, None, tmp_path, 2, method="spawn", arbitrator=server.target, timeout_s=300)
    assert summary["final_batch_sizes"] == [128, 128]
    assert summary["policy"] == "static:128" and summary["policies"] == ["static:128"]
    assert summary["arbitrator"] == server.target
    runs = pd.read_csv(tmp_path / "runs.csv")
    assert set(runs["policy"]) == {"static:128"} and set(runs["batch_size"]) == {128}


# ------------------------------------------------------------------------------------------------
# Writes outside the output


def repository_state() -> tuple[str, dict[str, tuple[int, int]]]:
    """``git status`` of the tracked files and ``results/``, and every file's size and mtime under
    ``results/`` and ``calibrations/`` (an ignored file rewritten in place shows only there)."""
    status = subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all", "--", ".",
                             ":(exclude)data/cache", ":(exclude)**/__pycache__", ":(exclude).hypothesis",
                             ":(exclude).pytest_cache", ":(exclude).import_linter_cache"],
                            cwd=paths.ROOT, capture_output=True, text=True, check=True).stdout
    files = {str(p.relative_to(paths.ROOT)): (p.stat().st_size, p.stat().st_mtime_ns)
             for folder in (paths.ROOT / "results", paths.CALIBRATION) for p in folder.rglob("*") if p.is_file()}
    return status, files


def changed(before, after) -> list[str]:
    status = sorted(set(after[0].splitlines()) ^ set(before[0].splitlines()))
    return status + sorted(k for k in set(before[1]) | set(after[1]) if before[1].get(k) != after[1].get(k))


def writing_commands(out: Path) -> dict[str, list[str]]:
    return {
        "simulate": [*SIM, "--policy", "lbbsp", "--out", str(out / "sim")],
        "evaluate": ["evaluate", "--cluster", "clusters/slow-worker-4.yaml", "--policy", "static:32", "--seeds", "1",
                     "--budget", "epochs", *TINY, "--out", str(out / "eval")],
        "train": ["train", *TINY, "--dataset", "cifar10-mini", "--out", str(out / "train")],
        "calibrate": ["calibrate", "--model", "mlp", "--width", "0.25", "--batch-sizes", "8", "16", "--repeats", "1",
                      "--out", str(out / "cal")],
        "train-policy": ["train-policy", "--name", "p", "--profile", "smoke", "--set", "rl.timesteps=16",
                         "--set", "rl.n_steps=8", "--set", "rl.warm_start_timesteps=8", "--set", "rl.warm_start_epochs=1",
                         "--out", str(out / "policies")],
    }


def test_writing_commands_write_only_under_their_out(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing may land in the working directory either
    before = repository_state()
    for name, argv in writing_commands(tmp_path).items():
        assert run_cli(capsys, argv)[0] == 0, name
        assert changed(before, repository_state()) == [], f"dynamix {name} wrote outside --out"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cal", "eval", "policies", "sim", "train"]


def test_the_repository_check_sees_a_write_into_results():
    """The check above can fail: a file written into results/ (ignored by git) is seen."""
    before = repository_state()
    probe = paths.ROOT / "results" / "policies" / f"probe-{os.getpid()}.json"  # an ignored path
    made = not probe.parent.exists()
    probe.parent.mkdir(parents=True, exist_ok=True)
    try:
        probe.write_text(json.dumps({"a_ms": 1.0}))
        assert str(probe.relative_to(paths.ROOT)) in " ".join(changed(before, repository_state()))
    finally:
        probe.unlink()
        if made:
            probe.parent.rmdir()


# ------------------------------------------------------------------------------------------------
# Interrupts


def test_ctrl_c_stops_a_simulation_with_one_line_and_leaves_its_folder_consistent(tmp_path):
    """SIGINT: exit 130 and one line, no traceback; the folder records an interrupted run (no partial
    runs.csv), and a simulation started there again says the interrupted one restarts from iteration 0."""
    import signal
    import sys
    import time

    out = tmp_path / "sim"
    argv = [sys.executable, "-m", "dynamix.cli", *SIM, "--policy", "static:32", "--set", "train.max_iters=100000",
            "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(paths.ROOT)}
    # the child starts with Ctrl-C's default disposition, as from a terminal, whatever an earlier test left
    # in this process (an ignored SIGINT is inherited across exec, and Python then keeps ignoring it)
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not (out / "run.json").exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    time.sleep(2.0)  # inside the training loop
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == "dynamix simulate: interrupted"
    assert run_status(out) == "running" and not (out / "runs.csv").exists()
    again = subprocess.run([*argv[:-4], "--set", "train.max_iters=2", "--out", str(out)], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "held an interrupted run" in again.stderr, again.stderr
    assert run_status(out) == "complete" and (out / "runs.csv").exists()
