"""Inputs that would cost the machine, and nonsense that used to be accepted, are one line and exit 2.

YAML aliases that expand to gigabytes, nesting deeper than Python's recursion, huge values repeated
in a message, counts no command could use, files that are not files (a FIFO blocks its reader
forever), device caps below the batch bounds, a cluster given twice, names that point outside the
output folder, a params file the pipeline would not read, a profile chosen by ``--set``, and launch
inputs only its ranks would otherwise find (more workers than the cluster spec, an unknown model, a
policy artifact trained for other batch bounds). Each is refused before any work."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from dynamix import cli

SMOKE = ["--profile", "smoke", "--set", "model.name=mlp", "--set", "model.width=0.25"]
SIM = ["simulate", "--cluster", "clusters/slow-worker-4.yaml", *SMOKE, "--no-progress"]
ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi"))
"""318 bytes of YAML that expand to 9^9 (387 million) values."""
LAUNCH = ["launch", *SMOKE, "--set", "train.max_iters=2", "--nproc", "2", "--policy", "static:32"]
CPU_POLICY = Path(__file__).resolve().parents[1] / "results/profiles/cpu/policies/dynamix.zip"
"""The cpu pipeline's committed policy, trained for batch bounds [32, 1024]."""


def run_cli(capsys, argv: list[str]) -> tuple[int, list[str]]:
    capsys.readouterr()
    rc = cli.main(argv)
    lines = capsys.readouterr().err.strip().splitlines()
    return rc, [line for line in lines if not re.match(r"decoding \S+: ", line)]


def one_line(rc: int, err: list[str], *fragments: str) -> None:
    assert rc == 2 and len(err) == 1 and ": error: " in err[0] and len(err[0]) <= cli.MAX_ERROR, err
    assert all(f in err[0] for f in fragments), err[0][:500]


def spec(tmp_path, text: str, name: str = "c.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("text,fragment", [
    (ALIAS_BOMB, "aliases are expanded"),
    ("name: x\nworkers: " + "[" * 20000 + "]" * 20000 + "\n", "nesting deeper than 64"),
    ("name: &n [*n]\n", "aliases are expanded"),  # a value inside itself
])
def test_yaml_that_expands_or_nests_without_end_is_refused(tmp_path, capsys, text, fragment):
    one_line(*run_cli(capsys, [*SIM, "--cluster", spec(tmp_path, text), "--out", str(tmp_path / "o")]), fragment)
    params = spec(tmp_path, text, "params.yaml")
    one_line(*run_cli(capsys, [*SIM, "--params", params, "--out", str(tmp_path / "o")]), fragment)


@pytest.mark.parametrize("override,fragment", [
    ("train.seed=" + "[" * 20000, "nesting deeper than 64"),
    ("a" + ".a" * 20000 + "=1", "nested deeper than 64"),
    ("train.seed=" + "x" * 100_000, "train.seed must be an integer"),
    ("batch.max=" + "9" * 100_000, "refused: Exceeds the limit"),
])
def test_overrides_are_bounded_and_their_values_cut_in_messages(tmp_path, capsys, override, fragment):
    one_line(*run_cli(capsys, [*SIM, "--set", override, "--out", str(tmp_path / "o")]), fragment)


def test_a_fifo_is_refused_as_a_cluster_or_params_file(tmp_path, capsys):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    one_line(*run_cli(capsys, [*SIM[:1], "--cluster", str(fifo), *SIM[3:], "--out", str(tmp_path / "o")]),
             str(fifo), "not a regular file")
    one_line(*run_cli(capsys, [*SIM, "--params", str(fifo), "--out", str(tmp_path / "o")]), "not a regular file")


