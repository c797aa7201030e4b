"""Virtual-time cluster simulator: real model math, the calibrated cost model
(:mod:`dynamix.cluster.costmodel`) for time.

- :mod:`dynamix.sim.calibrate`: measures a_m, c_m on this machine (``dynamix calibrate``);
- :mod:`dynamix.sim.cluster`: :class:`VirtualCluster`, k real iterations per window in one process,
  timed by the cost model under the spec's :mod:`dynamix.cluster.dynamics`;
- :mod:`dynamix.sim.run`: :func:`simulate`, a whole run under a policy (``dynamix simulate``).

The simulator against the engine is an evaluation: :mod:`dynamix.evaluation.validate_sim`.
"""
