"""Lossless homomorphic compression of one flat gradient: index, sizing, sketch, decode.

One reduction with :class:`Codec` (every rank runs the same steps on the same merged index):

1. ``index(g)``: the bitmap of g != 0 (plus one flags byte), as int64 words; the ranks OR it
   (collective 1; gloo ORs 8-byte words faster than bytes).
2. ``plan(merged)``: per bucket of :data:`BUCKET` elements, m_b merged non-zeros get a sketch of
   C_b = 3 ceil((1.3 m_b + 24) / 3) counters (:func:`counters`). The structural peel
   (:func:`dynamix.comm.peel.schedule`) runs on the index alone; a bucket that does not peel is
   re-hashed into a 1.25x larger sketch, up to :data:`ATTEMPTS` sizes, then sent dense, as is a
   bucket whose sketch would not be smaller than the bucket. Empty buckets send nothing.
3. ``encode(g, plan)``: the message [count sketch of the sketched buckets | dense buckets]; each
   merged non-zero i adds sign_k(i) g_i to its three counters. The sketch is linear, so summing the
   workers' messages (collective 2, plain SUM) gives the message of the summed gradient.
4. ``decode(msg, plan, out)``: peel the summed sketch along the schedule; copy the dense buckets.

Exactness: the decoded vector has the summed gradient's support exactly and every dense bucket is
the plain all-reduce. A sketched value is read from a counter after the other items' values were
subtracted from it, so in floating point it carries the rounding of those sums: exact (bit for bit)
whenever all partial sums are representable (integer-valued or dyadic data, float64 tests), and
otherwise off by a few ulp of the largest magnitude sharing its counters (measured in
docs/journal/compression.md). A dense all-reduce carries the same kind of error from its own summation order.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from dynamix.comm import bitmap, hashing, native
from dynamix.comm.hashing import bucket_positions
from dynamix.comm.peel import Schedule, replay, schedule

BUCKET = 1 << 16  # elements per sizing / fallback unit (64 blocks of 1,024)
COUNTERS_PER_ITEM = 1.3  # above the 3-hash peeling threshold ~1.222 (1.25 still fails ~10% at m=1,000)
SLACK = 24  # extra counters: small sketches fail more often (two items on the same 3 counters ~ 6/m)
GROWTH = 1.25  # sketch growth on a failed peel (a new hash layout)
ATTEMPTS = 3  # sketch sizes tried before a bucket goes dense


def counters(m: int | torch.Tensor, attempt: int = 0) -> torch.Tensor:
    """Sketch counters for m merged non-zeros at the given attempt: a multiple of 3 (one third per hash)."""
    m = torch.as_tensor(m, dtype=torch.float64)
    return 3 * torch.ceil((COUNTERS_PER_ITEM * m + SLACK) * GROWTH ** attempt / 3).to(torch.int64)


@dataclass(frozen=True)
class Plan:
    """What every rank sends for one merged index: sketch layout, peel schedule, dense buckets."""

    n: int  # gradient elements
    items: torch.Tensor  # int64 [m]: merged non-zeros in sketched buckets
    pos: torch.Tensor  # int64 [m, 3]: their counters
    sign: torch.Tensor  # int64 [m, 3]
    sched: Schedule
    n_counters: int
    dense: list[tuple[int, int]]  # element ranges sent dense
    fallbacks: int  # non-empty buckets sent dense (sketch too large, or no size peeled)

    @property
    def n_dense(self) -> int:
        return sum(hi - lo for lo, hi in self.dense)

    @property
    def message_len(self) -> int:
        return self.n_counters + self.n_dense


def _sketch(nz: torch.Tensor, sizes: torch.Tensor, attempt: torch.Tensor, seed: int):
    """Items of the buckets with ``sizes`` > 0 counters, their positions and signs, and the peel schedule."""
    items = nz[sizes[nz // BUCKET] > 0]
    offsets = torch.cumsum(sizes, 0) - sizes
    pos, sign = bucket_positions(items, BUCKET, offsets, sizes, attempt, seed, ATTEMPTS)
    return items, pos, sign, schedule(pos, int(sizes.sum()))


def make_plan(nz: torch.Tensor, n: int, seed: int) -> Plan:
    """The plan for merged non-zeros ``nz`` (ascending int64) of ``n`` elements; deterministic in its inputs.

    Buckets peel independently (disjoint counters, and positions within a bucket depend only on its
    size), so each attempt tests the buckets still pending, and the sizes that peeled keep peeling
    in the final layout. On the CPU one C pass plans it (:func:`_plan_native`); this tensor version
    runs elsewhere and without a compiler.
    """
    n_buckets, dev = max(math.ceil(n / BUCKET), 1), nz.device
    bucket_len = torch.full((n_buckets,), BUCKET, dtype=torch.int64, device=dev)
    bucket_len[-1] = n - BUCKET * (n_buckets - 1)
    bounds = torch.arange(n_buckets + 1, dtype=torch.int64, device=dev) * BUCKET
    first = torch.searchsorted(nz, bounds)  # nz ascending: bucket b holds nz[first[b]:first[b + 1]]
    m_b = torch.diff(first)
    lib = native.library() if dev.type == "cpu" else None
    if lib is not None:
        return _plan_native(lib, nz.contiguous(), n, seed, first, m_b, bucket_len)
    sizes = torch.zeros(n_buckets, dtype=torch.int64, device=dev)  # final counters per bucket, 0 = not sketched
    chosen = torch.zeros(n_buckets, dtype=torch.int64, device=dev)  # the attempt whose size and hashes peeled
    pending = m_b > 0
    first = None
    for attempt in range(ATTEMPTS):
        trial = counters(m_b, attempt)
        pending &= trial < bucket_len  # a sketch no smaller than the bucket: send the bucket
        if not bool(pending.any()):
            break
        test = torch.where(pending, trial, 0)
        items, pos, sign, sched = _sketch(nz, test, torch.full_like(test, attempt), seed)
        failed = torch.zeros(n_buckets, dtype=torch.bool, device=dev)
        failed[items[sched.unpeeled] // BUCKET] = True
        sizes = torch.where(pending & ~failed, trial, sizes)
        chosen = torch.where(pending & ~failed, attempt, chosen)
        pending &= failed
        first = first or (test, (items, pos, sign, sched))
    if first is not None and torch.equal(first[0], sizes):  # the common case: everything peeled at once
        items, pos, sign, sched = first[1]
    else:
        items, pos, sign, sched = _sketch(nz, sizes, chosen, seed)
    return _plan(n, m_b, sizes, bucket_len, items, pos, sign, sched)


def _plan(n: int, m_b: torch.Tensor, sizes: torch.Tensor, bucket_len: torch.Tensor, items: torch.Tensor,
          pos: torch.Tensor, sign: torch.Tensor, sched: Schedule) -> Plan:
    """The plan of the sketched buckets' items; every non-empty bucket without a sketch goes dense."""
    dense_b = ((m_b > 0) & (sizes == 0)).nonzero().squeeze(1).tolist()
    dense = [(b * BUCKET, b * BUCKET + int(bucket_len[b])) for b in dense_b]
    return Plan(n, items, pos, sign, sched, int(sizes.sum()), dense, len(dense_b))


