"""Run batch-size policies on one cluster in the simulator: what the playground's Run button does.

    from dynamix.explore import session
    cfg = session.workload_config("smoke", workload="mlp@0.25/adam", epochs=1.0)
    spec = session.load_cluster("clusters/heldout/hetero-speed-4.yaml")
    result = session.run(spec, ["static:64", "lbbsp", "gns"], cfg, seeds=1)

Nothing here re-implements evaluation: each (policy, seed) is one call of the evaluation runner
(:func:`dynamix.evaluation.runner.evaluate`), so a run has the same time budget (the virtual time the
static ``batch.initial`` run needs for the epoch budget on this cluster), the same finished-run cache
(``out_dir/cache``: rerunning a setting reads it back, adding a policy simulates only that policy) and
the same target and time to target (:func:`dynamix.evaluation.targets.set_targets`) as ``dynamix
evaluate`` and every experiment. One call per run is what lets the views update as runs finish; the
target, ``evaluation.target_fraction`` x the best mean final accuracy, is over the runs finished so far, so
it is provisional until the last run ends.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import pandas as pd
import yaml
from tqdm.auto import tqdm

from dynamix import cluster as clusters
from dynamix import config, io, paths
from dynamix.cluster import ClusterSpec
from dynamix.config import Config, ConfigError, with_overrides
from dynamix.errors import UserError
from dynamix.evaluation import plan
from dynamix.evaluation.runner import evaluate
from dynamix.evaluation.targets import set_targets
from dynamix.explore.results import RunSet
from dynamix.pipeline.manifest import write_manifest
from dynamix.policies.base import make_policy
from dynamix.sim.cluster import calibrated_cost

log = logging.getLogger(__name__)

SCRATCH = paths.RESULTS / "tmp" / "explore"
"""Where playground runs go by default (``results/tmp`` is not tracked by git or DVC)."""

SUGGESTED_POLICIES = ("static:64", "static:256", "lbbsp", "gns", "ramp", "lbbsp:batch=512")
"""Policy specs offered in the controls; any spec :func:`dynamix.policies.base.make_policy` reads works."""

SUGGESTED_WORKLOADS = ("mlp@0.25/sgd", "mlp@0.25/adam", "mlp@0.5/sgd", "tiny-cnn/sgd", "resnet8/sgd")
"""Workloads offered in the controls (``MODEL[@WIDTH]/OPT``); empty means the profile's own."""

MAX_SEEDS = 10


def example_clusters() -> list[str]:
    """The example specs, relative to the repository root: ``clusters/``, then held-out, then validation."""
    found = sorted(paths.CLUSTERS.glob("*.yaml")) + sorted(paths.CLUSTERS.glob("*/*.yaml"))
    return [str(p.relative_to(paths.ROOT)) for p in found]


def trained_policies(folder: str | Path | None = None) -> list[str]:
    """A policy spec for every agent artifact in ``folder``: ``dynamix:NAME`` in ``results/policies``
    (the default, where a bare name resolves), ``dynamix:PATH`` elsewhere."""
    folder = paths.POLICIES if folder is None else paths.resolve(folder)
    if not folder.is_dir():
        return []
    bare = folder == paths.POLICIES
    return [f"dynamix:{p.stem if bare else p.with_suffix('')}" for p in sorted(folder.glob("*.zip"))]


def profiles() -> list[str]:
    """The profile names of ``params.yaml``."""
    return list(config.read_params().get("profiles", {}))


def workload_config(profile: str = "smoke", workload: str = "", epochs: float = 0.0,
                    budget: str = "", params: str | Path | None = None) -> Config:
    """The simulated run config: ``profile`` of ``params.yaml``, its experiments' workload (or
    ``workload``, :func:`~dynamix.evaluation.plan.parse_workload`, Adam at ``experiments.inference.adam_lr``), ``epochs`` per
    run (0: the profile's ``experiments.epochs``), ``budget`` ``time`` | ``epochs`` ("" : ``evaluation.budget``)."""
    if not epochs >= 0:
        raise ConfigError(f"epochs = {epochs} is out of range: must be >= 0 (0: the profile's experiments.epochs)")
    cfg = config.load(params, profile)
    if workload.strip():
        w = plan.parse_workload(workload)
        cfg = plan.sim_config(cfg, model={"name": w.model, "width": w.width}, optim=plan.optimizer(cfg, w.optimizer))
    else:
        cfg = plan.sim_config(cfg)
    overrides: dict[str, Any] = {}
    if epochs > 0:
        overrides["train"] = {"epochs": float(epochs), "max_iters": 0}
    if budget:
        overrides["evaluation"] = {"budget": budget}
    return with_overrides(cfg, overrides) if overrides else cfg


