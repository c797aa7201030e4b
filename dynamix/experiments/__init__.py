"""The experiments behind every figure: one module per notebook, each with
``run(cfg, out_dir) -> dict``.

They sit on the evaluation protocol (:mod:`dynamix.evaluation`), the agent's training
(:mod:`dynamix.rl`), the simulator, the engine and the figures (:mod:`dynamix.plots`); the
notebooks, ``dynamix run`` and ``dynamix pipeline`` run them, the playground reads their results.
The notebooks' generator, the runner of their sequence and the ``manifest.json`` each stage writes
belong to :mod:`dynamix.pipeline`.

Modules, in the pipeline's data-flow order (:data:`EXPERIMENTS` names the stages):

- ``shared``           what several stages share: workload, seeds, budgets, run cache, policy names;
- ``prepare``          data counts and the committed calibrations every later stage relies on;
- ``baselines``        the static batch-size sweep on one simulated cluster;
- ``surrogate``        fit the surrogate to the static sweep and validate it (``fit-surrogate``,
                       ``validate-surrogate``); the training stages fit it when they need it;
- ``policy_training``  train the agent on randomised clusters over training seeds; the reward curve;
- ``inference``        the agent against every baseline on the held-out clusters, one engine run;
- ``scalability``      the policies as the cluster grows (to 32 workers);
- ``transfer``         a policy trained on one workload, run on another;
- ``claims``           the paper's claims beside our numbers, each with an interval and a verdict;
- ``ablation``         from the paper's recipe to ours, one addition at a time;
- ``compression``      what lossless gradient compression changes for the policies.

``run`` writes ``runs.csv``, ``summary.csv``, ``summary.json`` and ``manifest.json``
(:mod:`dynamix.pipeline.manifest`) into ``out_dir`` (see :mod:`dynamix.experiments.shared`) and
returns the summary; ``figures(out_dir, fig_dir)`` draws the experiment's figures from those files
(:mod:`dynamix.plots`). The notebooks and ``dynamix run`` call exactly these two functions.

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
