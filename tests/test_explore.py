"""The playground (notebooks/explore.ipynb, dynamix/explore): thin notebook, its papermill run, the views'
numbers, finished-run loading, and the errors a user's typing causes."""

from __future__ import annotations

import ast
import math

import nbformat
import numpy as np
import pandas as pd
import papermill
import pytest
import yaml

from dynamix import paths
from dynamix.config import ConfigError
from dynamix.errors import InputFileError
from dynamix.explore import results, session, views
from dynamix.explore.results import RunSet
from dynamix.metrics.schema import RUNS_COLUMNS
from helpers.notebooks import execute as run_notebook

NOTEBOOK = paths.NOTEBOOKS / "explore.ipynb"
TWO_WORKERS = """name: typed-2
architecture: {kind: ps, num_servers: 1, server_bandwidth_gbps: 5}
workers:
  - {count: 1, device: reference, bandwidth_gbps: 5, latency_ms: 0.1}
  - {count: 1, device: {name: slow, speed: 0.4}, bandwidth_gbps: 1, latency_ms: 0.3}
"""


# ------------------------------------------------------------------------------------------ notebook


def test_playground_notebook_is_thin_stripped_literal_and_not_a_stage():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.kernelspec.name == "python3"
    code = [c for c in nb.cells if c.cell_type == "code"]
    for cell in code:
        assert cell.outputs == [] and cell.execution_count is None, "outputs must be stripped"
        tree = ast.parse(cell.source)
        assert not [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                 ast.ClassDef, ast.Lambda))], "logic goes in dynamix"
        assert "open(" not in cell.source.replace("ui.open(", "") and "Path(" not in cell.source
    assert "parameters" in code[0].metadata.get("tags", [])
    for stmt in ast.parse(code[0].source).body:
        assert isinstance(stmt, ast.Assign), ast.unparse(stmt)
        ast.literal_eval(stmt.value)  # literals only: papermill injects overrides after this cell
    names = {t.id for s in ast.parse(code[0].source).body for t in s.targets}
    assert names == {"cluster", "policies", "profile", "workload", "epochs", "seeds", "out_dir", "open_run"}
    # papermill reads every line (a comment holding "=" made it drop the parameter, with a warning)
    assert set(papermill.inspect_notebook(str(NOTEBOOK))) == names
    assert "explore" not in (paths.ROOT / "dvc.yaml").read_text()


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """The playground under papermill, as a user's headless run: a typed-in 2-worker cluster, two
    policies, the smoke profile, a fraction of an epoch; then the same folder opened as a finished run."""
    tmp = tmp_path_factory.mktemp("explore")
    out = tmp / "out"
    with pytest.MonkeyPatch.context() as mp:  # the kernel's results root (a missing calibration goes there)
        mp.setenv("DYNAMIX_RESULTS", str(tmp / "results"))
        _execute(tmp, out)
    return nbformat.read(tmp / "explore.ipynb", as_version=4), out


def _execute(tmp, out) -> None:
    run_notebook(
        str(NOTEBOOK), str(tmp / "explore.ipynb"), kernel_name="python3", cwd=str(paths.NOTEBOOKS),
        parameters={"cluster": TWO_WORKERS, "policies": ["static:64", "lbbsp"], "profile": "smoke",
                    "epochs": 0.3, "seeds": 1, "out_dir": str(out), "open_run": str(out)},
        progress_bar=False, log_output=False,
    )  # fmt: skip


def test_playground_run_writes_figures_and_a_finite_table(executed):
    nb, out = executed
    for name in ("cluster", "accuracy_vs_time", "batch_sizes", "time_split"):
        png = out / "figures" / f"{name}.png"
        assert png.exists() and png.stat().st_size > 5000, png
        assert png.with_suffix(".pdf").exists()
    table = pd.read_csv(out / "figures" / "table.csv")
    assert list(table.columns) == views.TABLE_COLUMNS
    assert list(table["policy"]) == ["static:64", "lbbsp"]
    finite = table[["target_accuracy_pct", "final_accuracy_pct", "total_time_s", "mean_global_batch"]].to_numpy(float)
    assert np.isfinite(finite).all()
    assert (table["reached"] >= 1).any(), "the best policy reaches 0.9 x its own final accuracy"
    runs = pd.read_csv(out / "runs.csv")
    assert set(RUNS_COLUMNS) <= set(runs.columns) and set(runs["rank"]) == {0, 1}
    assert yaml.safe_load((out / "cluster.yaml").read_text())["name"] == "typed-2"


def test_playground_cells_show_figures_and_no_error(executed):
    nb, _ = executed
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    # cluster drawing; 3 live views; the finished run: cluster + 3 views
    assert len(images) >= 8, len(images)
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs), "controls shown"


def test_a_playground_folder_opens_again_with_its_cluster(executed):
    _, out = executed
    rs = results.load(out).select()
    assert rs.spec is not None and rs.spec.name == "typed-2" and rs.spec.architecture.kind == "ps"
    assert rs.policies == ["static:64", "lbbsp"]
    assert views.table(rs)["final_accuracy_pct"].notna().all()