def _plan_native(lib, nz: torch.Tensor, n: int, seed: int, first: torch.Tensor, m_b: torch.Tensor,
                 bucket_len: torch.Tensor) -> Plan:
    """:func:`make_plan` as one C pass over the buckets (``dynamix_plan`` in ``codec.c``): each bucket is
    hashed at its final offset and peeled once, again only if it failed; the same plan (a test)."""
    n_buckets, m = m_b.numel(), nz.numel()
    trial = torch.stack([counters(m_b, a) for a in range(ATTEMPTS)]).contiguous()
    tab = hashing.table(seed, BUCKET, ATTEMPTS)
    sizes = torch.empty(n_buckets, dtype=torch.int64)
    items, order, order_k = (torch.empty(m, dtype=torch.int64) for _ in range(3))
    pos, sign = torch.empty(m, 3, dtype=torch.int64), torch.empty(m, 3, dtype=torch.int64)
    lens, kept = torch.empty(m + 1, dtype=torch.int64), torch.zeros(1, dtype=torch.int64)
    i64 = native.i64
    rounds = lib.dynamix_plan(i64(nz), i64(first), i64(bucket_len), n_buckets, i64(trial), ATTEMPTS, i64(tab), BUCKET,
                              i64(sizes), i64(items), i64(pos), i64(sign), i64(order), i64(order_k),
                              i64(lens), i64(kept))
    if rounds < 0:
        raise MemoryError(f"planning the sketch of {m} items")
    k, round_len = int(kept), lens[:rounds].tolist()
    sched = Schedule(order[:k], order_k[:k], round_len, torch.zeros(k, dtype=torch.bool))
    return _plan(n, m_b, sizes, bucket_len, items[:k], pos[:k], sign[:k], sched)


def index_words(n: int) -> int:
    """int64 words of the index of ``n`` elements: the bitmap and one flags byte, padded to 8 bytes."""
    return (bitmap.packed_len(n) + 1 + 7) // 8


def index_flags(index: torch.Tensor) -> int:
    """The flags byte of a (merged) index."""
    return int(index.view(torch.uint8)[-1])


@dataclass
class Stats:
    """Running totals of one rank's reductions (bytes this rank puts on the wire per reduction)."""

    reductions: int = 0
    bytes_sent: int = 0  # index + message
    dense_bytes: int = 0  # what a dense reduction of the same gradient sends
    fallbacks: int = 0
    encode_s: float = 0.0  # bitmap + sketch
    decode_s: float = 0.0  # plan (sizing, structural peel) + peel replay

    def dense(self, nbytes: int) -> None:
        """Count one uncompressed reduction of ``nbytes``."""
        self.reductions += 1
        self.bytes_sent += nbytes
        self.dense_bytes += nbytes

    def take(self) -> "Stats":
        """The totals so far; the running totals restart."""
        out = Stats(**vars(self))
        self.__init__()
        return out


