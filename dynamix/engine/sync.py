"""Gradient synchronisation with unequal batches: ring all-reduce and parameter server.

Both compute, for worker batches b_1..b_N with B = sum_i b_i and local mean-loss gradients g_i,

    g = sum_i w_i g_i,   w_i = b_i / B,                                        (1)

the gradient of the mean loss over the union batch. (Plain DDP averaging, (1/N) sum_i g_i,
over-weights small batches.) Each worker scales its own gradient by w_i and the reduction SUMS.

Zero-copy layout (:class:`FlatBuffers`): every parameter's ``.grad`` (and, for the parameter server,
its ``.data``) is a view into one flat buffer, so backward writes straight into the buffer that is
reduced, and pulled parameters land straight in the model. Parameters are split into ``num_shards``
contiguous shards balanced by size (one per server; one in ring mode); each shard is followed by
:data:`CONTROL` scalar slots carried along with the same message:

    grad slots  (worker -> server, summed): [B, lr_scale, flags, 0]   (only worker 0 writes them)
    param slots (server -> workers):        [|g_s|^2, 0, 0, 0]         (the shard's aggregated grad)

- :class:`RingSync`: ``all_reduce(SUM)`` of the weighted flat gradient over the workers (gloo's ring
  / halving-doubling on CPU, NCCL's ring on GPU); every worker then takes the same optimiser step.
- Parameter server (:class:`PSClient` on workers, :class:`ParameterServer` on server ranks): push =
  ``reduce(SUM)`` of each gradient shard to its server over the group {workers, server}; the server
  takes the optimiser step on its shard (SGD/Adam are elementwise, so sharding changes nothing) and
  pull = ``broadcast`` of the new shard to the workers. Same math as the ring, hence the same
  trajectory up to float summation order.

With ``engine.compression = lhc`` (:mod:`dynamix.comm`) each reduction is two collectives: the
bitmap index (OR), then [count sketch | dense buckets] (SUM), decoded on every worker
(:class:`LHCRingSync`). In parameter-server mode the server ranks are aggregators
(:class:`LHCAggregator`): they OR the indexes and SUM the sketches of their shard without decoding
them (the in-network aggregation the paper puts on a switch) and send the sums back; the workers
decode and take the optimiser step, as in ring mode. Every sync keeps :class:`~dynamix.comm.Stats`
(bytes on the wire, encode/decode time) for the window metrics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from dynamix.comm import Codec, Stats, index_flags, index_words
from dynamix.config import OptimConfig
from dynamix.train.optim import build_optimizer, learning_rate


CONTROL = 4
FLAG_CHECKPOINT = 1  # servers send their optimiser state after this step
FLAG_STOP = 2  # servers leave their loop without stepping


@dataclass(frozen=True)
class Shard:
    start: int  # first element of the shard in the flat buffer
    numel: int  # parameter elements (the CONTROL slots follow)

    @property
    def region(self) -> slice:
        return slice(self.start, self.start + self.numel + CONTROL)

    @property
    def control(self) -> slice:
        return slice(self.start + self.numel, self.start + self.numel + CONTROL)


def shard_bounds(sizes: list[int], num_shards: int) -> list[tuple[int, int]]:
    """Split parameters (by index) into ``num_shards`` contiguous runs of roughly equal element count."""
    if num_shards > len(sizes):
        raise ValueError(f"engine.num_servers = {num_shards} exceeds the model's {len(sizes)} parameter "
                         "tensors: must be at most that")
    total, bounds, start, acc = sum(sizes), [], 0, 0
    for i, n in enumerate(sizes):
        acc += n
        remaining_shards = num_shards - len(bounds) - 1
        if remaining_shards > 0 and (acc >= total * (len(bounds) + 1) / num_shards
                                     or len(sizes) - i - 1 == remaining_shards):
            bounds.append((start, i + 1))
            start = i + 1
    bounds.append((start, len(sizes)))
    return bounds


class FlatBuffers:
    """Flat gradient (and parameter) buffers whose slices are the model's ``.grad`` (and ``.data``)."""

    def __init__(self, model: nn.Module, num_shards: int = 1, params_too: bool = False) -> None:
        params = [p for p in model.parameters() if p.requires_grad]
        sizes = [p.numel() for p in params]
        ref = params[0]
        self.shards: list[Shard] = []
        offsets, pos = [], 0
        for lo, hi in shard_bounds(sizes, num_shards):
            numel = sum(sizes[lo:hi])
            self.shards.append(Shard(pos, numel))
            for n in sizes[lo:hi]:
                offsets.append(pos)
                pos += n
            pos += CONTROL
        self.numel = pos
        self.grad = torch.zeros(pos, dtype=ref.dtype, device=ref.device)
        self.param = torch.zeros(pos, dtype=ref.dtype, device=ref.device) if params_too else None
        with torch.no_grad():
            for p, off, n in zip(params, offsets, sizes):
                p.grad = self.grad[off : off + n].view_as(p)
                if self.param is not None:
                    self.param[off : off + n].copy_(p.reshape(-1))
                    p.data = self.param[off : off + n].view_as(p)

    @property
    def nbytes(self) -> int:
        return self.grad.numel() * self.grad.element_size()

    def zero_grad(self) -> None:
        self.grad.zero_()


