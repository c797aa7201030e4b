"""The evaluation protocol: policies on clusters over seeds, under one budget, judged by time to
target.

One definition for the project: ``dynamix evaluate`` (:mod:`dynamix.commands.evaluate`) and every
experiment (:mod:`dynamix.experiments`) run and score their simulations through these modules.

Modules, in data-flow order (tasks in; runs, targets, intervals and verdicts out):

- ``plan``          an experiment's simulated runs: the workload, their config, seeds and budget,
                    the run cache they share;
- ``policy_names``  what the experiments' policy names stand for: ``dynamix`` (the trained policy,
                    or the selection's choice among its seeds), the tuned LB-BSP rules;
- ``budget``        time and epoch budgets, the reference policy;
- ``runner``        run tasks (cluster, config, policy, seed) in-process, in a process pool or on
                    Ray, through the run cache; :func:`~dynamix.evaluation.runner.evaluate`, the
                    whole protocol;
- ``executor``      the runner's Ray backend (``executor.kind: ray``): every run one Ray task, the
                    driver keeping cache and outputs;
- ``cache``         finished runs keyed by the settings a simulated run reads;
- ``runs``          per-run readings of runs.csv rows (final accuracy, time, throughput);
- ``targets``       target accuracy, time to target, censoring;
- ``stats``         every estimate, interval and verdict over seeds;
- ``compare``       a policy's time-to-target ratios against the baselines;
- ``tuning``        LB-BSP tuned on validation clusters;
- ``selection``     the trained seeds scored on validation clusters beside the tuned rule;
- ``oracle``        the oracle bound of a cluster, its global batch chosen in hindsight;
- ``sim2real``      the policies on the real engine beside the simulator;
- ``validate_sim``  the simulator's iteration times against the real engine (static runs);
- ``surrogate_fit`` the simulator's surrogate of learning fitted to a static sweep run here
                    (``dynamix fit-surrogate``), and the config that trains a policy on it;
- ``validate_surrogate``  the surrogate's times to target against the real-math simulator's.

The protocol itself (targets, budgets, the learning-rate rule, censoring, intervals, verdicts) is
told once, in ``docs/protocol.md``.

Layer: above :mod:`dynamix.rl` (it runs trained policies), below :mod:`dynamix.experiments`.
"""
