"""Peeling decoder of a count sketch whose non-zero positions are known (the merged index).

Every rank knows which items (merged non-zeros) map to which counters, so it knows each counter's
item count without any values. A counter holding exactly one unpeeled item holds that item's value
(times its sign); peeling takes it, subtracts it from the item's other counters, and repeats. Which
items peel, from which counter and in which round depends on the index and the hashes only, so the
schedule is computed once from the index (:func:`schedule`), before any value is sent: a bucket that
would not peel completely is known in advance and goes dense instead (lossless by construction).
:func:`replay` then decodes the summed sketch along the schedule. Both loop over peeling rounds
(tens), never over items.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Schedule:
    """Peeling rounds: ``items[r]`` peel in round r from column ``hash_k[r]`` of their positions."""

    items: list[torch.Tensor]
    hash_k: list[torch.Tensor]
    unpeeled: torch.Tensor  # bool [m]: items no round peeled (their buckets must go dense)


def schedule(pos: torch.Tensor, n_counters: int) -> Schedule:
    """Peel the hypergraph with item->counter positions ``pos`` [m, 3] structurally.

    As in an invertible Bloom lookup table, each counter keeps its count of unpeeled items and the
    sum of their ids, so a pure counter names its item; a round touches only the counters that
    became pure in the previous one (O(m) work in all).
    """
    m = pos.shape[0]
    flat = pos.reshape(-1)
    ids = torch.arange(m, device=pos.device).repeat_interleave(3)
    count = torch.bincount(flat, minlength=n_counters)
    idsum = torch.zeros(n_counters, dtype=torch.int64, device=pos.device).index_add_(0, flat, ids)
    pure = (count == 1).nonzero().squeeze(1)
    peeled = torch.zeros(m, dtype=torch.bool, device=pos.device)
    items, ks = [], []
    while pure.numel():
        cand = idsum[pure]
        # an item alone in several counters peels once, from the first of them
        k = (count[pos[cand]] == 1).to(torch.int8).argmax(1)
        first = pos[cand].gather(1, k[:, None]).squeeze(1) == pure
        it, k = cand[first], k[first]
        items.append(it)
        ks.append(k)
        peeled[it] = True
        p = pos[it].reshape(-1)
        count.index_add_(0, p, torch.full_like(p, -1))
        idsum.index_add_(0, p, -it.repeat_interleave(3))
        touched = p[count[p] == 1]
        pure = torch.unique(touched)
    return Schedule(items, ks, ~peeled)


def replay(sched: Schedule, pos: torch.Tensor, sign: torch.Tensor, sketch: torch.Tensor) -> torch.Tensor:
    """Item values [m] from the summed ``sketch`` (consumed: it ends as the peeling residual).

    Within a round no item's pure counter is touched by another item of the round (it holds one
    item), so reading all of a round's counters before subtracting any is the sequential peel.
    """
    values = torch.zeros(pos.shape[0], dtype=sketch.dtype, device=sketch.device)
    for it, k in zip(sched.items, sched.hash_k):
        p, s = pos[it], sign[it].to(sketch.dtype)
        v = sketch[p.gather(1, k[:, None]).squeeze(1)] * s.gather(1, k[:, None]).squeeze(1)
        values[it] = v
        sketch.index_add_(0, p.reshape(-1), (s * -v[:, None]).reshape(-1))
    return values
