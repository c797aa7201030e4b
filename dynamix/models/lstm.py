"""An LSTM language model with a sampled softmax: the paper's second sparse workload, sized for a CPU.

Input: int64 [B, CONTEXT + 1] token windows from :mod:`dynamix.data.tokens`; the model reads the first
CONTEXT tokens (embedding, one LSTM layer) and scores the next one. Output: [B, VOCAB] logits.

In training the softmax runs over the batch's own tokens only, every token of its windows, the
targets included (a sampled softmax whose candidates are the batch's target vocabulary, Jean et al.,
ACL 2015; the window carries its target, which the model reads for the candidate set alone, never as
context). Every other logit is -inf, so its probability and its gradient are exactly zero. A batch thus
touches only its tokens' rows of the embedding and of the softmax weights and bias, ~97 % of the
parameters: the sparse gradient LHC (:mod:`dynamix.comm`) compresses, as in the LSTM of the LHC paper
(arXiv 2402.07529). Evaluation (``model.eval()``) scores the full vocabulary.
"""

from __future__ import annotations

import torch
from torch import nn

VOCAB = 32_768  # the size of dynamix.data.tokens' vocabulary (a test checks that they agree)


class LSTMLM(nn.Module):
    """Embedding -> LSTM -> last hidden state -> softmax over the vocabulary (sampled in training)."""

    def __init__(self, vocab: int = VOCAB, dim: int = 32, hidden: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        nn.init.normal_(self.embed.weight, std=0.1)
        self.lstm = nn.LSTM(dim, hidden, batch_first=True)
        self.out_weight = nn.Parameter(torch.randn(vocab, hidden) * hidden**-0.5)
        self.out_bias = nn.Parameter(torch.zeros(vocab))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lstm(self.embed(x[:, :-1]))[0][:, -1]  # [B, hidden]: the context's summary
        if not self.training:
            return h @ self.out_weight.T + self.out_bias
        cand = torch.unique(x)  # the batch's tokens, its targets among them
        logits = h.new_full((len(x), self.out_bias.numel()), float("-inf"))
        logits[:, cand] = h @ self.out_weight[cand].T + self.out_bias[cand]
        return logits

    @staticmethod
    def example_input() -> torch.Tensor:
        return torch.tensor([[0, 1, 2], [VOCAB - 3, VOCAB - 2, VOCAB - 1]])  # two windows of 2 tokens + target
