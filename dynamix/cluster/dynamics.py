"""A cluster spec's dynamics, iteration by iteration: events, random stragglers, jitter.

Everything random is drawn from the spec's seed and the iteration number alone,

    rng_t = numpy.random.default_rng(derive_seed(spec.seed, "dynamics", t)),

so the straggler pattern of a spec is the same whatever the batch sizes, the policy or the run seed,
and any process (the simulator, or one engine rank emulating its own slowdown) can compute iteration
t's factors without replaying earlier ones. Per iteration and worker:

- speed factor = prod(active slowdown factors) * (straggler factor with probability p, else 1)
  / exp(sigma z - sigma^2 / 2), z ~ N(0, 1), sigma = ``jitter``: the last term multiplies compute
  time by a mean-one lognormal;
- bandwidth factor = prod(active bandwidth-event factors).

An event triggered by ``at_iteration`` is active on iterations [at, at + duration) (to the end when
duration is 0); one triggered by ``at_time_s`` starts at the first iteration that begins at or after
that virtual (or wall) time, which is why :meth:`ClusterDynamics.factors` takes the current time.
"""

from __future__ import annotations

import numpy as np

from dynamix.cluster.spec import ClusterSpec
from dynamix.seeding import derive_seed


class ClusterDynamics:
    """Per-iteration speed and bandwidth multipliers for every worker of a spec. Call in order of t
    when any event is time-triggered (the trigger iteration is remembered)."""

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.n = spec.n_workers
        self._masks = []
        for e in spec.events:
            mask = np.zeros(self.n, bool)
            mask[list(e.workers) if e.workers else slice(None)] = True
            self._masks.append(mask)
        self.reset()

    def reset(self) -> None:
        """Forget time-triggered starts (a new run)."""
        self._start = [e.at_iteration if e.at_time_s < 0 else None for e in self.spec.events]

    def _active(self, k: int, iteration: int, time_s: float) -> bool:
        e = self.spec.events[k]
        if self._start[k] is None:
            if time_s < e.at_time_s:
                return False
            self._start[k] = iteration
        start = self._start[k]
        forever = e.duration_iterations == 0
        return iteration >= start and (forever or iteration < start + e.duration_iterations)

    def factors(self, iteration: int, time_s: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """(speed factors, bandwidth factors), arrays of length n_workers, for iteration ``iteration``
        (0-based) starting at time ``time_s``."""
        speed = np.ones(self.n)
        bandwidth = np.ones(self.n)
        for k, e in enumerate(self.spec.events):
            if self._active(k, iteration, time_s):
                target = speed if e.kind == "slowdown" else bandwidth
                target[self._masks[k]] *= e.factor
        st, sigma = self.spec.stragglers, self.spec.jitter
        if st.probability > 0 or sigma > 0:
            rng = np.random.default_rng(derive_seed(self.spec.seed, "dynamics", iteration))
            u = rng.random(self.n)
            z = rng.standard_normal(self.n)
            speed *= np.where(u < st.probability, st.factor, 1.0)
            speed /= np.exp(sigma * z - 0.5 * sigma * sigma)
        return speed, bandwidth
