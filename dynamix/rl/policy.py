"""``dynamix:PATH``: a trained DYNAMIX agent as a :class:`BatchSizePolicy` (deterministic inference).

PATH is a policy artifact (``results/policies/NAME.zip``, its ``.json``, or a bare ``NAME``), checked
by :func:`dynamix.rl.artifact.load_policy` on construction and against the run's action set and
bounds where it is made for a run (:meth:`DynamixPolicy.check_bounds`) and on
:meth:`DynamixPolicy.reset`. Each window, the shared policy network reads every worker's
``[local | global]`` observation (:mod:`dynamix.rl.state`, the same builder and state spec the
training environment used, as the artifact records them) and picks that worker's
batch-size step by argmax (``deterministic=True``), or, for a policy trained with ``rl.action:
global``, one step of the global batch from the workers' mean row, split by speed
(:mod:`dynamix.rl.actions`); the same windows always give the same decisions. The run's epoch budget
and base lr come from the :class:`PolicyContext`. Works unchanged in the simulator, the engine and
the arbitrator.

The policy registry (:mod:`dynamix.policies.base`, a lower layer) names this module by its import
path, so ``make_policy("dynamix:PATH")`` imports it (and stable-baselines3) only when asked for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from dynamix.config import ConfigError
from dynamix.metrics.schema import GlobalWindow, WorkerWindow
from dynamix.policies.base import BatchSizePolicy, Bounds, Decision, PolicyContext, unheld_global_batch
from dynamix.rl.artifact import action_scheme, check_compatible, load_policy, observer


class DynamixPolicy(BatchSizePolicy):
    def __init__(self, path: str) -> None:
        if not path:
            raise ConfigError("policy spec 'dynamix:PATH': PATH (a results/policies/NAME.zip) is required")
        self.path = path
        self.model, self.meta = load_policy(path)
        self.name = f"dynamix:{Path(path).with_suffix('').name}"

    def check_bounds(self, bounds) -> None:
        """The run's ``batch`` config against the action set and bounds the artifact was trained for:
        the check :meth:`reset` makes, here where the policy is made (``dynamix launch``, ``simulate``,
        ``evaluate``, the arbitrator), before any worker starts."""
        check_compatible(self.meta, tuple(bounds.actions), bounds, where=self.name)

    def unmet_request(self, n_workers: int, bounds: Bounds) -> str | None:
        """Under a residual span [m(N) / s, m(N) s] that ``n_workers`` cannot hold within the bounds (e.g. 512
        x 1.5 = 768 samples on 32 workers at batch.min 32): every decision is held at the nearest global
        batch they can, so the agent runs at the floor (or the ceiling), not as trained. The run says so
        as a rule's unheld batch does (``clamped``)."""
        limits = action_scheme(self.meta, bounds).limits(n_workers)
        return unheld_global_batch(self.name, limits[0], n_workers, bounds, upto=limits[1]) if limits else None

    def reset(self, ctx: PolicyContext) -> None:
        super().reset(ctx)
        check_compatible(self.meta, tuple(ctx.actions), ctx.bounds, where=self.name)
        try:  # the layout and frames it was trained on; the run's epoch budget and base lr
            self.state = observer(self.meta, ctx.bounds, epochs=ctx.epochs, base_lr=ctx.base_lr)
        except ValueError as exc:
            raise ConfigError(f"{self.name}: {exc}") from None
        self.scheme = action_scheme(self.meta, ctx.bounds)

    def initial(self, ctx: PolicyContext) -> Decision:
        """The run's initial batch, or the residual span's start (m(N) split equally) for a policy trained with one."""
        first = self.scheme.initial(ctx.n_workers)
        return Decision(first) if first else super().initial(ctx)

    def decide(self, workers: Sequence[WorkerWindow], glob: GlobalWindow) -> Decision:
        obs = self.scheme.view(self.state.observe(workers, glob))
        actions, _ = self.model.predict(obs, deterministic=True)
        return Decision(self.scheme.apply(workers, np.asarray(actions).reshape(-1)))

    def state_dict(self) -> dict:
        return self.state.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.state.load_state_dict(state)
