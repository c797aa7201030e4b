"""The C loops of the codec (``codec.c``), built on first use and loaded with ctypes.

The tensor versions of the structural peel, the replay, the sketch's hash positions, the encoder and the
bitmaps spend most of their time in the fixed cost of small tensor operations (tens per peeling round)
and their temporaries; on the CPU one pass of C does the same work several times faster
(``benchmarks/bench_lhc.py``). The library is compiled with the system C compiler (``$CC``, else ``cc``) into ``$DYNAMIX_NATIVE_CACHE`` (default
``~/.cache/dynamix``), named by the hash of its source, so an edited source is rebuilt and concurrent
builds do not collide. Without a compiler, or with ``DYNAMIX_NATIVE=0``, :func:`library` returns None
and the tensor versions run: each gives the same result as its C twin (``tests/test_comm.py``).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("codec.c")
_I64 = ctypes.POINTER(ctypes.c_int64)
_SIGNATURES = {
    "dynamix_peel_replay_f32": ([_I64, _I64, ctypes.c_int64, _I64, _I64, ctypes.c_void_p, ctypes.c_void_p], None),
    "dynamix_peel_replay_f64": ([_I64, _I64, ctypes.c_int64, _I64, _I64, ctypes.c_void_p, ctypes.c_void_p], None),
    "dynamix_bitmap_nonzero": ([ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p], ctypes.c_int64),
    "dynamix_pack_nonzero_f32": ([ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p], None),
    "dynamix_pack_nonzero_f64": ([ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p], None),
    "dynamix_sketch_encode_f32": ([_I64, ctypes.c_int64, _I64, _I64, ctypes.c_void_p, ctypes.c_double, ctypes.c_void_p], None),
    "dynamix_sketch_encode_f64": ([_I64, ctypes.c_int64, _I64, _I64, ctypes.c_void_p, ctypes.c_double, ctypes.c_void_p], None),
    "dynamix_plan": ([_I64, _I64, _I64, ctypes.c_int64, _I64, ctypes.c_int64, _I64, ctypes.c_int64, _I64, _I64, _I64,
                      _I64, _I64, _I64, _I64, _I64], ctypes.c_int64),
}
SUFFIX = {torch.float32: "f32", torch.float64: "f64"}  # the dtypes the C loops take


def ptr(t: torch.Tensor) -> ctypes.c_void_p:
    """The address of a contiguous CPU tensor's data, for the C functions."""
    return ctypes.c_void_p(t.data_ptr())


def i64(t: torch.Tensor):
    """An int64 tensor's data as ``int64_t *``."""
    return ctypes.cast(t.data_ptr(), _I64)


def _cache_dir() -> Path:
    return Path(os.environ.get("DYNAMIX_NATIVE_CACHE") or Path.home() / ".cache" / "dynamix")


def _build(target: Path) -> None:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise FileNotFoundError("no C compiler (cc, gcc or $CC)")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        out = Path(tmp) / target.name
        subprocess.run([cc, "-O2", "-ffp-contract=off", "-shared", "-fPIC", "-o", str(out), str(SOURCE)], check=True,
                       capture_output=True, text=True, timeout=120)
        os.replace(out, target)  # atomic: another process sees the whole library or none


@functools.lru_cache(maxsize=1)
def library() -> ctypes.CDLL | None:
    """The loaded library, or None (``DYNAMIX_NATIVE=0``, or it cannot be built: logged once)."""
    if os.environ.get("DYNAMIX_NATIVE", "1") == "0":
        return None
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    target = _cache_dir() / f"codec-{digest}.so"
    try:
        if not target.exists():
            _build(target)
        lib = ctypes.CDLL(str(target))
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", "") or exc
        log.warning("the C codec loops could not be built or loaded (%s); using the tensor versions",
                    str(detail).strip())
        return None
    for name, (args, res) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, res
    return lib
