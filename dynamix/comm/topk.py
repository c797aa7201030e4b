"""Top-k sparsification with error feedback: LOSSY, for dense models, before lossless compression.

Each worker keeps the k = ceil(fraction * n) largest-magnitude entries of its gradient plus the
residual it carried over, and carries the rest to the next iteration (error feedback; Stich, Cordonnier
and Jaggi, NeurIPS 2018; Karimireddy et al., ICML 2019):

    a_t = g_t + e_t,    s_t = top_k(a_t),    e_{t+1} = a_t - s_t

so every gradient entry is applied eventually, but late: the trajectory differs from uncompressed
training (that step is lossy). The sparse s_t is what LHC (:mod:`dynamix.comm.lhc`) then reduces
exactly. Residuals live on each worker and are not checkpointed: a resumed run restarts them at 0.
"""

from __future__ import annotations

import math

import torch


class ErrorFeedbackTopK:
    """In-place top-k of (gradient + residual), the remainder kept as the next residual."""

    def __init__(self, fraction: float) -> None:
        if not 0 < fraction <= 1:
            raise ValueError(f"top-k fraction = {fraction} is out of range: must be in (0, 1]")
        self.fraction = fraction
        self.residual: torch.Tensor | None = None

    def __call__(self, g: torch.Tensor) -> None:
        """Replace ``g`` by top_k(g + residual); the rest becomes the residual."""
        if self.residual is None:
            self.residual = torch.zeros_like(g)
        acc = self.residual.add_(g)  # a_t, in the residual's storage
        k = math.ceil(self.fraction * g.numel())
        keep = acc.abs().topk(k, sorted=False).indices
        g.zero_()
        g[keep] = acc[keep]
        acc[keep] = 0.0  # e_{t+1} = a_t - s_t
