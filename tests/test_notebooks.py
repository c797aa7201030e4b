"""Notebooks: hygiene (stripped, thin, literal parameters, generated) and papermill runs (smoke profile).

Every notebook runs under papermill with the smoke profile into a temporary results folder and the
test checks the files it wrote. The cheap data/calibration notebook runs in the default tier (from
the repo root, as DVC runs it, and from notebooks/, as JupyterLab does); the full chain is ``slow``.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import nbformat
import pytest

from dynamix import paths
from dynamix.experiments import EXPERIMENTS
from dynamix.experiments import notebooks as gen

NOTEBOOK_FILES = sorted(paths.NOTEBOOKS.glob("*.ipynb"))


def _code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def test_every_notebook_is_generated_and_every_generated_one_is_committed():
    assert [p.name for p in NOTEBOOK_FILES] == sorted(gen.path(s).name for s in gen.NOTEBOOKS)
    for spec in gen.NOTEBOOKS:
        assert gen.path(spec).read_text() == gen.render(spec), (
            f"{gen.path(spec).name} differs from its generator: run `python -m dynamix.experiments.notebooks`"
        )
        assert spec.experiment in EXPERIMENTS


@pytest.mark.parametrize("path", NOTEBOOK_FILES, ids=lambda p: p.name)
def test_notebook_is_stripped_thin_and_parameterised(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.kernelspec.name == "python3"
    cells = _code_cells(nb)
    for cell in cells:
        assert cell.outputs == [] and cell.execution_count is None, "outputs must be stripped"
        tree = ast.parse(cell.source)
        defs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))]
        assert not defs, f"{path.name}: notebooks hold no def/class/lambda (put logic in dynamix)"
        assert "open(" not in cell.source and "Path(" not in cell.source and "os.path" not in cell.source, (
            f"{path.name}: paths come from dynamix.paths only"
        )
    first = cells[0]
    assert "parameters" in first.metadata.get("tags", []), "the first code cell must be tagged `parameters`"
    for stmt in ast.parse(first.source).body:
        assert isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant), (
            f"{path.name}: the parameters cell holds literal assignments only, got {ast.unparse(stmt)!r}"
        )
    names = {t.id for s in ast.parse(first.source).body for t in s.targets}
    assert names == {"profile", "results_dir"}


def _execute(name: str, results: Path, cwd: Path) -> Path:
    import papermill

    out = results / "notebooks" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    papermill.execute_notebook(
        str(paths.NOTEBOOKS / name), str(out), parameters={"profile": "smoke", "results_dir": str(results)},
        kernel_name="python3", cwd=str(cwd), progress_bar=False, log_output=False,
    )  # fmt: skip
    return out


def _check_stage_files(results: Path, stage: str) -> None:
    """The files DVC declares for ``stage`` exist under ``results`` (figures non-empty PNG and PDF)."""
    import yaml

    dvc = yaml.safe_load((paths.ROOT / "dvc.yaml").read_text())
    stages = dvc["stages"]
    declared = [next(iter(o)) if isinstance(o, dict) else o for o in stages[stage].get("outs", [])]
    declared += [next(iter(m)) for m in stages[stage].get("metrics", [])]
    for rel in declared:
        rel = Path(rel).relative_to("results")
        if rel.parts[0] in ("notebooks", "calibration", "policies"):
            continue  # written by papermill / into the repo's results (calibration, main policy)
        target = results / rel
        assert target.exists(), f"stage {stage}: {target} was not written"
    for plot in dvc["plots"]:  # every figure DVC shows for this stage was drawn
        if Path(plot).parts[2] == stage:
            assert (results / Path(plot).relative_to("results")).exists(), f"stage {stage}: {plot} missing"
    figs = results / "figures" / stage
    pngs = sorted(figs.glob("*.png"))
    assert pngs, f"stage {stage}: no figures in {figs}"
    for png in pngs:
        assert png.stat().st_size > 1000 and png.with_suffix(".pdf").exists()


def test_prepare_notebook_runs_from_repo_root_and_from_notebooks_dir(tmp_path):
    out = _execute("00_prepare.ipynb", tmp_path / "a", paths.ROOT)
    _check_stage_files(tmp_path / "a", "prepare")
    summary = json.loads((tmp_path / "a" / "prepare" / "summary.json").read_text())
    assert summary["n_train"] > 0 and len(summary["class_counts"]["train"]) == 10
    executed = nbformat.read(out, as_version=4)
    assert any(c.get("outputs") for c in _code_cells(executed)), "papermill output should hold results"
    _execute("00_prepare.ipynb", tmp_path / "b", paths.NOTEBOOKS)  # JupyterLab's working directory
    assert (tmp_path / "b" / "prepare" / "summary.csv").read_text() == (tmp_path / "a" / "prepare" / "summary.csv").read_text()


@pytest.mark.slow
def test_every_notebook_runs_in_order_under_papermill_with_the_smoke_profile(tmp_path):
    """The whole chain, as ``dvc repro`` runs it, into a temporary results folder."""
    for spec in gen.NOTEBOOKS:
        _execute(f"{spec.stem}.ipynb", tmp_path, paths.ROOT)
        _check_stage_files(tmp_path, spec.experiment)
    claims = (tmp_path / "claims" / "claims.csv").read_text()
    assert "46%" in claims or "training time" in claims
