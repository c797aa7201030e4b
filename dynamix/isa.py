"""Torch's CPU kernels pinned to one instruction set: the same bits on every machine of one CPU model.

Torch picks CPU kernels by the processor it runs on, in three libraries: ATen's vectorised kernels
(``ATEN_CPU_CAPABILITY``: default, avx2, avx512), oneDNN's convolutions (``ONEDNN_MAX_CPU_ISA``) and
MKL's BLAS (``MKL_ENABLE_INSTRUCTIONS`` caps the code path; ``MKL_CBWR``, Conditional Numerical
Reproducibility, fixes one path and MKL's run-to-run choices). Wider vectors add in another order, so
one training step of a conv net already ends in other bits on an AVX-512 machine than on an AVX2 one,
and the difference grows over a run. AVX2 is the widest set every x86-64 server of the kind this
artifact targets has (Intel since Haswell, AMD since Zen), so every process is pinned to it. Across
CPU vendors the bits still differ (docs/protocol.md, "The same bits on every machine of one CPU
model"): MKL's reproducible AVX2 branch is Intel's only.

The libraries read these variables once, before their first kernel runs, so they must be in the
environment before torch computes anything: importing ``dynamix`` calls :func:`pin` first of all, and
child processes (engine workers, torchrun, notebook kernels) inherit the environment; the Makefile
exports the same values for processes that import torch before dynamix. A variable already set is
left as it is. ``DYNAMIX_CPU_ISA=native`` lifts the pin (each library then takes the widest set the
CPU has). What the pin costs: docs/protocol.md. A base module: it imports nothing from the package.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import MutableMapping

log = logging.getLogger(__name__)

SWITCH = "DYNAMIX_CPU_ISA"
"""``avx2`` (the default) pins the variables below; ``native`` lifts the pin."""

PINNED = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "MKL_CBWR": "AVX2",
}


def pin(environ: MutableMapping[str, str] = os.environ) -> bool:
    """Set the kernel-ISA variables unless the switch says ``native``; True when the pin is on.

    ``native`` also removes the pinned values a parent (the Makefile) exported, not other values.
    """
    mode = environ.get(SWITCH, "avx2")
    if mode not in ("avx2", "native"):
        raise ValueError(f"{SWITCH}={mode!r}: choose avx2 (the default) or native")
    if mode == "native":
        for key, value in PINNED.items():
            if environ.get(key) == value:
                del environ[key]
        return False
    missing = [key for key in PINNED if key not in environ]
    for key in missing:
        environ[key] = PINNED[key]
    if missing and "torch" in sys.modules:
        log.warning("torch was imported before dynamix: the CPU kernels may not follow %s", ", ".join(missing))
    return True


def cpu_identity(cpuinfo: str | os.PathLike = "/proc/cpuinfo") -> dict[str, str]:
    """This machine's CPU as ``cpuinfo`` names its first processor: vendor, family and model decide which
    code paths and blockings the kernel libraries take (so which bits a run computes); the model name is
    for people. Empty values where the file is missing (not Linux)."""
    fields: dict[str, str] = {}
    try:
        with open(cpuinfo) as f:
            for line in f:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return {"vendor": fields.get("vendor_id", ""), "family": fields.get("cpu family", ""),
            "model": fields.get("model", ""), "name": fields.get("model name", "")}