class RingSync:
    """All-reduce of the weighted gradient; afterwards every worker holds g of Eq. (1) in ``.grad``."""

    arch = "ring"
    server_steps = False  # the workers take the optimiser step

    def __init__(self, flat: FlatBuffers, group: Any = None) -> None:
        self.flat, self.group = flat, group
        self.stats = Stats()

    def reduce(self, weight: float, global_batch: int, lr_scale: float, flags: int) -> float:
        """Eq. (1); returns |g|^2 of the aggregated gradient."""
        self.flat.grad.mul_(weight)
        dist.all_reduce(self.flat.grad, op=dist.ReduceOp.SUM, group=self.group)
        self.stats.dense(self.flat.nbytes)
        return float(self.flat.grad.dot(self.flat.grad))


def _wait(works: list[Any]) -> None:
    for w in works:
        w.wait()


class LHCRingSync:
    """Ring mode with LHC: all-reduce of the index (OR), then of the sketch (SUM); every worker decodes."""

    arch = "ring"
    server_steps = False

    def __init__(self, flat: FlatBuffers, codec: Codec, group: Any = None) -> None:
        self.flat, self.codec, self.group = flat, codec, group
        self.stats = codec.stats

    def reduce(self, weight: float, global_batch: int, lr_scale: float, flags: int) -> float:
        """Eq. (1) through the compressed collectives; returns |g|^2 of the aggregated gradient."""
        g = self.flat.grad  # weighted in the encoder: one pass over the gradient fewer
        index = self.codec.index(g)
        dist.all_reduce(index, op=dist.ReduceOp.BOR, group=self.group)
        plan = self.codec.plan(index, g.numel())
        msg = self.codec.encode(g, plan, weight)
        dist.all_reduce(msg, op=dist.ReduceOp.SUM, group=self.group)
        return self.codec.decode(msg, plan, g)


class LHCPSClient:
    """Worker side of LHC with aggregating servers: per shard, push index and sketch, pull their sums."""

    arch = "ps"
    server_steps = False

    def __init__(self, flat: FlatBuffers, codec: Codec, server_ranks: list[int], groups: list[Any],
                 rank: int) -> None:
        self.flat, self.codec, self.server_ranks, self.groups, self.rank = flat, codec, server_ranks, groups, rank
        self.stats = codec.stats

    def _round_trip(self, tensors: list[torch.Tensor], op: Any) -> None:
        """Reduce each shard's tensor to its server, then receive the server's result."""
        pairs = list(zip(self.server_ranks, self.groups))
        _wait([dist.reduce(t, dst=r, op=op, group=g, async_op=True) for t, (r, g) in zip(tensors, pairs)])
        _wait([dist.broadcast(t, src=r, group=g, async_op=True) for t, (r, g) in zip(tensors, pairs)])

    def reduce(self, weight: float, global_batch: int, lr_scale: float, flags: int) -> float:
        g = self.flat.grad  # weighted in the encoder
        shards = [g[s.start : s.start + s.numel] for s in self.flat.shards]
        indexes = [self.codec.index(x, flags if self.rank == 0 else 0) for x in shards]
        self._round_trip(indexes, dist.ReduceOp.BOR)
        if flags & FLAG_STOP:
            return 0.0
        plans = [self.codec.plan(i, x.numel()) for i, x in zip(indexes, shards)]
        msgs = [self.codec.encode(x, p, weight) for x, p in zip(shards, plans)]
        self._round_trip(msgs, dist.ReduceOp.SUM)
        return sum(self.codec.decode(m, p, x) for m, p, x in zip(msgs, plans, shards))

    def stop(self) -> None:
        """Tell the servers to leave their loop."""
        self.flat.zero_grad()
        self.reduce(0.0, 0, 0.0, FLAG_STOP)


