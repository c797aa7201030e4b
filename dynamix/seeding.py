"""Seeding: one base seed per run; every other seed derived from it by role and rank.

``derive_seed(base, "sampler", epoch)`` hashes the roles through ``numpy.random.SeedSequence`` so
sub-streams are independent and stable across processes and Python versions (no ``hash()``, which
is salted per process).
"""

from __future__ import annotations

import hashlib
import random

import numpy as np
import torch


def _role_int(role: object) -> int:
    if isinstance(role, int) and role >= 0:
        return role
    return int.from_bytes(hashlib.sha256(str(role).encode()).digest()[:8], "little")


def derive_seed(base: int, *roles: object) -> int:
    """A 63-bit seed for the sub-stream named by ``roles`` (e.g. ``"sampler", epoch``)."""
    ss = np.random.SeedSequence([int(base), *(_role_int(r) for r in roles)])
    lo, hi = (int(v) for v in ss.generate_state(2, dtype=np.uint32))
    return (lo | (hi << 32)) >> 1


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch globally (model initialisation draws from torch's global RNG)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
