"""Seeded hash positions and signs of the count sketch, identical on every rank.

Element ``i`` of a bucket whose sketch has ``C = 3q`` counters lands in one counter of each third,
``k q + floor(f_k(i) q / 2^20)`` for k = 0, 1, 2 (partitioned hashing: the three positions are
distinct, and peeling a random 3-partite hypergraph succeeds w.h.p. above about 1.222 counters per
item), with sign ``(-1)^(s_k(i))``. The 20-bit fields f_k and the sign bits s_k of element i are
read from a table of 63 random bits per (sketch attempt, position within a bucket), drawn once from
a generator seeded with ``seed``: buckets have separate sketches, so they may share the table, a
gather replaces a per-element hash computation, and a re-sized sketch uses fresh bits (scaling the
same fields to a new size would keep the same colliding items together). Every worker, server and
test builds the same table.
"""

from __future__ import annotations

from functools import lru_cache

import torch

HASHES = 3
FIELD_BITS = 20  # position fields: a bias below q / 2^20 (< 2 % for the largest sketch of a bucket)


@lru_cache(maxsize=4)
def table(seed: int, size: int, attempts: int) -> torch.Tensor:
    """int64 [attempts * size] of 63 random bits per (attempt, bucket position): 3 fields, 3 sign bits."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 2**63 - 1, (attempts * size,), generator=gen, dtype=torch.int64)


def positions_and_signs(local: torch.Tensor, offset: torch.Tensor, third: torch.Tensor, seed: int,
                        size: int, attempt: torch.Tensor | int = 0,
                        attempts: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Counter positions [m, 3] (into the concatenated sketch) and signs [m, 3] (+-1), int64.

    ``local`` is each item's position within its bucket of ``size`` elements; ``offset``,
    ``third`` and ``attempt`` are, per item, its bucket's first counter, q = C/3 and sketch attempt.
    """
    h = table(seed, size, attempts).to(local.device)[local + size * attempt]
    mask = (1 << FIELD_BITS) - 1
    pos = [offset + k * third + (((h >> (FIELD_BITS * k)) & mask) * third >> FIELD_BITS) for k in range(HASHES)]
    sign = [1 - 2 * ((h >> (FIELD_BITS * HASHES + k)) & 1) for k in range(HASHES)]
    return torch.stack(pos, 1), torch.stack(sign, 1)


def bucket_positions(items: torch.Tensor, size: int, offsets: torch.Tensor, sizes: torch.Tensor,
                     attempts: torch.Tensor, seed: int, n_attempts: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`positions_and_signs` of element indices ``items``, each in bucket ``item // size``, from
    per-bucket first counters ``offsets``, counters ``sizes`` (3q) and sketch ``attempts`` (on the CPU
    the C plan, ``dynamix_plan`` in ``codec.c``, computes the same positions itself)."""
    b = items // size
    return positions_and_signs(items % size, offsets[b], sizes[b] // 3, seed, size, attempts[b], n_attempts)
