"""How long an evaluated run trains: the same virtual time per cluster (``time``) or the same epochs.

``time`` (``evaluation.budget``, the default): every run on a cluster stops at the virtual time the
reference run (every worker at ``batch.initial``, seed 0; :func:`reference_policy`) needs for the epoch
budget on that cluster, its epochs only a safety cap (:func:`~dynamix.train.loop.epoch_cap`). ``epochs``:
every run trains ``train.epochs``. :func:`dynamix.evaluation.runner.budgets` runs the reference runs.
"""

from __future__ import annotations


import pandas as pd

from dynamix.config import Config, with_overrides
from dynamix.evaluation.runs import run_totals
from dynamix.train.loop import epoch_cap

BUDGETS = ("time", "epochs")
"""How long each run trains (module docstring); ``evaluation.budget`` takes the same names."""


def check_budget(budget: str) -> str:
    """``budget`` if it is one of :data:`BUDGETS`; else a ValueError naming the allowed ones."""
    if budget not in BUDGETS:
        raise ValueError(f"budget = {budget!r} is not allowed: must be one of {', '.join(map(repr, BUDGETS))}")
    return budget


def reference_policy(cfg: Config) -> str:
    """The run whose epoch-budget time sets a cluster's time budget: every worker at ``batch.initial``."""
    return f"static:{cfg.batch.initial}"


def time_budget_config(cfg: Config, budget_s: float) -> Config:
    """``cfg`` with runs ending at ``budget_s`` virtual seconds, its epoch budget only a cap; the
    learning-rate schedule keeps the nominal epochs as its horizon (``train.schedule_epochs``)."""
    if not budget_s > 0:
        raise ValueError(f"budget_s = {budget_s} is out of range: must be > 0")
    return with_overrides(cfg, {"train": {"max_time_s": float(budget_s), "max_iters": 0,
                                          "epochs": epoch_cap(cfg, cfg.train.epochs),
                                          "schedule_epochs": cfg.train.schedule_epochs or cfg.train.epochs}})


def budget_time_s(reference: pd.DataFrame) -> float:
    """A cluster's time budget: the reference run's (:func:`reference_policy`) total virtual time."""
    return run_totals(reference)["total_time_s"]
