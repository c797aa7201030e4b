"""Fit a :class:`~dynamix.sim.progress.ProgressModel` to real-math simulator runs (their ``runs.csv`` rows).

Per run, window w has global batch B_w, k_w iterations and learning rate lr_w, so for a candidate kappa
its progress is P_w = sum_{v <= w} k_v (lr_v / lr) B_v E(B_v) / n_train (:mod:`dynamix.sim.progress`).
The noise scale B_noise is the ratio of the window means of tr(Sigma) and |G|^2 over all runs, each
window's pair from :func:`dynamix.policies.gns.noise_moments`. kappa is chosen on a geometric grid as
the one whose progress best collapses the runs' test-accuracy curves onto one power law (least squares,
:func:`scipy.optimize.least_squares`); the other curves and the gradient tables are then fitted at that
kappa: test accuracy and loss at the end of each window (where the run tested), training accuracy and
loss at its middle (they are means over the window).

Every fit weighs the windows (:func:`window_weights`): each run alike, whatever its number of windows
(a run at 16x the batch has 16x fewer, so window-weighted the smallest batch sets the curve), and the
annealed windows, where the learning rate has decayed below :data:`ANNEALED` of the run's peak,
:data:`ANNEALED_WEIGHT` times: a time to target is read near a run's end, and the curve has to be
right there more than anywhere. On the `cpu` workload, window-weighted, the surrogate's final accuracy
at the larger batches came out 2-3 points below the model math's (docs/journal/rl.md).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from dynamix.config import Config
from dynamix.errors import UserError
from dynamix.policies.gns import noise_moments
from dynamix.sim.progress import CURVES, Curve, ProgressModel, workload

KAPPAS = np.geomspace(1.0 / 64, 64.0, 25)
"""Candidate kappa (phi = kappa * B_noise), a factor of 64 either side of Pollux's 1."""
GRAD_KNOTS = 8
"""Bins (equal counts over P) of the gradient tables."""
ANNEALED = 0.05
"""A window is annealed when its lr_t is below this fraction of its run's peak lr_t."""
ANNEALED_WEIGHT = 4.0
"""How much more an annealed window weighs in the fits."""


class FitError(UserError, ValueError):
    """The runs cannot determine the model (too few windows, no gradient noise measured)."""


def window_table(runs: pd.DataFrame, lr: float) -> pd.DataFrame:
    """One row per (run, window): B, iterations, lr_t / lr, the measured curves and noise moments."""
    rows = []
    for run_id, run in runs.groupby("run_id", sort=False):
        prev = 0
        for w, g in run.groupby("window", sort=True):
            first = g.iloc[0]
            b = g["batch_size"].to_numpy(float)
            sqr, trace = noise_moments(b, g["grad_sqnorm"].to_numpy(float), float(first["agg_grad_sqnorm"]))
            it = int(first["iteration"])
            rows.append({"run_id": run_id, "window": w, "global_batch": float(first["global_batch"]),
                         "iters": it - prev, "lr_ratio": float(first["lr"]) / lr,
                         "test_acc": float(first["test_acc"]), "test_loss": float(first["test_loss"]),
                         "train_acc": float(first["train_acc"]), "train_loss": float(first["train_loss"]),
                         "sqr": sqr, "trace": trace, "batches": b, "sqnorms": g["grad_sqnorm"].to_numpy(float),
                         "sigma2": g["sigma2_norm"].to_numpy(float)})
            prev = it
    return pd.DataFrame(rows)


def progress(windows: pd.DataFrame, model: ProgressModel) -> tuple[np.ndarray, np.ndarray]:
    """(P at each window's end, P at its middle) under ``model``'s efficiency."""
    d = windows["iters"].to_numpy(float) * model.step_progress(windows["global_batch"].to_numpy(float),
                                                               windows["lr_ratio"].to_numpy(float))
    end = pd.Series(d).groupby(windows["run_id"].to_numpy(), sort=False).cumsum().to_numpy()
    return end, end - d / 2


def window_weights(windows: pd.DataFrame) -> np.ndarray:
    """Each window's weight in the fits (module docstring), mean 1: 1 / (its run's windows), times
    :data:`ANNEALED_WEIGHT` where lr_t < :data:`ANNEALED` x the run's peak."""
    runs = windows.groupby("run_id", sort=False)
    lr = windows["lr_ratio"].to_numpy(float)
    w = 1.0 / runs["window"].transform("size").to_numpy(float)
    w *= np.where(lr < ANNEALED * runs["lr_ratio"].transform("max").to_numpy(float), ANNEALED_WEIGHT, 1.0)
    return w / w.mean()


