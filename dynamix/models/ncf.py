"""Neural collaborative filtering (He et al., WWW 2017, NeuMF): the naturally sparse workload.

Input: int64 [B, 2] (user id, item id) from :mod:`dynamix.data.interactions`; output: 2 logits
(no interaction / interaction), so the cross-entropy training loop is the one the CIFAR models use.
A batch touches at most B rows of each embedding table, so the embedding gradients, ~95 % of the
parameters, are zero outside those rows: the gradient LHC (:mod:`dynamix.comm`) compresses.
"""

from __future__ import annotations

import torch
from torch import nn

USERS = 2_000  # the sizes of dynamix.data.interactions' data set (tests check that they agree)
ITEMS = 20_000


class NCF(nn.Module):
    """GMF (u * v) and an MLP on [u; v], concatenated into a linear head (NeuMF's fusion)."""

    def __init__(self, users: int = USERS, items: int = ITEMS, dim: int = 32, num_classes: int = 2) -> None:
        super().__init__()
        self.user_gmf, self.item_gmf = nn.Embedding(users, dim), nn.Embedding(items, dim)
        self.user_mlp, self.item_mlp = nn.Embedding(users, dim), nn.Embedding(items, dim)
        for e in (self.user_gmf, self.item_gmf, self.user_mlp, self.item_mlp):
            nn.init.normal_(e.weight, std=0.1)
        self.mlp = nn.Sequential(nn.Linear(2 * dim, dim), nn.ReLU(inplace=True), nn.Linear(dim, dim // 2),
                                 nn.ReLU(inplace=True))
        self.head = nn.Linear(dim + dim // 2, num_classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        u, i = ids[:, 0], ids[:, 1]
        gmf = self.user_gmf(u) * self.item_gmf(i)
        mlp = self.mlp(torch.cat([self.user_mlp(u), self.item_mlp(i)], 1))
        return self.head(torch.cat([gmf, mlp], 1))

    @staticmethod
    def example_input() -> torch.Tensor:
        return torch.tensor([[0, 0], [USERS - 1, ITEMS - 1]])