def load_cluster(source: str | Path | Mapping | ClusterSpec) -> ClusterSpec:
    """A cluster spec from a path (relative to the repository root), typed-in YAML text, or a mapping.

    Text holding a newline or starting like a spec (``name:``, ``workers:``, ``{``) is read as YAML;
    anything else as a path. Errors name the field and its allowed range (:mod:`dynamix.cluster.spec`).
    """
    if isinstance(source, ClusterSpec):
        return source
    if isinstance(source, Mapping):
        return clusters.from_dict(source, source="typed-in cluster")
    text = str(source).strip()
    if not text:
        raise ConfigError("cluster is empty: give a spec path (e.g. clusters/heldout/hetero-speed-4.yaml) or YAML text")
    if "\n" in text or text.startswith(("name:", "workers:", "{")):
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"typed-in cluster is not valid YAML: {exc}") from exc
        return clusters.from_dict(data or {}, source="typed-in cluster")
    return clusters.load(text)


def check_policies(specs: str | Iterable[str]) -> list[str]:
    """The policy specs, stripped and without repeats, each built once to check it; a bad one raises
    naming its position and the known kinds. A single string holds one spec per line."""
    items = specs.splitlines() if isinstance(specs, str) else list(specs)
    out = list(dict.fromkeys(s.strip() for s in items if str(s).strip()))
    if not out:
        raise ConfigError("policies is empty: give at least one spec, e.g. static:64, lbbsp, gns")
    for i, spec in enumerate(out):
        try:
            make_policy(spec)
        except (UserError, ValueError) as exc:  # policy factories raise either
            raise ConfigError(f"policies[{i}] = {spec!r}: {exc}") from exc
    return out


def default_out_dir(spec: ClusterSpec) -> Path:
    return SCRATCH / io.slug(spec.name)


def run(spec: ClusterSpec, policies: Sequence[str], cfg: Config, seeds: int = 1,
        out_dir: str | Path | None = None, on_update: Callable[[RunSet], None] | None = None,
        progress: bool = True) -> RunSet:
    """Simulate every policy (x ``seeds``, seeds 0..N-1) on ``spec``; the runs as a :class:`RunSet`.

    ``on_update`` receives the runs finished so far after each run. ``out_dir`` (default
    ``results/tmp/explore/<cluster>``) receives ``runs.csv`` and ``summary.csv`` (the columns of
    ``dynamix evaluate``), ``cluster.yaml``, ``manifest.json`` and the run cache, so the folder opens
    again with :func:`dynamix.explore.results.load`.
    """
    policies = check_policies(policies)
    if not isinstance(seeds, int) or not 1 <= seeds <= MAX_SEEDS:
        raise ConfigError(f"seeds = {seeds!r} is out of range: must be an integer in [1, {MAX_SEEDS}]")
    out = default_out_dir(spec) if out_dir is None or str(out_dir) == "" else paths.resolve(out_dir)
    cost = calibrated_cost(cfg)  # once, not per run
    runs: list[pd.DataFrame] = []
    rows: list[pd.DataFrame] = []
    result = RunSet(pd.DataFrame(), pd.DataFrame(), _label(out), spec, {"cluster": spec.name})
    bar = tqdm(total=len(policies) * seeds, desc=f"{spec.name}", unit="run", disable=not progress)
    for policy in policies:
        for seed in range(seeds):
            bar.set_postfix(policy=policy, seed=seed)
            r, s = evaluate([spec], [policy], cfg, [seed], progress=False, cost=cost, cache_dir=out / "cache")
            runs.append(r)
            rows.append(s)
            result = _runset(runs, rows, cfg, result)
            bar.update()
            if on_update is not None:
                on_update(result)
    bar.close()
    io.write_csv(result.runs, out / "runs.csv")
    io.write_csv(result.summary, out / "summary.csv")
    io.write_text(out / "cluster.yaml", yaml.safe_dump(clusters.to_yaml_dict(spec), sort_keys=False))
    write_manifest(out, cfg, "explore", {"cluster": spec.name, "policies": policies, "seeds": seeds})
    log.info("wrote %s", out)
    return result


def _runset(runs: list[pd.DataFrame], rows: list[pd.DataFrame], cfg: Config, like: RunSet) -> RunSet:
    """The runs so far, the target and every time to target recomputed over all of them."""
    all_runs = pd.concat(runs, ignore_index=True)
    summary = set_targets(pd.concat(rows, ignore_index=True), all_runs, cfg.evaluation.target_fraction,
                          cfg.evaluation.target_accuracy)
    return RunSet(all_runs, summary, like.source, like.spec, like.group)


def _label(folder: Path) -> str:
    try:
        return str(folder.relative_to(paths.ROOT))
    except ValueError:
        return str(folder)
