"""Data sets and batches: CIFAR-10 from three sources with a prepared-tensor cache, the synthetic
interaction and token sets, and the per-worker batches cut from them.

Sits on the base modules (:mod:`dynamix.config`, :mod:`dynamix.io`, :mod:`dynamix.seeding`); the
trainer, the simulator, the engine, the RL environment and the experiments load their data here.
:func:`load_dataset` returns the set ``data.dataset`` names.

Modules, in data-flow order (files or a seed in, worker batches out):

- ``embed``         build the embedded class-balanced subset ``data/cifar10-mini.tar.gz`` from a
                    full ImageFolder set (``dynamix make-mini``);
- ``sources``       CIFAR-10 from torchvision, a local path or the embedded subset, decoded once
                    into a cached uint8 tensor file;
- ``interactions``  the seeded synthetic (user, item) set of the NCF workload, in memory;
- ``tokens``        the seeded synthetic token stream of the LSTM language model, in memory;
- ``batches``       the global sampler that hands each worker its slice of an iteration's B samples,
                    normalisation and augmentation (crop, flip).
"""

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