@pytest.mark.parametrize("argv,fragments", [
    (["calibrate", "--model", "mlp", "--threads", "100000"], ["--threads = 100000", "[1, 256]"]),
    (["sample-clusters", "--profile", "smoke", "--n", "100000000"], ["--n = 100000000", "[1, 1000]"]),
    (["sample-clusters", "--profile", "smoke", "--workers", "100000"], ["--workers", "[1, 4096]"]),
    (["sample-clusters", "--profile", "smoke", "--prefix", "../x"], ["--prefix = '../x'"]),
    (["train-policy", "--profile", "smoke", "--name", "../x"], ["--name = '../x'"]),
    (["pipeline", "--profile", "smoke", "--params", "clusters/slow-worker-4.yaml"], ["--params", "no other file"]),
    ([*SIM, "--profile", ""], ["--profile is empty"]),
    ([*SIM, "--set", "profile=default"], ["profile = 'default'", "--profile", "one of ablation"]),
])
def test_counts_names_and_options_no_command_could_use_are_refused(tmp_path, capsys, argv, fragments):
    out = [] if argv[0] in ("calibrate", "pipeline", "train-policy") else ["--out", str(tmp_path / "o")]
    one_line(*run_cli(capsys, [*argv, *out]), *fragments)
    assert not list(tmp_path.glob("x-*.yaml"))  # --prefix ../x wrote nothing beside the folder


def test_a_device_cap_below_batch_min_is_refused_naming_both(tmp_path, capsys):
    text = "name: capped\nworkers:\n  - {count: 2, device: {name: tiny, speed: 1.0, max_batch: 1}}\n"
    one_line(*run_cli(capsys, [*SIM, "--cluster", spec(tmp_path, text), "--out", str(tmp_path / "o")]),
             "max_batch = 1", "batch.min = 32")


def test_a_cluster_or_policy_given_twice_is_refused(tmp_path, capsys):
    base = ["evaluate", *SMOKE, "--seeds", "1", "--no-progress", "--out", str(tmp_path / "o")]
    one_line(*run_cli(capsys, [*base, "--cluster", "clusters/slow-worker-4.yaml", "--cluster",
                               "clusters/slow-worker-4.yaml", "--policy", "static:32"]),
             "--cluster names slow-worker-4 more than once")
    one_line(*run_cli(capsys, [*base, "--cluster", "clusters/slow-worker-4.yaml", "--policy", "static:32",
                               "--policy", "static:32"]), "--policy names static:32 more than once")


def test_sample_clusters_refuses_a_folder_of_specs_it_did_not_write(tmp_path, capsys):
    out = tmp_path / "specs"
    out.mkdir()
    (out / "mine.yaml").write_text("name: mine\nworkers: [{count: 2}]\n")
    one_line(*run_cli(capsys, ["sample-clusters", "--profile", "smoke", "--n", "1", "--out", str(out)]),
             "mine.yaml", "no run record", "--force")
    assert (out / "mine.yaml").read_text().startswith("name: mine")


@pytest.mark.parametrize("argv,fragments", [
    (["--nproc", "5", "--cluster", "clusters/slow-worker-4.yaml"],
     ["slow-worker-4", "5 worker ranks", "(--nproc) must be in [1, 4]"]),
    (["--nproc", "4", "--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:29999", "--dry-run", "--cluster", "clusters/slow-worker-4.yaml"],
     ["slow-worker-4", "has 4 workers", "4 + 1 worker ranks at least", "--nproc must be in [1, 3]"]),
    (["--nproc", "1", "--nnodes", "5", "--rdzv-endpoint", "127.0.0.1:29999", "--dry-run", "--cluster", "clusters/slow-worker-4.yaml"],
     ["slow-worker-4", "1 + 4 worker ranks at least", "--nnodes must be in [1, 4]"]),
    (["--set", "model.name=nope"], ["model.name = 'nope' is unknown", "one of tiny-cnn, mlp"]),
    (["--set", "batch.max=512", "--policy", f"dynamix:{CPU_POLICY}"],
     ["trained for batch bounds [32, 1024]", "[batch.min, batch.max] = [32, 512]"]),
])
def test_launch_refuses_what_its_ranks_would_refuse_before_torchrun_starts(tmp_path, capsys, argv, fragments):
    """One line from the launching process, not one per rank after torchrun has started them."""
    out = tmp_path / "o"
    one_line(*run_cli(capsys, [*LAUNCH, *argv, "--out", str(out)]), *fragments)
    assert not out.exists()
