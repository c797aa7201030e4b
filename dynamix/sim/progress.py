"""The surrogate's model of learning: accuracy, loss and gradient statistics as functions of progress.

What it models. One scalar, the *progress* P of a run (in reference epochs), advances every iteration by

    dP = (lr_t / lr) * B * E(B) / n_train,      E(B) = (phi + B0) / (phi + B),    phi = kappa * B_noise

with B the global batch, ``lr_t`` the learning rate the simulator would set at that iteration
(:func:`dynamix.train.optim.learning_rate`: warm-up, schedule, batch scaling and a policy's
``lr_scale``) over the base ``optim.lr``, and E(B) Pollux's statistical efficiency of batch B relative
to B0 (Qiao et al., OSDI'21, Sec. 3.1; McCandlish et al. 2018), where B_noise = tr(Sigma) / |G|^2 is
the gradient noise scale measured on the fitting runs (ratio of the window means, as
:class:`dynamix.policies.gns.GradientNoiseEstimator` does) and kappa a fitted factor (kappa = 1 is
Pollux as written; it assumes the learning rate adapts to B, which a fixed-lr SGD run does not, so
kappa is fitted to the runs: small kappa means progress per *iteration* barely grows with B, large kappa
means progress per *sample* does not fall). Test accuracy, test loss, training accuracy and training
loss are each a saturating power law in P shifted by the noise temperature of SGD (:class:`Curve`),

    y(P, tau) = y_inf + (y_0 - y_inf) * (1 + P / p_scale) ** (-power) - gamma * (tau - 1),
    tau = (lr_t / lr) * B0 / B,

tau being the learning rate over the batch relative to the reference run's: the gradient noise the
iterate sees, which sets how far above the minimum it fluctuates (Mandt et al. 2017; Smith & Le 2018:
the SGD noise scale is proportional to lr / B). Without it, a fixed-lr run at a small batch would
reach the same accuracy at the same progress as one at a large batch; measured, it plateaus lower.

The gradient statistics the state needs come from |G|^2(P) and tr(Sigma)(P), tables over log P
(bin means of the per-window unbiased estimates, :func:`dynamix.policies.gns.noise_moments`): worker i
at batch b_i reads E|g_i|^2 = |G|^2 + tr(Sigma)/b_i, the aggregate |G|^2 + tr(Sigma)/B, and over k
iterations sigma2_norm = s * ((k-1)/k * tr(Sigma)/b_i) / (|G|^2 + tr(Sigma)/(k b_i)) with a fitted
scale s (:mod:`dynamix.metrics.gradstats` defines sigma2_norm; gradients drift within a window, which
s absorbs). Measured norms scatter around the model by a fitted log-normal spread.

What it leaves out: the accuracy jump at a step decay of the learning rate (annealing; the schedule
scales dP and tau, not the shape of a decay), the noise scale's growth during training in E(B) (one
B_noise per workload), any effect of unequal per-worker batches beyond the global batch (batch-norm statistics per worker),
divergence at too large a learning rate, and the run-to-run spread of the accuracy curve (test
accuracy is the curve itself; training accuracy and loss get the sampling noise of k*b_i samples).

Measured accuracy (``sim.learning: measured``). A fitted curve misranks the batch sizes where a
decision is made: at equal epochs the test accuracy of this workload is set by the global batch B (the
same B at 4, 6 or 8 workers ends within half a point), and a run's time to target hangs on whether its
accuracy after a step decay clears the target, which no smooth law in P reproduces. So the model may
carry, instead, the measured mean test accuracy of the experiments' static sweep (every seed, the
profile's own schedule and epoch budget) on a grid of epochs e and log2 B (:func:`accuracy_table` in
:mod:`dynamix.sim.measured`). A run at a varying batch reads it, bilinearly, at its epochs and at
an effective batch

    log2 B_eff <- log2 B + (log2 B_eff - log2 B) exp(-dc / m),    dc = de * f(t),    m = ``memory_epochs``

(the iterate relaxes to the noise temperature of the new batch; Mandt et al. 2017). The clock c runs in
epochs de weighted by f = warmup * schedule * lr_scale (:func:`dynamix.train.optim.schedule_factor`): the
relaxation takes m epochs at the schedule's full step and ten times as many after a 0.1 decay, so a batch
dropped after a decay moves the accuracy as little as the real math lets it (its first half is kept).

A run's seed moves its whole curve: at the batches where a target is won or lost, one seed's final
accuracy sits 0.3-0.6 points from the mean (the per-worker split and the data order), and whether the run
reaches the target hangs on it. So the table also carries the runs' standard deviation s(e, B)
(``acc_spread``), and a training episode reads mean + z s at its effective batch, with one z ~ N(0, 1)
per run seed: a batch whose mean barely clears the target misses on a share of the episodes, as it does
on the real math (every other surrogate run reads the mean). This leaves out the batches outside the
sweep (clamped to its ends) and epochs past the sweep's budget (held at the last value); training
accuracy, losses and gradient statistics still come from the fitted curves.

The fitted model is a JSON artifact (:func:`save`, :func:`load`) with the workload it was fitted on and
its provenance; :func:`load` refuses, in one line, a file that is not one, was altered after fitting
(a checksum over the model), or was fitted on another workload than the config asks for.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from dynamix import io, paths
from dynamix.config import Config
from dynamix.errors import InputFileError

SCHEMA = "dynamix-surrogate-v1"
CURVES = ("test_acc", "test_loss", "train_acc", "train_loss")
TABLE_FIELDS = ("acc_epochs", "acc_log2b", "acc_table", "memory_epochs", "acc_spread")


class SurrogateArtifactError(InputFileError, ValueError):
    """A fitted-surrogate file is not one, is corrupt, or was fitted on another workload."""


@dataclass(frozen=True)
class Curve:
    """y(P, tau) = y_inf + (y_0 - y_inf) (1 + P/p_scale)^(-power) - gamma (tau - 1): a saturating power
    law in progress, shifted by the SGD noise temperature tau (module docstring)."""

    y0: float
    y_inf: float
    p_scale: float
    power: float
    gamma: float = 0.0

    def __call__(self, p: np.ndarray | float, tau: np.ndarray | float = 1.0) -> np.ndarray | float:
        return self.y_inf + (self.y0 - self.y_inf) * (1.0 + p / self.p_scale) ** (-self.power) - self.gamma * (tau - 1.0)


def workload(cfg: Config) -> dict[str, Any]:
    """What a fitted model is only valid for: the network, the optimiser and its schedule, the data."""
    return {"model": cfg.model.name, "width": float(cfg.model.width), "optim": io.jsonable(asdict(cfg.optim)),
            "data": {"source": cfg.data.source, "path": cfg.data.path, "augment": cfg.data.augment}}


@dataclass(frozen=True)
class ProgressModel:
    """The fitted surrogate of one workload (module docstring); :mod:`dynamix.sim.surrogate` runs it."""

    workload: dict
    n_train: int  # training samples (epochs are counted in these)
    b_ref: float  # B0 of E(B): the fitting runs' reference global batch
    noise_scale: float  # B_noise = tr(Sigma)/|G|^2 measured on the fitting runs
    kappa: float  # phi = kappa * noise_scale (fitted)
    curves: dict  # name (CURVES) -> Curve
    grad_p: tuple[float, ...]  # knots of the gradient tables, in P
    grad_sqr: tuple[float, ...]  # |G|^2 at the knots
    grad_trace: tuple[float, ...]  # tr(Sigma) at the knots
    sigma2_scale: float  # s of sigma2_norm
    grad_spread: float  # standard deviation of log(measured |g_i|^2 / model)
    provenance: dict = field(default_factory=dict)  # workload, profile, config hash, runs, residuals, git sha
    # measured accuracy (module docstring), empty when the fitted curve gives the test accuracy:
    acc_epochs: tuple[float, ...] = ()  # the table's epochs, ascending
    acc_log2b: tuple[float, ...] = ()  # its global batches, log2, ascending
    acc_table: tuple[tuple[float, ...], ...] = ()  # mean test accuracy [batch][epoch]
    memory_epochs: float = 0.0  # m of the effective batch, in schedule-weighted epochs
    acc_spread: tuple[tuple[float, ...], ...] = ()  # between-run standard deviation [batch][epoch]; () none

    @property
    def measured(self) -> bool:
        """Whether test accuracy comes from the measured table (module docstring)."""
        return bool(self.acc_epochs)

    def __post_init__(self) -> None:
        for name in ("n_train", "b_ref", "noise_scale", "kappa", "sigma2_scale"):
            v = float(getattr(self, name))
            if not (math.isfinite(v) and v > 0):
                raise SurrogateArtifactError(f"surrogate {name} = {v} is out of range: must be finite and > 0")
        if not (math.isfinite(self.grad_spread) and self.grad_spread >= 0):
            raise SurrogateArtifactError(f"surrogate grad_spread = {self.grad_spread}: must be finite and >= 0")
        if set(self.curves) != set(CURVES):
            raise SurrogateArtifactError(f"surrogate curves {sorted(self.curves)}: need exactly {list(CURVES)}")
        for name, c in self.curves.items():
            if not all(math.isfinite(v) for v in asdict(c).values()) or c.p_scale <= 0 or c.power <= 0:
                raise SurrogateArtifactError(f"surrogate curve {name} = {asdict(c)}: need finite values, "
                                             "p_scale > 0 and power > 0")
        n = len(self.grad_p)
        if n < 1 or len(self.grad_sqr) != n or len(self.grad_trace) != n or list(self.grad_p) != sorted(self.grad_p):
            raise SurrogateArtifactError("surrogate gradient tables: need grad_p ascending, with grad_sqr and "
                                         "grad_trace of the same length")
        if min(self.grad_p) <= 0 or min(self.grad_sqr) <= 0 or min(self.grad_trace) <= 0:
            raise SurrogateArtifactError("surrogate gradient tables: grad_p, grad_sqr and grad_trace must be > 0")
        for name in ("grad_p", "grad_sqr", "grad_trace"):  # the tables in log space, for moments()
            object.__setattr__(self, "_log" + name[4:], [math.log(v) for v in getattr(self, name)])
        if self.acc_epochs or self.acc_log2b or self.acc_table:
            self._check_table()

    def _check_table(self) -> None:
        e, lb = np.asarray(self.acc_epochs, float), np.asarray(self.acc_log2b, float)
        table = np.asarray(self.acc_table, float)
        if len(e) < 2 or len(lb) < 1 or table.shape != (len(lb), len(e)):
            raise SurrogateArtifactError(f"surrogate acc_table: shape {table.shape}, need (len(acc_log2b) = {len(lb)}, "
                                         f"len(acc_epochs) = {len(e)} >= 2)")
        if np.any(np.diff(e) <= 0) or np.any(np.diff(lb) <= 0):
            raise SurrogateArtifactError("surrogate acc_epochs and acc_log2b: must be strictly ascending")
        if not (np.all(np.isfinite(table)) and table.min() >= 0.0 and table.max() <= 1.0):
            raise SurrogateArtifactError("surrogate acc_table: accuracies must be finite and in [0, 1]")
        if not (math.isfinite(self.memory_epochs) and self.memory_epochs >= 0):
            raise SurrogateArtifactError(f"surrogate memory_epochs = {self.memory_epochs}: must be finite and >= 0")
        spread = np.asarray(self.acc_spread, float) if self.acc_spread else np.zeros_like(table)
        if spread.shape != table.shape or not (np.all(np.isfinite(spread)) and spread.min() >= 0.0):
            raise SurrogateArtifactError(f"surrogate acc_spread: shape {spread.shape}, need {table.shape}, "
                                         "finite and >= 0")
        object.__setattr__(self, "_table", table)
        object.__setattr__(self, "_spread", spread)

    def table_accuracy(self, epochs: float, log2b: float) -> float:
        """The measured mean test accuracy at ``epochs`` and effective batch 2^``log2b`` (bilinear; clamped
        to the table's batches and epochs)."""
        return self._bilinear(self._table, epochs, log2b)

    def table_spread(self, epochs: float, log2b: float) -> float:
        """The between-run standard deviation of the test accuracy at ``epochs`` and 2^``log2b`` (as
        :meth:`table_accuracy`; 0 for a table without one)."""
        return self._bilinear(self._spread, epochs, log2b)

    def _bilinear(self, grid: np.ndarray, epochs: float, log2b: float) -> float:
        per_batch = [float(np.interp(epochs, self.acc_epochs, row)) for row in grid]
        return float(np.interp(log2b, self.acc_log2b, per_batch))

    def effective_log2b(self, previous: float, log2b: float, clock: float) -> float:
        """log2 B_eff after ``clock`` schedule-weighted epochs (dc of the module docstring) at 2^``log2b``
        from ``previous`` (nan: the start)."""
        if math.isnan(previous) or self.memory_epochs == 0:
            return log2b
        return log2b + (previous - log2b) * math.exp(-clock / self.memory_epochs)

    @property
    def phi(self) -> float:
        return self.kappa * self.noise_scale

    def efficiency(self, global_batch: np.ndarray | float) -> np.ndarray | float:
        """Pollux E(B) = (phi + B0)/(phi + B): progress per sample at B relative to B0 (<= 1 above B0)."""
        return (self.phi + self.b_ref) / (self.phi + np.asarray(global_batch, float))

    def temperature(self, global_batch: float, lr_ratio: float) -> float:
        """tau = (lr_t / lr) B0 / B, the noise temperature relative to the reference batch B0."""
        return lr_ratio * self.b_ref / global_batch

    def step_progress(self, global_batch: float, lr_ratio: np.ndarray | float) -> np.ndarray | float:
        """dP of one iteration at global batch B and lr_t / lr = ``lr_ratio``."""
        return lr_ratio * global_batch * self.efficiency(global_batch) / self.n_train

    def moments(self, p: float) -> tuple[float, float]:
        """(|G|^2, tr(Sigma)) at progress P, log-linear between the knots, constant beyond them."""
        lp, knots = math.log(max(p, 1e-12)), self._log_p
        i = bisect.bisect_right(knots, lp)
        if i == 0 or i == len(knots):
            j = 0 if i == 0 else len(knots) - 1
            return math.exp(self._log_sqr[j]), math.exp(self._log_trace[j])
        w = (lp - knots[i - 1]) / (knots[i] - knots[i - 1])
        return (math.exp(self._log_sqr[i - 1] + w * (self._log_sqr[i] - self._log_sqr[i - 1])),
                math.exp(self._log_trace[i - 1] + w * (self._log_trace[i] - self._log_trace[i - 1])))

    def sigma2_norm(self, sqr: float, trace: float, b: np.ndarray, k: int) -> np.ndarray:
        """sigma2_norm of workers at batches ``b`` over ``k`` iterations (module docstring); 0 for k = 1."""
        if k < 2:
            return np.zeros(len(b))
        return self.sigma2_scale * ((k - 1) / k * trace / b) / (sqr + trace / (k * b))

    # ---- the artifact ---------------------------------------------------------------------------
    def body(self) -> dict:
        """Everything but the provenance and checksum, JSON-native."""
        d = {k: v for k, v in asdict(self).items() if k != "provenance"}
        if not self.measured:  # the fitted-only artifacts of before the table keep their checksums
            for k in TABLE_FIELDS:
                d.pop(k)
        if not self.acc_spread:  # and the tables of before the spread theirs
            d.pop("acc_spread", None)
        return io.jsonable(d)

    def checksum(self) -> str:
        return hashlib.sha256(json.dumps(self.body(), sort_keys=True).encode()).hexdigest()


def default_path(cfg: Config, root: str | Path | None = None) -> Path:
    """Where ``dynamix fit-surrogate`` puts the model of ``cfg``'s workload: ``ROOT/<model>-w<width>-<optimiser>.json``
    with ROOT ``results/surrogate`` unless given."""
    root = paths.RESULTS / "surrogate" if root is None else Path(root)
    return root / f"{cfg.model.name}-w{cfg.model.width:g}-{cfg.optim.name}.json"


def path_for(cfg: Config) -> Path:
    """Where the fitted model a run of ``cfg`` uses lies: ``sim.surrogate`` when set, else
    :func:`default_path`."""
    return paths.resolve(cfg.sim.surrogate) if cfg.sim.surrogate else default_path(cfg)


def for_config(cfg: Config) -> ProgressModel:
    """The fitted model a run of ``cfg`` uses (:func:`path_for`)."""
    return load(path_for(cfg), cfg)


def save(model: ProgressModel, path: str | Path) -> Path:
    """Write the artifact: schema, model, checksum and provenance."""
    return io.write_json(path, {"schema": SCHEMA, "model": model.body(), "sha256": model.checksum(),
                                "provenance": model.provenance})


def load(path: str | Path, cfg: Config | None = None) -> ProgressModel:
    """The model in ``path``; refused (one line) when not a surrogate artifact, altered, or, with ``cfg``,
    fitted on another workload than ``cfg``'s (:func:`workload`)."""
    path = Path(path)
    if not path.exists():
        raise SurrogateArtifactError(f"{path}: no fitted surrogate there (run `dynamix fit-surrogate`)")
    try:
        raw = json.loads(path.read_text())
        body = raw["model"]
        curves = {name: Curve(**c) for name, c in body.pop("curves").items()}
        for key in ("grad_p", "grad_sqr", "grad_trace", "acc_epochs", "acc_log2b"):
            if key in body:
                body[key] = tuple(float(v) for v in body[key])
        if "acc_table" in body:
            body["acc_table"] = tuple(tuple(float(v) for v in row) for row in body["acc_table"])
        model = ProgressModel(curves=curves, provenance=raw.get("provenance", {}), **body)
    except SurrogateArtifactError as exc:
        raise SurrogateArtifactError(f"{path}: {exc}") from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SurrogateArtifactError(f"{path}: not a fitted surrogate ({type(exc).__name__}: {exc})") from None
    if raw.get("schema") != SCHEMA:
        raise SurrogateArtifactError(f"{path}: schema {raw.get('schema')!r} is not {SCHEMA!r}: refit it")
    if raw.get("sha256") != model.checksum():
        raise SurrogateArtifactError(f"{path}: checksum mismatch: the model was altered after fitting; refit it")
    if cfg is not None:
        check_workload(model, cfg, path)
    return model


def check_workload(model: ProgressModel, cfg: Config, where: str | Path = "surrogate") -> None:
    """Refuse a model fitted on another workload than ``cfg``'s, naming the first field that differs."""
    want = io.jsonable(workload(cfg))
    diff = _first_difference(model.workload, want)
    if diff:
        key, have, need = diff
        raise SurrogateArtifactError(f"{where}: fitted on {key} = {have!r}, but the config asks for {need!r}: "
                                     "refit with `dynamix fit-surrogate` for this workload")


def _first_difference(have: Mapping, want: Mapping, prefix: str = "") -> tuple[str, Any, Any] | None:
    for key in sorted(set(have) | set(want)):
        a, b = have.get(key), want.get(key)
        name = f"{prefix}{key}"
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            found = _first_difference(a, b, name + ".")
            if found:
                return found
        elif a != b:
            return name, a, b
    return None
