"""The one configuration path: ``params.yaml`` -> frozen dataclasses.

``params.yaml`` holds base sections (top-level keys named after the fields of :class:`Config`), a
``profiles`` mapping of partial overrides (``smoke``, ``default``, ``rl-eval``, ``paper``) and
``profile``, the profile in force. :func:`load` deep-merges ``base <- profiles[profile] <- overrides``
and builds the dataclasses. DVC cannot select nested keys (``${profiles.${profile}}``), which is why
the merge lives here and every DVC stage depends on ``profile`` and ``profiles``.

Validation is strict because a silently ignored typo in a research config costs a week: an unknown
key, a wrong type or an out-of-range value raises :class:`ConfigError` naming the dotted field and
its allowed range or choices. Ranges and choices are declared once, in field metadata, beside the
field's documentation. A setting moved to the section where it acts (:data:`HASH_MOVED`) is refused
under its old key, naming the new one; configs stored in the old layout still build (:func:`upgrade`).

Defaults and documentation: this module is the one place a setting is documented and given its
default, ``setting(default, meta, doc="...")`` per field and the docstring's summary per section
(:func:`doc_of`). ``params.yaml``'s base sections, everything above ``profiles:``, are generated from
them (``tools/paramsgen.py``, ``make params-yaml``): every field at its default, its doc beside it, so
the file a user edits shows and explains every setting and a section built in code (``RLConfig()``)
behaves as the pipeline does. ``tests/test_config.py`` fails when the file is not what the generator
writes. Profiles, written by hand, override only.

To add a field or a section: give every field a default, a ``doc`` and ``rng``/``one_of`` metadata
where a range exists, add sections as fields of :class:`Config` (the section's docstring opens with
its summary), then run ``make params-yaml``.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from dynamix import paths
from dynamix.errors import UserError


class ConfigError(UserError, ValueError):
    """A config value is unknown, mistyped or out of range; the message names the field (a user's
    mistake: ``dynamix`` prints it as one line and exits with status 2)."""


YAML_LIMITS = {"bytes": 1 << 22, "depth": 64, "nodes": 1_000_000}
"""What one YAML input may hold: 4 MiB of text, nesting 64 deep, a million values once its aliases
are expanded (a few hundred bytes of nested aliases otherwise expand to gigabytes)."""


class _BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses, while composing, nesting deeper than ``YAML_LIMITS["depth"]``
    (before Python's recursion limit) and a document whose aliases expand beyond ``"nodes"``."""

    depth = 0

    def compose_node(self, parent, index):
        self.depth += 1
        try:
            if self.depth > YAML_LIMITS["depth"]:
                raise ConfigError(f"nesting deeper than {YAML_LIMITS['depth']} levels")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def compose_document(self):
        node = super().compose_document()
        sizes: dict[int, int] = {}

        def expanded(n) -> int:  # values under n with every alias expanded; each distinct node once
            if id(n) not in sizes:
                sizes[id(n)] = YAML_LIMITS["nodes"] + 1  # until counted: a node inside itself is endless
                children = n.value if isinstance(n, yaml.SequenceNode) else \
                    [c for pair in n.value for c in pair] if isinstance(n, yaml.MappingNode) else []
                sizes[id(n)] = min(1 + sum(expanded(c) for c in children), YAML_LIMITS["nodes"] + 1)
            return sizes[id(n)]

        if node is not None and expanded(node) > YAML_LIMITS["nodes"]:
            raise ConfigError(f"more than {YAML_LIMITS['nodes']:,} values once its aliases are expanded")
        return node