# ------------------------------------------------------------------------------------------ views


def _runs(policy: str, seed: int, sizes: list[tuple[int, int]], accs: list[float], window_s: float = 1.0) -> pd.DataFrame:
    """Schema-complete rows of one 2-worker run: window w has per-worker ``sizes[w]``, 10 iterations,
    test accuracy ``accs[w]``; worker 0 computes 2 ms and waits 3, worker 1 computes 5 and waits 0."""
    rows = []
    for w, (b0, b1) in enumerate(sizes):
        for rank, (b, comp, wait) in enumerate([(b0, 2.0, 3.0), (b1, 5.0, 0.0)]):
            row = {c: 0.0 for c in RUNS_COLUMNS}
            row.update(run_id=f"{policy}-{seed}", backend="sim", policy=policy, seed=seed, window=w,
                       iteration=10 * (w + 1), elapsed_s=window_s * (w + 1), global_batch=b0 + b1, rank=rank,
                       batch_size=b, compute_ms=comp, comm_ms=1.0, wait_ms=wait, iter_time_ms=6.0,
                       test_acc=accs[w], speed=2.0 - rank, n_workers=2)
            rows.append(row)
    return pd.DataFrame(rows).assign(cluster="toy")


@pytest.fixture
def toy() -> RunSet:
    runs = pd.concat([
        _runs("static:64", 0, [(64, 64)] * 3, [0.2, 0.3, 0.4]),
        _runs("lbbsp", 0, [(64, 64), (96, 32), (96, 32)], [0.2, 0.5, 0.6]),
        _runs("lbbsp", 1, [(64, 64), (96, 32), (96, 32)], [0.2, 0.3, 0.5]),
    ], ignore_index=True)  # fmt: skip
    summary = pd.DataFrame({"cluster": "toy", "policy": ["static:64", "lbbsp", "lbbsp"], "seed": [0, 0, 1],
                            "final_accuracy": [0.4, 0.6, 0.5], "total_time_s": 3.0})
    return RunSet(runs, results.with_time_to_target(summary, runs, 0.9), "toy", session.load_cluster(TWO_WORKERS))


def test_time_to_target_uses_the_evaluation_definition(toy):
    # target = 0.9 x best mean final (lbbsp: 0.55) = 0.495; lbbsp seed 0 crosses between (1 s, 0.2) and
    # (2 s, 0.5): 1 + (0.495 - 0.2) / 0.3 = 1.983 s; seed 1 between (2 s, 0.3) and (3 s, 0.5): 2.975 s
    s = toy.summary.set_index(["policy", "seed"])
    assert s["target_accuracy"].iloc[0] == pytest.approx(0.495)
    assert s.loc[("lbbsp", 0), "time_to_target_s"] == pytest.approx(1 + 0.295 / 0.3)
    assert s.loc[("lbbsp", 1), "time_to_target_s"] == pytest.approx(2 + 0.195 / 0.2)
    assert math.isnan(s.loc[("static:64", 0), "time_to_target_s"])


def test_table_reports_reached_runs_and_medians(toy):
    t = views.table(toy).set_index("policy")
    assert list(views.table(toy).columns) == views.TABLE_COLUMNS
    assert t.loc["lbbsp", "runs"] == 2 and t.loc["lbbsp", "reached"] == 2
    assert t.loc["lbbsp", "time_to_target_s"] == pytest.approx(np.median([1 + 0.295 / 0.3, 2 + 0.195 / 0.2]), abs=1e-3)
    assert t.loc["static:64", "reached"] == 0 and math.isnan(t.loc["static:64", "time_to_target_s"])
    assert t.loc["lbbsp", "final_accuracy_pct"] == pytest.approx(55.0)
    assert t.loc["static:64", "mean_global_batch"] == pytest.approx(128.0)


def test_time_split_is_the_iteration_weighted_mean_per_worker(toy):
    split = views.split(toy.runs).set_index(["policy", "rank"])
    assert split.loc[("lbbsp", 0), "compute_ms"] == pytest.approx(2.0)
    assert split.loc[("lbbsp", 0), "wait_ms"] == pytest.approx(3.0)
    assert split.loc[("lbbsp", 1), "wait_ms"] == pytest.approx(0.0)
    parts = split[["compute_ms", "comm_ms", "wait_ms"]].sum(axis=1)
    np.testing.assert_allclose(parts, split["iter_time_ms"])


