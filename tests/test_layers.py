"""The package's layers point down, its sibling modules import each other without cycles, and it
never imports test helpers: import-linter's contracts in ``pyproject.toml`` ([tool.importlinter]),
checked on the tree as it is and, on a copy, shown to catch each kind of violation."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dynamix import paths

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint(root: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` in ``root`` (it puts its working directory first on the path, so it analyses
    ``root/dynamix`` with ``root/pyproject.toml``)."""
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--no-logo"], cwd=root, capture_output=True,
                          text=True, timeout=300)


def test_import_contracts_are_kept():
    run = lint(paths.ROOT)
    assert run.returncode == 0, f"lint-imports failed:\n{run.stdout}\n{run.stderr}"


@pytest.mark.parametrize("module, line, reported", [
    # an upward import: a policy reaching into the RL layer instead of the lazy registry entry
    ("policies/base.py", "import dynamix.rl.policy", "dynamix.policies.base -> dynamix.rl.policy"),
    # an upward import into the top layer
    ("cluster/spec.py", "import dynamix.experiments", "dynamix.cluster.spec -> dynamix.experiments"),
    # the pipeline runs the stages' notebooks, never a stage by import (the stages import its manifest)
    ("pipeline/runner.py", "import dynamix.experiments.claims",
     "dynamix.pipeline.runner -> dynamix.experiments.claims"),
    # a stage importing another: what stages share sits below them
    ("experiments/claims.py", "import dynamix.experiments.inference",
     "dynamix.experiments.claims -> dynamix.experiments.inference"),
    # production code using a test helper
    ("engine/world.py", "import helpers.engine", "dynamix.engine.world -> helpers"),
    # a cycle between two modules of one package
    ("sim/calibrate.py", "import dynamix.sim.run", "No cycles are allowed in dynamix.sim."),
])
def test_import_contracts_catch_a_violation(tmp_path, module, line, reported):
    shutil.copytree(paths.ROOT / "dynamix", tmp_path / "dynamix", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(paths.ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    with open(tmp_path / "dynamix" / module, "a") as fh:
        fh.write(f"\n{line}  # injected by the test\n")
    run = lint(tmp_path)
    assert run.returncode != 0, f"lint-imports accepted `{line}` in {module}:\n{run.stdout}"
    assert reported in run.stdout, run.stdout
