"""Data sets (CIFAR-10 sources with their prepared-tensor cache; synthetic interactions) and batches."""

from dynamix.config import DataConfig

from dynamix.data.batches import BatchMaker, GlobalSampler, augment, normalise  # noqa: F401
from dynamix.data.sources import CLASSES, Cifar10, DataSourceError, load_cifar10, resolve_source  # noqa: F401
from dynamix.data.interactions import Interactions, generate as generate_interactions  # noqa: F401


def load_dataset(cfg: DataConfig | None = None) -> Cifar10 | Interactions:
    """The data set ``data.dataset`` names: cifar10 (from ``data.source``) or the synthetic interactions."""
    cfg = cfg or DataConfig()
    return generate_interactions() if cfg.dataset == "interactions" else load_cifar10(cfg)