def parse_yaml(text: Any, source: str) -> Any:
    """``yaml.safe_load(text)`` (a string or an open file) within :data:`YAML_LIMITS`; a syntax error
    or a limit is a :class:`ConfigError` naming ``source`` (and the line and column)."""
    source = clip(source)
    try:
        text = text if isinstance(text, str) else text.read(YAML_LIMITS["bytes"] + 1)
        if len(text) > YAML_LIMITS["bytes"]:
            raise ConfigError(f"more than {YAML_LIMITS['bytes']:,} characters")
        return yaml.load(text, Loader=_BoundedLoader)
    except ConfigError as exc:
        raise ConfigError(f"{source}: refused: {exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{source}: not a text file (UTF-8 YAML expected)") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise ConfigError(f"{source}: refused: {clip(str(exc))}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}, line {mark.line + 1}, column {mark.column + 1}" if mark is not None else source
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{where}: not valid YAML ({problem})") from None


def read_yaml(path: Path, source: str) -> Any:
    """The YAML file at ``path`` (:func:`parse_yaml`, errors naming ``source``); a FIFO, device or other
    non-file is refused before it is opened (reading one would wait forever or never end)."""
    if path.exists() and not path.is_file() and not path.is_dir():
        raise ConfigError(f"{clip(source)}: not a regular file")
    with open(path) as fh:
        return parse_yaml(fh, source)


def clip(text: str, limit: int = 200) -> str:
    """``text`` cut to ``limit`` characters for an error message: a message names what was wrong,
    never repeats a huge value."""
    return text if len(text) <= limit else f"{text[:limit - 15]}... ({len(text):,} chars)"


def brief(value: Any) -> str:
    """``repr(value)`` cut by :func:`clip`."""
    return clip(repr(value))


def rng(lo: float | None = None, hi: float | None = None) -> dict:
    """Field metadata: the value (or every element of a tuple) must lie in ``[lo, hi]``."""
    return {"range": (lo, hi)}


def one_of(*choices: str) -> dict:
    """Field metadata: the value must be one of ``choices``."""
    return {"choices": tuple(choices)}


def setting(default: Any, meta: dict | None = None, doc: str = "") -> Any:
    """A dataclass field with a default, validation metadata (``rng``/``one_of``) and ``doc``, what the
    setting does: the one text that documents it, kept in the metadata (``metadata["doc"]``, read by
    :func:`doc_of`) and written beside the key in ``params.yaml`` (``make params-yaml``). Plain text, as a
    user reads it in ``params.yaml``: values as they are written there, other settings by dotted name."""
    if isinstance(default, (list, dict)):
        raise TypeError("use tuples for sequence defaults (frozen config)")
    return field(default=default, metadata={**(meta or {}), **({"doc": doc} if doc else {})})


def doc_of(cls: type, name: str) -> str:
    """What the setting ``name`` of section ``cls`` does (its :func:`setting`'s ``doc``); for a section
    (a field whose type is a dataclass), the summary paragraph of that dataclass's docstring."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    if "doc" in f.metadata:
        return f.metadata["doc"]
    summary = (typing.get_type_hints(cls)[name].__doc__ or "").split("\n\n")[0]
    return " ".join(re.sub(r":\w+:`~?([^`]+)`|``([^`]+)``", lambda m: m[1] or m[2], summary).split())


SEED = rng(0, 2**31 - 1)
"""The range of every seed (``train.seed``, ``--seed``): what numpy and torch generators accept."""


# --------------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DataConfig:
    """Which data set, and where CIFAR-10 comes from; see :mod:`dynamix.data.sources`."""

    dataset: str = setting("cifar10", one_of("cifar10", "interactions", "tokens"),
                           doc="cifar10 (from `source`), or a seeded synthetic data set of a sparse "
                               "workload: interactions, (user, item) pairs for model.name = ncf "
                               "(dynamix.data.interactions); tokens, token windows for model.name = lstm-lm "
                               "(dynamix.data.tokens)")
    source: str = setting("embedded", one_of("embedded", "path", "torchvision"),
                          doc="embedded: the class-balanced subset committed as data/cifar10-mini.tar.gz | "
                              "path: `path` | torchvision: torchvision.datasets.CIFAR10 with download=True "
                              "into `download_root`; $DYNAMIX_CIFAR10 forces path")
    path: str = setting("",
                        doc="for source path: a directory or .tar.gz in ImageFolder layout; $DYNAMIX_CIFAR10 "
                            "overrides it")
    download_root: str = setting("data/torchvision",
                                 doc="where torchvision downloads CIFAR-10 (source: torchvision)")
    augment: bool = setting(True, doc="random crop (pad 4) + horizontal flip on training batches")


@dataclass(frozen=True)
class ModelConfig:
    """Which network to train; names are the keys of ``dynamix.models.REGISTRY`` (ncf needs data.dataset =
    interactions, lstm-lm data.dataset = tokens)."""

    name: str = setting("tiny-cnn",
                        doc="a key of dynamix.models.REGISTRY: tiny-cnn, mlp, resnet8/20, vgg11-19, "
                            "resnet18/34/50, ncf")
    width: float = setting(1.0, rng(0.0625, 8.0),
                           doc="channel multiplier of the model family (VGG/ResNet families)")


@dataclass(frozen=True)
class OptimConfig:
    """Optimiser and learning-rate schedule (see :mod:`dynamix.train.optim`)."""

    name: str = setting("sgd", one_of("sgd", "adam"), doc="sgd | adam")
    lr: float = setting(0.05, rng(1e-6, 10.0),
                        doc="learning rate (at base_batch when lr_scaling is not none)")
    momentum: float = setting(0.9, rng(0.0, 0.999), doc="SGD momentum")
    weight_decay: float = setting(5e-4, rng(0.0, 0.1), doc="L2 weight decay")
    schedule: str = setting("constant", one_of("constant", "cosine", "step", "multistep"),
                            doc="constant | cosine | step | multistep")
    step_every_iters: int = setting(1000, rng(1, None),
                                    doc="step schedule: divide the LR by 10 every this many iterations")
    milestones: tuple[float, ...] = setting((0.5, 0.75), rng(0.0, 1.0),
                                            doc="multistep schedule: divide the LR by 10 at each of these "
                                                "fractions of the run's budget (He et al. 2016's CIFAR "
                                                "schedule: half and three quarters of training)")
    warmup_iters: int = setting(0, rng(0, None), doc="linear LR warm-up (0: none)")
    lr_scaling: str = setting("none", one_of("none", "linear", "sqrt"),
                              doc="how the LR follows the global batch B: none | linear (lr * B / "
                                  "base_batch, Goyal et al. 2017) | sqrt (lr * sqrt(B / base_batch), "
                                  "Krizhevsky 2014); AdaScale is a policy's lr_scale instead")
    base_batch: int = setting(128, rng(1, None), doc="the global batch at which lr applies (lr_scaling)")

    def __post_init__(self) -> None:
        if list(self.milestones) != sorted(self.milestones):
            raise ConfigError(f"optim.milestones = {list(self.milestones)} is not allowed: must be in ascending order")


@dataclass(frozen=True)
class TrainConfig:
    """A training run's budget, cadence and seed."""

    batch_size: int = setting(64, rng(1, 65536), doc="per-worker batch of a static run")
    epochs: float = setting(5.0, rng(0.0, 10000.0), doc="run length in epochs of the training set")
    max_iters: int = setting(0, rng(0, None), doc="stop after this many iterations (0: run by epochs)")
    max_time_s: float = setting(0.0, rng(0.0, None),
                                doc="simulator only: a virtual-time budget in seconds (0: none); the run "
                                    "also ends at the first iteration that finishes past it (`dynamix "
                                    "evaluate --budget time`). The engine refuses it: its ranks' wall clocks "
                                    "differ, so a time stop could end them at different iterations")
    schedule_epochs: float = setting(0.0, rng(0.0, 10000.0),
                                     doc="the learning-rate schedule's horizon in epochs of the run's own "
                                         "samples (0: epochs). The schedule follows the run's own progress; "
                                         "a time budget only stops a run, it never moves it")
    eval_every: int = setting(100, rng(1, None), doc="iterations between test-set evaluations")
    eval_samples: int = setting(0, rng(0, None), doc="test images per evaluation (0: the whole test split)")
    checkpoint_every: int = setting(200, rng(1, None), doc="iterations between checkpoints")
    seed: int = setting(0, SEED, doc="base seed; sub-seeds are derived per role and rank")
    threads: int = setting(0, rng(0, 256), doc="torch threads per process (0: torch's default)")
    device: str = setting("auto",
                          doc="where the model math runs (simulator, `dynamix train`, calibrate, evaluate, "
                              "the engine): auto = CUDA when torch sees a GPU, else cpu | cpu | cuda = the "
                              "current GPU (the engine: one per local rank) | cuda:N = GPU N; resolved by "
                              "dynamix.train.device.resolve_device")
    amp: str = setting("none", one_of("none", "bf16", "fp16"),
                       doc="mixed precision of forward/backward on CUDA (torch.autocast): none | bf16 | fp16 "
                           "with dynamic loss scaling. Refused on cpu: CPU autocast made a tiny-cnn step "
                           "8-10x slower than fp32 on a CPU without bf16/fp16 units (measured)")
    channels_last: bool = setting(False,
                                  doc="NHWC activations and weights: faster convolutions on CPU (oneDNN), "
                                      "but a different float rounding than the default layout, so same-seed "
                                      "outputs differ from runs without it (opt-in)")

    def __post_init__(self) -> None:
        if not self.max_iters and not self.epochs > 0:
            raise ConfigError(f"train.epochs = {self.epochs:g} with train.max_iters = 0 trains nothing: set "
                              "train.epochs > 0 or train.max_iters >= 1")
        if not re.fullmatch(r"auto|cpu|cuda(:[0-9]+)?", str(self.device)):
            raise ConfigError(f"train.device = {self.device!r} is not allowed: must be one of 'auto', 'cpu', "
                              "'cuda', 'cuda:N' (N a GPU index)")

    @property
    def horizon_epochs(self) -> float:
        """The run's epoch budget as its learning-rate schedule sees it: ``schedule_epochs``, else
        ``epochs`` (the denominator of :func:`dynamix.train.loop.schedule_progress` in epochs)."""
        return float(self.schedule_epochs or self.epochs)


@dataclass(frozen=True)
class BatchConfig:
    """The batch-size action space shared by every adaptive policy (paper Sec. III)."""

    min: int = setting(32, rng(1, 65536), doc="smallest per-worker batch an adaptive policy may set")
    max: int = setting(1024, rng(1, 65536), doc="largest per-worker batch an adaptive policy may set")
    actions: tuple[int, ...] = setting((-100, -25, 0, 25, 100), rng(-65536, 65536),
                                       doc="per-window batch-size steps of the action set (paper Sec. III)")
    window: int = setting(10, rng(1, None), doc="k: iterations between decisions")
    initial: int = setting(64, rng(1, 65536), doc="every worker's batch at the start of a run")


@dataclass(frozen=True)
class EngineConfig:
    """The torch.distributed engine (see :mod:`dynamix.engine`)."""

    world_size: int = setting(2, rng(1, 4096),
                              doc="worker processes of `dynamix launch` when --nproc is not given")
    arch: str = setting("ring", one_of("ring", "ps"),
                        doc="ring (weighted all-reduce) | ps (parameter server)")
    backend: str = setting("auto", one_of("auto", "gloo", "nccl"),
                           doc="auto (nccl when each rank has a GPU of its own, else gloo) | gloo | nccl")
    num_servers: int = setting(1, rng(1, 64), doc="parameter-server ranks (arch: ps only)")
    net_mode: str = setting("inject", one_of("inject", "netns"),
                            doc="inject (modelled communication time as a floor) | netns (root: namespaces + "
                                "tc shaping)")
    cluster: str = setting("clusters/homogeneous-4.yaml",
                           doc="cluster spec whose heterogeneity the engine emulates")
    retrans: str = setting("tcp_info", one_of("tcp_info", "ebpf"),
                           doc="TCP retransmission counter: tcp_info (this worker's own sockets) | ebpf "
                               "(bpftrace on the tcp:tcp_retransmit_skb tracepoint; needs root and tracefs, "
                               "falls back to tcp_info with one log line)")
    compression: str = setting("none", one_of("none", "lhc"),
                               doc="gradient compression: none | lhc (lossless homomorphic, dynamix.comm, "
                                   "docs/compression.md; exact up to float summation order, pays off on "
                                   "sparse gradients such as the embedding model ncf's)")
    topk: float = setting(0.0, rng(0.0, 1.0),
                          doc="LOSSY top-k sparsification with error feedback before the reduction "
                              "(dynamix.comm.topk): the fraction of gradient entries each worker sends per "
                              "iteration; 0 = off. For dense models with lhc")


@dataclass(frozen=True)
class PolicyConfig:
    """Which batch-size policy runs, as a spec string (``static:64``, ``lbbsp``, ``gns``, ...)."""

    spec: str = setting("static:64", doc="batch-size policy: static:B | lbbsp | gns | ramp | dynamix:PATH")


@dataclass(frozen=True)
class RewardConfig:
    """Reward coefficients (paper Eq. for r_SGD / r_Adam); see :mod:`dynamix.rl.reward`."""

    alpha: float = setting(1.0, rng(0.0, None), doc="weight of the accuracy gain max(0, dA)")
    beta: float = setting(0.5, rng(0.0, None), doc="weight of the scaled iteration time T_iter")
    delta: float = setting(0.02, rng(0.0, None), doc="weight of log2(b) - 5 (penalises extreme batches)")
    eta: float = setting(0.01, rng(0.0, None),
                         doc="adaptive optimisers (Adam) only: weight of sigma2_norm + sigma_norm")


@dataclass(frozen=True)
class BaselinesExperiment:
    """Static batch-size sweep on one cluster: accuracy vs time, throughput vs batch size."""

    cluster: str = setting("clusters/homogeneous-4.yaml", doc="cluster of the static sweep")
    batch_sizes: tuple[int, ...] = setting((32, 64, 128, 256, 512), rng(1, 65536),
                                           doc="per-worker static batch sizes swept")


@dataclass(frozen=True)
class PolicyTrainingExperiment:
    """Train the DYNAMIX policy; the artifact is ``<policies>/<name>.zip`` (+ ``.json``)."""

    name: str = setting("dynamix", doc="artifact: results/policies/<name>.zip (+ .json)")
    timesteps: int = setting(0, rng(0, None),
                             doc="the pipeline's PPO budget, per-worker transitions (0: rl.timesteps)")
    seeds: int = setting(3, rng(1, 20),
                         doc="training seeds (train.seed + k): k = 0 is the pipeline's policy, the others "
                             "(<name>-s<k>) give the reward curve its band over seeds (paper Fig. 3)")
    select: bool = setting(False,
                           doc="the selection stage chooses the policy that ships among the seeds and snapshots "
                               "on the validation clusters with the real math (dynamix.experiments.selection); "
                               "false: the first seed's, unless dynamix select-policy has chosen one")


@dataclass(frozen=True)
class InferenceExperiment:
    """DYNAMIX against every baseline on held-out clusters, per optimiser; plus one engine run."""

    clusters: tuple[str, ...] = setting(
        ("clusters/heldout/hetero-speed-4.yaml", "clusters/heldout/ps-event-4.yaml")
    ,
        doc="held-out specs every policy runs on")
    policies: tuple[str, ...] = setting(("dynamix", "static:32", "static:64", "static:128", "static:256", "static:512",
                                         "lbbsp", "lbbsp:batch=512", "gns", "ramp"),
                                        doc="policy specs compared; dynamix stands for the policy trained by "
                                            "the policy_training stage. The whole static sweep of "
                                            "baselines.batch_sizes (the claims' median static) and "
                                            "lbbsp:batch=512, the rule the agent's warm start imitates, "
                                            "beside lbbsp")
    optimizers: tuple[str, ...] = setting(("sgd", "adam"), doc="workloads: optim.name per run")
    adam_lr: float = setting(0.001, rng(1e-6, 1.0), doc="optim.lr of the Adam workload")
    engine_cluster: str = setting("clusters/mixed-4.yaml",
                                  doc="cluster of the end-to-end engine run (4 emulated heterogeneous "
                                      "workers)")
    engine_iters: int = setting(60, rng(0, None),
                                doc="iterations of that run (0: skip the end-to-end engine run)")
    engine_policy: str = setting("dynamix", doc="policy the arbitrator serves in that run")
    tune_clusters: tuple[str, ...] = setting(("clusters/validation/val-mixed-5.yaml", "clusters/validation/val-ps-4.yaml",
                                              "clusters/validation/val-straggler-6.yaml"),
                                             doc="lbbsp:tuned (when listed in policies): LB-BSP at the mean "
                                                 "per-worker batch, among tune_batches, that is fastest to "
                                                 "target on these clusters over tune_seeds seeds "
                                                 "(dynamix/evaluation/tuning.py); lbbsp:tuned-global the "
                                                 "same at a global batch (tune_global_batches). Validation "
                                                 "clusters only, never the held-out ones")
    tune_batches: tuple[int, ...] = setting((32, 64, 128, 256), rng(1, 65536),
                                            doc="lbbsp:tuned: mean per-worker batches swept (LB-BSP's global "
                                                "batch = this x workers)")
    tune_global_batches: tuple[int, ...] = setting((256, 384, 512, 640, 768), rng(1, 1 << 20),
                                                   doc="lbbsp:tuned-global: the same sweep over global "
                                                       "batches, the same on every cluster whatever its "
                                                       "workers")
    tune_seeds: int = setting(1, rng(1, 1000), doc="seeds per candidate and cluster")
    confirm_seeds: int = setting(0, rng(0, 1000),
                                 doc="a trained policy chosen over its warm start ships only if, on these "
                                     "many seeds of the validation clusters (the tune_seeds ones and more), "
                                     "it is faster than the warm start in pooled paired ratio, the whole "
                                     "interval below 1, and misses the target on no more runs "
                                     "(dynamix/evaluation/selection.py); 0: no check, else more than tune_seeds")
    oracle_batches: tuple[int, ...] = setting((), rng(1, 65536),
                                              doc="the oracle bound (docs/protocol.md): per held-out "
                                                  "cluster, oracle:batch=m x workers for every per-worker "
                                                  "batch m here (its hindsight grid) over oracle_seeds "
                                                  "seeds, the fastest to the comparison's target in "
                                                  "hindsight then run on every seed as oracle "
                                                  "(dynamix/evaluation/oracle.py); []: no oracle")
    oracle_seeds: int = setting(1, rng(1, 1000),
                                doc="seeds of that grid; the chosen batch then runs on every seed")
    oracle_refine: bool = setting(False,
                                  doc="then B*/1.25 and B* x 1.25 around the grid's constant winner B*")
    oracle_phase_epochs: tuple[float, ...] = setting((), rng(0.0, None),
                                                     doc="two-phase members: B* until each epoch E here, "
                                                         "then B* x 0.5 or x 2 "
                                                         "(dynamix/evaluation/oracle.py)")

    def __post_init__(self) -> None:
        if 0 < self.confirm_seeds <= self.tune_seeds:
            raise ConfigError(f"experiments.inference.confirm_seeds = {self.confirm_seeds} must be 0 (no check) or "
                              f"more than tune_seeds = {self.tune_seeds}: the check runs the seeds the choice "
                              "was not made on")


@dataclass(frozen=True)
class ScalabilityExperiment:
    """The same worker mix repeated to each cluster size (paper: up to 32 nodes)."""

    cluster: str = setting("clusters/heldout/hetero-speed-4.yaml",
                           doc="worker mix, its workers cycled to reach each size")
    workers: tuple[int, ...] = setting((4, 8, 16, 32), rng(1, 4096), doc="cluster sizes")
    policies: tuple[str, ...] = setting(("dynamix", "static:64", "lbbsp", "lbbsp:batch=512", "gns"),
                                        doc="policies compared at each size")
    iterations: int = setting(0, rng(0, None),
                              doc="budget per size in iterations: the time the static batch.initial run "
                                  "needs for this many iterations on that size (0: experiments.epochs, so "
                                  "larger clusters take fewer, larger iterations)")


@dataclass(frozen=True)
class TransferExperiment:
    """Policy transfer between workloads ``SRC_MODEL/SRC_OPT->DST_MODEL/DST_OPT`` (paper Sec. V)."""

    pairs: tuple[str, ...] = setting(("mlp@0.25/sgd->mlp@0.5/sgd", "mlp@0.25/sgd->mlp@0.25/adam"),
                                     doc="SRC_MODEL/SRC_OPT->DST_MODEL/DST_OPT workload pairs (model@width); "
                                         "the defaults are CPU stand-ins")
    cluster: str = setting("clusters/heldout/hetero-speed-4.yaml", doc="cluster of the transfer runs")
    static_batch: int = setting(64, rng(1, 65536), doc="the static baseline in the comparison")
    timesteps: int = setting(0, rng(0, None),
                             doc="PPO budget of each target-trained policy (0: the source's, "
                                 "policy_training.timesteps): the claims compare a transferred policy with "
                                 "one trained alike on the target")


@dataclass(frozen=True)
class SimToRealExperiment:
    """The agent's advantage on the real engine beside the simulator's (``dynamix sim2real``,
    :mod:`dynamix.evaluation.sim2real`)."""

    cluster: str = setting("clusters/heldout/hetero-speed-4.yaml",
                           doc="a held-out spec the engine emulates (4 workers, speeds by time dilation)")
    policies: tuple[str, ...] = setting(("dynamix", "static:32", "static:64", "static:128", "static:256",
                                         "static:512", "lbbsp"),
                                        doc="the compared policies: the static sweep (the median static), "
                                            "LB-BSP and the agent (dynamix: the policy_training stage's "
                                            "policy)")
    epochs: float = setting(3.0, rng(0.01, 1000.0),
                            doc="every run's budget in epochs (the engine cannot stop on virtual time)")
    published: str = setting("docs/expected/sim2real",
                             doc="a run on this machine's quiet cores (dynamix sim2real --publish), read by "
                                 'the claims ("": no row)')


ID_DATASETS = {"ncf": "interactions", "lstm-lm": "tokens"}
"""The models that train on a synthetic id data set, and its ``data.dataset`` name."""


@dataclass(frozen=True)
class CompressionExperiment:
    """Batch-size policies with and without lossless gradient compression (``engine.compression: lhc``)
    on communication-bound clusters (:mod:`dynamix.experiments.compression`, docs/compression.md)."""

    clusters: tuple[str, ...] = setting(("clusters/sparse-comm-4.yaml",),
                                        doc="every policy runs on these: communication-bound for the "
                                            "workloads, so compression has something to save")
    static_clusters: tuple[str, ...] = setting(("clusters/links-1g-4.yaml", "clusters/links-10g-4.yaml"),
                                               doc="the static policies alone run on these: the links "
                                                   "benchmark's rings at its measured speeds (1 and 10 Gbit/s, "
                                                   "docs/expected/links.json), where links.csv says whether "
                                                   "compression changes the best static batch")
    static_seeds: int = setting(1, rng(0, 1000),
                                doc="seeds of each run on static_clusters (0: experiments.seeds); one keeps "
                                    "the default profile quick")
    policies: tuple[str, ...] = setting(("dynamix", "static:64", "static:256", "lbbsp", "gns"),
                                        doc="policy specs, each run without and with engine.compression = "
                                            "lhc; dynamix is the policy_training stage's agent (trained on "
                                            "rl.model: applied to these workloads unchanged, a transfer)")
    workloads: tuple[str, ...] = setting(("ncf",),
                                         doc="MODEL[@WIDTH] each, on its data set (ncf: interactions, lstm-lm: "
                                             "tokens, every other model cifar10); ncf and lstm-lm have sparse "
                                             "gradients")
    epochs: float = setting(2.0, rng(0.0, 10000.0),
                            doc="every run's budget in epochs (0: experiments.epochs)")

    def __post_init__(self) -> None:
        if not self.workloads:
            raise ConfigError("experiments.compression.workloads is empty: name at least one, e.g. [ncf]")
        names = [f"{model}@{width:g}" for model, width, _ in self.parse_workloads(self.workloads)]
        if len(set(names)) < len(names):
            raise ConfigError(f"experiments.compression.workloads = {brief(list(self.workloads))} names a "
                              "workload twice: list each once")
        if not self.clusters and not self.static_clusters:
            raise ConfigError("experiments.compression.clusters and static_clusters are both empty: name a "
                              "cluster to run on")
        both = sorted(set(self.clusters) & set(self.static_clusters))
        if both:
            raise ConfigError(f"experiments.compression.static_clusters repeats {', '.join(both)} of clusters: "
                              "list a cluster in one of them")
        if self.static_clusters and not any(STATIC_POLICY.fullmatch(p) for p in self.policies):
            raise ConfigError("experiments.compression.static_clusters run the static:B policies of policies, "
                              f"and policies = {brief(list(self.policies))} has none: add one or set "
                              "static_clusters: []")

    @staticmethod
    def parse_workloads(workloads: tuple[str, ...]) -> list[tuple[str, float, str]]:
        """(model, width, data set) of each entry of ``workloads`` (:attr:`workloads`), in order; a
        malformed entry is a :class:`ConfigError` naming the field and the form."""
        out = []
        for i, text in enumerate(workloads):
            model, _, width = text.strip().partition("@")
            try:
                w = float(width) if width else 1.0
            except ValueError:
                w = math.nan
            if not model or not 0.0625 <= w <= 8.0:
                raise ConfigError(f"experiments.compression.workloads[{i}] = {brief(text)} must look like "
                                  "MODEL[@WIDTH] with WIDTH in [0.0625, 8.0], e.g. ncf or lstm-lm@0.5")
            out.append((model, w, ID_DATASETS.get(model, "cifar10")))
        return out


STATIC_POLICY = re.compile(r"static:(\d+)")
"""A static policy spec with its batch size (``static:64``), what the compression experiment ranks."""


@dataclass(frozen=True)
class AblationStep:
    """One row of the ablation (:data:`ABLATION`, :mod:`dynamix.experiments.ablation`)."""

    ladder: bool
    """On the ladder (a step, adding :attr:`rl` to the step before it) or a variant beside it (:attr:`rl`
    applied to the config given, the default recipe)."""
    rl: Mapping[str, Any] | None
    """The ``rl`` overrides: a step's addition (the first step's to the paper recipe given the whole
    transition budget), a variant's one change; ``None``: the config given itself (the last step)."""
    changes: str
    """One line: what the row changes (the ``changes`` column of the ablation's table)."""


ABLATION: dict[str, AblationStep] = {
    # the ladder, in order
    "paper": AblationStep(True, {}, "the paper's recipe: its state, T_iter = iteration time, plain sum over "
                                    "epoch-budgeted episodes, PPO from scratch on the whole budget"),
    "time": AblationStep(True, {"return_shape": "time"},
                         "+ duration-weighted return over a time-budgeted episode (rl.return_shape: time)"),
    "imbalance": AblationStep(True, {"time_signal": "imbalance"},
                              "+ T_iter = straggler excess + own wait, per iteration "
                              "(rl.time_signal: imbalance)"),
    "state": AblationStep(True, {"state": "dynamix"},
                          "+ our state v4: lb_gap, compute/wait/comm split, busy_rel, straggler and "
                          "noise-scale aggregates"),
    "dynamix": AblationStep(True, None, "+ LB-BSP warm start, its transitions taken from PPO's budget: "
                                        "the default recipe"),
    # the variants of the default
    "schedule": AblationStep(False, {"state": "schedule"},
                             "+ schedule state: training progress, learning-rate phase, noise-scale trend "
                             "(rl.state: schedule)"),
    "global": AblationStep(False, {"action": "global"},
                           "global action: one step of the global batch (x0.5..x2) per window, split by "
                           "speed (rl.action: global)"),
    "schedule-scratch": AblationStep(False, {"state": "schedule", "warm_start": "none"},
                                     "schedule state without the warm start: PPO from scratch on the whole "
                                     "budget"),
    "global-scratch": AblationStep(False, {"action": "global", "warm_start": "none"},
                                   "global action without the warm start: PPO from scratch on the whole "
                                   "budget"),
}
"""Every row the ablation can run (``experiments.ablation.steps``), by name: the ladder from the paper's
recipe to ours, one addition per step, in order, then the opt-in variants of the default, each one
change to it (:mod:`dynamix.experiments.ablation`). The one table of them: the names allowed, the
ladder's order, the overrides and the table's labels all come from here."""
ABLATION_STEPS = tuple(name for name, row in ABLATION.items() if row.ladder)
"""The ablation's ladder, in order (:data:`ABLATION`)."""
ABLATION_VARIANTS = tuple(name for name, row in ABLATION.items() if not row.ladder)
"""Opt-in rows beside the ladder, each one change to the default recipe (:data:`ABLATION`)."""


@dataclass(frozen=True)
class AblationExperiment:
    """From the paper's recipe to ours one addition at a time (:mod:`dynamix.experiments.ablation`,
    docs/journal/rl.md)."""

    steps: tuple[str, ...] = setting(ABLATION_STEPS,
                                     doc="rows to train and evaluate, names of config.ABLATION: the ladder's "
                                         "steps, in order (paper .. dynamix = the default recipe), and "
                                         "opt-in variants of the default (config.ABLATION_VARIANTS: "
                                         "schedule, global, schedule-scratch, global-scratch)")
    seeds: int = setting(3, rng(1, 100),
                         doc="training seeds per step (train.seed + k); policy k runs with run seed k")
    heldout: tuple[str, ...] = setting(
        ("clusters/heldout/hetero-net-6.yaml", "clusters/heldout/hetero-speed-4.yaml", "clusters/heldout/ps-event-4.yaml"),
        doc="test clusters")
    validation: int = setting(4, rng(0, 1000),
                              doc="validation clusters: the first N of `dynamix sample-clusters --seed "
                                  "validation_seed --workers validation_workers` (the docs' sampled "
                                  "validation set); 0: none")
    validation_seed: int = setting(1, rng(0, None), doc="seed of that draw")
    validation_workers: tuple[int, ...] = setting((4, 5, 6), rng(1, 256),
                                                  doc="worker counts cycled over the validation clusters")
    baselines: tuple[str, ...] = setting(("static:32", "static:64", "static:128", "static:256", "static:512",
                                          "lbbsp", "gns", "lbbsp:batch=512"),
                                         doc="what every step is compared with (run seeds 0..seeds-1); "
                                             "ratios are to the median static:* policy")
    precomputed: str = setting("docs/expected/ablation/summary.csv",
                               doc="per-run results committed by an `ablation`-profile run (its "
                                   'summary.csv); "": train and evaluate here (~2 h)')

    def __post_init__(self) -> None:
        allowed = ABLATION_STEPS + ABLATION_VARIANTS
        unknown = [x for x in self.steps if x not in allowed]
        if unknown or not self.steps:
            raise ConfigError(f"experiments.ablation.steps = {list(self.steps)} is not allowed: must be a non-empty "
                              f"list of {', '.join(map(repr, allowed))}")


@dataclass(frozen=True)
class ExperimentsConfig:
    """The experiments behind the figures (``dynamix.experiments``, dynamix/experiments/*.py), one subsection
    per stage notebook."""

    seeds: int = setting(3, rng(1, 1000), doc="runs per (policy, cluster, workload): seeds 0..seeds-1")
    ci: float = setting(0.95, rng(0.5, 0.999),
                        doc="coverage of the t intervals over seeds (docs/protocol.md)")
    tie_margin: float = setting(0.03, rng(0.0, 1.0),
                                doc="the tie band m stated up front: a ratio within [1/(1+m), 1+m] (and a "
                                    "time reduction within +-100 m %; 0.03: +-3 %) is no practical "
                                    "difference, a tie")
    tie_margin_pts: float = setting(0.5, rng(0.0, 100.0),
                                    doc="accuracy differences within +- this many points are a tie")
    target_levels: tuple[float, ...] = setting((0.9, 0.98), rng(0.01, 1.0),
                                               doc="besides evaluation.target_fraction, the target levels "
                                                   "(fractions of the best policy's mean final accuracy) at "
                                                   "which per_policy.csv reads every time to target: a claim "
                                                   "must not hang on one level")
    jobs: int = setting(2, rng(1, 256),
                        doc="simulations run in parallel, one torch thread each (1: in-process)")
    model: str = setting("mlp",
                         doc="the workload every simulated experiment trains (transfer pairs name their own; "
                             '"": model.name). The default profile uses the RL training workload, a '
                             "CPU-cheap MLP, so the pipeline fits 45 min")
    width: float = setting(0.25, rng(0.0, 8.0), doc="its channel multiplier (0: model.width)")
    epochs: float = setting(3.0, rng(0.0, 10000.0),
                            doc="budget of every simulated run, in epochs of the training set (0: "
                                "train.epochs / train.max_iters). Epochs, not iterations, so a policy that "
                                "grows the batch does not get more samples for free")
    eval_every: int = setting(10, rng(1, None),
                              doc="test cadence of every simulated run in the experiments, in iterations "
                                  "(overrides train.eval_every). runs.csv keeps the last test of each window "
                                  "(batch.window), and time to target interpolates between windows "
                                  "(dynamix.evaluation.targets.time_to_target), so testing more often than "
                                  "batch.window buys nothing")
    eval_samples: int = setting(0, rng(0, None),
                                doc="test images per evaluation of a simulated run (overrides "
                                    "train.eval_samples; 0: the whole test split, 2000 embedded images: "
                                    "+-1.1 points, 1000: +-1.5)")
    baselines: BaselinesExperiment = field(default_factory=BaselinesExperiment)
    policy_training: PolicyTrainingExperiment = field(default_factory=PolicyTrainingExperiment)
    inference: InferenceExperiment = field(default_factory=InferenceExperiment)
    scalability: ScalabilityExperiment = field(default_factory=ScalabilityExperiment)
    transfer: TransferExperiment = field(default_factory=TransferExperiment)
    ablation: AblationExperiment = field(default_factory=AblationExperiment)
    sim2real: SimToRealExperiment = field(default_factory=SimToRealExperiment)
    compression: CompressionExperiment = field(default_factory=CompressionExperiment)


@dataclass(frozen=True)
class ArbitratorConfig:
    """The gRPC arbitrator (:mod:`dynamix.rpc`; ``dynamix arbitrator serve``, ``dynamix launch
    --arbitrator``): server barrier and the workers' fail-open client."""

    host: str = setting("127.0.0.1", doc="bind address; anything but loopback requires a token or TLS")
    port: int = setting(50051, rng(0, 65535), doc="0: pick a free port")
    barrier_timeout_s: float = setting(1.0, rng(0.001, 600.0),
                                       doc="wait this long for the slowest report of a window")
    idle_run_timeout_s: float = setting(60.0, rng(0.0, None),
                                        doc="a run silent this long yields to a new one")
    overhead_ms: float = setting(0.0, rng(0.0, 1e6),
                                 doc="the simulator's cost of one window's arbitration "
                                     "(dynamix.cluster.costmodel), added to the virtual clock once per "
                                     "window: overhead_ms + overhead_ms_per_worker x N workers. 0 and 0: not "
                                     "modelled. Measured values: docs/usage.md (benchmarks/bench_rpc.py)")
    overhead_ms_per_worker: float = setting(0.0, rng(0.0, 1e3), doc="see overhead_ms")
    deadline_s: float = setting(2.0, rng(0.001, 600.0),
                                doc="client: no report (retries included) takes longer")
    retries: int = setting(2, rng(0, 10), doc="client: extra attempts on UNAVAILABLE within the deadline")
    backoff_ms: float = setting(50.0, rng(0.0, 10000.0), doc="client: first retry delay, doubled per retry")
    reconnect_max_skip: int = setting(8, rng(0, 1000),
                                      doc="client: after failures skip 1, 2, 4.. windows, capped here")

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9._:%-]{1,253}", self.host):
            raise ConfigError(f"arbitrator.host = {self.host!r} is not allowed: must be a host name or an IP address")


