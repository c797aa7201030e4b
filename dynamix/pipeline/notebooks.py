"""Writes ``notebooks/NN_<experiment>.ipynb`` from one template, so the notebooks stay thin and alike.

    python -m dynamix.pipeline.notebooks             # regenerate every notebook (outputs stripped)

Each notebook is: a title cell naming its figures and DVC stage; a ``parameters`` cell with literals
only (papermill injects overrides after it, so nothing derived may live there); one cell calling the
experiment's ``run(cfg, out_dir)``; one drawing its figures; optional cells showing tables. Paths come
from :mod:`dynamix.paths` only, so the notebook runs the same from ``notebooks/`` (JupyterLab) and from
the repository root (papermill under DVC). ``tests/test_notebooks.py`` checks that the committed
notebooks equal this generator's output.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import nbformat

from dynamix import paths


@dataclass(frozen=True)
class NotebookSpec:
    stem: str  # file name without .ipynb; the DVC stage is the experiment name
    experiment: str  # key of dynamix.experiments.EXPERIMENTS
    title: str
    about: str  # what it shows, which paper figure it reproduces
    tables: tuple[str, ...] = ()  # extra code cells (literal source) after the figures


NOTEBOOKS: tuple[NotebookSpec, ...] = (
    NotebookSpec(
        "00_prepare", "prepare", "Data and calibration",
        "Decodes the configured CIFAR-10 source into the tensor cache, reports the class balance, and "
        "the simulator's compute model t(b) = a + c*b for every model the experiments use, from the "
        "committed reference calibrations (`calibrations/`).",
        ('pd.read_csv(results / "prepare" / "summary.csv")',),
    ),
    NotebookSpec(
        "01_baselines", "baselines", "Static batch-size baselines",
        "Static per-worker batch sizes 32..512 on one cluster: test accuracy against training time, and "
        "cluster throughput against batch size (the paper's static-baseline figure).",
        ('pd.read_csv(results / "baselines" / "summary.csv")',),
    ),
    NotebookSpec(
        "02_policy_training", "policy_training", "DYNAMIX policy training",
        "Trains the PPO arbitrator on randomised simulated clusters and plots the cumulative reward per "
        "episode (the paper's reward curve). The policy is saved under `results/policies/`.",
    ),
    NotebookSpec(
        "03_selection", "selection", "Which trained policy ships",
        "Scores every trained seed's policy and its snapshots on the validation clusters with the real math, "
        "beside LB-BSP at each global batch, and confirms a trained choice against its warm start on fresh "
        "seeds (`experiments.policy_training.select`); held-out clusters play no part. Every later stage's "
        "`dynamix` is the policy that ships.",
        ('pd.read_csv(results / "selection" / "selection.csv") if summary["selected"] else summary',),
    ),
    NotebookSpec(
        "04_inference", "inference", "DYNAMIX against every baseline",
        "On held-out heterogeneous clusters, for SGD and Adam workloads: accuracy against time, time to "
        "target accuracy and final accuracy of DYNAMIX, static batch sizes, LB-BSP, GNS and ramp; plus "
        "one end-to-end run of the real engine with 4 emulated heterogeneous workers through the gRPC "
        "arbitrator.",
        ('pd.read_csv(results / "inference" / "summary.csv")',),
    ),
    NotebookSpec(
        "05_scalability", "scalability", "Scalability",
        "The same worker mix at 4, 8, 16 and 32 workers (64/128 in the paper profile): time to target and "
        "throughput per policy.",
        ('pd.read_csv(results / "scalability" / "summary.csv")',),
    ),
    NotebookSpec(
        "06_transfer", "transfer", "Policy transfer",
        "A policy trained on one workload, run on another (ResNet34 -> ResNet50 and VGG11-SGD -> "
        "VGG11-Adam in the paper; CPU stand-ins in the default profile), against a policy trained on the "
        "target and against a static batch size.",
        ('pd.read_csv(results / "transfer" / "summary.csv")',),
    ),
    NotebookSpec(
        "07_claims", "claims", "The paper's claims against our numbers",
        "Each claim of the paper beside the number this pipeline measured, with a 95% t interval "
        "over seeds.",
        ('pd.read_csv(results / "claims" / "claims.csv")',),
    ),
    NotebookSpec(
        "08_ablation", "ablation", "Ablation: from the paper's recipe to ours",
        "The paper's recipe (`rl.recipe: paper`), then one addition at a time up to the default recipe: "
        "the time-weighted return, the imbalance time signal, our state (`lb_gap`), the LB-BSP warm start. "
        "Time to target over the median static on the held-out and validation clusters, beside LB-BSP, GNS "
        "and `lbbsp:batch=512`. The default profile reads the committed per-run results "
        "(`docs/expected/ablation/`); the `ablation` profile trains and evaluates everything (about two hours).",
        ('pd.read_csv(results / "ablation" / "table.csv")',),
    ),
    NotebookSpec(
        "09_compression", "compression", "Batch-size policies with lossless gradient compression",
        "On a communication-bound cluster, static batch sizes, LB-BSP, GNS and the DYNAMIX agent train each "
        "sparse workload (`experiments.compression.workloads`: ncf on the interaction data, lstm-lm on the "
        "token stream) with and without lossless homomorphic compression (`engine.compression: lhc`, arXiv "
        "2402.07529): time to target, the global batch each policy chooses, and each policy's time with "
        "compression over its time without (paired by seed); the static batch sizes also run on the links "
        "benchmark's rings at 1 and 10 Gbit/s (`static_clusters`). The agent is the policy_training stage's, "
        "trained on another workload (a transfer). Then each workload's gradient density and bytes per "
        "iteration by batch size (`density.csv`), and the measured links (`docs/expected/links.json`) beside "
        "the cost model's predictions and each simulated cluster's best static batch with and without "
        "compression (`links.csv`).",
        ('pd.read_csv(results / "compression" / "compression.csv")',
         'pd.read_csv(results / "compression" / "density.csv")',
         'pd.read_csv(results / "compression" / "links.csv")'),
    ),
)


def _code(source: str, tags: tuple[str, ...] = ()) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source)
    if tags:
        cell.metadata["tags"] = list(tags)
    return cell


def build(spec: NotebookSpec) -> nbformat.NotebookNode:
    """The notebook for ``spec``, outputs empty; cell ids derived from the stem (stable diffs)."""
    e = spec.experiment
    cells = [
        nbformat.v4.new_markdown_cell(
            f"# {spec.title}\n\n{spec.about}\n\n"
            f"- DVC stage: `dvc repro {e}` (executed copy: `results/notebooks/{spec.stem}.ipynb`)\n"
            f"- Same computation from the shell: `dynamix run {e} --profile default`\n"
            f"- Code: `dynamix/experiments/{e}.py`; figures: `dynamix/plots/{e}.py`; "
            f"outputs: `results/{e}/`, `results/figures/{e}/`"
        ),
        _code(
            '# Literals only: papermill injects overrides after this cell.\n'
            'profile = "default"  # smoke | default | paper (params.yaml `profiles`)\n'
            'results_dir = ""  # empty: results/ at the repository root',
            ("parameters",),
        ),
        _code(
            "import logging\n\n"
            "import pandas as pd\n\n"
            "from dynamix import config, paths\n"
            f"from dynamix.experiments import {e}\n\n"
            'logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")\n'
            "cfg = config.load(profile=profile)\n"
            "results = paths.resolve(results_dir) if results_dir else paths.RESULTS\n"
            f'summary = {e}.run(cfg, results / "{e}")\n'
            "summary"
        ),
        _code(f'{e}.figures(results / "{e}", results / "figures" / "{e}")'),
        *(_code(t) for t in spec.tables),
    ]
    for i, cell in enumerate(cells):
        cell["id"] = f"{spec.stem.replace('_', '-')}-{i}"
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def path(spec: NotebookSpec, folder: Path = paths.NOTEBOOKS) -> Path:
    return Path(folder) / f"{spec.stem}.ipynb"


def render(spec: NotebookSpec) -> str:
    """The exact file text of the notebook (what is committed)."""
    return nbformat.writes(build(spec)) + "\n"


def write_all(folder: Path = paths.NOTEBOOKS) -> list[Path]:
    out = []
    for spec in NOTEBOOKS:
        p = path(spec, folder)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(render(spec))
        out.append(p)
    return out


if __name__ == "__main__":
    for written in write_all():
        print(written)
