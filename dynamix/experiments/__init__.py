"""The experiments behind every figure: one module per notebook, each with ``run(cfg, out_dir) -> dict``.

``run`` writes ``runs.csv``, ``summary.csv``, ``summary.json`` and ``manifest.json`` into ``out_dir``
(see :mod:`dynamix.experiments.shared`) and returns the summary; ``figures(out_dir, fig_dir)`` draws
the experiment's figures from those files (:mod:`dynamix.plots`). The notebooks and ``dynamix run``
call exactly these two functions.

Results of one pipeline live side by side under a results root (``results/`` by default): an
experiment writes ``<root>/<name>/`` and reads what earlier stages wrote beside it (``<root>/policies``
for the trained policy, ``<root>/inference`` etc. for the claims table), so the whole pipeline can be
redirected into another folder (the notebook tests do) by changing ``out_dir`` alone.
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