@dataclass(frozen=True)
class SimConfig:
    """What models learning in a simulated run (:mod:`dynamix.sim`): ``dynamix simulate`` and
    ``evaluate``, the experiments' runs and the agent's training episodes."""

    backend: str = setting("math", one_of("math", "surrogate"),
                           doc="math: the real model math on the virtual cluster (dynamix.sim.cluster) | "
                               "surrogate: the same clock and cost model with a fitted model of learning "
                               "instead (dynamix.sim.surrogate, microseconds a window; `dynamix "
                               "fit-surrogate` first). The experiments judge every policy with the math "
                               "(dynamix.evaluation.plan): an agent trained on the surrogate is never judged "
                               "on its own model")
    surrogate: str = setting("",
                             doc='the fitted surrogate JSON (`dynamix fit-surrogate`); "": '
                                 "results/surrogate/<model>-w<width>-<optimiser>.json")
    learning: str = setting("fitted", one_of("fitted", "measured"),
                            doc="the surrogate's test accuracy: fitted = a power law in progress | measured "
                                "= the mean test accuracy curves of the experiments' static sweep by epoch "
                                "and global batch, which fit-surrogate then also runs at the experiments' "
                                "own epochs and seeds (dynamix.sim.measured)")
    table_seeds: int = setting(0, rng(0, 1000),
                               doc="measured: the seeds of the table's runs at table_seed_batches (0: "
                                   "experiments.seeds). A row's mean over 5 seeds is off by about 0.3 points "
                                   "(a run's final accuracy varies by 0.6-0.9 points from seed to seed), the "
                                   "size of the gap that decides whether a batch reaches the target after the "
                                   "first learning-rate drop (dynamix.sim.measured)")
    table_seed_batches: tuple[int, ...] = setting((), rng(1, 65536),
                                                  doc="measured: the per-worker batches of the table's sweep "
                                                      "that get table_seeds seeds (the rest get "
                                                      "experiments.seeds); []: every batch of the sweep")
    table_policy: str = setting("static", one_of("static", "lbbsp"),
                                doc="measured: what runs the table's rows at table_seed_batches (every row when "
                                    "that is empty). static: static:b on experiments.baselines.cluster | lbbsp: "
                                    "lbbsp:batch=b x N on table_cluster (N its workers), the global batch split "
                                    "by speed as the rule a residual agent (rl.residual_span) moves around "
                                    "splits it; on the cpu workload 512 samples split by speed end about half a "
                                    "point above 4 x 128 (dynamix.sim.measured)")
    table_cluster: str = setting("", doc='measured, table_policy lbbsp: the cluster of those runs ("": '
                                         "experiments.baselines.cluster); never a validation or held-out "
                                         "cluster of the experiments, which judge the agent")