def fit_curve(p: np.ndarray, y: np.ndarray, tau: np.ndarray, weight: np.ndarray) -> tuple[Curve, float]:
    """Weighted least-squares curve through (P, tau, y) (:func:`window_weights`); returns it and its
    weighted RMS residual."""
    ok = np.isfinite(p) & np.isfinite(y)
    p, y, tau, weight = p[ok], y[ok], tau[ok], weight[ok]
    if len(p) < 5:
        raise FitError(f"the fitting runs have {len(p)} tested windows: need at least 5 to fit a curve "
                       "(lengthen experiments.epochs or shorten batch.window)")
    span = float(np.ptp(y)) or 1.0
    x0 = [float(y[np.argmin(p)]), float(y[np.argmax(p)]), float(np.median(p)), 1.0, 0.0]
    lo = [-np.inf, -np.inf, 1e-6, 0.01, -np.inf]
    hi = [np.inf, np.inf, 1e6, 10.0, np.inf]
    root = np.sqrt(weight)
    res = least_squares(lambda x: root * (Curve(*x)(p, tau) - y) / span, x0, bounds=(lo, hi), x_scale="jac")
    curve = Curve(*map(float, res.x))
    return curve, float(np.sqrt(np.sum(weight * (curve(p, tau) - y) ** 2) / np.sum(weight)))


def _model(base: dict, kappa: float, **kw) -> ProgressModel:
    return ProgressModel(**{**base, "kappa": float(kappa), **kw})


def fit_progress(runs: pd.DataFrame, cfg: Config, n_train: int, b_ref: float) -> ProgressModel:
    """The model of ``cfg``'s workload fitted to ``runs`` (the simulator's rows of several runs, keyed by
    ``run_id``); ``b_ref`` is B0. Provenance holds the fit's residuals; the caller adds the rest."""
    windows = window_table(runs, cfg.optim.lr)
    sqr_mean, trace_mean = float(windows["sqr"].mean()), float(windows["trace"].mean())
    if not (sqr_mean > 0 and trace_mean > 0):
        raise FitError(f"mean |G|^2 = {sqr_mean:.3g}, tr(Sigma) = {trace_mean:.3g} over {len(windows)} windows: "
                         "the runs do not determine a noise scale (need >= 2 workers and longer runs)")
    placeholder = Curve(0.0, 1.0, 1.0, 1.0)
    base = dict(workload=workload(cfg), n_train=int(n_train), b_ref=float(b_ref), noise_scale=trace_mean / sqr_mean,
                curves={c: placeholder for c in CURVES}, grad_p=(1.0,), grad_sqr=(sqr_mean,),
                grad_trace=(trace_mean,), sigma2_scale=1.0, grad_spread=0.0)
    test = windows["test_acc"].to_numpy(float)
    weight = window_weights(windows)
    tau = _model(base, 1.0).temperature(windows["global_batch"].to_numpy(float), windows["lr_ratio"].to_numpy(float))
    scores = []
    for kappa in KAPPAS:
        end, _ = progress(windows, _model(base, kappa))
        scores.append(fit_curve(end, test, tau, weight)[1])
    kappa = float(KAPPAS[int(np.argmin(scores))])
    end, mid = progress(windows, _model(base, kappa))
    curves, rms = {}, {}
    for name in CURVES:
        at = end if name.startswith("test") else mid
        curves[name], rms[name] = fit_curve(at, windows[name].to_numpy(float), tau, weight)
    # gradient tables: means of the unbiased per-window estimates in bins of equal counts over P
    order = np.argsort(mid)
    knots, sqrs, traces = [], [], []
    for part in np.array_split(order, min(GRAD_KNOTS, len(order))):
        knots.append(float(np.median(mid[part])))
        sqrs.append(max(float(windows["sqr"].to_numpy()[part].mean()), 0.05 * sqr_mean))
        traces.append(max(float(windows["trace"].to_numpy()[part].mean()), 0.05 * trace_mean))
    fitted = _model(base, kappa, curves=curves, grad_p=tuple(knots), grad_sqr=tuple(sqrs), grad_trace=tuple(traces))
    # spread of the measured local |g_i|^2 and the scale of sigma2_norm, against the fitted moments
    log_ratio, s2_ratio = [], []
    for p, row in zip(mid, windows.itertuples()):
        sqr, trace = fitted.moments(p)
        b = row.batches
        log_ratio.extend(np.log(np.maximum(row.sqnorms, 1e-30) / (sqr + trace / b)))
        if row.iters >= 2:
            s2_ratio.extend(row.sigma2 / fitted.sigma2_norm(sqr, trace, b, int(row.iters)))
    spread = float(np.std(log_ratio))
    s2 = float(np.median(s2_ratio)) if s2_ratio else 1.0
    scores_by_kappa = {f"{k:.4g}": round(s, 5) for k, s in zip(KAPPAS, scores)}
    provenance = {"fit": {"rms": rms, "test_acc_rms_by_kappa": scores_by_kappa, "windows": int(len(windows)),
                          "weights": {"per_run": True, "annealed_below": ANNEALED, "annealed_weight": ANNEALED_WEIGHT},
                          "runs": int(windows["run_id"].nunique())}}
    return _model(base, kappa, curves=curves, grad_p=tuple(knots), grad_sqr=tuple(sqrs), grad_trace=tuple(traces),
                  sigma2_scale=s2 if math.isfinite(s2) and s2 > 0 else 1.0, grad_spread=spread, provenance=provenance)
