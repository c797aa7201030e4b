"""The evaluation protocol: policies on clusters over seeds, under one budget, judged by time to target.

One definition for the project: ``dynamix evaluate`` (:mod:`dynamix.commands.evaluate`) and every
experiment (:mod:`dynamix.experiments`) run and score their simulations through these modules.

- :mod:`~dynamix.evaluation.runner`: run tasks (cluster, config, policy, seed) in-process or in a
  process pool, through the run cache; :func:`~dynamix.evaluation.runner.evaluate`, the whole protocol;
- :mod:`~dynamix.evaluation.cache`: finished runs keyed by the settings a simulated run reads;
- :mod:`~dynamix.evaluation.budget`: time and epoch budgets, the reference policy;
- :mod:`~dynamix.evaluation.runs`: per-run readings of runs.csv rows (final accuracy, time, throughput);
- :mod:`~dynamix.evaluation.targets`: target accuracy, time to target, censoring;
- :mod:`~dynamix.evaluation.stats`: every estimate, interval and verdict over seeds;
- :mod:`~dynamix.evaluation.compare`: a policy's time-to-target ratios against the baselines;
- :mod:`~dynamix.evaluation.tuning`: LB-BSP tuned on validation clusters;
- :mod:`~dynamix.evaluation.sim2real`, :mod:`~dynamix.evaluation.validate_sim`: the simulator against the
  real engine (policies, and static runs).
- :mod:`~dynamix.evaluation.oracle`: the oracle bound of a cluster, its global batch chosen in hindsight.

The protocol itself (targets, budgets, the learning-rate rule, censoring, intervals, verdicts) is told
once, in ``docs/protocol.md``.

Layer: above :mod:`dynamix.rl` (it runs trained policies), below :mod:`dynamix.experiments`.
"""