@dataclass(frozen=True)
class EvaluationConfig:
    """How a run is judged (:mod:`dynamix.evaluation`, ``docs/protocol.md``): ``dynamix evaluate``, every
    experiment, and the agent's target return (``rl.return_shape: target``)."""

    target_accuracy: float = setting(0.0, rng(0.0, 1.0),
                                     doc="time to target = the first virtual time the test accuracy reaches "
                                         "the target. target_accuracy > 0 fixes it; 0 derives it per cluster "
                                         "as target_fraction x the best policy's mean (over seeds) final "
                                         "test accuracy in that evaluation")
    target_fraction: float = setting(0.9, rng(0.01, 1.0),
                                     doc="target = this x the best policy's mean final test accuracy (when "
                                         "target_accuracy is 0)")
    budget: str = setting("time", one_of("time", "epochs"),
                          doc="how long each evaluated run trains. time: every policy on a cluster gets the "
                              "same virtual time, the static batch.initial run's time for the epoch budget "
                              "(the agent's training episodes are budgeted the same way) | epochs: every "
                              "policy gets the same epochs, so a policy that takes larger batches stops "
                              "after fewer updates and may never reach the target")


RECIPES: dict[str, dict[str, Any]] = {
    # Our method: duration-weighted return, imbalance T_iter, state with lb_gap, LB-BSP warm start
    # (1024 teacher transitions, rl.warm_start_timesteps) then 2048 PPO transitions (docs/rl.md).
    "dynamix": {"state": "dynamix", "time_signal": "imbalance", "return_shape": "time", "warm_start": "lbbsp",
                "timesteps": 2048},
    # The paper as written (Sec. III): its state, T_iter the worker's iteration time, the plain sum of
    # per-window rewards over an epoch-budgeted episode, PPO from scratch. PPO gets the whole budget the
    # dynamix recipe spends on teacher and PPO together (1024 + 2048 environment transitions).
    "paper": {"state": "paper", "time_signal": "iteration", "return_shape": "paper", "warm_start": "none",
              "timesteps": 3072},
}
"""What ``rl.recipe`` sets: every knob below left at its "from the recipe" value (``""``, or 0 for
``timesteps``) takes the recipe's; a knob set explicitly (``--set rl.time_signal=iteration``) wins over it."""


