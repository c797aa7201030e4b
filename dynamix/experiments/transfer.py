"""Policy transfer (paper Sec. V): does a policy trained on one workload help on another?

Each pair ``SRC_MODEL/SRC_OPT->DST_MODEL/DST_OPT`` (paper: ResNet34 -> ResNet50, VGG11-SGD ->
VGG11-Adam; the default profile uses CPU-sized stand-ins) is evaluated on the target workload on
``experiments.transfer.cluster`` with three policies:

- ``transferred``: the policy trained on the source workload, run unchanged on the target;
- ``target-trained``: a policy trained on the target workload itself (the upper reference);
- ``static:<static_batch>``: the static baseline.

A workload's policy is trained with the ``rl`` settings and the workload's model and optimiser
(:func:`workload_config`); policies are cached in ``out_dir/policies/<workload>.zip`` (resumable), and
the main policy of the policy_training stage is reused when its workload matches.

Outputs: ``runs.csv``, ``summary.csv`` (per pair, policy and seed: time to target, final accuracy),
``summary.json`` (IQM and 95% intervals; ``ratio_transferred_vs_target`` of times to target),
``manifest.json``. Figure: time to target per pair and policy.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

NAME = "transfer"


@dataclass(frozen=True)
class Workload:
    """A model (at a width multiplier) trained with an optimiser: ``resnet20/sgd``, ``mlp@0.25/adam``."""

    model: str
    optimizer: str
    width: float = 1.0

    def __str__(self) -> str:
        width = "" if self.width == 1.0 else f"@{self.width:g}"
        return f"{self.model}{width}/{self.optimizer}"


def parse_pair(text: str) -> tuple[Workload, Workload]:
    """``"resnet8/sgd->resnet20@0.5/adam"`` -> (source, target); errors name the field and the form."""
    form = "experiments.transfer.pairs entries must look like MODEL[@WIDTH]/OPT->MODEL[@WIDTH]/OPT with OPT sgd or adam"
    if text.count("->") != 1:
        raise ValueError(f"{form}, got {text!r}")
    sides = []
    for side in text.split("->"):
        model, _, opt = side.strip().partition("/")
        model, _, width = model.partition("@")
        try:
            w = float(width) if width else 1.0
        except ValueError:
            w = -1.0
        if not model or opt not in ("sgd", "adam") or not w > 0:
            raise ValueError(f"{form}, got {text!r}")
        sides.append(Workload(model, opt, w))
    return sides[0], sides[1]
