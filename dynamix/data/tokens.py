"""A synthetic token stream for the LSTM language model: documented, seeded, generated in memory.

Generator (seed :data:`SEED`; every rank and every run builds the same tensors in well under a second):

- a vocabulary of :data:`VOCAB` tokens, token v in topic v mod :data:`TOPICS`; token popularity is
  Zipf, p(v) proportional to (v + 1)^-:data:`ZIPF_S` (token 0 the most common), as word frequencies are;
- the stream's topic moves to the next topic (t + 1 mod :data:`TOPICS`) after each token with
  probability :data:`FOLLOW`, and jumps to a uniform topic otherwise; each token is drawn from its
  topic's tokens by popularity.

So the next token depends on the context (the current topic predicts the next one), and common tokens
recur in every batch while most of the vocabulary appears in few: the embedding and softmax rows a
batch touches are a small, overlapping part of the tables, the sparsity of language-model gradients.
A sample is a window of :data:`CONTEXT` tokens followed by the token to predict, int64
[N, CONTEXT + 1]; its label is that last token. Train and test windows come from separate streams.
Same field layout as :class:`~dynamix.data.sources.Cifar10`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

SEED = 1409
VOCAB = 32_768
TOPICS = 64
ZIPF_S = 1.1
FOLLOW = 0.8
CONTEXT = 8
TRAIN, TEST = 60_000, 6_000


@dataclass(frozen=True)
class Tokens:
    """Windows of ``CONTEXT + 1`` tokens and their labels (the last token of each window)."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    source: str = f"tokens:seed={SEED}"
    augmentable: ClassVar[bool] = False  # ids: no image augmentation


def stream(n: int, gen: torch.Generator) -> torch.Tensor:
    """int64 [n] tokens: the topic walk, then each token by popularity within its topic."""
    jump = torch.rand(n, generator=gen) >= FOLLOW
    jump[0] = True
    start = torch.randint(0, TOPICS, (n,), generator=gen)
    pos = torch.arange(n)
    last_jump = torch.cummax(torch.where(jump, pos, 0), 0).values  # the walk restarts at each jump
    topic = (start[last_jump] + pos - last_jump) % TOPICS
    popularity = (torch.arange(VOCAB, dtype=torch.float64) + 1) ** -ZIPF_S
    out = torch.empty(n, dtype=torch.int64)
    for t in range(TOPICS):
        sel = (topic == t).nonzero().squeeze(1)
        if len(sel):
            tokens = torch.arange(t, VOCAB, TOPICS)
            out[sel] = tokens[torch.multinomial(popularity[tokens], len(sel), replacement=True, generator=gen)]
    return out


def _windows(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    if not n:
        return torch.empty(0, CONTEXT + 1, dtype=torch.int64), torch.empty(0, dtype=torch.int64)
    x = stream(n + CONTEXT, gen).unfold(0, CONTEXT + 1, 1).contiguous()
    return x, x[:, -1].clone()


def generate(seed: int = SEED, train: int = TRAIN, test: int = TEST) -> Tokens:
    """The data set; ``seed`` and the sizes are parameters for tests only."""
    gen = torch.Generator().manual_seed(seed)
    train_x, train_y = _windows(train, gen)
    test_x, test_y = _windows(test, gen)
    return Tokens(train_x, train_y, test_x, test_y, f"tokens:seed={seed}")
