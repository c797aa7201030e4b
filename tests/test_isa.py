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


def _pinned_record() -> dict:
    record = json.loads(GOLDEN.read_text())
    assert record["recipe"] == golden.RECIPE, "the golden recipe changed: re-record tests/data/isa_golden.json"
    assert torch.backends.cpu.get_cpu_capability() == "AVX2", (
        "torch's ATen kernels are not pinned to AVX2 in this process: import dynamix before torch, or run "
        "through make (dynamix/isa.py)"
    )
    return record


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the pin is for x86-64 CPUs")
def test_tiny_cnn_after_three_steps_has_the_bits_recorded_for_this_cpu():
    """The golden test: a CPU with a record computes its recorded bits (every machine of that model computes
    the same bits under the pins); a CPU without one is reported, and held to the norms below."""
    record = _pinned_record()
    cpu = isa.cpu_identity()
    mine = [r for r in record["records"] if all(r[k] == cpu[k] for k in ("vendor", "family", "model"))]
    got = golden.conv_net_digest()
    if not mine:
        pytest.skip(f"no recorded bits for {cpu} (its hash: {got}); the norms test holds it to the "
                    f"recorded values within {record['norms']['tolerance']:g}")
    here = {k: os.environ.get(k) for k in isa.PINNED}
    assert got == mine[0]["sha256"], (
        f"the tiny CNN's parameters after 3 steps hash to {got[:16]}..., not {mine[0]['sha256'][:16]}... as "
        f"recorded on this CPU model ({cpu}) with torch {record['torch']} under {record['pins']}; this process has "
        f"torch {torch.__version__} under {here}. If those agree, the environment or the torch build is not the "
        f"locked one (dynamix/isa.py, requirements.lock)."
    )


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the pin is for x86-64 CPUs")
def test_tiny_cnn_after_three_steps_is_within_float_noise_of_the_record_on_every_cpu():
    """Across CPU vendors the pins do not give the same bits (the records differ): every CPU's parameters
    must still agree with the recorded ones to the tolerance, 14-100x the spread another summation order
    gives (1e-6-7e-6 of each tensor's L1 and L2 norm), so a real change (another recipe, library or
    model) fails here."""
    record = _pinned_record()
    want, tol = record["norms"]["values"], record["norms"]["tolerance"]
    got = golden.conv_net_norms()
    assert set(got) == set(want)
    off = {k: max(abs(g - w) / abs(w) for g, w in zip(got[k], want[k])) for k in want}
    worst = max(off, key=off.get)
    assert off[worst] <= tol, (f"{worst}'s norms differ from the record ({record['norms']['cpu']}) by "
                               f"{off[worst]:.2e} of their size, over the tolerance {tol:g}")


def test_a_changed_recipe_moves_the_norms_past_the_tolerance():
    """Control: the tolerance separates float noise from a real change (one step more)."""
    record = json.loads(GOLDEN.read_text())
    want, tol = record["norms"]["values"], record["norms"]["tolerance"]
    got = golden.conv_net_norms(steps=4)
    assert max(abs(g - w) / abs(w) for k in want for g, w in zip(got[k], want[k])) > 100 * tol


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
    pinned = [r["sha256"] for r in json.loads(GOLDEN.read_text())["records"]]
    assert native["sha256"] not in pinned