def recipe_overrides(name: str) -> dict[str, Any]:
    """``rl`` overrides that switch a built config's recipe, its knobs back to "from the recipe"
    (``with_overrides(cfg, {"rl": recipe_overrides("paper")})``): a built config holds resolved knobs,
    so setting ``recipe`` alone would keep the old recipe's values as if set explicitly."""
    if name not in RECIPES:
        raise ConfigError(f"rl.recipe = {name!r} is not allowed: must be one of {', '.join(map(repr, RECIPES))}")
    return {"recipe": name, **{k: (0 if k == "timesteps" else "") for k in RECIPES[name]}}


@dataclass(frozen=True)
class RLConfig:
    """Training the DYNAMIX agent (:mod:`dynamix.rl`, ``dynamix train-policy``): PPO hyper-parameters, the training workload,
    episodes and the domain-randomisation ranges of training clusters (:mod:`dynamix.rl.domain`).

    ``recipe`` fills the method's knobs (:data:`RECIPES`) that are left "from the recipe" (``""``, or 0
    for ``timesteps``); on the built object every knob holds its resolved value."""

    recipe: str = setting("dynamix", one_of(*RECIPES),
                          doc="the method: dynamix (the configuration's defaults: time return, imbalance "
                              "T_iter, lb_gap state, LB-BSP warm start; the agent that ships sets more, the "
                              "default profile's &agent, docs/rl.md) | paper (the paper's state, reward and "
                              'return, PPO from scratch, no warm start); fills the knobs left "" (or 0) below '
                              "(config.RECIPES)")
    timesteps: int = setting(0, rng(0, None),
                             doc="PPO per-worker transitions (one window of one worker each) after the warm "
                                 "start; 0: the recipe's (dynamix 2048, paper 3072)")
    state: str = setting("", one_of("", "dynamix", "paper", "schedule"),
                         doc="the observation layout (dynamix.rl.state.SPECS): dynamix (state v4, with "
                             "lb_gap and the compute/wait/communication split) | paper (the paper's features "
                             "only) | schedule (dynamix plus training progress, learning-rate phase and "
                             "noise-scale trend: what a batch schedule needs); \"\": the recipe's")
    action: str = setting("worker", one_of("worker", "global"),
                          doc="what one decision moves (dynamix.rl.actions): worker = each worker's batch by "
                              "one of batch.actions (the paper) | global = the global batch by one factor "
                              "of GLOBAL_FACTORS (x0.5..x2) per window, split over the workers by measured "
                              "speed (LB-BSP's split)")
    n_steps: int = setting(64, rng(2, None),
                           doc="windows per worker per rollout: rollout = n_steps * workers")
    batch_size: int = setting(64, rng(2, None), doc="PPO minibatch (transitions)")
    n_epochs: int = setting(4, rng(1, 100), doc="PPO passes over each rollout")
    learning_rate: float = setting(3e-4, rng(1e-7, 1.0), doc="PPO's Adam step size")
    gamma: float = setting(0.95, rng(0.0, 1.0), doc="discount per window")
    gae_lambda: float = setting(0.95, rng(0.0, 1.0), doc="GAE lambda")
    clip_range: float = setting(0.2, rng(0.01, 10.0), doc="PPO ratio clip")
    ent_coef: float = setting(0.01, rng(0.0, 1.0), doc="entropy bonus weight")
    vf_coef: float = setting(0.5, rng(0.0, 10.0), doc="value-loss weight")
    net_arch: tuple[int, ...] = setting((64, 64), rng(1, 4096),
                                        doc="hidden layers of the policy and value networks")
    checkpoint_every: int = setting(1, rng(1, None), doc="rollouts between resumable checkpoints")
    model: str = setting("mlp",
                         doc="the workload PPO trains on; cheap by design (mlp x0.25: ~38k img/s on one core "
                             'here). "" / 0: use model.name / model.width. Evaluating on another workload '
                             "is a transfer")
    width: float = setting(0.25, rng(0.0, 8.0), doc="channel multiplier of the training workload")
    world: str = setting("", one_of("", "math", "surrogate"),
                           doc="the world PPO trains in, as sim.backend names them; \"\": sim.backend. "
                               "surrogate here leaves every simulation outside training (dynamix simulate, "
                               "evaluate, the experiments) on sim.backend, so a profile can train on the "
                               "surrogate and still simulate with the model math")
    episode_epochs: float = setting(1.5, rng(0.01, 1000.0),
                                    doc="one episode = the virtual time the initial batches need for this "
                                        "many epochs (return_shape: time), or this many epochs "
                                        "(return_shape: paper, target)")
    workers: int = setting(4, rng(1, 256),
                           doc="workers per randomised training cluster (fixed: one VecEnv slot each)")
    workers_range: tuple[int, ...] = setting((), rng(1, 256),
                                             doc="[low, high]: workers per training cluster drawn per "
                                                 "episode, log-uniform (rounded): a policy that meets 2-32 "
                                                 "workers in training (rl.action global only: one slot "
                                                 "whatever N); []: rl.workers")
    speed: tuple[float, ...] = setting((0.25, 2.0), rng(1e-3, 1e4),
                                       doc="worker speed range, log-uniform (domain randomisation, "
                                           "dynamix.rl.domain)")
    bandwidth_gbps: tuple[float, ...] = setting((0.5, 25.0), rng(1e-4, 1e4),
                                                doc="per-link bandwidth range, log-uniform")
    latency_ms: tuple[float, ...] = setting((0.01, 1.0), rng(0.0, 1e4), doc="per-link latency range, uniform")
    ps_probability: float = setting(0.3, rng(0.0, 1.0), doc="chance a training cluster is a parameter server")
    straggler_probability: tuple[float, ...] = setting((0.0, 0.05), rng(0.0, 1.0),
                                                       doc="per-iteration straggler probability range, "
                                                           "uniform")
    jitter: tuple[float, ...] = setting((0.0, 0.1), rng(0.0, 1.0),
                                        doc="per-iteration time jitter range (std of log t), uniform")
    event_probability: float = setting(0.5, rng(0.0, 1.0),
                                       doc="chance of one slowdown or bandwidth-drop event per cluster")
    fixed_ms: tuple[float, ...] = setting((0.0, 0.0), rng(0.0, 1e5),
                                          doc="per-worker fixed cost per iteration range (ms), uniform; [0, "
                                              "0]: not drawn")
    overlap: tuple[float, ...] = setting((0.0, 0.0), rng(0.0, 1.0),
                                         doc="share of ring communication hidden behind the backward pass, "
                                             "range, uniform; [0, 0]: not drawn")
    time_signal: str = setting("", one_of("", "iteration", "imbalance"),
                               doc="T_iter in the reward (dynamix.rl.reward): iteration = the synchronous "
                                   "iteration time every worker pays (shared, the paper's) | imbalance = the "
                                   "straggler's excess over the second slowest plus the worker's own wait, "
                                   "as a fraction of the iteration (0 when balanced). imbalance is the "
                                   "default: with the worker's own busy time PPO learned only to cut every "
                                   "batch to the minimum (docs/journal/rl.md). \"\": the recipe's (dynamix: "
                                   "imbalance; paper: iteration)")
    return_shape: str = setting("", one_of("", "time", "paper", "target"),
                                doc="how an episode is budgeted and its windows summed (dynamix.rl.reward, "
                                    "dynamix.rl.env). time: the episode ends after a fixed virtual time (the "
                                    "initial-batch run's time for episode_epochs, measured on the first "
                                    "window) and every window's reward is weighted by its duration, so the "
                                    "return is the time integral of the reward (area under accuracy-vs-time) "
                                    "| paper: the episode ends after episode_epochs and windows are summed "
                                    "unweighted; with that, smaller batches mean more windows and so more "
                                    "accuracy terms: the return itself favours them | target (opt-in): the "
                                    "episode trains episode_epochs epochs, as the evaluation at equal epochs "
                                    "does, and ends early at the target test accuracy; every window costs "
                                    "its duration, all workers alike, so the return is minus the time to "
                                    "target; a run that misses it pays its time twice. \"\": the recipe's "
                                    "(dynamix: time; paper: paper)")
    warm_start: str = setting("", one_of("", "none", "lbbsp"),
                              doc="before PPO, imitate a heuristic (dynamix.rl.warmstart): lbbsp = LB-BSP's "
                                  "load-balancing step read off the state, for warm_start_timesteps "
                                  "per-worker transitions of teacher episodes, fitted for warm_start_epochs "
                                  "passes | none = PPO from a random policy (the paper's way, from scratch). "
                                  "lbbsp is the default: from scratch, which policy PPO reaches in this "
                                  "budget depended mostly on the seed (docs/journal/rl.md). "
                                  "\"\": the recipe's (dynamix: lbbsp; paper: none). lbbsp reads lb_gap, so it "
                                  "needs state dynamix (or schedule)")
    warm_start_timesteps: int = setting(1024, rng(1, None),
                                        doc="teacher transitions (per worker) for the imitation")
    warm_start_epochs: int = setting(100, rng(1, 1000), doc="passes of the imitation fit")
    warm_start_lr: float = setting(1e-3, rng(1e-7, 1.0), doc="Adam step size of the imitation fit")
    warm_start_batch: int = setting(512, rng(0, 65536),
                                    doc="the teacher splits a global batch of this many samples by speed, as "
                                        "lbbsp:batch=m does; 0 = LB-BSP at the current global batch. 512 "
                                        "was selected on a sampled validation set (docs/journal/rl.md)")
    warm_start_fit: str = setting("network", one_of("network", "head"),
                                  doc="what the imitation fits (dynamix.rl.warmstart): network = every layer "
                                      "of the policy | head = only the bias of its action head (and the "
                                      "critic), the hidden layers kept at PPO's initialisation. head is for a "
                                      "teacher that takes one action in every state (under residual_span: "
                                      "x1, the base rule), which a bias represents exactly; fitting a "
                                      "constant with the whole network saturates its tanh units and leaves "
                                      "PPO a policy that cannot depend on the state (docs/journal/rl.md)")
    warm_start_smoothing: float = setting(0.0, rng(0.0, 1.0),
                                          doc="label smoothing of the imitation (dynamix.rl.warmstart): this "
                                              "share of each teacher label is spread over every action, so "
                                              "the warm-started policy still explores; 0 = none")
    residual_span: float = setting(0.0, rng(0.0, 64.0),
                                   doc="residual control around the teacher (rl.action global only; "
                                       "dynamix.rl.actions): the global batch starts at warm_start_batch "
                                       "(split equally) and stays within [m / s, m x s] for this s >= 1, "
                                       "so doing nothing is a plain rule, m split by the last window's "
                                       "speeds (ActionScheme.base_rule: lbbsp:batch=m,history=1,deadband=0; "
                                       "m(N) with rl.residual_per_worker); "
                                       "0 = none (the run's initial batch, the whole range)")
    residual_per_worker: int = setting(0, rng(0, 1024),
                                       doc="under a residual span, the samples per worker its start never "
                                           "falls below: m(N) = max(warm_start_batch, N x this), so a larger "
                                           "cluster does not sit every worker at batch.min (512 on 16 "
                                           "workers is 32 each, where every policy holding it missed the "
                                           "target, docs/rl.md); 0 = m whatever N")
    snapshots: tuple[float, ...] = setting((), rng(0.0, 0.999),
                                           doc="fractions of the training's timesteps at which the policy is "
                                               "also saved, as <name>-at<percent>.zip (0: right after the warm "
                                               "start, before PPO): more candidates for the selection stage, "
                                               "which scores them on the validation clusters (early stopping "
                                               "by validation); [] = the final policy alone")

    def snapshot_names(self, name: str) -> dict[str, float]:
        """The artifact name of each ``snapshots`` fraction of policy ``name``'s training,
        ``<name>-at<percent>`` -> the fraction."""
        return {f"{name}-at{round(100 * f)}": f for f in sorted(self.snapshots)}

    def __post_init__(self) -> None:
        chosen = RECIPES.get(self.recipe)
        if chosen is None:  # built without validation (RLConfig(recipe=...)): say what is allowed
            raise ConfigError(f"rl.recipe = {self.recipe!r} is not allowed: must be one of {', '.join(map(repr, RECIPES))}")
        for knob, value in chosen.items():
            if getattr(self, knob) in ("", 0):
                object.__setattr__(self, knob, value)  # frozen: resolve once, at construction
        if self.workers_range and (len(self.workers_range) != 2 or self.workers_range[0] > self.workers_range[1]):
            raise ConfigError(f"rl.workers_range = {list(self.workers_range)} must be a pair [low, high] of worker "
                              "counts with 1 <= low <= high <= 256, or [] for rl.workers")
        if self.workers_range and self.action != "global":
            raise ConfigError(f"rl.workers_range = {list(self.workers_range)} needs rl.action = 'global' (one slot "
                              f"whatever the worker count); rl.action = {self.action!r} has one slot per worker")
        if self.residual_span and (self.residual_span < 1.0 or self.action != "global" or not self.warm_start_batch):
            raise ConfigError(f"rl.residual_span = {self.residual_span} must be 0 (none) or at least 1, with "
                              f"rl.action = 'global' (now {self.action!r}) and rl.warm_start_batch > 0 (now "
                              f"{self.warm_start_batch}), the global batch it starts at")
        if self.residual_per_worker and not self.residual_span:
            raise ConfigError(f"rl.residual_per_worker = {self.residual_per_worker} needs a residual span "
                              "(rl.residual_span >= 1), whose start it floors; set it to 0 without one")
        if len(set(self.snapshot_names(""))) != len(self.snapshots):
            raise ConfigError(f"rl.snapshots = {list(self.snapshots)}: two fractions name the same percent "
                              "(the snapshot's file name); list each percent once")
        if self.warm_start == "lbbsp" and self.state not in ("dynamix", "schedule"):
            raise ConfigError(
                f"rl.warm_start = 'lbbsp' reads lb_gap, which rl.state = {self.state!r} does not observe: "
                "set rl.state = dynamix (or schedule) or rl.warm_start = none")


