"""The merged non-zero index: one bit per gradient element, packed eight to a byte.

Workers OR their bitmaps (``ReduceOp.BOR`` on uint8, which gloo reduces), so after one collective
every rank knows the union of the workers' non-zero positions; a bit is 1/32 of an fp32 element.
NCCL has no bitwise reduction: the public LHC kernels sum 4-bit counters instead (1/8), which this
module does not implement, so the engine refuses ``lhc`` on NCCL.

Packing reads 8 bools as one int64 (one byte each, 0 or 1) and gathers them with one
multiplication: byte j of x lands in bit j of the top byte of x * 0x0102040810204080 (no
carries, as every byte is 0 or 1). Unpacking expands only the non-zero bytes. On the CPU the index of
a gradient (:func:`pack_nonzero`) is one pass of C over it (:mod:`dynamix.comm.native`), else NumPy's
``astype(bool)`` and ``packbits``: the same bits, either one far faster than torch's single-threaded
``!=`` and the multiply (4 M elements: 0.9 ms against 8 ms for NumPy).
"""

from __future__ import annotations

import numpy as np
import torch

from dynamix.comm import native

_MAGIC = 0x0102040810204080
_SHIFTS = torch.arange(8, dtype=torch.uint8)  # element 8i + j is bit j of byte i


def packed_len(n: int) -> int:
    """Bytes of the bitmap of ``n`` elements."""
    return (n + 7) // 8


def pack(mask: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Bool [n] -> uint8 [ceil(n/8)], element 8j+k in bit k of byte j (into ``out`` if given)."""
    n = mask.numel()
    out = torch.empty(packed_len(n), dtype=torch.uint8, device=mask.device) if out is None else out
    full = n // 8
    if full:
        words = mask[: full * 8].view(torch.uint8).view(torch.int64)  # 8 bools per word
        out[:full] = ((words * _MAGIC) >> 56).to(torch.uint8)
    if n % 8:
        tail = torch.zeros(8, dtype=torch.uint8, device=mask.device)
        tail[: n % 8] = mask[full * 8 :]
        out[full] = (tail << _SHIFTS.to(mask.device)).sum(dtype=torch.uint8)
    return out


def pack_nonzero(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """The bitmap of ``x != 0`` (:func:`pack`'s layout; NaN counts as non-zero, -0.0 as zero)."""
    if x.device.type != "cpu":
        return pack(x != 0, out)
    c_ok = x.dtype in native.SUFFIX and x.is_contiguous() and (out is None or out.is_contiguous())
    lib = native.library() if c_ok else None
    if lib is not None:
        out = torch.empty(packed_len(x.numel()), dtype=torch.uint8) if out is None else out
        getattr(lib, "dynamix_pack_nonzero_" + native.SUFFIX[x.dtype])(native.ptr(x), x.numel(), native.ptr(out))
        return out
    bits = torch.from_numpy(np.packbits(x.detach().reshape(-1).numpy().astype(bool), bitorder="little"))
    if out is None:
        return bits
    out.copy_(bits)
    return out


def nonzero(bits: torch.Tensor, n: int) -> torch.Tensor:
    """The set element indices (int64, ascending) of a bitmap of ``n`` elements (C on the CPU,
    :mod:`dynamix.comm.native`, when it is built)."""
    lib = native.library() if bits.device.type == "cpu" and bits.is_contiguous() else None
    if lib is None:
        return nonzero_vectorised(bits, n)
    count = lib.dynamix_bitmap_nonzero(native.ptr(bits), bits.numel(), n, None)
    out = torch.empty(count, dtype=torch.int64)
    lib.dynamix_bitmap_nonzero(native.ptr(bits), bits.numel(), n, native.ptr(out))
    return out


def nonzero_vectorised(bits: torch.Tensor, n: int) -> torch.Tensor:
    """:func:`nonzero` in tensor operations, on any device."""
    byte = bits.nonzero().squeeze(1)
    set_ = ((bits[byte][:, None] >> _SHIFTS.to(bits.device)) & 1).bool()
    idx = (byte[:, None] * 8 + torch.arange(8, device=bits.device))[set_]
    return idx[idx < n]
