"""The DVC pipeline: one stage per notebook and back, the params/deps/outs conventions, a valid DAG."""

from __future__ import annotations

import dataclasses
import re
import sys
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from dynamix import config, paths
from dynamix.experiments import EXPERIMENTS
from dynamix.pipeline import notebooks as gen

DVC = yaml.safe_load((paths.ROOT / "dvc.yaml").read_text())
STAGES = DVC["stages"]


def _cmd(stage: dict) -> str:
    return DVC["vars"][0]["nb"] + stage["cmd"].split("${nb}", 1)[1] if "${nb}" in stage["cmd"] else stage["cmd"]


def test_one_stage_per_notebook_and_one_notebook_per_stage():
    by_stage = {}
    for name, stage in STAGES.items():
        nbs = re.findall(r"(?<!results/)notebooks/(\d\d_\w+)\.ipynb", stage["cmd"])
        assert len(nbs) == 1, f"stage {name}: cmd must run exactly one notebook"
        by_stage[name] = nbs[0]
        assert (paths.NOTEBOOKS / f"{nbs[0]}.ipynb").exists(), f"stage {name}: notebook {nbs[0]} is missing"
        assert f"results/notebooks/{nbs[0]}.ipynb" in stage["cmd"]
    assert sorted(by_stage.values()) == sorted(p.stem for p in paths.NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    assert {s.experiment: s.stem for s in gen.NOTEBOOKS} == by_stage
    assert set(STAGES) == set(EXPERIMENTS)


@pytest.mark.parametrize("name", list(STAGES))
def test_stage_runs_papermill_with_profile_and_declares_its_inputs(name):
    stage = STAGES[name]
    cmd = _cmd(stage)
    assert "papermill -k python3 --log-output" in cmd and "-p profile ${profile}" in cmd
    assert stage["params"][:2] == ["profile", "profiles"]
    sections = {f.name for f in dataclasses.fields(config.Config)}
    keys = {p.split(".")[0] for p in stage["params"]} - {"profiles"}
    assert keys <= sections, "params must be keys of params.yaml (a section, or a dotted key in one)"
    notebook = re.search(r"notebooks/\w+\.ipynb", cmd).group(0)
    assert notebook in stage["deps"]
    assert f"dynamix/experiments/{name}.py" in stage["deps"]  # its code, file by file (tools/dvcgen.py)
    metrics = [next(iter(m)) for m in stage["metrics"]]
    assert metrics and all(m.endswith("summary.json") for m in metrics)
    outs = [next(iter(o)) if isinstance(o, dict) else o for o in stage["outs"]]
    assert f"results/figures/{name}" in outs


def test_every_declared_plot_is_a_png_drawn_by_its_stage():
    outs = {n: [next(iter(o)) if isinstance(o, dict) else o for o in s["outs"]] for n, s in STAGES.items()}
    for plot in DVC["plots"]:
        assert plot.endswith(".png")
        stage = Path(plot).parts[2]
        assert f"results/figures/{stage}" in outs[stage]
    assert {Path(p).parts[2] for p in DVC["plots"]} == set(STAGES)


def test_dvcignore_keeps_bytecode_out():
    ignored = (paths.ROOT / ".dvcignore").read_text().split()
    assert "__pycache__" in ignored and "*.pyc" in ignored


def test_dvc_parses_the_pipeline_and_its_dag_is_in_order():
    dvc = shutil.which("dvc", path=str(Path(sys.executable).parent)) or shutil.which("dvc")
    if dvc is None:
        pytest.skip("dvc is not installed in this environment")
    out = subprocess.run([dvc, "dag", "--dot"], cwd=paths.ROOT, capture_output=True, text=True, check=True).stdout
    edges = set(re.findall(r'"(\w+)" -> "(\w+)"', out))
    for edge in [("policy_training", "inference"), ("policy_training", "transfer"),
                 ("inference", "claims"), ("scalability", "claims"), ("transfer", "claims")]:  # fmt: skip
        assert edge in edges, out


def test_stages_read_the_committed_calibrations_and_none_writes_them():
    """The simulator's clock is the committed reference calibrations: a dependency of every stage that
    simulates, an output of none (no stage measures, so reruns of one commit agree)."""
    simulating = {"prepare", "baselines", "policy_training", "selection", "inference", "scalability", "transfer",
                  "ablation", "compression"}
    for name, stage in STAGES.items():
        outs = [next(iter(o)) if isinstance(o, dict) else o for o in stage["outs"]]
        assert not any(o.startswith(("calibrations", "results/calibration")) for o in outs), name
        assert ("calibrations" in stage["deps"]) == (name in simulating), name
    assert sorted(p.name for p in paths.CALIBRATION.glob("*.json")), "no committed reference calibration"