class LHCAggregator:
    """Server rank with LHC: ORs the indexes and SUMs the sketches of its shard, never decoding them.

    It derives the message layout (sketch sizes, dense buckets) from the merged index, as the workers
    do, to know how many counters to receive.
    """

    def __init__(self, numel: int, rank: int, group: Any, codec: Codec) -> None:
        self.numel, self.rank, self.group, self.codec = numel, rank, group, codec

    def serve(self) -> int:
        """Run until a STOP flag arrives; returns the number of reductions aggregated."""
        steps = 0
        while True:
            index = torch.zeros(index_words(self.numel), dtype=torch.int64)
            dist.reduce(index, dst=self.rank, op=dist.ReduceOp.BOR, group=self.group)
            dist.broadcast(index, src=self.rank, group=self.group)
            if index_flags(index) & FLAG_STOP:
                return steps
            msg = torch.zeros(self.codec.plan(index, self.numel).message_len)
            dist.reduce(msg, dst=self.rank, op=dist.ReduceOp.SUM, group=self.group)
            dist.broadcast(msg, src=self.rank, group=self.group)
            steps += 1


class PSClient:
    """Worker side of the parameter server: push weighted shards, pull updated shards."""

    arch = "ps"
    server_steps = True

    def __init__(self, flat: FlatBuffers, server_ranks: list[int], groups: list[Any], rank: int) -> None:
        if flat.param is None:
            raise ValueError("parameter-server mode needs FlatBuffers(params_too=True)")
        self.flat, self.server_ranks, self.groups, self.rank = flat, server_ranks, groups, rank
        self.server_opt_states: list[dict] | None = None
        self.stats = Stats()

    def reduce(self, weight: float, global_batch: int, lr_scale: float, flags: int) -> float:
        """Push g_i w_i, server steps, pull parameters; returns |g|^2 of the aggregated gradient."""
        grad, param = self.flat.grad, self.flat.param
        grad.mul_(weight)
        control = torch.tensor([global_batch, lr_scale, flags, 0.0], dtype=grad.dtype) if self.rank == 0 else 0.0
        for shard in self.flat.shards:
            grad[shard.control] = control
        works = [dist.reduce(grad[s.region], dst=r, op=dist.ReduceOp.SUM, group=g, async_op=True)
                 for s, r, g in zip(self.flat.shards, self.server_ranks, self.groups)]
        _wait(works)
        if flags & FLAG_STOP:
            return 0.0
        self.stats.dense(self.flat.nbytes)
        _wait([dist.broadcast(param[s.region], src=r, group=g, async_op=True)
               for s, r, g in zip(self.flat.shards, self.server_ranks, self.groups)])
        if flags & FLAG_CHECKPOINT:
            states = []
            for r, g in zip(self.server_ranks, self.groups):
                box = [None]
                dist.broadcast_object_list(box, src=r, group=g)
                states.append(box[0])
            self.server_opt_states = states
        return float(sum(param[s.control][0] for s in self.flat.shards))

    def stop(self) -> None:
        """Tell the servers to leave their loop."""
        self.flat.zero_grad()
        self.reduce(0.0, 0, 0.0, FLAG_STOP)


class ParameterServer:
    """Server rank for shard ``index``: holds the shard and its optimiser state, steps once per push."""

    def __init__(self, model: nn.Module, index: int, num_servers: int, rank: int, group: Any,
                 optim: OptimConfig, total_iters: int, iteration: int = 0,
                 opt_state: dict | None = None) -> None:
        flat = FlatBuffers(model, num_servers, params_too=True)
        self.shard = flat.shards[index]
        n = self.shard.numel
        self.send = flat.param[self.shard.region].clone()  # [params of the shard, CONTROL slots]
        self.recv = torch.zeros_like(self.send)
        self.param = nn.Parameter(self.send[:n])  # shares storage: the optimiser updates ``send``
        self.param.grad = self.recv[:n]
        self.opt = build_optimizer([self.param], optim)
        if opt_state is not None:
            self.opt.load_state_dict(opt_state)
        self.optim_cfg, self.total_iters, self.iteration = optim, total_iters, iteration
        self.rank, self.group = rank, group

    def serve(self) -> int:
        """Run until a STOP flag arrives; returns the number of steps taken."""
        n, steps = self.shard.numel, 0
        while True:
            self.recv.zero_()
            dist.reduce(self.recv, dst=self.rank, op=dist.ReduceOp.SUM, group=self.group)
            global_batch, lr_scale, flags = (float(v) for v in self.recv[n : n + 3])
            flags = int(round(flags))
            if flags & FLAG_STOP:
                return steps
            lr = learning_rate(self.optim_cfg, self.iteration, self.total_iters, int(round(global_batch)), lr_scale)
            for group in self.opt.param_groups:
                group["lr"] = lr
            self.opt.step()
            self.iteration += 1
            steps += 1
            g = self.recv[:n]
            self.send[n:] = 0.0
            self.send[n] = g.dot(g)
            dist.broadcast(self.send, src=self.rank, group=self.group)
            if flags & FLAG_CHECKPOINT:
                dist.broadcast_object_list([self.opt.state_dict()], src=self.rank, group=self.group)
