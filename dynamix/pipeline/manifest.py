"""``manifest.json``: what produced an experiment's results (config, config hash, git sha, versions, command).

Written beside the results by every experiment; figures read the config back from it
(:func:`read_manifest`) rather than the current ``params.yaml``, so a figure always matches its data.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping

from dynamix import io, isa, paths
from dynamix.config import Config
from dynamix.paths import git_sha

PACKAGES = (
    "torch", "torchvision", "numpy", "pandas", "stable-baselines3", "gymnasium", "grpcio", "protobuf",
    "seaborn", "matplotlib", "dvc", "papermill",
)  # fmt: skip
"""Packages whose versions a manifest records."""


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=paths.ROOT, capture_output=True, text=True, check=True).stdout.strip()


def stage_dependencies(stage: str) -> list[str]:
    """The code, data and params paths ``dvc.yaml`` says ``stage`` reads (its ``deps``, and ``params.yaml``)."""
    import yaml

    stages = yaml.safe_load((paths.ROOT / "dvc.yaml").read_text())["stages"]
    return [*stages[stage]["deps"], "params.yaml"] if stage in stages else ["dynamix", "params.yaml"]


def provenance_problem(stage: str, manifest: Mapping[str, Any]) -> str | None:
    """Why ``stage``'s outputs (its ``manifest``) cannot be published from this commit, or None.

    Published numbers must be reproducible from a commit: refused are outputs made from a modified
    working tree (``git_sha`` ending in ``-dirty``), with no recorded commit, or at a commit whose code
    or params the stage depends on (:func:`stage_dependencies`) differ from HEAD's."""
    sha = str(manifest.get("git_sha", "unknown"))
    if sha == "unknown":
        return f"stage {stage}: its manifest records no commit; rerun it in the repository"
    if sha.endswith("-dirty"):
        return f"stage {stage} was run from a modified working tree at {sha[:12]}; rerun it from a clean commit"
    try:
        if sha == _git("rev-parse", "HEAD"):
            return None
        changed = _git("diff", "--name-only", sha, "HEAD", "--", *stage_dependencies(stage)).splitlines()
    except subprocess.CalledProcessError:
        return f"stage {stage} was run at commit {sha[:12]}, which this repository does not have"
    if changed:
        more = f" and {len(changed) - 1} more" if len(changed) > 1 else ""
        return (f"stage {stage} was run at {sha[:12]}, and {changed[0]}{more} it depends on changed since; "
                f"rerun it from this commit")
    return None


def package_versions() -> dict[str, str]:
    """Python's and every :data:`PACKAGES` version (``missing`` when not installed)."""
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "missing"
    return out


def write_manifest(out_dir: str | Path, cfg: Config, experiment: str, extra: Mapping[str, Any] | None = None) -> Path:
    """``out_dir/manifest.json``: what produced the results beside it."""
    manifest = {
        "experiment": experiment,
        "profile": cfg.profile,
        "config_hash": cfg.hash(),
        "git_sha": git_sha(stage_dependencies(experiment)),  # clean: what the stage reads is HEAD's
        "command": " ".join(sys.argv),
        "cwd": os.getcwd(),
        "versions": package_versions(),
        # the bits a run computes depend on the CPU model even under the kernel pin (docs/protocol.md)
        "cpu": {**isa.cpu_identity(), "kernels": "native" if os.environ.get(isa.SWITCH) == "native" else "avx2"},
        "config": cfg.to_dict(),
        **(extra or {}),
    }
    return io.write_json(Path(out_dir) / "manifest.json", manifest)


def read_manifest(out_dir: str | Path) -> dict:
    """The ``manifest.json`` an experiment wrote (figures read its config, not the current params)."""
    return json.loads((Path(out_dir) / "manifest.json").read_text())