def test_every_view_draws_labelled_axes_with_units(toy):
    figs = views.figures(toy)
    assert set(figs) == {"cluster", "accuracy_vs_time", "batch_sizes", "time_split"}
    acc = figs["accuracy_vs_time"].axes[0]
    assert "(%)" in acc.get_ylabel() and "(s" in acc.get_xlabel()
    assert any(t.get_text().startswith("target") for t in acc.get_legend().get_texts())
    batch_axes = [ax for ax in figs["batch_sizes"].axes if ax.get_visible()]
    assert [ax.get_title() for ax in batch_axes] == ["static:64", "lbbsp"]
    assert all(len(ax.get_lines()) == 2 for ax in batch_axes), "one line per worker"
    lbbsp_w0 = batch_axes[1].get_lines()[0].get_ydata()
    assert lbbsp_w0[0] == 64 and lbbsp_w0[-1] == 96
    assert "(ms" in [ax for ax in figs["time_split"].axes if ax.get_visible()][-1].get_xlabel()


# ------------------------------------------------------------------------------------------ inputs


def test_cluster_from_path_yaml_text_and_mapping():
    assert session.load_cluster("clusters/heldout/hetero-speed-4.yaml").n_workers == 4
    assert session.load_cluster(TWO_WORKERS).speeds == (1.0, 0.4)
    assert session.load_cluster({"workers": [{"count": 3}]}).n_workers == 3
    assert "clusters/heldout/hetero-speed-4.yaml" in session.example_clusters()
    assert any(c.startswith("clusters/validation/") for c in session.example_clusters())


@pytest.mark.parametrize("text, words", [
    ("workers: [ {count: 2", "not valid YAML"),
    ("name: x\nworkers:\n  - {device: {name: f, speed: -1}}", "speed"),
    ("name: x\nworkers: []", "workers"),
    ("clusters/nowhere.yaml", "does not exist"),
])  # fmt: skip
def test_a_bad_cluster_names_the_field(text, words):
    with pytest.raises(ConfigError, match=words):
        session.load_cluster(text)


def test_policies_are_checked_and_deduplicated():
    assert session.check_policies(["static:64", " lbbsp ", "static:64", ""]) == ["static:64", "lbbsp"]
    assert session.check_policies("gns\nlbbsp:batch=512") == ["gns", "lbbsp:batch=512"]
    with pytest.raises(ConfigError, match=r"policies\[1\] = 'fastest'"):
        session.check_policies(["static:64", "fastest"])
    with pytest.raises(ConfigError, match="policies is empty"):
        session.check_policies([])


def test_workload_and_epochs_override_the_profile():
    cfg = session.workload_config("smoke", "mlp@0.5/adam", epochs=0.7)
    assert (cfg.model.name, cfg.model.width, cfg.optim.name) == ("mlp", 0.5, "adam")
    assert cfg.optim.lr == cfg.experiments.inference.adam_lr and cfg.train.epochs == pytest.approx(0.7)
    plain = session.workload_config("smoke")
    assert plain.model.name == plain.experiments.model and plain.train.epochs == pytest.approx(plain.experiments.epochs)
    with pytest.raises(ConfigError, match="workload must look like"):
        session.workload_config("smoke", "mlp/rmsprop")
    with pytest.raises(ConfigError, match="epochs = -1"):
        session.workload_config("smoke", epochs=-1)


def test_finished_run_lookup():
    assert results.figures_in(results.EXPECTED), "docs/expected holds the default run's figures"
    with pytest.raises(InputFileError, match="runs.csv"):
        results.load(results.EXPECTED)
    assert results.find_spec("ps-event-4").architecture.kind == "ps"
    assert results.find_spec("no-such-cluster") is None


def test_groups_split_a_stage_by_the_keys_that_vary(toy):
    runs = pd.concat([toy.runs.assign(n_workers=2), toy.runs.assign(n_workers=4, cluster="toy-4")])
    summary = pd.concat([toy.summary.assign(n_workers=2), toy.summary.assign(n_workers=4, cluster="toy-4")])
    rs = RunSet(runs, summary, "grid")
    assert rs.groups() == [{"cluster": "toy", "n_workers": 2}, {"cluster": "toy-4", "n_workers": 4}]
    second = rs.select({"cluster": "toy-4", "n_workers": 4})
    assert len(second.summary) == 3 and set(second.runs["n_workers"]) == {4}
    with pytest.raises(ValueError, match="must be one of"):
        rs.select({"cluster": "elsewhere"})


def test_controls_follow_the_parameters_and_the_picked_example():
    from dynamix.explore.widgets import Playground

    ui = Playground(cluster="clusters/heldout/hetero-speed-4.yaml", policies=["static:64"], epochs=0.5)
    assert ui.spec().name == "hetero-speed-4" and ui.config().train.epochs == pytest.approx(0.5)
    ui.cluster_choice.value = "clusters/heldout/ps-event-4.yaml"
    assert ui.spec().name == "ps-event-4"
    ui.policy_add.value = "gns"
    ui._on_add(None)
    assert list(ui.policies.value) == ["static:64", "gns"]
    with pytest.raises(ConfigError, match="profile = 'fast' is not defined"):
        Playground(profile="fast")
    typed = Playground(cluster=TWO_WORKERS)
    assert typed.cluster_choice.value == "(typed in below)" and typed.spec().name == "typed-2"
