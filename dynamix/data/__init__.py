"""CIFAR-10 sources, the prepared-tensor cache, and batch construction."""

from dynamix.data.batches import BatchMaker, GlobalSampler, augment, normalise  # noqa: F401
from dynamix.data.sources import CLASSES, Cifar10, DataSourceError, load_cifar10, resolve_source  # noqa: F401
