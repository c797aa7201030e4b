"""Peeling decoder of a count sketch whose non-zero positions are known (the merged index).

Every rank knows which items (merged non-zeros) map to which counters, so it knows each counter's
item count without any values. A counter holding exactly one unpeeled item holds that item's value
(times its sign); peeling takes it, subtracts it from the item's other counters, and repeats. Which
items peel, from which counter and in which round depends on the index and the hashes only, so the
schedule is computed once from the index (:func:`schedule`), before any value is sent: a bucket that
would not peel completely is known in advance and goes dense instead (lossless by construction).
:func:`replay` then decodes the summed sketch along the schedule. Both loop over peeling rounds
(tens), never over items in Python; on the CPU both are one pass of C (``codec.c``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dynamix.comm import native


@dataclass(frozen=True)
class Schedule:
    """Peeling rounds, flat: ``order`` lists the peeled items round after round (``round_len`` items
    each), every one read from its counter ``pos[item, hash_k]`` (its pure counter)."""

    order: torch.Tensor  # int64 [peeled]
    order_k: torch.Tensor  # int64 [peeled]
    round_len: list[int]
    unpeeled: torch.Tensor  # bool [m]: items no round peeled (their buckets must go dense)

    @property
    def items(self) -> list[torch.Tensor]:
        """The items of each round."""
        return list(self.order.split(self.round_len))

    @property
    def hash_k(self) -> list[torch.Tensor]:
        """Each round's items' pure-counter hashes."""
        return list(self.order_k.split(self.round_len))


def schedule(pos: torch.Tensor, n_counters: int) -> Schedule:
    """Peel the hypergraph with item->counter positions ``pos`` [m, 3] structurally, in tensor
    operations on any device: one loop over rounds (on the CPU the C plan, ``dynamix_plan`` in
    ``codec.c``, peels each bucket itself, with the same rounds: a test).

    As in an invertible Bloom lookup table, each counter keeps its count of unpeeled items and the
    sum of their ids, so a pure counter names its item; a round touches only the counters that
    became pure in the previous one (O(m) work in all). Duplicates are dropped by first occurrence
    (``scatter_reduce`` amin), so the schedule is deterministic on every rank.
    """
    m = pos.shape[0]
    dev = pos.device
    flat = pos.reshape(-1)
    count = torch.bincount(flat, minlength=n_counters)
    idsum = torch.zeros(n_counters, dtype=torch.int64, device=dev).index_add_(
        0, flat, torch.arange(m, device=dev).repeat_interleave(3))
    first = torch.full((n_counters,), 1 << 62, dtype=torch.int64, device=dev)
    pure = (count == 1).nonzero().squeeze(1)
    items, ks = [], []
    while pure.numel():
        cand = idsum[pure]
        pc = pos[cand]
        # an item alone in several counters peels once, from the first of them
        k = (count[pc] == 1).to(torch.int8).argmax(1)
        read = pc.gather(1, k[:, None]).squeeze(1)
        keep = read == pure
        it, k, read, pc = cand[keep], k[keep], read[keep], pc[keep]
        items.append(it)
        ks.append(k)
        p = pc.reshape(-1)
        count.index_add_(0, p, torch.full_like(p, -1))
        idsum.index_add_(0, p, -it.repeat_interleave(3))
        touched = p[count[p] == 1]
        order = torch.arange(touched.numel(), device=dev)
        first.scatter_reduce_(0, touched, order, reduce="amin")
        pure = touched[first[touched] == order]
        first[touched] = 1 << 62
    order = torch.cat(items) if items else torch.zeros(0, dtype=torch.int64, device=dev)
    unpeeled = torch.ones(m, dtype=torch.bool, device=dev)
    unpeeled[order] = False
    return Schedule(order, torch.cat(ks) if ks else torch.zeros_like(order), [len(it) for it in items], unpeeled)


def replay(sched: Schedule, pos: torch.Tensor, sign: torch.Tensor, sketch: torch.Tensor) -> torch.Tensor:
    """Item values [m] from the summed ``sketch`` (consumed: it ends as the peeling residual).

    Within a round no item's pure counter is touched by another item of the round (it holds one
    item), so reading all of a round's counters before subtracting any is the sequential peel, which
    the C loop runs on the CPU (bit for bit the same, a test); :func:`replay_vectorised` elsewhere.
    """
    lib = native.library() if sketch.device.type == "cpu" and sketch.dtype in native.SUFFIX else None
    if lib is None or not sketch.is_contiguous():
        return replay_vectorised(sched, pos, sign, sketch)
    values = torch.zeros(pos.shape[0], dtype=sketch.dtype)
    pos, sign = pos.contiguous(), sign.contiguous()
    getattr(lib, "dynamix_peel_replay_" + native.SUFFIX[sketch.dtype])(
        native.i64(sched.order), native.i64(sched.order_k), sched.order.numel(), native.i64(pos),
        native.i64(sign), native.ptr(sketch), native.ptr(values))
    return values


def replay_vectorised(sched: Schedule, pos: torch.Tensor, sign: torch.Tensor, sketch: torch.Tensor) -> torch.Tensor:
    """:func:`replay` in tensor operations, on any device: one loop over rounds."""
    values = torch.zeros(pos.shape[0], dtype=sketch.dtype, device=sketch.device)
    for it, k in zip(sched.items, sched.hash_k):
        touch = pos[it]
        read = touch.gather(1, k[:, None]).squeeze(1)
        s = sign[it].to(sketch.dtype)
        v = sketch[read] * s.gather(1, k[:, None]).squeeze(1)
        values[it] = v
        sketch.index_add_(0, touch.reshape(-1), (s * -v[:, None]).reshape(-1))
    return values
