"""Data sets (CIFAR-10 sources with their prepared-tensor cache; synthetic interactions and tokens) and batches."""

from dynamix.config import DataConfig

from dynamix.data.batches import BatchMaker, GlobalSampler, crop_flip, normalise  # noqa: F401
from dynamix.data.sources import CLASSES, Cifar10, DataSourceError, load_cifar10, resolve_source  # noqa: F401
from dynamix.data.interactions import Interactions, generate as generate_interactions  # noqa: F401
from dynamix.data.tokens import Tokens, generate as generate_tokens  # noqa: F401

GENERATED = {"interactions": generate_interactions, "tokens": generate_tokens}
"""The synthetic id data sets by ``data.dataset`` name: ``generate(seed, train, test)``."""


def load_dataset(cfg: DataConfig | None = None) -> Cifar10 | Interactions | Tokens:
    """The data set ``data.dataset`` names: cifar10 (from ``data.source``) or a synthetic one."""
    cfg = cfg or DataConfig()
    return GENERATED[cfg.dataset]() if cfg.dataset in GENERATED else load_cifar10(cfg)
