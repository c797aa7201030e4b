"""Virtual-time cluster simulator: real model math, the calibrated cost model
(:mod:`dynamix.cluster.costmodel`) for time; or, on the same clock, a fitted surrogate of learning.

It sits on the cluster spec, the trainer, the data, the models and the policies' interface;
``dynamix simulate``, the evaluation runner (every experiment's runs) and the agent's training
environment run it.

Two back-ends offer one window interface (``run_window``, ``done``, ``elapsed_s``, ``iteration``):
:class:`~dynamix.sim.cluster.VirtualCluster` (real math) and
:class:`~dynamix.sim.surrogate.SurrogateCluster` (fitted learning); ``sim.backend`` picks one for every
simulated run, the agent's training episodes included.

Modules, in data-flow order (a calibration, a spec and a policy in, a run's ``runs.csv`` rows out):

- ``calibrate``       measures a_m, c_m on this machine (``dynamix calibrate``) and reads the
                      committed reference calibrations;
- ``cluster``         :class:`VirtualCluster`, k real iterations per window in one process, timed by
                      the cost model under the spec's :mod:`dynamix.cluster.dynamics`;
- ``foresight``       the coming window as it will really run, for simulator-only policies;
- ``progress``        the surrogate's model of learning: accuracy, loss and gradient statistics as
                      functions of progress, a checked JSON artifact;
- ``progress_fit``    fits that model to real-math simulator runs (their ``runs.csv`` rows; the static
                      sweep that gives them and the artifact's provenance:
                      :mod:`dynamix.evaluation.surrogate_fit`);
- ``measured``        the table behind ``sim.learning: measured``: mean test-accuracy curves of a static
                      sweep by epoch and global batch, in place of the fitted power law;
- ``surrogate``       :class:`SurrogateCluster` (``sim.backend: surrogate``): the virtual cluster's
                      interface, the fitted model for learning, the same cost model and dynamics for
                      time, microseconds per window;
- ``run``             :func:`simulate`, a whole run under a policy (``dynamix simulate``).

The simulator against the engine is an evaluation: :mod:`dynamix.evaluation.validate_sim`.
"""
