"""The experiments behind every figure: one module per notebook, each with
``run(cfg, out_dir) -> dict``.

They sit on the evaluation protocol (:mod:`dynamix.evaluation`), the agent's training
(:mod:`dynamix.rl`), the simulator, the engine and the figures (:mod:`dynamix.plots`); the
notebooks, ``dynamix run`` and ``dynamix pipeline`` run them, the playground reads their results.
The notebooks' generator, the runner of their sequence and the ``manifest.json`` each stage writes
belong to :mod:`dynamix.pipeline`.

Modules, one per stage notebook (``notebooks/NN_<stage>.ipynb``), in the pipeline's data-flow order
(:data:`EXPERIMENTS` names the stages):

- ``prepare``          data counts and the committed calibrations every later stage relies on;
- ``baselines``        the static batch-size sweep on one simulated cluster;
- ``policy_training``  train the agent on randomised clusters over training seeds (on the fitted
                       surrogate when ``sim.backend`` is ``surrogate``: fitted first when needed,
                       :mod:`dynamix.evaluation.surrogate_fit`); the reward curve;
- ``selection``        which trained policy ships, chosen on the validation clusters with the real
                       math when the profile asks (``experiments.policy_training.select``);
- ``inference``        the agent against every baseline on the held-out clusters, one engine run;
- ``scalability``      the policies as the cluster grows (to 32 workers);
- ``transfer``         a policy trained on one workload, run on another;
- ``claims``           the paper's claims beside our numbers, each with an interval and a verdict;
- ``ablation``         from the paper's recipe to ours, one addition at a time;
- ``compression``      what lossless gradient compression changes for the policies.

The package holds the stages only, and no stage imports another. What they share sits below them:
how their simulated runs are planned (workload, run config, seeds, budgets, run cache:
:mod:`dynamix.evaluation.plan`) and what their policy names stand for
(:mod:`dynamix.evaluation.policy_names`).

``run`` writes into ``out_dir`` and returns the summary:

- ``runs.csv``: tidy long format, one row per (run, window, rank), columns
  :data:`dynamix.metrics.schema.RUNS_COLUMNS` plus the experiment's keys (units in column names);
- ``summary.csv``: one row per run (policy, seed, time to target, final accuracy, ...);
- ``summary.json``: the aggregates the DVC ``metrics`` section tracks;
- ``manifest.json``: config, config hash, git sha, package versions and the command that ran
  (:mod:`dynamix.pipeline.manifest`).

``figures(out_dir, fig_dir)`` draws the experiment's figures from those files (:mod:`dynamix.plots`).
The notebooks and ``dynamix run`` call exactly these two functions.

Results of one pipeline live side by side under a results root (``results/`` by default): an
experiment writes ``<root>/<name>/`` and reads what earlier stages wrote beside it
(``<root>/policies`` for the trained policy, ``<root>/inference`` etc. for the claims table), so the
whole pipeline can be redirected into another folder (the notebook tests do) by changing ``out_dir``
alone.
"""

from __future__ import annotations

import importlib
from types import ModuleType

EXPERIMENTS: dict[str, str] = {
    # name (= results sub-folder and stage): module
    "prepare": "dynamix.experiments.prepare",
    "baselines": "dynamix.experiments.baselines",
    "policy_training": "dynamix.experiments.policy_training",
    "selection": "dynamix.experiments.selection",
    "inference": "dynamix.experiments.inference",
    "scalability": "dynamix.experiments.scalability",
    "transfer": "dynamix.experiments.transfer",
    "claims": "dynamix.experiments.claims",
    "ablation": "dynamix.experiments.ablation",
    "compression": "dynamix.experiments.compression",
}


def get(name: str) -> ModuleType:
    """The module of experiment ``name``; unknown names list the known ones."""
    if name not in EXPERIMENTS:
        from dynamix.config import ConfigError

        raise ConfigError(f"experiment {name!r} is unknown: must be one of {', '.join(EXPERIMENTS)}")
    return importlib.import_module(EXPERIMENTS[name])
