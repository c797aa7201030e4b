"""One instruction set for torch's CPU kernels (dynamix.isa): the pin, its Makefile mirror, the golden bits."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dynamix import isa, paths

from helpers import golden

GOLDEN = Path(__file__).parent / "data" / "isa_golden.json"


def cpu_flags() -> set[str]:
    with open("/proc/cpuinfo") as f:
        return set(next(line for line in f if line.startswith("flags")).split(":", 1)[1].split())


def test_pin_sets_what_is_missing_and_keeps_what_is_set():
    env = {"MKL_CBWR": "COMPATIBLE"}
    assert isa.pin(env) is True
    assert env == {**isa.PINNED, "MKL_CBWR": "COMPATIBLE"}


def test_native_lifts_the_pinned_values_only():
    env = {**isa.PINNED, "ONEDNN_MAX_CPU_ISA": "AVX512_CORE", isa.SWITCH: "native"}
    assert isa.pin(env) is False
    assert env == {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE", isa.SWITCH: "native"}


def test_an_unknown_switch_value_is_refused():
    with pytest.raises(ValueError, match="DYNAMIX_CPU_ISA='avx512': choose avx2"):
        isa.pin({isa.SWITCH: "avx512"})


def test_makefile_exports_the_pinned_values():
    """Processes that import torch before dynamix get the same values from the Makefile."""
    keep = set(isa.PINNED) | {isa.SWITCH, "MAKEFLAGS", "MFLAGS", "MAKELEVEL"}
    env = {k: v for k, v in os.environ.items() if k not in keep}
    out = subprocess.run(["make", "-s", "--no-print-directory", "--eval=isa-env: ; @env", "isa-env"],
                         cwd=paths.ROOT, env=env, capture_output=True, text=True, check=True).stdout
    exported = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    assert {k: exported.get(k) for k in isa.PINNED} == isa.PINNED


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the pin is for x86-64 CPUs")
def test_tiny_cnn_after_three_steps_has_the_recorded_bits():
    """The golden test: this machine computes the bits the recording machine computed."""
    record = json.loads(GOLDEN.read_text())
    assert record["recipe"] == golden.RECIPE, "the golden recipe changed: re-record tests/data/isa_golden.json"
    assert torch.backends.cpu.get_cpu_capability() == "AVX2", (
        "torch's ATen kernels are not pinned to AVX2 in this process: import dynamix before torch, or run "
        "through make (dynamix/isa.py)"
    )
    got = golden.conv_net_digest()
    here = {k: os.environ.get(k) for k in isa.PINNED}
    assert got == record["sha256"], (
        f"the tiny CNN's parameters after 3 steps hash to {got[:16]}..., not {record['sha256'][:16]}... as "
        f"recorded on {record['cpu']} ({record['cpu_id']}) with torch {record['torch']} under {record['pins']}; "
        f"this process has torch {torch.__version__} under {here}. If those agree, this CPU computes other "
        f"bits than the recording one under the same pins: its runs will not reproduce the published tables "
        f"bit for bit, only within their stated tolerance (report the CPU). If they differ, the environment "
        f"or the torch build is not the locked one (dynamix/isa.py, requirements.lock)."
    )


@pytest.mark.skipif(platform.machine() != "x86_64" or "avx512f" not in cpu_flags(),
                    reason="without AVX-512 the unpinned kernels are the AVX2 ones: nothing to distinguish")
def test_without_the_pin_an_avx512_cpu_computes_other_bits():
    """Control: the golden test can fail. Unpinned, this CPU's AVX-512 kernels give another hash."""
    env = {k: v for k, v in os.environ.items() if k not in isa.PINNED}
    env[isa.SWITCH] = "native"
    out = subprocess.run([sys.executable, golden.__file__], env=env, capture_output=True, text=True,
                         check=True).stdout
    native = json.loads(out.splitlines()[-1])
    assert native["capability"] == "AVX512"
    assert native["sha256"] != json.loads(GOLDEN.read_text())["sha256"]
