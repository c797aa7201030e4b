"""What every experiment shares: run ids, manifests, tidy tables, aggregation over seeds.

Each experiment module (``dynamix.experiments.<name>``) has ``run(cfg, out_dir) -> dict`` and writes
into ``out_dir``:

- ``runs.csv``: tidy long format, one row per (run, window, rank), columns
  :data:`dynamix.metrics.schema.RUNS_COLUMNS` plus the experiment's keys (units in column names);
- ``summary.csv``: one row per run (policy, seed, time to target, final accuracy, ...);
- ``summary.json``: the aggregates the DVC ``metrics`` section tracks;
- ``manifest.json``: config, config hash, git sha, package versions and the command that ran.

Run ids are deterministic (built from what the run *is*, never from when it ran), so a rerun into the
same folder overwrites rather than accumulates.

Aggregates over seeds (Agarwal et al., NeurIPS'21, "Deep RL at the edge of the statistical
precipice"): the point estimate is the interquartile mean (IQM: the mean of the middle 50% of the
values, robust to one bad seed; with fewer than 4 values it is the plain mean) or the mean, and the
interval is a percentile bootstrap over seeds with ``n_boot`` resamples at coverage ``ci``.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import json
import logging
import math
import multiprocessing
import os
import platform
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from dynamix import paths
from dynamix.cluster import ClusterSpec
from dynamix.config import Config, DataConfig, build, deep_merge
from dynamix.data import load_cifar10
from dynamix.seeding import derive_seed

log = logging.getLogger(__name__)

PACKAGES = (
    "torch", "torchvision", "numpy", "pandas", "stable-baselines3", "gymnasium", "grpcio", "protobuf",
    "seaborn", "matplotlib", "dvc", "papermill",
)  # fmt: skip
"""Packages whose versions a manifest records."""


# --------------------------------------------------------------------------------------------
# Identity
# --------------------------------------------------------------------------------------------


def slug(text: str) -> str:
    """A filesystem-safe token: ``static:64`` -> ``static-64``, ``resnet8/sgd`` -> ``resnet8-sgd``."""
    return re.sub(r"[^A-Za-z0-9_.]+", "-", str(text)).strip("-")


def run_id(*parts: Any) -> str:
    """Deterministic id of one run from what it is, e.g. ``run_id("mixed-4", "static:64", "sgd", 0)``
    -> ``mixed-4__static-64__sgd__s0`` (integers are seeds and get an ``s`` prefix)."""
    return "__".join(_token(p) for p in parts)


def _token(part: Any) -> str:
    if isinstance(part, int) and not isinstance(part, bool):
        return f"s{part}"
    text = str(part)
    if text.endswith((".yaml", ".yml", ".zip")):  # a spec or policy file: its name is enough
        text = Path(text).stem
    return slug(text)


def with_overrides(cfg: Config, overrides: Mapping[str, Any]) -> Config:
    """``cfg`` with a nested mapping of overrides applied and re-validated (e.g. an Adam workload)."""
    return build(Config, deep_merge(cfg.to_dict(), overrides))


def sim_config(cfg: Config, **sections: Mapping[str, Any]) -> Config:
    """The config a simulated experiment run uses: ``cfg`` with the experiments' workload
    (``experiments.model``/``width`` when set), budget (``experiments.epochs`` when set), evaluation cadence (``experiments.eval_every``,
    ``eval_samples``) and any further section overrides (e.g. an optimiser)."""
    e = cfg.experiments
    base: dict[str, Any] = {"train": {"eval_every": e.eval_every, "eval_samples": e.eval_samples}}
    if e.model:
        base["model"] = {"name": e.model, "width": e.width or cfg.model.width}
    if e.epochs:
        base["train"].update(epochs=e.epochs, max_iters=0)
    return with_overrides(cfg, deep_merge(base, sections))


def seeds(cfg: Config) -> list[int]:
    """The run seeds of an experiment: ``train.seed + i`` for ``i < experiments.seeds``."""
    return [cfg.train.seed + i for i in range(cfg.experiments.seeds)]


# --------------------------------------------------------------------------------------------
# Provenance
# --------------------------------------------------------------------------------------------


def git_sha() -> str:
    """HEAD of the repository, with ``-dirty`` when tracked files differ; ``unknown`` without git."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=paths.ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=paths.ROOT, capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "missing"
    return out


