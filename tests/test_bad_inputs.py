"""Every bad input gets one clear line and exit status 2, before any work starts; never a traceback.

Explicit cases for each kind of input a user gets wrong (batch bounds, budgets, totals, targets,
seeds, hosts and ports, file encodings, launcher options, tokens, Register fields), then a
property-based fuzz of the command line over policy specs, ``--set`` values and launcher options,
in-process on paths that validate and stop (``launch --dry-run``)."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from dynamix import cli, config
from dynamix.policies import make_policy
from dynamix.rpc.validate import InvalidArgument, Registration, check_registration
from dynamix.policies.base import Bounds

SIM = ["simulate", "--cluster", "clusters/slow-worker-4.yaml", "--profile", "smoke", "--set", "model.name=mlp",
       "--set", "model.width=0.25", "--no-progress"]
LAUNCH = ["launch", "--profile", "smoke", "--dry-run"]


def run_cli(capsys, argv: list[str]) -> tuple[int, list[str]]:
    capsys.readouterr()
    try:
        rc = cli.main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        rc = exc.code
    lines = capsys.readouterr().err.strip().splitlines()
    # a first run on a fresh clone decodes the data set once, with a progress bar: not an error line
    return rc, [line for line in lines if not re.match(r"decoding \S+: ", line)]


def assert_one_line(rc: int, err: list[str], *fragments: str) -> None:
    assert rc == 2 and len(err) == 1 and ": error: " in err[0], err
    assert all(f in err[0] for f in fragments), err[0]


@pytest.mark.parametrize("extra,fragments", [
    (["--policy", "static:16"], ["static:16", "[batch.min, batch.max] = [32, 1024]"]),
    (["--policy", "static:"], ["'static:'", "empty"]),
    (["--policy", "lbbsp:batch=[1"], ["lbbsp", "not valid YAML"]),
    (["--set", "train.epochs=0", "--set", "train.max_iters=0"], ["train.epochs = 0", "train.max_iters"]),
    (["--set", "optim.milestones=[0.75, 0.5]"], ["optim.milestones", "ascending"]),
    (["--seed", "-1"], ["--seed = -1", "in [0, 2147483647]"]),
    (["--seed", "4294967296"], ["--seed", "in [0, 2147483647]"]),
])
def test_simulate_refuses_before_it_starts(tmp_path, capsys, extra, fragments):
    assert_one_line(*run_cli(capsys, [*SIM, *extra, "--out", str(tmp_path / "x")]), *fragments)
    assert not (tmp_path / "x").exists()


def test_cluster_totals_and_binary_files_are_one_line(tmp_path, capsys):
    huge = tmp_path / "huge.yaml"
    huge.write_text("name: huge\nworkers:\n" + "".join(f"  - {{count: {c}}}\n" for c in (4000, 4000, 2000)))
    assert_one_line(*run_cli(capsys, ["simulate", "--cluster", str(huge), "--profile", "smoke", "--out", str(tmp_path / "a")]),
                    "workers total 10000", "[1, 4096]")
    wide = tmp_path / "wide.yaml"
    wide.write_text("name: wide\nworkers:\n  - {count: 16}\n")
    assert_one_line(*run_cli(capsys, ["simulate", "--cluster", str(wide), "--policy", "static:1024", *SIM[3:],
                                      "--out", str(tmp_path / "w")]), "global batch 16384", "exceeds the training set")
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(bytes(range(128, 256)) * 4)
    assert_one_line(*run_cli(capsys, ["simulate", "--cluster", str(binary), "--profile", "smoke",
                                      "--out", str(tmp_path / "b")]), "not a text file")
    assert_one_line(*run_cli(capsys, [*SIM, "--params", str(binary), "--out", str(tmp_path / "c")]), "not a text file")


@pytest.mark.parametrize("extra,fragments", [
    (["--nproc", "0"], ["--nproc = 0", "[1, 4096]"]),
    (["--nproc", "-1"], ["--nproc = -1"]),
    (["--max-restarts", "-1"], ["--max-restarts = -1", "[0, 100]"]),
    (["--nproc", "2", "--initial", "64"], ["--initial 64 has 1 sizes", "one per worker (2)"]),
    (["--nproc", "2", "--initial", "16,16"], ["--initial", "[32, 1024]"]),
    (["--arbitrator", "127.0.0.1:99999"], ["--arbitrator = '127.0.0.1:99999'", "[1, 65535]"]),
    (["--arbitrator", "localhost"], ["HOST:PORT"]),
    (["--policy", "static:2048"], ["static:2048", "[32, 1024]"]),
    (["--node-rank", "1"], ["--node-rank = 1", "[0, 0]"]),
])
def test_launch_checks_before_torchrun(tmp_path, capsys, extra, fragments):
    assert_one_line(*run_cli(capsys, [*LAUNCH, *extra, "--out", str(tmp_path / "x")]), *fragments)


@pytest.mark.parametrize("value", ["2", "nan", "-0.5", "0", "inf"])
def test_evaluate_target_accuracy_is_in_0_1(tmp_path, capsys, value):
    assert_one_line(*run_cli(capsys, ["evaluate", "--cluster", "clusters/slow-worker-4.yaml", "--policy", "static:64",
                                      "--profile", "smoke", "--target-accuracy", value, "--out", str(tmp_path)]),
                    "--target-accuracy", "(0, 1]")


@pytest.mark.parametrize("argv,fragments", [
    (["train-policy", "--timesteps", "-3"], ["--timesteps = -3"]),
    (["train", "--epochs", "0"], ["train.epochs = 0"]),
    (["evaluate", "--cluster", "clusters/slow-worker-4.yaml", "--policy", "static:64", "--seeds", "0"], ["--seeds = 0"]),
    (["evaluate", "--cluster", "clusters/slow-worker-4.yaml", "--policy", "static:8"], ["static:8", "[32, 1024]"]),
    (["calibrate", "--model", "mlp", "--repeats", "0"], ["--repeats = 0"]),
    (["calibrate", "--model", "mlp", "--width", "0"], ["model.width = 0.0"]),
])
def test_other_commands_refuse_before_they_start(tmp_path, capsys, argv, fragments):
    assert_one_line(*run_cli(capsys, [*argv, "--out", str(tmp_path / "x")]), *fragments)
    assert not (tmp_path / "x").exists()


def test_arbitrator_refuses_a_policy_outside_the_bounds_before_serving(capsys):
    assert_one_line(*run_cli(capsys, ["arbitrator", "serve", "--policy", "static:16", "--port", "0"]),
                    "static:16", "[32, 1024]")


@pytest.mark.parametrize("content,fragment", [(b"", "is empty"), (b"  \n", "is empty"),
                                              (b"\xff\xfe\x00token", "not a text file")])
def test_an_empty_or_binary_token_file_is_an_error(tmp_path, capsys, content, fragment):
    token = tmp_path / "token"
    token.write_bytes(content)
    # --host is taken as typed: "1.5" would be a YAML float and fail as arbitrator.host before the token
    assert_one_line(*run_cli(capsys, ["arbitrator", "serve", "--host", "1.5", "--port", "0",
                                      "--token-file", str(token)]), "--token-file", fragment)


def test_an_unreadable_token_file_is_an_error(tmp_path, capsys):
    assert_one_line(*run_cli(capsys, ["arbitrator", "serve", "--port", "0", "--token-file", str(tmp_path / "nope")]),
                    "nope", "no such file")


def test_non_loopback_bind_says_what_is_missing(capsys, monkeypatch):
    monkeypatch.delenv("DYNAMIX_ARBITRATOR_TOKEN", raising=False)
    assert_one_line(*run_cli(capsys, ["arbitrator", "serve", "--host", "0.0.0.0", "--port", "0"]),
                    "no token and no TLS were given")


@pytest.mark.parametrize("field,value", [("seed", 2**40), ("next_window", 2**60), ("dataset_size", 0)])
def test_register_numeric_fields_are_range_checked(field, value):
    reg = Registration(run_id="r", rank=0, world_size=1, initial_batch_sizes=(64,), current_batch_size=64,
                       **{field: value})
    with pytest.raises(InvalidArgument, match=field):
        check_registration(reg, Bounds(32, 1024))


@pytest.mark.parametrize("device", [{"speed": math.nan}, {"speed": math.inf}, {"num_threads": -1},
                                    {"pid": 2**40}])
def test_register_device_fields_are_range_checked(device):
    reg = Registration(run_id="r", rank=0, world_size=1, initial_batch_sizes=(64,), current_batch_size=64,
                       device=device)
    with pytest.raises(InvalidArgument, match="device."):
        check_registration(reg, Bounds(32, 1024))


# ------------------------------------------------------------------------------------------------
# Fuzz: every input runs or exits 2 with one line

KINDS = ["static", "lbbsp", "gns", "ramp", "dynamix", "nope", ""]
ARG = st.text(alphabet="0123456789abz=,.:-_[]{}'\" !&*\\", max_size=14)
POLICY = st.builds(lambda kind, sep, arg: kind + sep + arg, st.sampled_from(KINDS), st.sampled_from(["", ":"]),
                   st.one_of(ARG, st.integers(-10, 5000).map(str),
                             st.sampled_from(["batch=512", "every=0", "epochs=1", "factor=0.5", "batch=-3"])))
FIELDS = sorted(config.Config().to_dict().keys())
KEYS = st.one_of(st.sampled_from(["train.epochs", "train.max_iters", "train.seed", "batch.min", "batch.max",
                                  "batch.initial", "batch.window", "batch.actions", "optim.milestones", "optim.lr",
                                  "engine.world_size", "engine.arch", "arbitrator.host", "arbitrator.port",
                                  "model.width", "train.device", "evaluation.target_accuracy", "policy.spec"]),
                 st.sampled_from(FIELDS), st.text(alphabet="abcxyz._", min_size=1, max_size=10))
VALUE = st.one_of(
    st.integers(-(2**40), 2**40).map(str), st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["[]", "[0.75, 0.5]", "[1, 2, 3]", "{a: 1}", "null", "yes", "''", "[", "{", ": :", "!!binary x",
                     "nan", ".inf", "-.inf", "1e400", "cuda:x", "0.0.0.0"]),
    st.text(max_size=10))
SET = st.one_of(st.builds(lambda k, v: f"{k}={v}", KEYS, VALUE),
                st.sampled_from(["train.max_iters=10", "batch.window=5", "optim.lr=0.1", "engine.arch=ps",
                                 "train.seed=7", "batch.min=16", "batch.initial=128"]))
SPEC = st.one_of(POLICY, st.sampled_from(["static:64", "static", "lbbsp", "lbbsp:batch=512", "gns", "ramp:every=50"]))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(policy=SPEC, sets=st.lists(SET, max_size=2), nproc=st.one_of(st.none(), st.none(), st.integers(-3, 5000)),
       initial=st.one_of(st.none(), st.none(), ARG, st.sampled_from(["64,64", "16,16", "64", "2048,64"])),
       arbitrator=st.one_of(st.none(), st.none(), st.sampled_from(["127.0.0.1:99999", "127.0.0.1:50051", ":1",
                                                                  "h:", "h:0"])))
def test_fuzz_launch_options_run_or_exit_2_with_one_line(tmp_path, capsys, policy, sets, nproc, initial, arbitrator):
    argv = [*LAUNCH, f"--policy={policy}", *[f"--set={s}" for s in sets], "--out", str(tmp_path / "x")]
    argv += [f"--nproc={nproc}"] if nproc is not None else []
    argv += [f"--initial={initial}"] if initial is not None else []
    argv += [f"--arbitrator={arbitrator}"] if arbitrator is not None else []
    rc, err = run_cli(capsys, argv)
    event(f"exit status {rc}")
    assert rc in (0, 2), (argv, err)
    if rc == 2:
        assert_one_line(rc, err)
    assert not (tmp_path / "x").exists()  # a dry run writes nothing


@settings(max_examples=100, deadline=None)
@given(policy=SPEC, sets=st.lists(SET, max_size=4))
def test_fuzz_config_and_policy_parsers_raise_only_user_errors(policy, sets):
    """The parsers every command shares: a value is accepted or refused with a UserError, nothing else."""
    from dynamix.errors import UserError

    try:
        cfg = config.load(profile="smoke", overrides=sets)
        event("config accepted")
    except UserError:
        cfg = config.load(profile="smoke")
        event("config refused")
    try:
        make_policy(policy, bounds=cfg.batch)
        event("policy accepted")
    except (UserError, FileNotFoundError, IsADirectoryError):
        event("policy refused")
