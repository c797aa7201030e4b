"""Gradient statistics over a window: norms and the normalised gradient std/variance.

Definitions (the paper names sigma_norm and sigma2_norm but does not define them; these are ours).
For one worker with local flattened gradients g_1..g_k over the k iterations of a window:

    gbar        = (1/k) sum_t g_t
    sigma2      = (1/k) sum_t |g_t - gbar|^2  =  (1/k) sum_t |g_t|^2 - |gbar|^2
    sigma2_norm = sigma2 / (|gbar|^2 + eps)          (noise-to-signal ratio, dimensionless)
    sigma_norm  = sqrt(sigma2_norm)

A large sigma2_norm means the gradient direction is dominated by sampling noise (the batch is small
relative to the gradient noise scale, McCandlish et al. 2018); it falls as b_i grows. With k = 1
both are 0 by definition. The running sums need one extra parameter-sized vector per worker.
"""

from __future__ import annotations

import math

import torch

EPS = 1e-12


class GradientWindowStats:
    """Accumulates one worker's local gradients over a window; O(P) memory."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._sum: torch.Tensor | None = None
        self._sq = 0.0
        self._norm = 0.0
        self.count = 0

    def add(self, flat_grad: torch.Tensor) -> float:
        """Record one iteration's local gradient (flattened); returns its squared norm."""
        g = flat_grad.detach().to(torch.float64)
        sq = float(g.dot(g))
        self._sum = g.clone() if self._sum is None else self._sum.add_(g)
        self._sq += sq
        self._norm += math.sqrt(sq)
        self.count += 1
        return sq

    def summary(self) -> dict[str, float]:
        """Means over the window: grad_norm, grad_sqnorm, sigma_norm, sigma2_norm."""
        if self.count == 0:
            return {"grad_norm": 0.0, "grad_sqnorm": 0.0, "sigma_norm": 0.0, "sigma2_norm": 0.0}
        k = self.count
        mean_sq = self._sq / k
        gbar = self._sum / k
        gbar_sq = float(gbar.dot(gbar))
        sigma2 = max(mean_sq - gbar_sq, 0.0)
        s2n = sigma2 / (gbar_sq + EPS)
        return {
            "grad_norm": self._norm / k,
            "grad_sqnorm": mean_sq,
            "sigma_norm": math.sqrt(s2n),
            "sigma2_norm": s2n,
        }


def flat_grad(model: torch.nn.Module) -> torch.Tensor:
    """All parameter gradients concatenated (zeros for parameters without a gradient)."""
    return torch.cat(
        [
            (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
            for p in model.parameters()
            if p.requires_grad
        ]
    )
