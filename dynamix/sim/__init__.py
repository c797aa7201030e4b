"""Virtual-time cluster simulator: real model math, calibrated cost model for time.

- :mod:`dynamix.sim.costmodel`: the documented cost model (compute, ring / parameter-server
  communication, overlap, synthesised network and system counters);
- :mod:`dynamix.sim.calibrate`: measures a_m, c_m on this machine (``dynamix calibrate``);
- :mod:`dynamix.sim.dynamics`: a spec's events, stragglers and jitter per iteration (seeded);
- :mod:`dynamix.sim.cluster`: :class:`VirtualCluster`, k real iterations per window in one process;
- :mod:`dynamix.sim.run`: :func:`simulate`, a whole run under a policy (``dynamix simulate``).
"""

from dynamix.sim.costmodel import CostModel, IterationCost  # noqa: F401
