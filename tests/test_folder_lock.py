"""One command at a time writes an output folder (:func:`dynamix.rundir.lock`).

A second command into a held folder is refused with one line naming the folder and the holder's pid;
pairs of commands started together into one folder never leave a mixed or mislabelled run; a killed
``launch`` leaves no rank behind, and a folder its ranks still write is refused."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from dynamix import cli, paths, rundir

TINY = ["--profile", "smoke", "--set", "model.name=mlp", "--set", "model.width=0.25", "--set", "train.max_iters=4",
        "--set", "batch.window=2", "--set", "train.threads=1", "--set", "train.eval_samples=100", "--no-progress"]
SIM = ["simulate", "--cluster", "clusters/slow-worker-4.yaml", *TINY]
HOLD = ("from dynamix import rundir; import sys, time; rundir.lock(sys.argv[1]); print('held', flush=True); "
        "time.sleep(120)")


def start(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *args], cwd=paths.ROOT, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, **kw)


def one_error(rc: int, err: list[str], *fragments: str) -> None:
    assert rc == 2 and len(err) == 1 and "error:" in err[0], err
    assert all(f in err[0] for f in fragments), err


def test_a_second_command_into_a_held_folder_is_refused_naming_the_holder(tmp_path, capsys):
    out = tmp_path / "sim"
    holder = start("-c", HOLD, str(out))
    try:
        assert holder.stdout.readline().strip() == "held"
        for argv in ([*SIM, "--policy", "static:32", "--out", str(out)],
                     ["sample-clusters", "--profile", "smoke", "--n", "1", "--out", str(out)]):
            capsys.readouterr()
            rc = cli.main(argv)
            one_error(rc, capsys.readouterr().err.strip().splitlines(), str(out), f"pid {holder.pid}", "in use")
        assert sorted(p.name for p in out.iterdir()) == [rundir.LOCK_FILE]  # nothing written
    finally:
        holder.kill()
        holder.wait()
    capsys.readouterr()
    assert cli.main([*SIM, "--policy", "static:32", "--out", str(out)]) == 0  # free again: runs
    assert not (out / rundir.LOCK_FILE).exists()  # and gives the folder back


def test_a_folder_a_killed_launchs_ranks_still_write_is_refused(tmp_path, capsys):
    """The lock file names the ranks' process group; while any of it lives, the folder is refused."""
    ranks = subprocess.Popen(["sleep", "60"], start_new_session=True)
    out = tmp_path / "run"
    out.mkdir()
    (out / rundir.LOCK_FILE).write_text(json.dumps({"pid": 1, "group": ranks.pid}))
    try:
        capsys.readouterr()
        rc = cli.main([*SIM, "--policy", "static:32", "--out", str(out)])
        one_error(rc, capsys.readouterr().err.strip().splitlines(), str(out), f"process group {ranks.pid}")
    finally:
        ranks.kill()
        ranks.wait()
    capsys.readouterr()
    assert cli.main([*SIM, "--policy", "static:32", "--out", str(out)]) == 0


def check_one_run(out: Path) -> None:
    """The folder holds exactly the run its record names: every row that run's policy, complete."""
    record = json.loads((out / "run.json").read_text())
    policy = record["identity"]["policy"]
    runs = pd.read_csv(out / "runs.csv")
    assert record["status"] == "complete", record
    assert set(runs["policy"]) == {policy} and set(runs["batch_size"]) == {int(policy.split(":")[1])}, (policy, runs)
    assert runs.groupby(["window", "rank"]).size().max() == 1  # no row twice: one lineage


@pytest.mark.slow
def test_pairs_of_commands_into_one_folder_never_mix(tmp_path):
    """20 pairs of simulations started together into one fresh folder each: one runs, the other is
    refused with one line; the folder always holds one whole, correctly labelled run."""
    refused = 0
    for i in range(20):
        out = tmp_path / f"pair{i}"
        procs = [start("-m", "dynamix.cli", *SIM, "--policy", p, "--out", str(out)) for p in ("static:32", "static:128")]
        results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
        codes = sorted(rc for rc, _ in results)
        assert codes == [0, 2], results
        err = next(e for rc, e in results if rc == 2).strip().splitlines()
        assert len(err) == 1 and ("in use" in err[0] or "holds another run" in err[0]), err
        refused += "in use" in err[0]
        check_one_run(out)
    print(f"20 pairs: 20 whole runs, {refused} refused as in use, {20 - refused} as holding another run")


@pytest.mark.slow
def test_a_killed_launch_leaves_no_rank_behind(tmp_path):
    out = tmp_path / "launch"
    launch = start("-m", "dynamix.cli", "launch", "--nproc", "2", "--policy", "static:32", *TINY[:-1],
                   "--set", "train.max_iters=100000", "--out", str(out))
    deadline = time.monotonic() + 120
    while not (out / "progress.json").exists():  # the ranks are training
        assert launch.poll() is None and time.monotonic() < deadline, launch.communicate()
        time.sleep(0.5)
    group = json.loads((out / rundir.LOCK_FILE).read_text())["group"]
    launch.send_signal(signal.SIGKILL)
    launch.wait()
    deadline = time.monotonic() + 60
    while rundir.group_alive(group):
        assert time.monotonic() < deadline, subprocess.run(["ps", "-o", "pid,pgid,cmd", "-g", str(group)],
                                                           capture_output=True, text=True).stdout
        time.sleep(0.5)
    iteration = json.loads((out / "progress.json").read_text())["iteration"]
    time.sleep(2)
    assert json.loads((out / "progress.json").read_text())["iteration"] == iteration  # nobody writes on