@dataclass(frozen=True)
class ExecutorConfig:
    """Where a sweep's simulated runs execute (:mod:`dynamix.evaluation.executor`): how, never what.
    The section is in no DVC stage's params and out of :meth:`Config.hash` (:data:`UNHASHED`), so the
    results, ``dvc.lock`` and resumption do not depend on it."""

    kind: str = setting("local", one_of("local", "ray"),
                        doc="local: this machine, experiments.jobs processes (`dynamix evaluate --jobs`) | "
                            "ray: every run a Ray task of one CPU (one GPU when train.device is cuda), the "
                            'driver keeping the run cache and the outputs (docs/usage.md "Sweeps on a Ray '
                            'cluster")')
    address: str = setting("",
                           doc="ray: the cluster's head as HOST:PORT (`ray start --head` prints it); \"\": "
                               "$RAY_ADDRESS, else a Ray started for this process on this machine's loopback "
                               "with experiments.jobs CPUs")
    dashboard: bool = setting(False,
                              doc="ray: the dashboard of a Ray started here (a cluster's: ray start's flag)")


HASH_NEUTRAL: dict[str, dict[str, Any]] = {"sim": {"table_seeds": 0, "table_seed_batches": (), "table_policy": "static",
                                                   "table_cluster": ""},
                                           "rl": {"action": "worker", "learning": "fitted",
                                                  "warm_start_smoothing": 0.0, "warm_start_fit": "network", "workers_range": (),
                                                  "residual_span": 0.0, "snapshots": (), "residual_per_worker": 0,
                                                  "world": ""},
                                           "arbitrator": {"overhead_ms": 0.0, "overhead_ms_per_worker": 0.0},
                                           "experiments.policy_training": {"select": False},
                                           "experiments": {"target_levels": (0.9, 0.98)},
                                           "experiments.inference": {"oracle_refine": False, "oracle_phase_epochs": (),
                                                                             "confirm_seeds": 0,
                                                                             "tune_global_batches": (256, 384, 512, 640, 768)},
                                           # the compression stage's workload list at ncf alone (its single
                                           # workload before the list) and its static clusters at their
                                           # defaults: runs a profile's stage adds there are a change of the
                                           # stage's code (rerun it by name), its policies keep their hashes
                                           "experiments.compression": {
                                               "workloads": ("ncf",), "static_seeds": 1,
                                               "static_clusters": ("clusters/links-1g-4.yaml", "clusters/links-10g-4.yaml")}}
