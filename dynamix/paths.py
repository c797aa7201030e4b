"""Every path the project uses, anchored at the repository root, and the commit that root is at
(:func:`git_sha`, which records and artifacts carry).

Notebooks run from two working directories (``notebooks/`` interactively, the repo root under
papermill and DVC), so nothing may depend on the current directory: resolve through here.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[1]
"""Repository root (the folder holding ``params.yaml``)."""

PARAMS = ROOT / "params.yaml"
DATA = ROOT / "data"
EMBEDDED_CIFAR10 = DATA / "cifar10-mini.tar.gz"
RESULTS = ROOT / os.path.expanduser(os.environ.get("DYNAMIX_RESULTS", "results"))  # an absolute value replaces ROOT
"""Results root: ``results/`` at the repository root; ``$DYNAMIX_RESULTS`` moves it, policies
included (the notebook tests run the whole pipeline into a temporary folder this way)."""
CACHE = Path(os.environ.get("DYNAMIX_CACHE", str(DATA / "cache")))
FIGURES = RESULTS / "figures"
POLICIES = RESULTS / "policies"
CALIBRATION = ROOT / "calibrations"
"""The committed reference calibrations the simulator's clock reads (:mod:`dynamix.sim.calibrate`)."""
CLUSTERS = ROOT / "clusters"
PROTOS = ROOT / "protos"
NOTEBOOKS = ROOT / "notebooks"


def resolve(path: str | os.PathLike) -> Path:
    """Resolve ``path`` against the repository root unless it is absolute (``~`` expanded)."""
    p = Path(os.path.expanduser(str(path)))
    return p if p.is_absolute() else ROOT / p


def relative(path: str | os.PathLike) -> str:
    """``path`` as :func:`resolve` reads it back: relative to the repository root when inside it (so a
    config or artifact recording it does not depend on where the checkout is), else absolute."""
    p = resolve(path).resolve()
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)


def git_sha(reads: Sequence[str] | None = None) -> str:
    """HEAD of the repository, with ``-dirty`` when tracked files differ from it; ``unknown`` without git.

    ``reads``: only these paths count (a stage's code, data and params,
    :func:`dynamix.pipeline.manifest.stage_dependencies`). A profile whose results are committed
    (``results/profiles/cpu``) rewrites tracked files as its stages run, so its own outputs, and earlier
    stages' ones, must not make a clean run dirty."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", *(reads or ())],
            cwd=ROOT, capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