def write_manifest(out_dir: Path, cfg: Config, experiment: str, extra: Mapping[str, Any] | None = None) -> Path:
    """``out_dir/manifest.json``: what produced the results beside it."""
    manifest = {
        "experiment": experiment,
        "profile": cfg.profile,
        "config_hash": cfg.hash(),
        "git_sha": git_sha(),
        "command": " ".join(sys.argv),
        "cwd": os.getcwd(),
        "versions": package_versions(),
        "config": cfg.to_dict(),
        **(extra or {}),
    }
    return write_json(Path(out_dir) / "manifest.json", manifest)


# --------------------------------------------------------------------------------------------
# Writers (atomic: a killed run never leaves a half-written table where a good one was)
# --------------------------------------------------------------------------------------------


def _atomic_write_text(path: Path, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return None if not math.isfinite(float(value)) else float(value)
    if isinstance(value, Path):
        return str(value)
    return value


def write_json(path: Path, data: Mapping[str, Any]) -> Path:
    """JSON with NaN/inf as ``null`` (strict JSON, which DVC's metrics parser requires)."""
    return _atomic_write_text(Path(path), json.dumps(_jsonable(data), indent=2, sort_keys=True) + "\n")


def write_csv(df: pd.DataFrame, path: Path) -> Path:
    """A tidy CSV (no index); missing values are empty cells."""
    return _atomic_write_text(Path(path), df.to_csv(index=False))


# --------------------------------------------------------------------------------------------
# Aggregation over seeds
# --------------------------------------------------------------------------------------------


def iqm(values: Iterable[float]) -> float:
    """Interquartile mean: mean of the values between the 25th and 75th percentile ranks.

    Sorted x_1..x_n, trimmed by floor(n/4) on each side; for n < 4 nothing is trimmed (the mean).
    NaNs are dropped; an empty input gives NaN.
    """
    x = np.sort(np.asarray([v for v in values if not _isnan(v)], dtype=float))
    if x.size == 0:
        return math.nan
    k = x.size // 4
    return float(x[k : x.size - k].mean())


def _isnan(v: Any) -> bool:
    return v is None or (isinstance(v, (float, np.floating)) and math.isnan(v))


def point_estimate(values: Iterable[float], method: str) -> float:
    if method == "iqm":
        return iqm(values)
    if method == "mean":
        x = [v for v in values if not _isnan(v)]
        return float(np.mean(x)) if x else math.nan
    raise ValueError(f"experiments.aggregate = {method!r}: must be 'iqm' or 'mean'")


def bootstrap_ci(
    values: Iterable[float], method: str = "iqm", n_boot: int = 2000, ci: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile-bootstrap interval of ``point_estimate(values, method)`` over resampled seeds.

    One value gives a degenerate interval (that value); none gives (NaN, NaN).
    """
    x = np.asarray([v for v in values if not _isnan(v)], dtype=float)
    if x.size == 0:
        return math.nan, math.nan
    if x.size == 1:
        return float(x[0]), float(x[0])
    rng = np.random.default_rng(derive_seed(seed, "bootstrap"))
    samples = x[rng.integers(0, x.size, size=(n_boot, x.size))]
    if method == "mean":
        stats = samples.mean(axis=1)
    else:
        samples.sort(axis=1)
        k = x.size // 4
        stats = samples[:, k : x.size - k].mean(axis=1)
    lo, hi = np.quantile(stats, [(1 - ci) / 2, 1 - (1 - ci) / 2])
    return float(lo), float(hi)


def aggregate(
    df: pd.DataFrame, by: list[str], values: list[str], method: str = "iqm", n_boot: int = 2000, ci: float = 0.95
) -> pd.DataFrame:
    """One row per group of ``by``: for each value column ``v``: ``v`` (IQM or mean over the rows,
    i.e. seeds), ``v_lo`` and ``v_hi`` (bootstrap interval), and ``n_seeds`` (rows in the group).
    Also ``v_reached``: the fraction of rows where ``v`` is not missing (e.g. target reached)."""
    rows = []
    for key, group in df.groupby(by, sort=False, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        row = dict(zip(by, key))
        row["n_seeds"] = len(group)
        for v in values:
            col = group[v].astype(float).tolist()
            row[v] = point_estimate(col, method)
            row[f"{v}_lo"], row[f"{v}_hi"] = bootstrap_ci(col, method, n_boot, ci)
            row[f"{v}_reached"] = float(np.mean([not _isnan(c) for c in col]))
        rows.append(row)
    return pd.DataFrame(rows)


def aggregate_cfg(df: pd.DataFrame, by: list[str], values: list[str], cfg: Config) -> pd.DataFrame:
    """:func:`aggregate` with the method, resamples and coverage from ``cfg.experiments``."""
    e = cfg.experiments
    return aggregate(df, by, values, e.aggregate, e.n_boot, e.ci)


# --------------------------------------------------------------------------------------------
# Small shared readings of runs.csv
# --------------------------------------------------------------------------------------------


def resolve_policy(spec: str, policy_dir: Path, name: str) -> str:
    """``dynamix`` (the trained policy of the policy_training stage) -> ``dynamix:<dir>/<name>.zip``."""
    return f"dynamix:{Path(policy_dir) / (name + '.zip')}" if spec == "dynamix" else spec


def policy_label(spec: str) -> str:
    """Short legend label: ``dynamix:/x/y/dynamix.zip`` -> ``dynamix``; others unchanged."""
    kind, _, arg = spec.partition(":")
    return kind if kind == "dynamix" else spec


def read_manifest(out_dir: Path) -> dict:
    """The ``manifest.json`` an experiment wrote (figures read its config, not the current params)."""
    return json.loads((Path(out_dir) / "manifest.json").read_text())


def run_summary(runs: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One row per run (``run_id``) of a runs.csv frame, with ``keys`` and ``seed`` and:

    - ``final_accuracy``: the last test accuracy evaluated (fraction in [0, 1]);
    - ``total_time_s``: the run's (virtual) duration;
    - ``throughput_samples_per_s``: samples processed over the whole run / total_time_s, where a
      window contributes global_batch x (iterations in that window).

    Time to target is added per group by :func:`dynamix.rl.evaluate.set_targets`, the project's one
    definition of it.
    """
    rows = []
    for rid, run in runs.groupby("run_id", sort=False):
        w = run.drop_duplicates("window").sort_values("window")
        iters = w["iteration"].diff().fillna(w["iteration"].iloc[0])
        total_s = float(w["elapsed_s"].iloc[-1])
        acc = w["test_acc"].dropna()
        row = {"run_id": rid, **{k: w[k].iloc[0] for k in keys}, "seed": int(w["seed"].iloc[0])}
        row["final_accuracy"] = float(acc.iloc[-1]) if len(acc) else math.nan
        row["total_time_s"] = total_s
        row["throughput_samples_per_s"] = float((w["global_batch"] * iters).sum()) / total_s if total_s > 0 else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def curves(runs: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per (keys, window): elapsed time, test accuracy and cluster throughput (sum over ranks).

    ``runs`` is a runs.csv frame (one row per window and rank); the result has one row per window
    with ``elapsed_s``, ``test_acc``, ``global_batch``, ``epoch`` and ``throughput_samples_per_s``.
    """
    g = runs.groupby(keys + ["window"], sort=False)
    out = g.agg(
        elapsed_s=("elapsed_s", "first"),
        epoch=("epoch", "first"),
        test_acc=("test_acc", "first"),
        global_batch=("global_batch", "first"),
        iter_time_ms=("iter_time_ms", "max"),
        throughput_samples_per_s=("throughput_samples_per_s", "sum"),
    ).reset_index()
    return out


# --------------------------------------------------------------------------------------------
# Running many simulations
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SimTask:
    """One simulated run: a cluster, a full config (workload, budget), a policy spec and a seed.

    ``keys`` become extra columns of every row (e.g. ``optimizer``, ``n_workers``), so one tidy
    ``runs.csv`` holds a whole grid.
    """

    spec: ClusterSpec
    cfg: Config
    policy: str
    seed: int
    keys: tuple[tuple[str, Any], ...] = ()
    label: str = ""  # the ``policy`` column; default: :func:`policy_label` of the spec

    @property
    def run_id(self) -> str:
        return run_id(self.spec.name, *(v for _, v in self.keys), self.label or self.policy, self.seed)


@functools.lru_cache(maxsize=2)
def _dataset(data_cfg: DataConfig):
    return load_cifar10(data_cfg)


def _simulate(task: SimTask) -> pd.DataFrame:
    from dynamix.policies import make_policy
    from dynamix.sim.run import simulate

    if task.cfg.train.threads:
        torch.set_num_threads(task.cfg.train.threads)
    frame = simulate(task.spec, task.cfg, make_policy(task.policy), task.seed, progress=False,
                     data=_dataset(task.cfg.data))  # fmt: skip
    frame["run_id"] = task.run_id
    frame["policy"] = task.label or policy_label(task.policy)
    frame["cluster"] = task.spec.name
    for k, v in task.keys:
        frame[k] = v
    return frame


def budgeted(cfg: Config, groups: list[tuple[ClusterSpec, Config]]) -> list[Config]:
    """Each group's run config under ``rl.eval_budget`` (:mod:`dynamix.rl.evaluate`): unchanged for
    ``epochs``; for ``time``, capped at the virtual time the group's reference run (every worker at
    ``batch.initial``, seed 0) needs for its epoch budget on that cluster. The reference runs go in
    parallel (``experiments.jobs``)."""
    from dynamix.rl.evaluate import budget_time_s, reference_policy, time_budget_config

    if cfg.rl.eval_budget == "epochs":
        return [run_cfg for _, run_cfg in groups]
    refs = [SimTask(spec, run_cfg, reference_policy(run_cfg), 0, (("group", i),)) for i, (spec, run_cfg) in enumerate(groups)]
    runs = run_simulations(refs, cfg.experiments.jobs, desc="time budgets")
    return [time_budget_config(run_cfg, budget_time_s(runs[runs["group"] == i]))
            for i, (_, run_cfg) in enumerate(groups)]


def run_simulations(tasks: list[SimTask], jobs: int = 1, desc: str = "runs") -> pd.DataFrame:
    """Run every task (in ``jobs`` spawned processes, one torch thread each, when ``jobs > 1``)
    and return their rows concatenated in task order (deterministic whatever the scheduling)."""
    if not tasks:
        raise ValueError("run_simulations: no tasks (check the experiment's policies, clusters and seeds)")
    bar = tqdm(total=len(tasks), desc=desc, unit="run")
    frames: list[pd.DataFrame | None] = [None] * len(tasks)
    if jobs <= 1:
        for i, task in enumerate(tasks):
            frames[i] = _simulate(task)
            bar.update()
    else:
        one_thread = [dataclasses.replace(t, cfg=with_overrides(t.cfg, {"train": {"threads": 1}})) for t in tasks]
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
            futures = {pool.submit(_simulate, t): i for i, t in enumerate(one_thread)}
            for fut in as_completed(futures):
                frames[futures[fut]] = fut.result()
                bar.update()
    bar.close()
    return pd.concat(frames, ignore_index=True)
