"""What each pipeline stage reads besides its code: the ``params.yaml`` keys and the files (:data:`READS`).

``dvc.yaml`` declares for every stage exactly these params and files, and as code the files of the
modules its notebook imports within ``dynamix``, followed through the import graph; ``tools/dvcgen.py``
writes it from this table and that graph (``make dvc-yaml``), and ``tests/test_dvc_deps.py`` fails when
the committed file differs. So ``dvc repro`` reruns a stage only when something it reads changed: a
comment in one stage's figure module reruns that stage alone, an edit to ``dynamix/rl/`` the stages that
import it, a change to ``rl.timesteps`` the stages that train a policy.

Params are keys as DVC reads them: a section (``data``), a subsection (``experiments.inference``) or one
key (``rl.model``). A whole section is named where the stage reads every key of it, so a key added to it
later is read too. Every stage also reads ``profile`` and ``profiles`` (:data:`ALWAYS`): the chosen
profile is merged over the base sections in :func:`dynamix.config.load`, so any key's value may come
from either. The ``executor`` section is in no stage's params: it says where runs execute, never what
they compute. A stage's ``manifest.json`` records the whole config as the stage ran it, so after a
change to a key that stage does not read, its manifest shows the old value until the stage next runs.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Reads:
    """What one stage reads besides its code: ``params`` (keys of ``params.yaml``, besides
    :data:`ALWAYS`) and ``files`` (data, committed records and earlier stages' outputs)."""

    params: tuple[str, ...]
    files: tuple[str, ...] = ()


ALWAYS = ("profile", "profiles")
"""Every stage: the profile in force and the profiles merged over the base sections."""

CHARGED = ("engine.compression", "arbitrator.overhead_ms", "arbitrator.overhead_ms_per_worker")
"""What the cost model charges a simulated run per window besides its workload: the gradient
compression and the arbitration cost (:func:`dynamix.sim.cluster.calibrated_cost`)."""

SIMULATED_RUN = ("data", "model", "optim", "train", "batch", *CHARGED)
"""What a simulated run reads of its config: the sections of the run cache's key
(:data:`dynamix.evaluation.cache.SIM_SECTIONS`) and what the cost model charges (:data:`CHARGED`)."""

WORKLOAD = ("experiments.model", "experiments.width")
"""The experiments' simulated workload (:func:`dynamix.evaluation.plan.sim_config`), where a stage does
not replace it with one of its own."""

EXPERIMENT_RUNS = ("experiments.epochs", "experiments.eval_every", "experiments.eval_samples",
                   "experiments.seeds", "experiments.jobs", "experiments.ci")
"""Every simulated experiment: its runs' budget and test cadence, seeds, parallel runs, interval coverage."""

TARGET = ("evaluation.target_accuracy", "evaluation.target_fraction")
"""The target accuracy of time to target (:mod:`dynamix.evaluation.targets`)."""

BUDGET = ("evaluation.budget",)
"""Each run's budget: the reference run's time or the epochs (:func:`dynamix.evaluation.plan.budgeted`)."""

AGENT = ("rl", "sim", *TARGET, "reward", *CHARGED)
"""Training the agent (:mod:`dynamix.rl.learn`): every ``rl`` key, the simulator's model of learning
(``sim``: the fitted surrogate it may train on), the target of the target return, the reward and what
the cost model charges its simulated episodes. The experiments judge every policy with the model math
(:func:`dynamix.evaluation.plan.sim_config`), so the stages that only evaluate do not read ``sim``."""

SHIPPED = ("results/selection/selection.json",)
"""The selection stage's record of what the policy name ``dynamix`` means
(:func:`dynamix.evaluation.policy_names.trained_policy`): read by every stage that runs the agent."""

READS: dict[str, Reads] = {
    "prepare": Reads(
        params=("data", "model", *WORKLOAD, "rl.model", "rl.width", "experiments.transfer.pairs",
                "experiments.compression.workloads"),
        files=("data/cifar10-mini.tar.gz", "calibrations"),
    ),
    "baselines": Reads(
        params=(*SIMULATED_RUN, *WORKLOAD, *EXPERIMENT_RUNS, "experiments.baselines", *TARGET),
        files=("data/cifar10-mini.tar.gz", "clusters", "calibrations"),
    ),
    "policy_training": Reads(
        # the surrogate is fitted to the baselines' sweep, and the target return's reference is that sweep
        params=(*AGENT, "data", "model", "optim", "train", "batch", *EXPERIMENT_RUNS,
                "experiments.baselines", "experiments.policy_training"),
        files=("data/cifar10-mini.tar.gz", "clusters", "calibrations"),
    ),
    "selection": Reads(
        # the candidates run on the validation clusters under the evaluation protocol, beside the LB-BSP
        # sweeps of the tuned rules (experiments.inference's tune_*), a choice confirmed on confirm_seeds
        params=(*SIMULATED_RUN, *WORKLOAD, *EXPERIMENT_RUNS, "experiments.inference.optimizers",
                "experiments.inference.adam_lr", "experiments.inference.tune_clusters",
                "experiments.inference.tune_batches", "experiments.inference.tune_global_batches",
                "experiments.inference.tune_seeds", "experiments.inference.confirm_seeds",
                "experiments.policy_training", "rl.snapshots", *TARGET, *BUDGET),
        files=("data/cifar10-mini.tar.gz", "clusters", "calibrations", "results/policies"),
    ),
    "inference": Reads(
        # the engine run: a real 4-worker run through the gRPC arbitrator
        params=(*SIMULATED_RUN, "engine", "arbitrator", "policy", *WORKLOAD, *EXPERIMENT_RUNS,
                "experiments.target_levels", "experiments.inference", "experiments.baselines.batch_sizes",
                "experiments.policy_training.name", *TARGET, *BUDGET),
        files=("data/cifar10-mini.tar.gz", "clusters", "calibrations", "results/policies", *SHIPPED),
    ),
    "scalability": Reads(
        params=(*SIMULATED_RUN, *WORKLOAD, *EXPERIMENT_RUNS, "experiments.scalability",
                "experiments.policy_training.name", *TARGET, *BUDGET),
        files=("data/cifar10-mini.tar.gz", "clusters", "calibrations", "results/policies", *SHIPPED),
    ),
    "transfer": Reads(
        # trains a policy on each target workload, as policy_training does; the Adam workload's LR
        params=(*AGENT, "data", "model", "optim", "train", "batch", *EXPERIMENT_RUNS, "experiments.transfer",
                "experiments.baselines", "experiments.policy_training.name",
                "experiments.policy_training.timesteps", "experiments.policy_training.select",
                # a profile that selects chooses each trained workload's policy on the validation clusters
                "experiments.inference.adam_lr", "experiments.inference.tune_clusters",
                "experiments.inference.tune_batches", "experiments.inference.tune_global_batches",
                "experiments.inference.tune_seeds", "experiments.inference.confirm_seeds", *BUDGET),
        files=("data/cifar10-mini.tar.gz", "clusters", "calibrations", "results/policies", *SHIPPED),
    ),
    "claims": Reads(
        # the teacher rule the agent is compared with: rl.warm_start_batch, its floor per worker under a span
        params=("experiments.ci", "experiments.tie_margin", "experiments.tie_margin_pts",
                "experiments.sim2real.published", "evaluation.target_fraction", "rl.warm_start_batch",
                "rl.residual_per_worker", "rl.residual_span"),
        files=(
            "results/inference/summary.csv",
            "results/inference/levels.csv",  # times to target at the other levels
            "results/inference/clusters.csv",  # the held-out clusters' table
            "results/scalability/summary.csv",
            "results/transfer/summary.csv",
            "results/transfer/summary.json",  # the PPO budgets of the compared policies
            "docs/expected/sim2real",  # the real-engine rows (dynamix sim2real --publish)
        ),
    ),
    "ablation": Reads(
        params=(*AGENT, "data", "model", "optim", "train", "batch", *WORKLOAD, *EXPERIMENT_RUNS,
                "experiments.ablation", "experiments.baselines", "experiments.policy_training.name", *BUDGET),
        files=("data/cifar10-mini.tar.gz", "clusters", "calibrations", "docs/expected/ablation"),
    ),
    "compression": Reads(
        # its own workloads (experiments.compression.workloads); rl.model names the agent's
        params=(*SIMULATED_RUN, *EXPERIMENT_RUNS, "experiments.tie_margin", "experiments.compression",
                "experiments.policy_training.name", "rl.model", "rl.width", *TARGET, *BUDGET),
        files=("clusters", "calibrations", "results/policies", *SHIPPED, "docs/expected/links.json"),
    ),
}
"""Stage -> what it reads besides its code (:class:`Reads`), in pipeline order."""


def params(stage: str) -> tuple[str, ...]:
    """Every params key ``stage`` reads, as ``dvc.yaml`` lists them: :data:`ALWAYS`, then its own in
    table order, each once, and none whose section or subsection is listed whole."""
    keys = list(dict.fromkeys((*ALWAYS, *READS[stage].params)))
    return tuple(k for k in keys if not any(k.startswith(f"{whole}.") for whole in keys))
