"""Registry of models: CIFAR-form (3x32x32 input, 10 logits), ``ncf`` on (user, item) ids, and
``lstm-lm`` on token windows.

Sits on torch and :mod:`dynamix.config`; the trainer, the simulator and its calibration, the engine
and ``dynamix train`` build their models here (:func:`build_model`).

Modules, in the order of their inputs (images, then ids, then tokens; the registry below names
them):

- ``small``   tiny-cnn and mlp, the CPU-sized models for laptops and CI;
- ``resnet``  CIFAR ResNets (resnet8, resnet20) and ResNet18/34/50 with a 3x3 stride-1 stem;
- ``vgg``     VGG11/13/16/19 with batch norm, CIFAR form;
- ``ncf``     neural collaborative filtering on (user, item) ids: the sparse-gradient workload;
- ``lstm``    an LSTM language model with a sampled softmax on token windows: the second one.

Paper-size models (VGG11/13/16/19 with batch norm, ResNet18/34/50 in the CIFAR stem variant of
K. Liu's widely used pytorch-cifar) are the ``paper`` profile's workloads for GPU clusters; the
CPU-sized ones (tiny-cnn, mlp, resnet8, resnet20 of He et al. 2016, Sec. 4.2) stand in for them on
laptops and CI. ``width`` multiplies every channel count of the VGG and ResNet families, and the
embedding dimension (32) of ``ncf``, the sparse-gradient workload (:mod:`dynamix.models.ncf`,
trained on ``data.dataset = interactions``), and the embedding (32) and hidden (64) sizes of
``lstm-lm``, the second (:mod:`dynamix.models.lstm`, a sampled-softmax language model on
``data.dataset = tokens``).

    >>> from dynamix.models import build_model
    >>> build_model("resnet20").num_parameters()  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from dynamix.config import ConfigError, brief
from dynamix.models.lstm import LSTMLM
from dynamix.models.ncf import NCF
from dynamix.models.resnet import cifar_resnet, resnet_bottleneck, resnet_basic
from dynamix.models.small import MLP, TinyCNN
from dynamix.models.vgg import VGG

NUM_CLASSES = 10

REGISTRY: dict[str, Callable[[float], nn.Module]] = {
    "tiny-cnn": lambda w: TinyCNN(width=w),
    "mlp": lambda w: MLP(width=w),
    "resnet8": lambda w: cifar_resnet(depth=8, width=w),
    "resnet20": lambda w: cifar_resnet(depth=20, width=w),
    "vgg11": lambda w: VGG("vgg11", width=w),
    "vgg13": lambda w: VGG("vgg13", width=w),
    "vgg16": lambda w: VGG("vgg16", width=w),
    "vgg19": lambda w: VGG("vgg19", width=w),
    "resnet18": lambda w: resnet_basic((2, 2, 2, 2), width=w),
    "resnet34": lambda w: resnet_basic((3, 4, 6, 3), width=w),
    "resnet50": lambda w: resnet_bottleneck((3, 4, 6, 3), width=w),
    "ncf": lambda w: NCF(dim=max(2, int(round(32 * w)))),
    "lstm-lm": lambda w: LSTMLM(dim=max(2, int(round(32 * w))), hidden=max(2, int(round(64 * w)))),
}


def check_model(name: str, width: float = 1.0) -> None:
    """Refuse a model :func:`build_model` cannot build (a :class:`ConfigError` naming the field and its
    choices), without building it: ``dynamix launch`` asks before torchrun starts ranks that would fail."""
    if name not in REGISTRY:
        raise ConfigError(f"model.name = {brief(name)} is unknown: must be one of {', '.join(REGISTRY)}")
    if not width > 0:
        raise ConfigError(f"model.width = {width} is out of range: must be > 0")


def build_model(name: str, width: float = 1.0) -> nn.Module:
    """A freshly initialised model; the caller seeds torch first for reproducible weights."""
    check_model(name, width)
    return REGISTRY[name](width)


def num_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def gradient_bytes(model: nn.Module) -> int:
    """S in the communication cost model: bytes of one full gradient (fp32)."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def check_output(model: nn.Module) -> torch.Size:
    """Shape of the logits for a 2-sample batch (used by tests and ``dynamix models``)."""
    model.eval()
    example = getattr(model, "example_input", None)
    with torch.no_grad():
        return model(example() if example else torch.zeros(2, 3, 32, 32)).shape
