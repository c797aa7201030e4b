"""The evaluation protocol: policies on clusters over seeds, under one budget, judged by time to target.

One definition for the project: ``dynamix evaluate`` (:mod:`dynamix.commands.evaluate`) and every
experiment (:mod:`dynamix.experiments`) run and score their simulations through these modules.

- :mod:`~dynamix.evaluation.runner`: run tasks (cluster, config, policy, seed) in-process or in a
  process pool, through the run cache; :func:`~dynamix.evaluation.runner.evaluate`, the whole protocol;
- :mod:`~dynamix.evaluation.cache`: finished runs keyed by the settings a simulated run reads;
- :mod:`~dynamix.evaluation.budget`: time and epoch budgets, the reference policy;
- :mod:`~dynamix.evaluation.runs`: per-run readings of runs.csv rows (final accuracy, time, throughput);
- :mod:`~dynamix.evaluation.targets`: target accuracy, time to target, censoring;
- :mod:`~dynamix.evaluation.stats`: IQM, bootstrap intervals, paired per-seed values, aggregates;
- :mod:`~dynamix.evaluation.compare`: a policy's time-to-target ratios against the baselines;
- :mod:`~dynamix.evaluation.oracle`: the oracle bound of a cluster, its global batch chosen in hindsight.

**Target accuracy.** ``rl.target_accuracy > 0`` (or ``--target-accuracy``) fixes it for every
cluster. Otherwise it is set per cluster as ``rl.target_fraction`` (default 0.9) x the best mean
final test accuracy, where the mean is over seeds and the best is over the evaluated policies: a
level the best policy reliably reaches, so every policy's time to it is comparable. A run's time to
target is when its test accuracy, recorded at the end of every window, first reaches the target,
interpolated linearly between the window below it and the one at or above it; empty when never reached.

**Budget** (``rl.eval_budget`` or ``--budget``). ``time`` (default): on each cluster every run gets the
same virtual time, the time the reference ``static:<batch.initial>`` run (seed 0) needs for the epoch
budget (``train.epochs``) on that cluster; epochs only cap it (:func:`~dynamix.train.loop.epoch_cap`).
This is what "time to target" asks (who gets there first, given the same clock) and how the agent's
training episodes are budgeted (:mod:`dynamix.rl.env`). ``epochs``: every run gets ``train.epochs``;
a policy with larger batches then stops after fewer updates, and may be cut off before the target
(which then reads as never reached, although no clock ran out).

Layer: above :mod:`dynamix.rl` (it runs trained policies), below :mod:`dynamix.experiments`.
"""
