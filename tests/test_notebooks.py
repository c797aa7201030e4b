"""Notebooks: hygiene (stripped, thin, literal parameters, generated) and the whole smoke pipeline.

The default tier runs every notebook in order under papermill with the smoke profile into a
temporary results root (once per session, :func:`smoke_pipeline`), then checks the files each stage
declares in dvc.yaml, that the repository's results/ is untouched, and that every claims row has
finite numbers and the verdict its rule gives (:func:`dynamix.experiments.claims.row_verdict`).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
import papermill
import pytest

from dynamix import cluster, config, paths
from dynamix.experiments import EXPERIMENTS
from dynamix.pipeline import notebooks as gen
from helpers.notebooks import execute as run_notebook

NOTEBOOK_FILES = sorted(paths.NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))  # pipeline; explore.ipynb: test_explore.py


def _code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def test_every_notebook_is_generated_and_every_generated_one_is_committed():
    assert [p.name for p in NOTEBOOK_FILES] == sorted(gen.path(s).name for s in gen.NOTEBOOKS)
    for spec in gen.NOTEBOOKS:
        assert gen.path(spec).read_text() == gen.render(spec), (
            f"{gen.path(spec).name} differs from its generator: run `python -m dynamix.pipeline.notebooks`"
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
    assert set(papermill.inspect_notebook(str(path))) == names  # papermill reads every line of it


def _execute(name: str, results: Path, cwd: Path) -> Path:
    out = results / "notebooks" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    run_notebook(
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
        if rel.parts[0] == "notebooks":
            continue  # written by papermill, checked by the caller
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


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` with its size and modification time (nanoseconds)."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in root.rglob("*") if p.is_file()} if root.exists() else {}  # fmt: skip


@pytest.fixture(scope="module")
def smoke_pipeline(tmp_path_factory) -> Path:
    """The whole chain, as ``dvc repro`` runs it (every notebook in order, from the repo root), with
    the smoke profile into a temporary results root (:func:`dynamix.pipeline.runner.run_pipeline`,
    which points ``$DYNAMIX_RESULTS`` at it: calibration and policies go there too)."""
    from dynamix.pipeline.runner import run_pipeline

    results = tmp_path_factory.mktemp("smoke") / "results"
    repo_results = _tree(paths.RESULTS)
    run_pipeline("smoke", results)
    assert _tree(paths.RESULTS) == repo_results, "the smoke pipeline wrote into the repository's results/"
    return results


def test_pipeline_records_every_stage_time_and_publishes_the_headline_files(smoke_pipeline, tmp_path):
    from dynamix.pipeline.publish import PUBLISHED, publish
    from dynamix.pipeline.runner import STAGES

    times = pd.read_csv(smoke_pipeline / "stage_times.csv")
    assert list(times["stage"]) == list(STAGES) and (times["seconds"] > 0).all()
    written = publish("smoke", smoke_pipeline, tmp_path / "expected", check_provenance=False)
    assert (tmp_path / "expected" / "PROFILE").read_text() == "smoke\n"
    assert {p.name for p in written} >= set(PUBLISHED.values()) | {"claims_claims.png"}
    assert (tmp_path / "expected" / "claims.csv").read_text() == (smoke_pipeline / "claims" / "claims.csv").read_text()
    with pytest.raises(FileNotFoundError, match="claims"):
        publish("smoke", tmp_path / "empty", tmp_path / "x", check_provenance=False)


def test_smoke_scalability_budget_is_the_reference_runs_iterations_at_every_size(smoke_pipeline):
    cfg = config.load(profile="smoke")
    scal = pd.read_csv(smoke_pipeline / "scalability" / "summary.csv")
    ref = scal[scal["policy"] == f"static:{cfg.batch.initial}"]
    assert sorted(ref["n_workers"].unique()) == sorted(cfg.experiments.scalability.workers)
    assert (ref["iterations"] == cfg.experiments.scalability.iterations).all()


def test_smoke_inference_tunes_lbbsp_on_validation_clusters_and_runs_the_choice_on_held_out(smoke_pipeline):
    from dynamix.evaluation import tuning

    cfg = config.load(profile="smoke")
    e = cfg.experiments.inference
    inf = json.loads((smoke_pipeline / "inference" / "summary.json").read_text())
    sweep = pd.read_csv(smoke_pipeline / "inference" / "tuning.csv")
    validation = {cluster.load(c).name for c in e.tune_clusters}
    assert set(sweep["cluster"]) == validation and not validation & {cluster.load(c).name for c in e.clusters}
    runs = pd.read_csv(smoke_pipeline / "inference" / "runs.csv")
    for opt in e.optimizers:
        rows = sweep[sweep["optimizer"] == opt]
        assert sorted(rows["per_worker_batch"].unique()) == sorted(e.tune_batches)
        m = inf["tuned"][opt]["per_worker_batch"]
        assert m == tuning.choose(rows)  # recomputed from the published sweep
        # every window, the first included: the policy sets the split before the first iteration (the smoke
        # budget may end within that window at a large global batch)
        tuned = runs[(runs["policy"] == "lbbsp:tuned") & (runs["optimizer"] == opt)]
        g = m * tuned["rank"].nunique()
        assert inf["tuned"][opt]["held_out"] == {name: f"lbbsp:batch={g}" for name in tuned["cluster"].unique()}
        assert not tuned.empty and (tuned.groupby(["run_id", "window"])["batch_size"].sum() == g).all()


@pytest.mark.parametrize("spec", gen.NOTEBOOKS, ids=lambda s: s.experiment)
def test_every_stage_of_the_smoke_pipeline_writes_what_dvc_declares(smoke_pipeline, spec):
    _check_stage_files(smoke_pipeline, spec.experiment)
    executed = nbformat.read(smoke_pipeline / "notebooks" / f"{spec.stem}.ipynb", as_version=4)
    assert any(c.get("outputs") for c in _code_cells(executed)), "papermill output should hold results"


def test_smoke_pipeline_claims_are_finite_and_every_verdict_follows_its_rule(smoke_pipeline):
    from dynamix.evaluation import stats
    from dynamix.experiments import claims

    cfg = config.load(profile="smoke")
    table = pd.read_csv(smoke_pipeline / "claims" / "claims.csv")
    assert {"claim", "estimate", "ci_lo", "ci_hi", "verdict", "n_seeds", "n_cells", "null", "side"} <= set(table.columns)
    numbers = table[["estimate", "ci_lo", "ci_hi"]].to_numpy(dtype=float)
    assert np.isfinite(numbers).all(), table[["claim", "estimate", "ci_lo", "ci_hi"]]
    assert (table["ci_lo"] <= table["ci_hi"]).all()
    for _, row in table.iterrows():
        assert row["verdict"] == stats.row_verdict(row), f"{row['claim']}: {row['verdict']!r} breaks the rule"
    engine = table["claim"].str.startswith("(real engine)")  # the published sim2real run's own seeds
    assert (table.loc[~engine, "n_seeds"] == cfg.experiments.seeds).all()  # seeds, not seeds x cells
    published = pd.read_csv(paths.resolve(cfg.experiments.sim2real.published) / "ratios.csv")
    assert engine.sum() == 2 and (table.loc[engine, "n_seeds"] == published["n_seeds"].iloc[0]).all()
    kinds = " | ".join(table["claim"])
    for part in ("final accuracy vs static", "less training time vs static", "largest cluster",
                 "transferred policy generalises", f"DYNAMIX vs {claims.teacher_spec(cfg)}"):
        assert part in kinds, f"no claims row for {part!r}"
    # "static" is the median of the baselines' whole sweep, run in the inference experiment
    inference = pd.read_csv(smoke_pipeline / "inference" / "summary.csv")
    sweep = {f"static:{b}" for b in cfg.experiments.baselines.batch_sizes}
    assert sweep <= set(inference["policy"])
    summary = json.loads((smoke_pipeline / "summary.json").read_text())
    assert summary["accuracy_gain_pts"] == pytest.approx(table["estimate"].iloc[0])
    # per cell: DYNAMIX against the median static, every adaptive policy and the best other one (named
    # among the rest), each verdict by its rule
    cells = pd.read_csv(smoke_pipeline / "claims" / "per_cluster.csv")
    adaptive = {p for p in inference["policy"] if p != "dynamix" and not p.startswith("static:")}
    assert set(cells["reference"]) == {"median static", "best other"} | adaptive
    best = cells[cells["reference"] == "best other"]
    assert set(best["best_other"]) <= set(inference["policy"]) - {"dynamix", "oracle"}
    assert (smoke_pipeline / "claims" / "held_out.md").read_text().count("\n") == 2 + len(best)
    band = stats.tie_band(1.0, "time ratio", cfg.experiments.tie_margin, cfg.experiments.tie_margin_pts)
    for _, row in cells.iterrows():
        expect = stats.verdict(row["ci_lo"], row["ci_hi"], 1.0, "below", kind="ours", tie_lo=band[0], tie_hi=band[1])
        assert row["verdict"] == expect and row["ci_lo"] <= row["estimate"] <= row["ci_hi"]


def test_prepare_notebook_from_the_notebooks_dir_matches_the_pipeline(smoke_pipeline, tmp_path, monkeypatch):
    """JupyterLab's working directory is notebooks/: the same notebook gives the same table there."""
    monkeypatch.setenv("DYNAMIX_RESULTS", str(smoke_pipeline))  # reuse the pipeline's calibration
    _execute("00_prepare.ipynb", tmp_path, paths.NOTEBOOKS)
    summary = json.loads((tmp_path / "prepare" / "summary.json").read_text())
    assert summary["n_train"] > 0 and len(summary["class_counts"]["train"]) == 10
    assert (tmp_path / "prepare" / "summary.csv").read_text() == (smoke_pipeline / "prepare" / "summary.csv").read_text()
