"""Finished runs as one :class:`RunSet`: a pipeline stage's folder, a ``dynamix evaluate`` folder or a
playground run, read into the same shape so every view draws them alike.

A run folder holds ``runs.csv`` (one row per window and worker, :data:`~dynamix.metrics.schema.RUNS_COLUMNS`
plus the experiment's keys) and usually ``summary.csv`` (one row per run). Stages mix several
comparable groups in one table (clusters, optimisers, cluster sizes, transfer pairs: :data:`GROUP_KEYS`);
each group has its own target accuracy, so the views show one group at a time (:meth:`RunSet.select`).
Where a summary lacks the time to target (the baselines stage, the engine run) it is computed with the
project's one definition (:func:`~dynamix.evaluation.targets.set_targets`).

``docs/expected/`` holds only the figures of a default run (no tables): :func:`figures_in` lists them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from dynamix import cluster as clusters
from dynamix import paths
from dynamix.cluster import ClusterSpec
from dynamix.config import ConfigError, upgrade
from dynamix.errors import InputFileError
from dynamix.evaluation.runs import run_summary
from dynamix.evaluation.targets import set_targets

GROUP_KEYS = ("cluster", "optimizer", "n_workers", "pair")
"""Columns that split a run folder into groups compared under one target accuracy."""

EXPECTED = paths.ROOT / "docs" / "expected"
"""Figures of one default-profile pipeline run, committed for comparison."""

DEFAULT_TARGET_FRACTION = 0.9
"""``evaluation.target_fraction`` when a folder has no manifest to read it from."""


@dataclass(frozen=True)
class RunSet:
    """Runs of several policies (and seeds) on comparable settings, with their per-run summary.

    ``runs``: runs.csv rows (one per run, window and rank); ``summary``: one row per run with at least
    ``policy, seed, final_accuracy, total_time_s, time_to_target_s, target_accuracy``; ``spec``: the
    cluster, when known (drawn beside the runs).
    """

    runs: pd.DataFrame
    summary: pd.DataFrame
    source: str
    spec: ClusterSpec | None = None
    group: Mapping[str, Any] = field(default_factory=dict)

    @property
    def policies(self) -> list[str]:
        """Policy labels in the order they first ran."""
        return list(dict.fromkeys(self.summary["policy"]))

    @property
    def title(self) -> str:
        """The folder's name and the group, e.g. ``inference (cluster hetero-speed-4, optimizer adam)``."""
        where = ", ".join(f"{k} {v}" for k, v in self.group.items())
        name = Path(self.source).name
        return f"{name} ({where})" if where else name

    def groups(self) -> list[dict[str, Any]]:
        """The distinct combinations of :data:`GROUP_KEYS` present, in order of appearance (a key other
        than ``cluster`` only where it varies, e.g. ``n_workers`` in the scalability stage)."""
        keys = [k for k in GROUP_KEYS if k in self.runs.columns and self.runs[k].notna().any()
                and (k == "cluster" or self.runs[k].nunique() > 1)]
        if not keys:
            return [{}]
        combos = self.runs[keys].drop_duplicates()
        return [{k: _plain(v) for k, v in row.items()} for row in combos.to_dict(orient="records")]

    def select(self, group: Mapping[str, Any] | None = None) -> "RunSet":
        """The runs of one group (default: the first); the cluster spec found by name when possible."""
        choices = self.groups()
        group = dict(group or choices[0])
        if group not in choices:
            raise ConfigError(f"group {group} is not in {self.source}: must be one of {choices}")
        runs, summary = self.runs, self.summary
        for k, v in group.items():
            runs = runs[runs[k] == v]
            if k in summary.columns:
                summary = summary[summary[k] == v]
            else:  # summary without the key: keep the runs of this group
                summary = summary.merge(runs[["policy", "seed"]].drop_duplicates(), on=["policy", "seed"])
        spec = self.spec
        if spec is None and "cluster" in group:
            spec = find_spec(str(group["cluster"]), _folder(self.source))
        return replace(self, runs=runs.reset_index(drop=True), summary=summary.reset_index(drop=True),
                       spec=spec, group=group)


def _plain(value: Any) -> Any:
    """numpy scalars -> Python (stable equality and labels)."""
    return value.item() if hasattr(value, "item") else value


def _folder(source: str) -> Path | None:
    p = paths.resolve(source)
    return p if p.is_dir() else None