@dataclass
class Codec:
    """Index, plan, encode and decode for one flat gradient; ``seed`` fixes the hashes on every rank."""

    seed: int
    stats: Stats = field(default_factory=Stats)
    # what encode/decode time is read with: wall time on the ranks (what an iteration waits for); the
    # simulator passes the process's CPU time, which other processes on a loaded host do not inflate
    clock: Callable[[], float] = time.perf_counter

    def index(self, g: torch.Tensor, flags: int = 0) -> torch.Tensor:
        """int64 [:func:`index_words`] whose bytes are [bitmap of g != 0 | zero padding | flags]: reduced
        with BOR, so flags travel from any rank (:func:`index_flags`)."""
        t = self.clock()
        out = torch.zeros(index_words(g.numel()), dtype=torch.int64, device=g.device)
        raw = out.view(torch.uint8)
        bitmap.pack_nonzero(g, out=raw[: bitmap.packed_len(g.numel())])
        raw[-1] = flags
        self.stats.encode_s += self.clock() - t
        return out

    def plan(self, merged_index: torch.Tensor, n: int) -> Plan:
        t = self.clock()
        plan = make_plan(bitmap.nonzero(merged_index.view(torch.uint8)[: bitmap.packed_len(n)], n), n, self.seed)
        self.stats.decode_s += self.clock() - t
        return plan

    def encode(self, g: torch.Tensor, plan: Plan, weight: float = 1.0) -> torch.Tensor:
        """This rank's message of ``weight * g``: [count sketch | dense buckets]. The weight is applied
        here, to the merged non-zeros and dense buckets only, rather than to all of ``g``."""
        t = self.clock()
        msg = torch.zeros(plan.message_len, dtype=g.dtype, device=g.device)
        lib = native.library() if g.device.type == "cpu" and g.dtype in native.SUFFIX and g.is_contiguous() else None
        if lib is not None:
            i64 = native.i64
            getattr(lib, "dynamix_sketch_encode_" + native.SUFFIX[g.dtype])(
                i64(plan.items), plan.items.numel(), i64(plan.pos), i64(plan.sign), native.ptr(g), weight,
                native.ptr(msg))
        else:
            vals = (plan.sign.to(g.dtype) * (g[plan.items] * weight)[:, None]).reshape(-1)
            msg[: plan.n_counters].index_add_(0, plan.pos.reshape(-1), vals)
        at = plan.n_counters
        for lo, hi in plan.dense:
            torch.mul(g[lo:hi], weight, out=msg[at : at + hi - lo])
            at += hi - lo
        s = self.stats
        s.encode_s += self.clock() - t
        s.reductions += 1
        s.bytes_sent += 8 * index_words(g.numel()) + msg.numel() * msg.element_size()
        s.dense_bytes += g.numel() * g.element_size()
        s.fallbacks += plan.fallbacks
        return msg

    def decode(self, msg: torch.Tensor, plan: Plan, out: torch.Tensor) -> float:
        """Write the summed gradient into ``out`` from the summed message (consumed); returns its
        squared norm, summed over what was written (the rest of ``out`` is zero).

        ``out`` must be zero outside the merged support, as the encoded gradient is (its support is
        part of the merge): decoding in place writes only the merged non-zeros and dense buckets.
        """
        t = self.clock()
        values = replay(plan.sched, plan.pos, plan.sign, msg[: plan.n_counters])
        out[plan.items] = values
        sq = float(values.dot(values))
        at = plan.n_counters
        for lo, hi in plan.dense:
            part = msg[at : at + hi - lo]
            out[lo:hi] = part
            sq += float(part.dot(part))
            at += hi - lo
        self.stats.decode_s += self.clock() - t
        return sq


def reduce_in_process(grads: list[torch.Tensor], seed: int,
                      clock: Callable[[], float] = time.perf_counter) -> tuple[torch.Tensor, Codec]:
    """The LHC reduction of the workers' gradients in one process, as the ranks run it (the simulator
    and tests): the decoded sum, and rank 0's codec, whose stats are one worker's bytes and time
    (read with ``clock``)."""
    first, rest = Codec(seed, clock=clock), Codec(seed, clock=clock)
    n = grads[0].numel()
    merged = first.index(grads[0])
    for g in grads[1:]:
        merged |= rest.index(g)
    plan = first.plan(merged, n)
    total = first.encode(grads[0], plan)
    for g in grads[1:]:
        total += rest.encode(g, plan)
    out = grads[0].clone()
    first.decode(total, plan, out)
    return out, first
