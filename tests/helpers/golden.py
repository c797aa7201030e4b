"""The golden computation: a few SGD steps of the tiny CNN from fixed seeds, digested to one hash.

Small enough for the default tier (about a second on one thread), wide enough to touch every
library whose kernels depend on the instruction set: oneDNN (convolutions), MKL (the linear head's
GEMM) and ATen's vectorised kernels (batch norm, ReLU, pooling, the loss, the optimiser). One torch
thread: the thread count can change how a parallel reduction splits, which the ISA pin does not cover.
Run as a script, it prints ``{"capability": ..., "sha256": ...}`` for the process's own environment.
"""

from __future__ import annotations

import hashlib
import json

import dynamix  # noqa: F401  first: pins the CPU kernels' instruction set (dynamix.isa)

import torch
from torch.nn import functional as F

from dynamix import isa
from dynamix.models import build_model

RECIPE = ("tiny-cnn x0.5, 3 SGD steps (lr 0.1, momentum 0.9, wd 5e-4) on 32 N(0,1) images, seeds 0/1, "
          "1 thread, in the default and the channels-last layout")


def _trained_states(steps: int) -> list[tuple[str, torch.Tensor]]:
    """(layout/name, tensor) of the state dict (parameters and batch-norm buffers) after ``steps`` steps,
    trained once in each memory layout (the default profile's NCHW and the ``cpu`` profile's
    channels-last, which take different oneDNN kernels), on one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    states = []
    try:
        for layout in (torch.contiguous_format, torch.channels_last):
            torch.manual_seed(0)
            model = build_model("tiny-cnn", 0.5).to(memory_format=layout)
            opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
            gen = torch.Generator().manual_seed(1)
            for _ in range(steps):
                x = torch.randn(32, 3, 32, 32, generator=gen).contiguous(memory_format=layout)
                y = torch.randint(0, 10, (32,), generator=gen)
                opt.zero_grad()
                F.cross_entropy(model(x), y).backward()
                opt.step()
            states += [(f"{str(layout).removeprefix('torch.')}/{name}", tensor.detach().contiguous())
                       for name, tensor in model.state_dict().items()]
        return states
    finally:
        torch.set_num_threads(threads)


def conv_net_digest(steps: int = 3) -> str:
    """sha256 over the trained state dicts (:func:`_trained_states`), names and bytes."""
    digest = hashlib.sha256()
    for key, tensor in _trained_states(steps):
        digest.update(key.split("/", 1)[1].encode())
        digest.update(tensor.numpy().tobytes())
    return digest.hexdigest()


def conv_net_norms(steps: int = 3) -> dict[str, list[float]]:
    """Each floating tensor's L1 and L2 norm after the same steps: what another CPU's bits are compared
    with, within a tolerance, where no record of its own bits exists."""
    return {key: [float(t.double().abs().sum()), float(t.double().norm())]
            for key, t in _trained_states(steps) if t.is_floating_point()}


if __name__ == "__main__":
    print(json.dumps({"capability": torch.backends.cpu.get_cpu_capability(), "sha256": conv_net_digest(),
                      "cpu": isa.cpu_identity(), "norms": conv_net_norms()}))
