"""The compression experiment (dynamix/experiments/compression.py) on the smoke profile: it runs end to
end with both sparse workloads (ncf, lstm-lm), every policy on the communication-bound cluster and the
static policy on the 1 Gbit/s links cluster, writes the documented tables, its lhc runs really compress,
its ratios follow from its per-run table and each workload's gradient density is measured per batch
size. The agent needs the policy_training stage's policy, so it is left out here; the smoke pipeline
(tests/test_notebooks.py) runs the stage with it.

LHC is lossless: the simulator steps on the dense sum and only times LHC's reduction, so a static run's
accuracy and loss per window are the same floats with and without it (compared exactly here); that the
LHC-decoded gradient trains lstm-lm as the dense sum does, up to float summation order, is checked by
stepping with it (:func:`test_lstm_lm_trains_the_same_on_the_lhc_decoded_gradient`)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats as sp

from dynamix import config
from dynamix.comm import reduce_in_process
from dynamix.config import ConfigError
from dynamix.data import BatchMaker, load_dataset
from dynamix.evaluation import stats
from dynamix.experiments import compression
from dynamix.models import build_model
from dynamix.seeding import derive_seed, seed_everything
from dynamix.train.core import Trainer

POLICIES = ["static:64", "lbbsp"]
WORKLOADS = ["ncf", "lstm-lm"]
STATIC_CLUSTERS = ["clusters/links-1g-4.yaml"]
SMOKE = {"policies": POLICIES, "workloads": WORKLOADS, "static_clusters": STATIC_CLUSTERS}


@pytest.fixture(scope="module")
def stage(tmp_path_factory):
    root = tmp_path_factory.mktemp("cmp")
    cfg = config.load(profile="smoke", overrides={"experiments": {"compression": SMOKE}})
    summary = compression.run(cfg, root / "compression")
    figures = compression.figures(root / "compression", root / "figures" / "compression")
    return cfg, root / "compression", summary, figures


def test_writes_the_documented_tables_and_the_figures(stage):
    cfg, out, summary, figures = stage
    e = cfg.experiments.compression
    per_run = pd.read_csv(out / "summary.csv")
    ratios = pd.read_csv(out / "compression.csv")
    density = pd.read_csv(out / "density.csv")
    assert list(per_run.columns) == compression.SUMMARY_COLUMNS
    assert list(ratios.columns) == compression.RATIO_COLUMNS
    assert list(density.columns) == compression.DENSITY_COLUMNS
    for col in compression.SUMMARY_COLUMNS + compression.RATIO_COLUMNS + compression.DENSITY_COLUMNS:
        assert f"``{col}``" in compression.__doc__, f"{col} is not documented in the module docstring"
    every = len(e.clusters) * len(POLICIES) * cfg.experiments.seeds
    static = len(STATIC_CLUSTERS) * 1 * e.static_seeds  # static:64 alone, one seed
    assert len(per_run) == summary["n_runs"] == len(WORKLOADS) * 2 * (every + static)
    assert list(dict.fromkeys(per_run["workload"])) == WORKLOADS
    assert set(per_run["compression"]) == {"none", "lhc"}
    links_runs = per_run[per_run["cluster"] == "links-1g-4"]
    assert set(links_runs["policy"]) == {"static:64"} and set(links_runs["seed"]) == {cfg.train.seed}
    assert list(ratios[ratios["cluster"] == "sparse-comm-4"]["policy"].unique()) == POLICIES
    assert (out / "runs.csv").exists() and (out / "manifest.json").exists() and (out / "summary.json").exists()
    assert [f.name for f in figures] == ["compression.png", "density.png"]
    for f in figures:
        assert f.stat().st_size > 1000 and f.with_suffix(".pdf").exists()
    # one target per workload and cluster, shared by both compressions
    assert per_run.groupby(["workload", "cluster"])["target_accuracy"].nunique().eq(1).all()
    assert set(summary["target_accuracy"]) == set(WORKLOADS)
    # the measured links beside the clusters (tests/test_compression_links.py): one static batch size here
    links = pd.read_csv(out / "links.csv")
    assert list(links.columns) == compression.LINK_COLUMNS and summary["links_record"] == "docs/expected/links.json"
    ring_1g = links[(links["arch"] == "ring") & (links["gbps"] == 1.0)]
    assert set(ring_1g["coverage"]) == {"measured and simulated"} and set(ring_1g["cluster"]) == {"links-1g-4"}
    assert len(ring_1g) == 2 * 3  # each workload beside the three measured densities
    assert ring_1g.groupby("workload")["iter_speedup"].first().to_dict() == {"lstm-lm": 1.641, "ncf": 2.024}
    best = {"none": 64, "lhc": 64, "changes": None}
    assert summary["best_static_batch"] == {
        w: {"sparse-comm-4": {"arch": "ring", "gbps": 0.25, **best}, "links-1g-4": {"arch": "ring", "gbps": 1.0, **best}}
        for w in WORKLOADS}


def test_lhc_runs_compress_and_learn_as_the_uncompressed_ones(stage):
    _, out, _, _ = stage
    per_run = pd.read_csv(out / "summary.csv").set_index(["workload", "cluster", "compression", "policy", "seed"])
    for workload in WORKLOADS:
        none, lhc = per_run.loc[(workload, slice(None), "none")], per_run.loc[(workload, slice(None), "lhc")]
        assert (none["compression_ratio"] == 1.0).all() and (none["codec_ms_per_iter"] == 0).all()
        assert (lhc["compression_ratio"] > 3).all() and (lhc["codec_ms_per_iter"] > 0).all()
        assert (lhc["comm_mb_per_iter"] < none["comm_mb_per_iter"] / 3).all()
    # lossless: a static run sees the same test accuracy and losses at the same iterations either way (the
    # simulator steps on the dense sum; LHC's reduction sets the clock only), whatever the budget cut
    runs = pd.read_csv(out / "runs.csv")
    for workload in WORKLOADS:
        curve = {c: runs[(runs["workload"] == workload) & (runs["cluster"] == "sparse-comm-4")
                         & (runs["compression"] == c) & (runs["policy"] == "static:64") & (runs["seed"] == 0)]
                 .drop_duplicates("window").set_index("iteration")[["test_acc", "train_loss", "agg_grad_sqnorm"]]
                 for c in ("none", "lhc")}
        common = curve["none"].index.intersection(curve["lhc"].index)
        assert len(common) >= 2, workload
        pd.testing.assert_frame_equal(curve["lhc"].loc[common], curve["none"].loc[common])


def test_density_is_measured_per_workload_and_batch_beside_the_bytes_sent(stage):
    cfg, out, summary, _ = stage
    density = pd.read_csv(out / "density.csv").set_index("workload")
    assert list(density.index) == WORKLOADS and (density["batch_per_worker"] == 64).all()
    n_runs = cfg.experiments.seeds + cfg.experiments.compression.static_seeds  # static:64 per compression
    assert (density["workers"] == 4).all() and (density["n_runs"] == n_runs).all()
    # a batch of 64 touches few embedding (and, for lstm-lm, softmax) rows: docs/journal/compression.md
    # measured 1.9 % of lstm-lm's gradient per worker and 4.1 % merged over 4 workers
    lstm = density.loc["lstm-lm"]
    assert 0.01 < lstm["density_worker"] < 0.03 and 0.03 < lstm["density_merged"] < 0.06
    assert (density["density_worker"] < density["density_merged"]).all()
    assert (density["density_merged"] < 0.1).all()
    assert (density["comm_mb_per_iter_lhc"] < density["comm_mb_per_iter_none"] / 3).all()
    assert (density["compression_ratio_lhc"] > 3).all() and (density["codec_ms_per_iter_lhc"] > 0).all()
    assert [(r["workload"], r["batch_per_worker"]) for r in summary["density"]] == [(w, 64) for w in WORKLOADS]
    # the merged density at each best static batch sits beside the measured densities in links.csv
    links = pd.read_csv(out / "links.csv").dropna(subset=["cluster"])
    for workload, rows in links.groupby("workload"):
        assert (rows["merged_density_none"] == density.loc[workload, "density_merged"]).all()


def test_gradient_density_is_seeded_and_grows_with_the_batch():
    cfg = config.load(profile="smoke", overrides={"experiments": {"compression": {"workloads": ["ncf"]}}})
    run_cfg = compression.run_config(cfg, compression.workloads(cfg)[0], "none")
    small = compression.gradient_density(run_cfg, 16, 4, draws=2, seed=0)
    assert compression.gradient_density(run_cfg, 16, 4, draws=2, seed=0) == small
    assert compression.gradient_density(run_cfg, 16, 4, draws=2, seed=1) != small  # control: another seed
    large = compression.gradient_density(run_cfg, 256, 4, draws=2, seed=0)
    assert small[0] < small[1] < large[1] and small[0] < large[0] < large[1]


def test_ratio_rows_follow_from_the_per_run_table(stage):
    cfg, out, _, _ = stage
    per_run = pd.read_csv(out / "summary.csv")
    ratios = pd.read_csv(out / "compression.csv").set_index(["workload", "cluster", "policy"])
    horizon = per_run.groupby(["workload", "cluster"])["total_time_s"].transform("max")
    per_run["t"] = per_run["time_to_target_s"].fillna(horizon)  # unreached: at the cell's longest run
    lo_band, hi_band = 1 / (1 + cfg.experiments.tie_margin), 1 + cfg.experiments.tie_margin
    for key, rows in per_run[per_run["cluster"] == "sparse-comm-4"].groupby(["workload", "cluster", "policy"]):
        t = rows.pivot(index="seed", columns="compression", values="t")
        d = np.log(t["lhc"] / t["none"]).to_numpy()
        half = sp.t.ppf((1 + cfg.experiments.ci) / 2, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
        row = ratios.loc[key]
        assert row["ratio"] == pytest.approx(math.exp(d.mean()))
        assert (row["ci_lo"], row["ci_hi"]) == pytest.approx((math.exp(d.mean() - half), math.exp(d.mean() + half)))
        assert row["n_seeds"] == len(d)
        assert row["verdict"] == stats.verdict(row["ci_lo"], row["ci_hi"], 1.0, "below", kind="ours",
                                               tie_lo=lo_band, tie_hi=hi_band)
        batch = rows.groupby("compression")["mean_global_batch"].mean()
        assert (row["mean_global_batch_none"], row["mean_global_batch_lhc"]) == pytest.approx((batch["none"], batch["lhc"]))
    one_seed = ratios.xs("links-1g-4", level="cluster")  # the static cluster's single seed: no interval
    assert (one_seed["n_seeds"] == 1).all() and one_seed["ci_lo"].isna().all()
    assert set(one_seed["verdict"]) == {"inconclusive"}


LSTM_ITERS, LSTM_WORKERS, LSTM_BATCH = 8, 4, 32
LOSS_TOL = 1e-5
"""Absolute tolerance on lstm-lm's training losses (~5.4, the sampled softmax over a batch's tokens) over
:data:`LSTM_ITERS` SGD steps with momentum. LHC changes only the float summation order of the aggregate
(a peeled value carries the rounding of the counter sums it was read from, a few ulp): measured, the
losses came out equal and the parameters within 3e-8 (relative 9e-7); a decode that drops one worker's
gradient (the control) moved the losses by 2e-4 and the parameters by 6e-3."""
PARAM_TOL = 1e-6
"""Absolute tolerance on the parameters after those steps (largest magnitude ~0.6)."""


def _lstm_trajectory(cfg, reduce) -> tuple[list[float], torch.Tensor]:
    """lstm-lm trained for LSTM_ITERS steps on the stage's settings: LSTM_WORKERS workers of LSTM_BATCH
    samples each, the step reading ``reduce(weighted worker gradients)`` as the aggregate (the dense sum:
    what the simulator and a ring all-reduce apply). Returns the iteration losses and the parameters."""
    run_cfg = compression.run_config(cfg, compression.workloads(cfg)[0], "lhc")
    data = load_dataset(run_cfg.data)
    seed_everything(run_cfg.train.seed)
    trainer = Trainer(build_model(run_cfg.model.name, run_cfg.model.width), run_cfg.optim, LSTM_ITERS)
    maker = BatchMaker(data.train_x, data.train_y, False, run_cfg.train.seed)
    gen = torch.Generator().manual_seed(derive_seed(run_cfg.train.seed, "trajectory"))
    params = list(trainer.model.parameters())
    losses = []
    for _ in range(LSTM_ITERS):
        batches = [maker(torch.randperm(len(data.train_y), generator=gen)[:LSTM_BATCH]) for _ in range(LSTM_WORKERS)]
        local, grads = trainer.weighted_gradient(batches)
        agg = reduce([g / LSTM_WORKERS for g in grads])  # equal batches: weight 1/N each
        offset = 0
        for p in params:
            p.grad.copy_(agg[offset: offset + p.numel()].view_as(p))
            offset += p.numel()
        trainer.apply(LSTM_WORKERS * LSTM_BATCH)
        losses.append(float(np.mean([s.loss for s in local])))
    return losses, torch.cat([p.detach().flatten() for p in params])


def test_lstm_lm_trains_the_same_on_the_lhc_decoded_gradient():
    """The stage's lstm-lm workload, each step on LHC's decoded aggregate of the workers' gradients
    against the dense sum: the same losses and parameters within LOSS_TOL and PARAM_TOL; a control that
    loses one worker's gradient in the decode is far outside them."""
    cfg = config.load(profile="smoke", overrides={"experiments": {"compression": {"workloads": ["lstm-lm"]}}})
    seed = derive_seed(cfg.train.seed, "lhc")
    dense_losses, dense_params = _lstm_trajectory(cfg, lambda gs: torch.stack(gs).sum(0))
    lhc_losses, lhc_params = _lstm_trajectory(cfg, lambda gs: reduce_in_process(gs, seed)[0])
    np.testing.assert_allclose(lhc_losses, dense_losses, rtol=0, atol=LOSS_TOL)
    assert float((lhc_params - dense_params).abs().max()) <= PARAM_TOL
    lost_losses, lost_params = _lstm_trajectory(cfg, lambda gs: reduce_in_process(gs[:-1], seed)[0])
    assert max(abs(a - b) for a, b in zip(lost_losses, dense_losses)) > 5 * LOSS_TOL
    assert float((lost_params - dense_params).abs().max()) > 1000 * PARAM_TOL


