"""The compression experiment (dynamix/experiments/compression.py) on the smoke profile: it runs end to
end, writes the documented tables, its lhc runs really compress, and its ratios follow from its per-run
table. The agent needs the policy_training stage's policy, so it is left out here; the smoke pipeline
(tests/test_notebooks.py) runs the stage with it."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sp

from dynamix import config
from dynamix.config import ConfigError
from dynamix.evaluation import stats
from dynamix.experiments import compression

POLICIES = ["static:64", "lbbsp"]


@pytest.fixture(scope="module")
def stage(tmp_path_factory):
    root = tmp_path_factory.mktemp("cmp")
    cfg = config.load(profile="smoke", overrides={"experiments": {"compression": {"policies": POLICIES}}})
    summary = compression.run(cfg, root / "compression")
    figures = compression.figures(root / "compression", root / "figures" / "compression")
    return cfg, root / "compression", summary, figures


def test_writes_the_documented_tables_and_the_figure(stage):
    cfg, out, summary, figures = stage
    per_run = pd.read_csv(out / "summary.csv")
    ratios = pd.read_csv(out / "compression.csv")
    assert list(per_run.columns) == compression.SUMMARY_COLUMNS
    assert list(ratios.columns) == compression.RATIO_COLUMNS
    for col in compression.SUMMARY_COLUMNS + compression.RATIO_COLUMNS:
        assert f"``{col}``" in compression.__doc__, f"{col} is not documented in the module docstring"
    n = len(cfg.experiments.compression.clusters) * 2 * len(POLICIES) * cfg.experiments.seeds
    assert len(per_run) == summary["n_runs"] == n
    assert set(per_run["compression"]) == {"none", "lhc"} and list(ratios["policy"]) == POLICIES
    assert (out / "runs.csv").exists() and (out / "manifest.json").exists() and (out / "summary.json").exists()
    assert figures[0].stat().st_size > 1000 and figures[0].with_suffix(".pdf").exists()
    # one target per cluster, shared by both compressions
    assert per_run.groupby("cluster")["target_accuracy"].nunique().eq(1).all()
    # the measured links beside the clusters (tests/test_compression_links.py): one static batch size here
    links = pd.read_csv(out / "links.csv")
    assert list(links.columns) == compression.LINK_COLUMNS and summary["links_record"] == "docs/expected/links.json"
    assert summary["best_static_batch"] == {c: {"none": 64, "lhc": 64, "changes": None} for c in per_run["cluster"]}


def test_lhc_runs_compress_and_learn_as_the_uncompressed_ones(stage):
    _, out, _, _ = stage
    per_run = pd.read_csv(out / "summary.csv").set_index(["compression", "policy", "seed"])
    none, lhc = per_run.loc["none"], per_run.loc["lhc"]
    assert (none["compression_ratio"] == 1.0).all() and (none["codec_ms_per_iter"] == 0).all()
    assert (lhc["compression_ratio"] > 3).all() and (lhc["codec_ms_per_iter"] > 0).all()
    assert (lhc["comm_mb_per_iter"] < none["comm_mb_per_iter"] / 3).all()
    # lossless: the static policy sees the same test accuracy at the same iterations either way
    runs = pd.read_csv(out / "runs.csv")
    curve = {c: runs[(runs["compression"] == c) & (runs["policy"] == "static:64") & (runs["seed"] == 0)]
             .drop_duplicates("window").set_index("iteration")["test_acc"] for c in ("none", "lhc")}
    common = curve["none"].index.intersection(curve["lhc"].index)
    assert len(common) >= 2
    np.testing.assert_allclose(curve["lhc"][common], curve["none"][common], atol=0.005)


def test_ratio_rows_follow_from_the_per_run_table(stage):
    cfg, out, _, _ = stage
    per_run = pd.read_csv(out / "summary.csv")
    ratios = pd.read_csv(out / "compression.csv").set_index("policy")
    per_run["t"] = per_run["time_to_target_s"].fillna(per_run["total_time_s"])  # unreached: at the budget
    lo_band, hi_band = 1 / (1 + cfg.experiments.tie_margin), 1 + cfg.experiments.tie_margin
    for policy, rows in per_run.groupby("policy"):
        t = rows.pivot(index="seed", columns="compression", values="t")
        d = np.log(t["lhc"] / t["none"]).to_numpy()
        half = sp.t.ppf((1 + cfg.experiments.ci) / 2, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
        row = ratios.loc[policy]
        assert row["ratio"] == pytest.approx(math.exp(d.mean()))
        assert (row["ci_lo"], row["ci_hi"]) == pytest.approx((math.exp(d.mean() - half), math.exp(d.mean() + half)))
        assert row["n_seeds"] == len(d)
        assert row["verdict"] == stats.verdict(row["ci_lo"], row["ci_hi"], 1.0, "below", kind="ours",
                                               tie_lo=lo_band, tie_hi=hi_band)
        batch = rows.groupby("compression")["mean_global_batch"].mean()
        assert (row["mean_global_batch_none"], row["mean_global_batch_lhc"]) == pytest.approx((batch["none"], batch["lhc"]))


@pytest.mark.parametrize("override,field", [
    ({"dataset": "imagenet"}, "experiments.compression.dataset"),
    ({"dataset": "cifar10"}, "experiments.compression.model"),
    ({"epochs": -1}, "experiments.compression.epochs"),
])
def test_bad_settings_name_the_field(override, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        config.load(overrides={"experiments": {"compression": override}})
