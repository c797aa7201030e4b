"""What the policy names of the experiments stand for: ``dynamix``, the trained policy (the selection's
choice among its training seeds when there is one), and the LB-BSP rules the inference stage tunes;
where a results root keeps the policies and the selection.

Any other name is a policy spec (:mod:`dynamix.policies`) and stands for itself.
"""

from __future__ import annotations

import json
from pathlib import Path

from dynamix.config import Config, ConfigError
from dynamix.policies.base import TRAINED, PolicySpec


def policy_dir(out_dir: str | Path) -> Path:
    """Where the pipeline's policies live: ``policies/`` beside an experiment's folder."""
    return Path(out_dir).parent / "policies"


TUNED_LBBSP = "lbbsp:tuned"
"""LB-BSP at the per-worker batch a sweep on validation clusters finds fastest: the inference stage
tunes it (``experiments.inference.tune_*``, :mod:`dynamix.evaluation.tuning`); no other stage has it."""
TUNED_GLOBAL_LBBSP = "lbbsp:tuned-global"
"""LB-BSP at the global batch (``tune_global_batches``) the same sweep finds fastest; inference stage only."""
TUNED = {TUNED_LBBSP: "per_worker_batch", TUNED_GLOBAL_LBBSP: "global_batch"}
"""The tuned rules and what each sweep's candidates are (:data:`dynamix.evaluation.tuning.KEYS`)."""


SELECTION = "selection"
"""The folder beside ``policies/`` where the selection stage (or ``dynamix select-policy``) records which seed's policy ships
(:mod:`dynamix.experiments.selection`)."""


def trained_policy(policy_dir: Path, name: str) -> Path:
    """The artifact the name ``dynamix`` means: the selection's choice when ``<results>/selection``
    holds one for ``name``, else ``<name>.zip`` (the first training seed's). A choice whose artifact
    has changed since (retrained) is refused: its scores were another policy's."""
    record = Path(policy_dir).parent / SELECTION / "selection.json"
    data = json.loads(record.read_text()) if record.exists() else {}
    if data.get("name") != name:
        return Path(policy_dir) / f"{name}.zip"
    from dynamix.rl.artifact import sha256  # lazy: torch and SB3 only when a selection is read

    path = Path(policy_dir) / data["chosen"]
    if not path.exists() or sha256(path) != data["sha256"]:
        raise ConfigError(f"{record} chose {path}, which has changed since (or is gone): rerun `dynamix "
                          "select-policy`, or delete the record to use the first seed's policy")
    return path


def trained_candidates(cfg: Config, policy_dir: Path) -> dict[str, str]:
    """What the selection stage chooses among, label -> policy spec: the policy_training stage's final
    policies, ``<name>`` (seed 0) and ``<name>-s<k>``, then each seed's snapshots ``<seed>-at<p>``
    (``rl.snapshots``); a ConfigError naming any that is missing."""
    name, n = cfg.experiments.policy_training.name, cfg.experiments.policy_training.seeds
    labels = [name] + [f"{name}-s{k}" for k in range(1, n)]
    snapshots = [snap for label in labels for snap in cfg.rl.snapshot_names(label)]
    require_trained(policy_dir, labels + snapshots)
    return {label: f"dynamix:{Path(policy_dir) / label}.zip" for label in labels + snapshots}


def require_trained(policy_dir: Path, labels: list[str]) -> None:
    """A ConfigError naming every ``<label>.zip`` missing from ``policy_dir`` and the stage that writes it."""
    missing = [label for label in labels if not (Path(policy_dir) / f"{label}.zip").exists()]
    if missing:
        raise ConfigError(f"no trained policy {', '.join(missing)} in {policy_dir}: run the policy_training "
                          "stage first")


def resolve_policy(spec: str, policy_dir: Path, name: str) -> str:
    """A policy name of the experiments -> its policy spec: ``dynamix`` (the trained policy of the
    policy_training stage, :func:`trained_policy`) -> ``dynamix:<path>``; any other spec unchanged. The
    tuned rules (:data:`TUNED`) are refused here: only the inference stage, which runs their sweep, can
    resolve them."""
    if spec == TRAINED:
        return str(PolicySpec.trained(trained_policy(policy_dir, name)))
    if spec in TUNED:
        raise ConfigError(f"policy {spec!r} is tuned by the inference stage only: "
                          "list it in experiments.inference.policies, not elsewhere")
    return spec