def _target_fraction(folder: Path) -> float:
    manifest = folder / "manifest.json"
    if manifest.exists():  # a manifest written before the setting moved holds it in rl (config.upgrade)
        stored = upgrade(json.loads(manifest.read_text()).get("config", {}))
        return float(stored.get("evaluation", {}).get("target_fraction", DEFAULT_TARGET_FRACTION))
    return DEFAULT_TARGET_FRACTION


def with_time_to_target(summary: pd.DataFrame, runs: pd.DataFrame, fraction: float) -> pd.DataFrame:
    """``summary`` with ``target_accuracy`` and ``time_to_target_s`` set per group (:data:`GROUP_KEYS`)
    by :func:`~dynamix.evaluation.targets.set_targets`, the target ``fraction`` x the best mean final."""
    keys = [k for k in GROUP_KEYS if k in runs.columns and k in summary.columns and k != "cluster"]
    parts = []
    for key, rows in (summary.groupby(keys, sort=False) if keys else [((), summary)]):
        key = key if isinstance(key, tuple) else (key,)
        mask = pd.Series(True, index=runs.index)
        for col, val in zip(keys, key):
            mask &= runs[col] == val
        parts.append(set_targets(rows.assign(time_to_target_s=math.nan, target_accuracy=math.nan),
                                 runs[mask], fraction))  # fmt: skip
    return pd.concat(parts).sort_index()


def load(folder: str | Path) -> RunSet:
    """The runs of a finished run folder (relative paths resolve against the repository root)."""
    folder = paths.resolve(folder)
    runs_csv = folder / "runs.csv"
    if not runs_csv.exists():
        hint = " (docs/expected holds figures only: see figures_in)" if folder == EXPECTED else ""
        raise InputFileError(
            f"{runs_csv} does not exist: a finished run folder holds runs.csv and summary.csv{hint}; "
            f"folders with runs here: {', '.join(_label(p) for p in available()) or 'none yet (run `dvc repro`)'}"
        )
    runs = pd.read_csv(runs_csv)
    if "cluster" not in runs.columns:  # the engine's runs.csv: one cluster, named by its manifest or folder
        runs.insert(0, "cluster", folder.name)
    summary_csv = folder / "summary.csv"
    summary = pd.read_csv(summary_csv) if summary_csv.exists() else pd.DataFrame()
    if not {"policy", "seed", "final_accuracy", "total_time_s"} <= set(summary.columns):
        keys = ["cluster", "policy"] + [k for k in GROUP_KEYS[1:] if k in runs.columns]
        summary = run_summary(runs, keys)
    if "cluster" not in summary.columns:
        summary = summary.merge(runs[["policy", "seed", "cluster"]].drop_duplicates(), on=["policy", "seed"])
    if "time_to_target_s" not in summary.columns or "target_accuracy" not in summary.columns:
        summary = with_time_to_target(summary, runs, _target_fraction(folder))
    return RunSet(runs, summary, _label(folder))


def _label(folder: Path) -> str:
    try:
        return str(folder.relative_to(paths.ROOT))
    except ValueError:
        return str(folder)


def available(root: str | Path | None = None) -> list[Path]:
    """Folders under ``root`` (default ``results/``) holding a ``runs.csv``, run caches left out."""
    root = paths.RESULTS if root is None else paths.resolve(root)
    found = [p.parent for p in root.rglob("runs.csv") if "cache" not in p.relative_to(root).parts]
    return sorted(found)


def figures_in(folder: str | Path = EXPECTED) -> list[Path]:
    """The PNG figures in ``folder`` (e.g. ``docs/expected``, ``results/figures/<stage>``), sorted."""
    return sorted(paths.resolve(folder).glob("*.png"))


def find_spec(name: str, folder: Path | None = None) -> ClusterSpec | None:
    """The cluster spec named ``name``: first beside the runs (a playground run writes ``cluster.yaml``,
    the scalability stage ``clusters/*.yaml``), then anywhere under ``clusters/``; ``None`` when none
    matches."""
    candidates: list[Path] = []
    if folder is not None:
        candidates += sorted(folder.glob("*.yaml")) + sorted((folder / "clusters").glob("*.yaml"))
    candidates += sorted(paths.CLUSTERS.rglob("*.yaml"), key=lambda p: (p.stem != name, str(p)))
    for path in candidates:
        try:
            spec = clusters.load(path)
        except Exception:  # noqa: BLE001  (one broken file must not hide the others)
            continue
        if spec.name == name:
            return spec
    return None
