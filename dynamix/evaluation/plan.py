"""How an experiment plans its simulated runs: the workload they train, their config, seeds and budget,
the run cache they share, and work done side by side.

A stage (:mod:`dynamix.experiments`), the playground (:mod:`dynamix.explore`) and the steps between
stages (:mod:`dynamix.experiments.selection`, :mod:`dynamix.evaluation.surrogate_fit`) build their runs
through here, so every experiment trains the same workload under the same budget and shares one run
cache. What the policy names of the experiments stand for: :mod:`dynamix.evaluation.policy_names`.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from dynamix.cluster import ClusterSpec
from dynamix.config import Config, ConfigError, deep_merge, with_overrides
from dynamix.evaluation.runner import budgets


def optimizer(cfg: Config, name: str) -> dict:
    """The ``optim`` overrides of an optimiser workload: ``name``, Adam at ``experiments.inference.adam_lr``."""
    optim: dict = {"name": name}
    if name == "adam":
        optim["lr"] = cfg.experiments.inference.adam_lr
    return optim


def sim_config(cfg: Config, **sections: Mapping[str, Any]) -> Config:
    """The config a simulated experiment run uses: ``cfg`` with the experiments' workload
    (``experiments.model``/``width`` when set), budget (``experiments.epochs`` when set), evaluation
    cadence (``experiments.eval_every``, ``eval_samples``), the model math (``sim.backend: math``: an
    agent trained on the surrogate is judged on the real-math simulator, never on the model it was
    trained on) and any further section overrides (e.g. an optimiser)."""
    e = cfg.experiments
    base: dict[str, Any] = {"train": {"eval_every": e.eval_every, "eval_samples": e.eval_samples},
                            "sim": {"backend": "math"}}
    if e.model:
        base["model"] = {"name": e.model, "width": e.width or cfg.model.width}
    if e.epochs:
        base["train"].update(epochs=e.epochs, max_iters=0)
    return with_overrides(cfg, deep_merge(base, sections))


def seeds(cfg: Config) -> list[int]:
    """The run seeds of an experiment: ``train.seed + i`` for ``i < experiments.seeds``."""
    return [cfg.train.seed + i for i in range(cfg.experiments.seeds)]


def run_cache(out_dir: str | Path) -> Path:
    """Where the experiments keep every finished run (:mod:`dynamix.evaluation.cache`):
    ``cache/runs/`` in the results root, outside every stage's outputs, so an interrupted ``dvc repro``
    redoes only the runs that were in flight, and a rerun with unchanged settings simulates nothing."""
    return Path(out_dir).parent / "cache" / "runs"


def budgeted(cfg: Config, groups: list[tuple[ClusterSpec, Config]], out_dir: str | Path) -> list[Config]:
    """Each group's run config under ``evaluation.budget`` (:func:`dynamix.evaluation.runner.budgets`):
    unchanged for ``epochs``; for ``time``, capped at the virtual time the group's reference run needs
    for its epoch budget on that cluster. The reference runs go in parallel (``experiments.jobs``) and
    into :func:`run_cache`."""
    return [run_cfg for run_cfg, _ in budgets(groups, cfg.evaluation.budget, cfg.experiments.jobs,
                                              cache=run_cache(out_dir))]


def side_by_side(fn: Callable[..., Any], calls: Sequence[tuple], jobs: int) -> list:
    """``[fn(*args) for args in calls]``, up to ``jobs`` of them at once in spawned processes (one torch
    thread each, as :func:`dynamix.rl.learn.train_policy` sets): a policy's training is seeded and uses
    one core, so training several side by side gives the same artifacts in a fraction of the time.
    ``fn`` must be importable (module level); ``jobs`` <= 1 or a single call runs in this process."""
    jobs = min(jobs, len(calls))
    if jobs <= 1:
        return [fn(*args) for args in calls]
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(fn, *args) for args in calls]
        return [f.result() for f in futures]


@dataclass(frozen=True)
class Workload:
    """A model (at a width multiplier) trained with an optimiser: ``resnet20/sgd``, ``mlp@0.25/adam``."""

    model: str
    optimizer: str
    width: float = 1.0

    def __str__(self) -> str:
        width = "" if self.width == 1.0 else f"@{self.width:g}"
        return f"{self.model}{width}/{self.optimizer}"


WORKLOAD_FORM = "MODEL[@WIDTH]/OPT with OPT sgd or adam, e.g. mlp@0.25/sgd"


def parse_workload(text: str, field: str = "workload") -> Workload:
    """``MODEL[@WIDTH]/OPT`` (e.g. ``mlp@0.25/adam``) -> a Workload; errors name ``field`` and the form."""
    model, _, opt = text.strip().partition("/")
    model, _, width = model.partition("@")
    try:
        w = float(width) if width else 1.0
    except ValueError:
        w = -1.0
    if not model or opt not in ("sgd", "adam") or not w > 0:
        raise ConfigError(f"{field} must look like {WORKLOAD_FORM}; got {text!r}")
    return Workload(model, opt, w)


def parse_pair(text: str) -> tuple[Workload, Workload]:
    """``"resnet8/sgd->resnet20@0.5/adam"`` -> (source, target) of a transfer pair; errors name the
    field (``experiments.transfer.pairs``) and the form."""
    field = "experiments.transfer.pairs entries"
    if text.count("->") != 1:
        raise ConfigError(f"{field} must look like SOURCE->TARGET, each {WORKLOAD_FORM}; got {text!r}")
    source, target = (parse_workload(side, field) for side in text.split("->"))
    return source, target
