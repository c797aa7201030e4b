"""``dynamix:PATH``: a trained DYNAMIX agent as a :class:`BatchSizePolicy` (deterministic inference).

PATH is a policy artifact (``results/policies/NAME.zip``, its ``.json``, or a bare ``NAME``), checked
by :func:`dynamix.rl.artifact.load_policy` on construction and against the run's action set and
bounds on :meth:`DynamixPolicy.reset`. Each window, the shared policy network reads every worker's
``[local | global]`` observation (:mod:`dynamix.rl.state`, the same builder the training environment
uses) and picks that worker's batch-size step by argmax (``deterministic=True``), so the same windows
always give the same decisions. Works unchanged in the simulator, the engine and the arbitrator.

The policy registry (:mod:`dynamix.policies.base`, a lower layer) names this module by its import
path, so ``make_policy("dynamix:PATH")`` imports it (and stable-baselines3) only when asked for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from dynamix.config import ConfigError
from dynamix.metrics.schema import GlobalWindow, WorkerWindow
from dynamix.policies.base import BatchSizePolicy, Decision, PolicyContext
from dynamix.rl.artifact import check_compatible, load_policy, state_spec
from dynamix.rl.state import StateBuilder, apply_actions


class DynamixPolicy(BatchSizePolicy):
    def __init__(self, path: str) -> None:
        if not path:
            raise ConfigError("policy spec 'dynamix:PATH': PATH (a results/policies/NAME.zip) is required")
        self.path = path
        self.model, self.meta = load_policy(path)
        self.name = f"dynamix:{Path(path).with_suffix('').name}"

    def reset(self, ctx: PolicyContext) -> None:
        super().reset(ctx)
        check_compatible(self.meta, tuple(ctx.actions), ctx.bounds, where=self.name)
        self.state = StateBuilder(ctx.bounds, state_spec(self.meta))  # the layout it was trained on

    def decide(self, workers: Sequence[WorkerWindow], glob: GlobalWindow) -> Decision:
        obs = self.state.observe(workers, glob)
        actions, _ = self.model.predict(obs, deterministic=True)
        sizes = apply_actions([w.batch_size for w in workers], np.asarray(actions).reshape(-1),
                              tuple(self.ctx.actions), self.ctx.bounds)
        return Decision(sizes)

    def state_dict(self) -> dict:
        s = self.state
        return {"t_ref_ms": s.t_ref_ms, "thr_ref": s.thr_ref, "rate_ref": s.rate_ref,
                "prev_acc": None if s.prev_acc is None else s.prev_acc.tolist()}

    def load_state_dict(self, state: dict) -> None:
        s = self.state
        s.t_ref_ms, s.thr_ref, s.rate_ref = state["t_ref_ms"], state["thr_ref"], state["rate_ref"]
        s.prev_acc = None if state["prev_acc"] is None else np.asarray(state["prev_acc"], dtype=np.float64)
