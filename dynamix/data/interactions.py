"""A synthetic implicit-feedback data set for the NCF workload: documented, seeded, generated in memory.

Generator (seed :data:`SEED`; every rank and every run builds the same tensors in well under a second):

- :data:`USERS` users and :data:`ITEMS` items, each in one of :data:`GROUPS` taste groups (uniform);
- item popularity is Zipf, p(i) proportional to (i + 1)^-:data:`ZIPF_S` (item 0 the most popular);
- a positive sample (label 1, half the samples) is a uniform user u and an item drawn from the
  popularity re-weighted by :data:`AFFINITY` for items in u's group;
- a negative sample (label 0) is a uniform user and a uniform item (NCF's negative sampling).

So a model learns popularity and group affinity; since popular items recur in many batches, the
workers' embedding-gradient rows overlap, as in real recommendation training. Samples are int64
[N, 2] (user, item) with int64 labels, in the field layout of :class:`~dynamix.data.sources.Cifar10`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

SEED = 2402
USERS = 2_000
ITEMS = 20_000
GROUPS = 16
ZIPF_S = 1.1
AFFINITY = 8.0
TRAIN, TEST = 60_000, 6_000


@dataclass(frozen=True)
class Interactions:
    """(user, item) samples and their labels (1 = interaction)."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    source: str = f"interactions:seed={SEED}"
    augmentable: ClassVar[bool] = False  # ids: no image augmentation


def _samples(n: int, gen: torch.Generator, user_group: torch.Tensor, item_group: torch.Tensor,
             popularity: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    users = torch.randint(0, USERS, (n,), generator=gen)
    label = torch.rand(n, generator=gen) < 0.5
    items = torch.randint(0, ITEMS, (n,), generator=gen)  # negatives
    for g in range(GROUPS):  # positives, per taste group
        sel = (label & (user_group[users] == g)).nonzero().squeeze(1)
        if not len(sel):
            continue
        weights = popularity * torch.where(item_group == g, AFFINITY, 1.0)
        items[sel] = torch.multinomial(weights, len(sel), replacement=True, generator=gen)
    return torch.stack([users, items], 1), label.long()


def generate(seed: int = SEED, train: int = TRAIN, test: int = TEST) -> Interactions:
    """The data set; ``seed`` and the sizes are parameters for tests only."""
    gen = torch.Generator().manual_seed(seed)
    user_group = torch.randint(0, GROUPS, (USERS,), generator=gen)
    item_group = torch.randint(0, GROUPS, (ITEMS,), generator=gen)
    popularity = (torch.arange(ITEMS, dtype=torch.float64) + 1) ** -ZIPF_S
    train_x, train_y = _samples(train, gen, user_group, item_group, popularity)
    test_x, test_y = _samples(test, gen, user_group, item_group, popularity)
    return Interactions(train_x, train_y, test_x, test_y, f"interactions:seed={seed}")
