"""GNS / Pollux goodput: grow the global batch as the gradient noise scale grows; AdaScale the LR.

References: McCandlish et al., "An empirical model of large-batch training" (2018), App. A (the
estimator); Qiao et al., "Pollux: co-adaptive cluster scheduling for goodput-optimized deep learning"
(OSDI'21), Sec. 3 (efficiency, goodput); Johnson et al., "AdaScale SGD" (ICML'20) (the gain). The
AdaptDL package that implements Pollux does not run on current numpy/setuptools, so this is written
from the formulas; names follow AdaptDL's ``GradientNoiseScale``/``GoodputFunction`` where they exist.

Estimator (derivation). Let G be the true gradient and Sigma the per-sample gradient covariance. A
mean gradient over b i.i.d. samples satisfies E|g_b|^2 = |G|^2 + tr(Sigma)/b. Worker i reports
|g_i|^2 for its local mean gradient at batch b_i (``WorkerWindow.grad_sqnorm``) and the cluster
reports |g|^2 of the aggregate g = sum_i (b_i/B) g_i, the mean over the union batch B = sum_i b_i
(``GlobalWindow.agg_grad_sqnorm``). Combine the local norms with the same weights b_i/B:

    s = sum_i (b_i/B) |g_i|^2,   E[s]     = |G|^2 + sum_i (b_i/B) tr(Sigma)/b_i = |G|^2 + N tr(Sigma)/B
                                 E[|g|^2] = |G|^2 + tr(Sigma)/B

Two linear equations in the two unknowns; solving gives unbiased estimates (N >= 2 workers)

    tr(Sigma) ~ (s - |g|^2) * B / (N - 1),        |G|^2 ~ (N |g|^2 - s) / (N - 1).

With equal batches b_i = b = B/N this is McCandlish's two-batch estimator with B_small = b,
B_big = B. The weights b_i/B are what makes unequal batches work: any other weights leave a term
that depends on the unknown split of |G|^2 and tr(Sigma). Each window's values are means over its k
iterations, which keeps the estimates unbiased.

Smoothing: the two estimates are noisy (|G|^2 can come out negative), so each is averaged by its own
bias-corrected exponential moving average and the noise scale is the ratio of the averages,
B_simple = EMA[tr(Sigma)] / EMA[|G|^2] (the average of per-window ratios would be dominated by
windows where |G|^2 is near zero). The decay per window is ``smoothing ** (k * B / M0)``: a window
of k iterations at batch B counts as k*B/M0 iterations at the initial batch M0 (as AdaptDL does).

Efficiency and goodput (Pollux). Relative to the initial global batch M0, the progress per sample at
batch M >= M0 is

    E(M) = (phi + M0) / (phi + M),  phi = B_simple,       0 < E <= 1, non-increasing in M;

(E > 1 below M0, so the search never goes below M0, as in AdaptDL). In AdaScale's variables,
var = tr(Sigma)/M0 and sqr = |G|^2, S = M/M0, the gain r = (var + sqr)/(var/S + sqr) in [1, S] and
E = r/S. Goodput(M) = throughput(M) * E(M), with throughput M / T(M) from the fitted iteration-time
model (:mod:`dynamix.policies.timing`: every worker's affine compute time, the speed-proportional
split of M, plus synchronisation). Every ``refit`` iterations the policy evaluates goodput on a
geometric grid over [max(M0, N*min), N*max] and switches to the best M only if it beats the
current batch's goodput by more than ``gain`` (5%); the new M is split across workers in proportion
to speed (LB-BSP's allocation).

Learning rate: one rule, AdaScale's, in place of the config's batch rule (``optim.lr_scaling``, which
every other policy follows). The backend computes lr = lr0 * schedule * scaling(B) * lr_scale
(:mod:`dynamix.train.optim`); GNS returns

    lr_scale = r(M) * scaling(M0) / scaling(M),   so   lr = lr0 * scaling(M0) * schedule * r(M),

the learning rate of the initial batch M0 under the config's rule (the one every policy starts
from) times the AdaScale gain r of the batch in force (r**0.5 for Adam, whose step is already
normalised by the gradient scale). The sqrt or linear rule and the gain are never applied together:
both raise the LR with the batch, and together they would give GNS a larger step than either rule.

Spec: ``gns`` or ``gns:refit=50,gain=0.05,smoothing=0.98,grid=32,deadband=0.05,history=8,decay=0.7``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from dynamix.config import rng, setting
from dynamix.metrics.schema import GlobalWindow, WorkerWindow
from dynamix.policies.base import BatchSizePolicy, Decision, PolicyContext, parse_spec_args, register
from dynamix.policies.lbbsp import SpeedSplitter
from dynamix.train.optim import batch_scaling

log = logging.getLogger(__name__)


def noise_moments(
    batch_sizes: Sequence[int], local_sqnorms: Sequence[float], agg_sqnorm: float
) -> tuple[float, float]:
    """Unbiased (|G|^2, tr(Sigma)) of one window, from the local |g_i|^2 at b_i and |g|^2 at B.

    See the module docstring: s = sum_i (b_i/B)|g_i|^2; |G|^2 = (N|g|^2 - s)/(N-1);
    tr(Sigma) = (s - |g|^2) B/(N-1). Needs N >= 2 workers.
    """
    b = np.asarray(batch_sizes, dtype=np.float64)
    sq = np.asarray(local_sqnorms, dtype=np.float64)
    n = len(b)
    if n < 2 or len(sq) != n:
        raise ValueError(f"noise_moments: need >= 2 workers with one |g_i|^2 each, got {n} and {len(sq)}")
    total = float(b.sum())
    s = float((b / total * sq).sum())
    return (n * agg_sqnorm - s) / (n - 1), (s - agg_sqnorm) * total / (n - 1)


def efficiency(batch: float | np.ndarray, m0: float, var: float, sqr: float) -> float | np.ndarray:
    """Pollux statistical efficiency E(M) = (phi + M0)/(phi + M), phi = tr(Sigma)/|G|^2 = var*M0/sqr.

    Written with var = tr(Sigma)/M0 (gradient variance at the initial batch) and sqr = |G|^2 so
    that sqr <= 0 (pure noise) gives E = 1 instead of inf/inf. In [0, 1] and non-increasing for M >= M0.
    """
    scale = np.asarray(batch, dtype=np.float64) / m0
    return adascale_gain(batch, m0, var, sqr) / scale


def adascale_gain(batch: float | np.ndarray, m0: float, var: float, sqr: float) -> float | np.ndarray:
    """AdaScale gain r = (var + sqr)/(var/S + sqr), S = M/M0 (Johnson et al. 2020), in [1, S] for S >= 1."""
    scale = np.asarray(batch, dtype=np.float64) / m0
    var, sqr = max(var, 0.0), max(sqr, 0.0)
    denom = var / scale + sqr
    out = np.where(denom > 0, (var + sqr) / np.where(denom > 0, denom, 1.0), scale)
    return float(out) if out.ndim == 0 else out


class GradientNoiseEstimator:
    """Bias-corrected EMAs of |G|^2 and tr(Sigma) across windows; B_simple = ratio of the averages."""

    def __init__(self, m0: float, smoothing: float) -> None:
        self.m0 = m0
        self.smoothing = smoothing
        self._biased = {"sqr": 0.0, "trace": 0.0}
        self._unbias = 0.0
        self._last_iteration = 0

    def update(self, workers: Sequence[WorkerWindow], glob: GlobalWindow) -> None:
        sqr, trace = noise_moments(
            [w.batch_size for w in workers], [w.grad_sqnorm for w in workers], glob.agg_grad_sqnorm
        )
        if not (math.isfinite(sqr) and math.isfinite(trace)):
            log.warning("window %d: non-finite gradient norms, skipped by the noise estimator", glob.window)
            return
        iters = max(glob.iteration - self._last_iteration, 1)
        self._last_iteration = glob.iteration
        theta = self.smoothing ** (iters * glob.global_batch / self.m0)
        for key, value in (("sqr", sqr), ("trace", trace)):
            self._biased[key] = theta * self._biased[key] + (1.0 - theta) * value
        self._unbias = theta * self._unbias + (1.0 - theta)

    @property
    def ready(self) -> bool:
        return self._unbias > 0

    @property
    def grad_sqr(self) -> float:
        """EMA of |G|^2 (may be <= 0 early in training or when noise dominates)."""
        return self._biased["sqr"] / self._unbias

    @property
    def trace(self) -> float:
        """EMA of tr(Sigma), the per-sample gradient variance."""
        return self._biased["trace"] / self._unbias

    @property
    def var(self) -> float:
        """tr(Sigma)/M0: gradient variance at the initial batch (AdaScale's var)."""
        return max(self.trace, 0.0) / self.m0

    @property
    def b_simple(self) -> float:
        """tr(Sigma)/|G|^2, the simple noise scale; inf when |G|^2 <= 0."""
        return max(self.trace, 0.0) / self.grad_sqr if self.grad_sqr > 0 else math.inf

    def state_dict(self) -> dict:
        return {"biased": dict(self._biased), "unbias": self._unbias, "last_iteration": self._last_iteration}

    def load_state_dict(self, state: dict) -> None:
        self._biased = dict(state["biased"])
        self._unbias = state["unbias"]
        self._last_iteration = state["last_iteration"]


@dataclass(frozen=True)
class GnsOptions:
    refit: int = setting(50, rng(1, None))  # iterations between goodput re-optimisations
    gain: float = setting(0.05, rng(0.0, 10.0))  # relative goodput gain needed to change B
    smoothing: float = setting(0.98, rng(0.0, 0.999999))  # EMA decay per iteration at batch M0
    grid: int = setting(32, rng(2, 10000))  # points of the geometric grid of global batches
    deadband: float = setting(0.05, rng(0.0, 10.0))  # re-split threshold (see lbbsp)
    history: int = setting(8, rng(1, 10000))  # windows kept per worker for the time fit
    decay: float = setting(0.7, rng(0.0, 1.0))  # weight of a window one step older in the time fit


class GnsPolicy(BatchSizePolicy):
    name = "gns"

    def __init__(self, options: GnsOptions = GnsOptions(), name: str = "gns") -> None:
        self.options = options
        self.name = name  # the spec string: distinguishes runs with different arguments

    def reset(self, ctx: PolicyContext) -> None:
        super().reset(ctx)
        o = self.options
        n, lo, hi = ctx.n_workers, ctx.bounds.min, ctx.bounds.max
        self.m0 = float(min(max(sum(ctx.initial_batch_sizes), n * lo), n * hi))
        self.estimator = GradientNoiseEstimator(self.m0, o.smoothing)
        self.splitter = SpeedSplitter(n, ctx.bounds, o.history, o.decay, o.deadband)
        self.last_refit = 0
        self.diagnostics: dict[str, float] = {}
        if n < 2:
            log.warning("gns: the noise scale needs >= 2 workers; with %d the batch stays fixed", n)

    def grid(self) -> np.ndarray:
        """Candidate global batches: geometric over [max(M0, N*min), N*max], integers."""
        n, lo, hi = self.ctx.n_workers, self.ctx.bounds.min, self.ctx.bounds.max
        start = max(self.m0, n * lo)
        return np.unique(np.round(np.geomspace(start, n * hi, self.options.grid)).astype(np.int64))

    def goodput(self, batch: np.ndarray) -> np.ndarray:
        """Samples/s x efficiency for each candidate global batch, from the fitted models."""
        lo, hi = self.ctx.bounds.min, self.ctx.bounds.max
        t_ms = np.array([self.splitter.model.balanced_iter_ms(float(m), lo, hi) for m in batch])
        eff = efficiency(batch, self.m0, self.estimator.var, self.estimator.grad_sqr)
        return 1000.0 * batch / t_ms * eff

    def gain(self, batch: int) -> float:
        """The AdaScale gain r(M) of global batch ``batch`` (r**0.5 for Adam; 1 before any estimate)."""
        if not self.estimator.ready:
            return 1.0
        r = adascale_gain(max(batch, self.m0), self.m0, self.estimator.var, self.estimator.grad_sqr)
        return float(r**0.5) if self.ctx.optimizer == "adam" else float(r)

    def _lr_scale(self, batch: int) -> float:
        """r(M) * scaling(M0) / scaling(M): the gain instead of the config's batch rule (module docstring)."""
        rule, base = self.ctx.lr_scaling, self.ctx.base_batch
        return self.gain(batch) * batch_scaling(rule, self.m0, base) / batch_scaling(rule, batch, base)

    def decide(self, workers: Sequence[WorkerWindow], glob: GlobalWindow) -> Decision:
        current = tuple(int(w.batch_size) for w in workers)
        if len(workers) < 2:
            return Decision(current)
        self.estimator.update(workers, glob)
        self.splitter.observe(workers)
        sizes = current
        if glob.iteration - self.last_refit >= self.options.refit and self.estimator.ready:
            self.last_refit = glob.iteration
            n, lo, hi = len(current), self.ctx.bounds.min, self.ctx.bounds.max
            cur_b = min(max(sum(current), n * lo), n * hi)  # a backend may have capped the sizes
            grid = self.grid()
            candidates = np.unique(np.append(grid, cur_b))
            good = self.goodput(candidates)
            best = int(candidates[int(np.argmax(good))])
            good_cur = float(good[int(np.searchsorted(candidates, cur_b))])
            target = best if good.max() > (1.0 + self.options.gain) * good_cur else cur_b
            sizes = self.splitter.split(target, current)
            self.diagnostics = {
                "iteration": float(glob.iteration),
                "b_simple": float(self.estimator.b_simple),
                "grad_sqr": float(self.estimator.grad_sqr),
                "trace": float(self.estimator.trace),
                "goodput_current": good_cur,
                "goodput_best": float(good.max()),
                "global_batch": float(sum(sizes)),
            }
            log.debug("gns refit: %s", self.diagnostics)
        return Decision(sizes, self._lr_scale(sum(sizes)))

    def state_dict(self) -> dict:
        return {
            "estimator": self.estimator.state_dict(),
            "time_model": self.splitter.model.state_dict(),
            "last_refit": self.last_refit,
        }

    def load_state_dict(self, state: dict) -> None:
        self.estimator.load_state_dict(state["estimator"])
        self.splitter.model.load_state_dict(state["time_model"])
        self.last_refit = state["last_refit"]


@register("gns")
def _make(arg: str) -> GnsPolicy:
    return GnsPolicy(parse_spec_args("gns", arg, GnsOptions), f"gns:{arg}" if arg else "gns")