@pytest.mark.parametrize("override,message", [
    ({"workloads": []}, r"experiments\.compression\.workloads is empty"),
    ({"workloads": ["ncf", "ncf@1"]}, r"experiments\.compression\.workloads = .* names a workload twice"),
    ({"workloads": ["ncf@wide"]}, r"experiments\.compression\.workloads\[0\] = 'ncf@wide' must look like MODEL\[@WIDTH\]"),
    ({"workloads": ["lstm-lm@16"]}, r"experiments\.compression\.workloads\[0\]"),
    ({"static_clusters": ["clusters/sparse-comm-4.yaml"]}, r"experiments\.compression\.static_clusters repeats"),
    ({"clusters": [], "static_clusters": []}, r"experiments\.compression\.clusters and static_clusters are both empty"),
    ({"policies": ["lbbsp", "gns"]}, r"experiments\.compression\.static_clusters run the static:B policies"),
    ({"static_seeds": -1}, r"experiments\.compression\.static_seeds"),
    ({"epochs": -1}, r"experiments\.compression\.epochs"),
    # the single workload's keys, replaced by workloads: refused at another value, naming the new key
    ({"model": "lstm-lm"}, r"experiments\.compression\.model = 'lstm-lm' is not allowed: the setting was "
                           r"removed, replaced by experiments\.compression\.workloads"),
    ({"dataset": "tokens"}, r"experiments\.compression\.dataset = 'tokens' .* replaced by experiments\.compression\.workloads"),
    ({"width": 0.5}, r"experiments\.compression\.width = 0\.5 .* replaced by experiments\.compression\.workloads"),
])  # fmt: skip
def test_bad_settings_name_the_field(override, message):
    with pytest.raises(ConfigError, match=message):
        config.load(profile="base", overrides={"experiments": {"compression": override}})


def test_a_config_stored_with_the_single_workload_builds_to_its_hash():
    """Manifests and policy artifacts hold experiments.compression.{model, width, dataset}: at their last
    values (ncf on the interaction data) they build to the same config and hash as workloads: [ncf]."""
    cfg = config.load(profile="base")
    stored = cfg.to_dict()
    stored["experiments"]["compression"] = {
        k: v for k, v in stored["experiments"]["compression"].items() if k not in ("workloads", "static_clusters", "static_seeds")
    } | {"model": "ncf", "width": 1.0, "dataset": "interactions"}
    built = config.build(config.Config, stored)
    assert built == cfg and built.hash() == cfg.hash()
    more = config.load(profile="base", overrides={"experiments": {"compression": {"workloads": ["ncf", "lstm-lm"]}}})
    assert more.hash() != cfg.hash()  # control: a changed workload list counts
    assert config.load(profile="base", overrides={"experiments": {"compression": {"static_seeds": 2}}}).hash() != cfg.hash()