"""Settings added after configs were hashed, left out of :meth:`Config.hash` at these values (the
behaviour from before they existed): stage records, checkpoints and policy artifacts keep their hashes.
The evaluation run cache's key has its own table (:data:`dynamix.evaluation.cache.NEUTRAL`): its
settings were added at other times, and an entry moved from one to the other would change stored hashes."""

HASH_REMOVED: dict[str, dict[str, Any]] = {"arbitrator": {"max_threads": 64},
                                           "rl": {"warm_start_grow": 1.0, "warm_start_workers": (), "algo": "ppo"},
                                           "experiments.compression": {"model": "ncf", "width": 1.0,
                                                                       "dataset": "interactions"}}
"""Settings removed after configs were hashed, hashed at their last value so earlier hashes hold, and
accepted at that value alone when a stored config is built again (:func:`build`), so the configs that
policy artifacts and run folders carry still build (``arbitrator.max_threads``: the asyncio arbitrator
holds no thread per waiting worker; ``rl.warm_start_grow`` and ``rl.warm_start_workers``: teacher
variants the ablations dropped, docs/journal/rl.md; ``rl.algo``: its other value, ``simple``, the
paper's simplified policy gradient, was never trained beyond smoke size; ``experiments.compression``'s
single workload: :data:`REMOVED_FOR` names what replaced it). A dotted section names a subsection."""

REMOVED_UNHASHED: dict[str, dict[str, Any]] = {"rl": {"frame_stack": 1, "episodes": "sim"}}
"""Settings removed whose last value no hash held: accepted at that value alone, as :data:`HASH_REMOVED`'s
are, and left out of :meth:`Config.hash`, as they were (``rl.frame_stack``, the last k windows'
observations: left out at 1 since it was added, never trained beyond smoke size; ``rl.episodes``,
``engine`` for the agent's episodes on real workers, never used to train: at ``sim`` hashed inside the
old ``rl.backend``, which :data:`HASH_MOVED` now reads off ``sim.backend`` alone)."""

REMOVED_FOR: dict[str, str] = {f"experiments.compression.{key}": "experiments.compression.workloads (MODEL[@WIDTH] "
                                                                 "each, its data set implied)"
                               for key in ("model", "width", "dataset")}
"""What replaced a :data:`HASH_REMOVED` setting, named when a config sets it to another value."""

HASH_MOVED: dict[str, str | dict[str, dict[str, str]]] = {
    "rl.surrogate": "sim.surrogate",
    "rl.learning": "sim.learning",
    "rl.target_accuracy": "evaluation.target_accuracy",
    "rl.target_fraction": "evaluation.target_fraction",
    "rl.eval_budget": "evaluation.budget",
    "rl.backend": {"sim": {"sim.backend": "math"}, "surrogate": {"sim.backend": "surrogate"}},
}
"""Settings moved, after configs were hashed, to the section where they act: old dotted key -> new one;
for ``rl.backend``, which also said where the agent's episodes ran (its value ``engine`` went with
``rl.episodes``, :data:`REMOVED_UNHASHED`), old value -> the new settings it stands for.
:meth:`Config.hash` hashes each at its old place (:func:`_hashed_layout`), so stage records,
checkpoints and policy artifacts keep their hashes; :data:`HASH_NEUTRAL` and :data:`HASH_REMOVED` name
settings where they are hashed. A stored config (policy artifacts, run folders, manifests) in the old
layout builds with the new keys (:func:`upgrade`); a params.yaml or ``--set`` naming an old key is
refused, naming the new ones (:func:`load`)."""

UNHASHED = ("executor",)
"""Sections that say where runs execute, not what they compute: left out of :meth:`Config.hash` and of a
run's identity (:mod:`dynamix.rundir`) whatever their values, so a sweep resumed on another executor
keeps its stage records, checkpoints and policy artifacts."""


@dataclass(frozen=True)
class Config:
    """Every section of ``params.yaml``. ``profile`` records which profile produced it."""

    profile: str = setting("default", doc="the profile in force, one of `profiles` below (a built config "
                                          "records it)")
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    batch: BatchConfig = field(default_factory=BatchConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    sim: SimConfig = field(default_factory=SimConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    experiments: ExperimentsConfig = field(default_factory=ExperimentsConfig)
    arbitrator: ArbitratorConfig = field(default_factory=ArbitratorConfig)
    rl: RLConfig = field(default_factory=RLConfig)
    executor: ExecutorConfig = field(default_factory=ExecutorConfig)

    def __post_init__(self) -> None:
        if self.batch.min > self.batch.max:
            raise ConfigError(
                f"batch.min = {self.batch.min} exceeds batch.max = {self.batch.max}: need min <= max"
            )
        if not self.batch.min <= self.batch.initial <= self.batch.max:
            raise ConfigError(
                f"batch.initial = {self.batch.initial} is out of range: must be in "
                f"[batch.min, batch.max] = [{self.batch.min}, {self.batch.max}]"
            )

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def hash(self) -> str:
        """Short, stable hash of the full config: identifies a run's settings in manifests. Moved
        settings are hashed at their old places (:data:`HASH_MOVED`), removed ones at their last values
        (:data:`HASH_REMOVED`; those no hash held, :data:`REMOVED_UNHASHED`, stay out), settings at
        their :data:`HASH_NEUTRAL` values are left out, so moving, removing and adding them kept every
        earlier hash, and so are the :data:`UNHASHED` sections."""
        tree = _hashed_layout({k: v for k, v in self.to_dict().items() if k not in UNHASHED})
        for section, neutral in HASH_NEUTRAL.items():  # a dotted section names a subsection
            *parents, last = section.split(".")
            node = tree
            for key in parents:
                node = node[key]
            node[last] = {k: v for k, v in node[last].items() if k not in neutral or v != neutral[k]}
            if not parents and not node[last]:  # sim's: its other settings are hashed where they moved from
                del node[last]
        for section, removed in HASH_REMOVED.items():
            *parents, last = section.split(".")
            node = tree
            for key in parents:
                node = node[key]
            node[last] = {**removed, **node[last]}
        blob = json.dumps(tree, sort_keys=True, default=list).encode()
        return hashlib.sha256(blob).hexdigest()[:12]


def _has(tree: Mapping[str, Any], dotted: str) -> bool:
    *parents, last = dotted.split(".")
    for key in parents:
        tree = tree.get(key)
        if not isinstance(tree, Mapping):
            return False
    return last in tree


def _pop(tree: dict, dotted: str) -> Any:
    *parents, last = dotted.split(".")
    for key in parents:
        tree = tree[key]
    return tree.pop(last)


def _put(tree: dict, dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for key in parents:
        tree = tree.setdefault(key, {})
    tree[last] = value


def _split(old: str) -> dict[str, dict[str, str]]:
    """The values of a split setting of :data:`HASH_MOVED` and what each stands for ({} for a plain move)."""
    new = HASH_MOVED[old]
    return {} if isinstance(new, str) else new


def _new_keys(old: str) -> list[str]:
    """Where the moved setting ``old`` of :data:`HASH_MOVED` lives now."""
    new = HASH_MOVED[old]
    return [new] if isinstance(new, str) else list(next(iter(new.values())))


def _hashed_layout(tree: dict) -> dict:
    """``tree`` (a config's :meth:`Config.to_dict`, changed in place) with the :data:`HASH_MOVED`
    settings at their old places, the split one as the old value that stands for its new ones; a
    section they leave empty is dropped."""
    for old, new in HASH_MOVED.items():
        if isinstance(new, str):
            _put(tree, old, _pop(tree, new))
            continue
        now = {key: _pop(tree, key) for key in _new_keys(old)}
        _put(tree, old, next(value for value, stands in new.items() if stands == now))
    for section in {key.split(".")[0] for old in HASH_MOVED for key in _new_keys(old)}:
        if tree.get(section) == {}:
            del tree[section]
    return tree


def moved(old: str, value: Any = None) -> str:
    """The message that refuses the moved setting ``old`` (:data:`HASH_MOVED`), naming its new key(s)
    and, for the split one at a known ``value``, what that value is now."""
    keys = _new_keys(old)
    where = f"{old} is now {' and '.join(keys)} (a setting lives in the section where it acts)"
    if not _split(old):
        return f"{where}: set {keys[0]} instead"
    stands = _split(old).get(value) if isinstance(value, str) else None
    if stands is None:
        return where + ": " + "; ".join(f"{old} = {v} is {', '.join(f'{k} = {x}' for k, x in s.items())}"
                                        for v, s in _split(old).items())
    return f"{where}: {old} = {value} is {', '.join(f'{k} = {x}' for k, x in stands.items())}"


def upgrade(data: Mapping[str, Any]) -> dict:
    """A stored config mapping (a policy artifact's, a run folder's, a manifest's) in the layout from
    before :data:`HASH_MOVED`, its old keys moved to the new ones (a mapping without them comes back as
    it is). One that holds an old key beside a new one is refused, naming the new key: only an override
    written for the old layout mixes them."""
    old_keys = [old for old in HASH_MOVED if _has(data, old)]
    if not old_keys:
        return dict(data)
    mixed = [key for old in HASH_MOVED for key in _new_keys(old) if _has(data, key)]
    if mixed:
        raise ConfigError(moved(old_keys[0], _lookup(data, old_keys[0])))
    out = copy.deepcopy(dict(data))
    for old in old_keys:
        value = _pop(out, old)
        if not _split(old):
            _put(out, HASH_MOVED[old], value)
        elif isinstance(value, str) and value in _split(old):
            for key, v in _split(old)[value].items():
                _put(out, key, v)
        else:
            raise ConfigError(f"{old} = {brief(value)} is not allowed: must be one of "
                              f"{', '.join(map(repr, _split(old)))} (a stored config's; {moved(old)})")
    return out


def _lookup(tree: Mapping[str, Any], dotted: str) -> Any:
    for key in dotted.split("."):
        tree = tree[key]
    return tree


def _upgrade_section(cls: type, data: Mapping[str, Any], prefix: str) -> Mapping[str, Any]:
    """A stored section ``prefix`` built on its own (a policy artifact's ``training.rl``) in the layout
    from before :data:`HASH_MOVED`: the settings that moved out of it dropped (they belong to other
    sections now), the split one read as the setting it keeps here."""
    inside = {old.split(".", 1)[1]: old for old in HASH_MOVED if old.split(".", 1)[0] == prefix}
    if not inside.keys() & data.keys() or typing.get_type_hints(Config).get(prefix) is not cls:
        return data
    out = {k: v for k, v in data.items() if k not in inside}
    for key, old in inside.items():
        stands = _split(old).get(data[key]) if key in data and isinstance(data[key], str) else None
        for new, value in (stands or {}).items():
            section, name = new.split(".", 1)
            if section == prefix and name not in out:
                out[name] = value
    return out


# --------------------------------------------------------------------------------------------
# Building dataclasses from plain mappings, with validation
# --------------------------------------------------------------------------------------------


def _describe(meta: Mapping) -> str:
    if "choices" in meta:
        return "one of " + ", ".join(repr(c) for c in meta["choices"])
    lo, hi = meta.get("range", (None, None))
    return f"in [{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}]"


def _check_range(name: str, value: Any, meta: Mapping) -> None:
    if "choices" in meta and value not in meta["choices"]:
        raise ConfigError(f"{name} = {brief(value)} is not allowed: must be {_describe(meta)}")
    if "range" in meta:
        lo, hi = meta["range"]
        values = value if isinstance(value, tuple) else (value,)
        for v in values:
            if isinstance(v, float) and math.isnan(v):
                raise ConfigError(f"{name} is NaN: must be {_describe(meta)}")
            if (lo is not None and v < lo) or (hi is not None and v > hi):
                raise ConfigError(f"{name} = {brief(value)} is out of range: must be {_describe(meta)}")


def check_value(name: str, value: Any, meta: Mapping) -> Any:
    """Validate one value against ``rng``/``one_of`` metadata outside a dataclass build (e.g. a
    network message, a command-line option): ``value``, or :class:`ConfigError` naming ``name`` and
    the allowed range."""
    _check_range(name, value, meta)
    return value


def _coerce(name: str, value: Any, typ: Any) -> Any:
    origin = typing.get_origin(typ)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(typ) if a is not type(None)]
        if value is None:
            return None
        return _coerce(name, value, args[0])
    if origin is tuple:
        (elem, *_rest) = typing.get_args(typ)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{name} must be a list, got {brief(value)}")
        return tuple(_coerce(f"{name}[{i}]", v, elem) for i, v in enumerate(value))
    if typ is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{name} must be true or false, got {brief(value)}")
        return value
    if typ is int:
        if isinstance(value, bool) or not (
            isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        ):
            raise ConfigError(f"{name} must be an integer, got {brief(value)}")
        return int(value)
    if typ is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{name} must be a number, got {brief(value)}")
        return float(value)
    if typ is str:
        if not isinstance(value, str):
            raise ConfigError(f"{name} must be a string, got {brief(value)}")
        return value
    if dataclasses.is_dataclass(typ):
        return build(typ, value, prefix=name)
    raise TypeError(f"unsupported config type {typ!r} for {name}")


def _same(value: Any, last: Any) -> bool:
    """``value``, as YAML or JSON reads it, is ``last``: a list as a tuple, 1 as 1.0, but true not as 1."""
    if isinstance(last, tuple):
        return isinstance(value, (list, tuple)) and len(value) == len(last) and all(map(_same, value, last))
    return isinstance(value, bool) == isinstance(last, bool) and value == last


def _without_removed(cls: type, data: Mapping[str, Any], prefix: str) -> Mapping[str, Any]:
    """``data`` less the settings :data:`HASH_REMOVED` and :data:`REMOVED_UNHASHED` list for section
    ``prefix`` of :class:`Config`. At its last value a removed setting asks for what the code still
    does, so it is dropped (a stored config still builds); at any other value it asks for behaviour that
    no longer exists: ConfigError."""
    removed = {**HASH_REMOVED.get(prefix, {}), **REMOVED_UNHASHED.get(prefix, {})}
    if not removed or _section_type(prefix) is not cls:
        return data
    for key in sorted(removed.keys() & data.keys()):
        if not _same(data[key], removed[key]):
            successor = REMOVED_FOR.get(f"{prefix}.{key}")
            raise ConfigError(f"{prefix}.{key} = {brief(data[key])} is not allowed: the setting was removed"
                              + (f", replaced by {successor}" if successor else "")
                              + f" (a stored config may hold only its last value, {json.dumps(removed[key])})")
    return {k: v for k, v in data.items() if k not in removed}


def _section_type(dotted: str) -> Any:
    """The dataclass of :class:`Config`'s section (or subsection, dotted) ``dotted``; None if none."""
    typ: Any = Config
    for key in dotted.split("."):
        typ = typing.get_type_hints(typ).get(key) if dataclasses.is_dataclass(typ) else None
    return typ


def build(cls: type, data: Mapping[str, Any] | None, prefix: str = "") -> Any:
    """Build dataclass ``cls`` from ``data``: unknown keys, bad types and ranges raise ConfigError
    (removed settings: :func:`_without_removed`; a stored config's moved ones: :func:`upgrade`)."""
    data = {} if data is None else data
    if not isinstance(data, Mapping):
        raise ConfigError(f"{prefix or 'config'} must be a mapping, got {brief(data)}")
    data = _without_removed(cls, data, prefix)
    data = upgrade(data) if cls is Config else _upgrade_section(cls, data, prefix)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        where = f"{prefix}." if prefix else ""
        raise ConfigError(
            f"unknown key(s) {clip(', '.join(where + str(k) for k in unknown))}; "
            f"allowed in {prefix or 'the top level'}: {', '.join(sorted(fields))}"
        )
    kwargs = {}
    for key, value in data.items():
        name = f"{prefix}.{key}" if prefix else key
        coerced = _coerce(name, value, hints[key])
        _check_range(name, coerced, fields[key].metadata)
        kwargs[key] = coerced
    return cls(**kwargs)


def deep_merge(base: Mapping, override: Mapping) -> dict:
    """``base`` updated by ``override``, recursively for nested mappings (inputs untouched)."""
    out = copy.deepcopy(dict(base))
    for k, v in override.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def parse_override(text: str) -> dict:
    """``"train.seed=3"`` -> ``{"train": {"seed": 3}}``; the value is parsed as YAML."""
    if "=" not in text:
        raise ConfigError(f"override {brief(text)} must look like section.key=value")
    key, raw = text.split("=", 1)
    parts = key.strip().split(".")
    if len(parts) > YAML_LIMITS["depth"]:
        raise ConfigError(f"override {brief(text)}: the key is nested deeper than {YAML_LIMITS['depth']} levels")
    value = parse_yaml(raw, f"override {brief(text)}")
    out: dict = {}
    cur = out
    for p in parts[:-1]:
        cur = cur.setdefault(p, {})
    cur[parts[-1]] = value
    return out


def with_overrides(cfg: Config, overrides: Mapping[str, Any]) -> Config:
    """``cfg`` with a nested mapping of overrides applied and every field re-validated: the one way a
    run's config is derived from another (``dataclasses.replace`` would skip the range checks)."""
    return build(Config, deep_merge(cfg.to_dict(), overrides))


def read_params(path: str | Path | None = None) -> dict:
    """The raw ``params.yaml`` mapping (for DVC-style access and profile listing)."""
    p = paths.PARAMS if path is None else paths.resolve(path)
    raw = read_yaml(p, str(p)) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{p} must hold a mapping at the top level")
    return raw


def load(
    path: str | Path | None = None,
    profile: str | None = None,
    overrides: Mapping[str, Any] | list[str] | None = None,
) -> Config:
    """Load ``params.yaml``, apply ``profile`` (default: its ``profile`` key) and ``overrides``.

    ``overrides`` is a nested mapping or a list of ``section.key=value`` strings; they cannot set
    ``profile`` (ConfigError), which would otherwise be overwritten by the profile actually applied.
    """
    if profile is not None and not profile.strip():
        raise ConfigError("--profile is empty: name a profile of params.yaml, or leave it out for its `profile`")
    raw = read_params(path)
    profiles = raw.pop("profiles", {}) or {}
    chosen = profile or raw.pop("profile", "default")
    raw.pop("profile", None)
    if chosen not in profiles:
        raise ConfigError(
            f"profile = {brief(chosen)} is not defined: must be one of {', '.join(sorted(profiles))}"
        )
    merged = deep_merge(raw, profiles[chosen] or {})
    if isinstance(overrides, list):
        for text in overrides:
            merged = deep_merge(merged, parse_override(text))
    elif overrides:
        merged = deep_merge(merged, overrides)
    for old in HASH_MOVED:  # a stored config's old keys build (upgrade); a user's are refused
        if _has(merged, old):
            raise ConfigError(moved(old, _lookup(merged, old)))
    if "profile" in merged:  # the profile is the base the overrides apply to: one of them cannot choose it
        raise ConfigError(f"profile = {brief(merged['profile'])} cannot be set as an override (--set): "
                          f"choose it with --profile, one of {', '.join(sorted(profiles))}")
    merged["profile"] = chosen
    return build(Config, merged)
