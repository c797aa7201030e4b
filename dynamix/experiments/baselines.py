"""Static batch-size baselines (the paper's static-baseline figure): per-worker batch sizes
``experiments.baselines.batch_sizes`` (32..512) on one simulated cluster, ``experiments.seeds`` seeds.

Outputs (``out_dir``): ``runs.csv`` (per window and rank), ``summary.csv`` (one row per run:
``policy, batch_size, seed, final_accuracy, total_time_s, throughput_samples_per_s, iterations, epochs,
target_accuracy, time_to_target_s, late_gain_pts``, the target as in :mod:`dynamix.evaluation.targets`,
the last fifth's gain as in :func:`dynamix.evaluation.runs.late_gain_pts`),
``summary.json`` (means over seeds with t intervals per batch size; ``best_batch_size``, the most
accurate, and ``fastest_batch_size``, the one with the shortest time to target on this homogeneous
cluster; ``plateau``:
whether the most accurate static gains less than :data:`PLATEAU_BAR_PTS` over its last fifth, mean over
seeds), ``manifest.json``.

Figures: test accuracy against virtual training time per batch size; cluster throughput
(sum over workers of b_i / T_iter, in samples/s, averaged over windows) against batch size.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from dynamix import cluster, io
from dynamix.config import Config
from dynamix.evaluation import plan, stats
from dynamix.evaluation.runs import PLATEAU_FRACTION, curves, late_gain_pts, run_summary
from dynamix.evaluation.runner import SimTask, run_simulations
from dynamix.evaluation.targets import censored_time, set_targets
from dynamix.pipeline.manifest import read_manifest, write_manifest
from dynamix.plots import baselines as plots

log = logging.getLogger(__name__)

NAME = "baselines"
PLATEAU_BAR_PTS = 0.5
"""A run has reached its plateau when its last fifth adds less than this many points of test accuracy."""


def run(cfg: Config, out_dir: str | Path) -> dict:
    out = Path(out_dir)
    e = cfg.experiments.baselines
    spec = cluster.load(e.cluster)
    sim_cfg = plan.sim_config(cfg)
    tasks = [
        SimTask(spec, sim_cfg, f"static:{b}", seed, (("batch_size", b),))
        for b in e.batch_sizes
        for seed in plan.seeds(cfg)
    ]
    runs = run_simulations(tasks, cfg.experiments.jobs, desc="static sweep", cache=plan.run_cache(out))
    per_run = run_summary(runs, ["cluster", "policy", "batch_size"])
    per_run["late_gain_pts"] = [late_gain_pts(runs[runs["run_id"] == rid]) for rid in per_run["run_id"]]
    per_run = set_targets(per_run, runs, cfg.evaluation.target_fraction, cfg.evaluation.target_accuracy)
    per_run["time_to_target_censored_s"] = censored_time(per_run)
    agg = stats.aggregate(per_run, ["policy", "batch_size"], ["final_accuracy", "total_time_s", "throughput_samples_per_s",
                                                             "time_to_target_censored_s", "late_gain_pts"], cfg.experiments.ci)
    io.write_csv(runs, out / "runs.csv")
    io.write_csv(per_run, out / "summary.csv")
    best = agg.loc[agg["final_accuracy"].idxmax()]
    fastest = agg.loc[agg["time_to_target_censored_s"].idxmin()]
    summary = {
        "cluster": spec.name,
        "n_workers": spec.n_workers,
        "n_runs": len(tasks),
        "best_batch_size": int(best["batch_size"]),
        "best_final_accuracy": float(best["final_accuracy"]),
        "fastest_batch_size": int(fastest["batch_size"]),
        # converged? the most accurate static's test-accuracy gain over the last fifth of its run
        "plateau": {"batch_size": int(best["batch_size"]), "late_gain_pts": float(best["late_gain_pts"]),
                    "late_gain_pts_ci": [float(best["late_gain_pts_lo"]), float(best["late_gain_pts_hi"])],
                    "fraction": PLATEAU_FRACTION, "bar_pts": PLATEAU_BAR_PTS,
                    "holds": bool(best["late_gain_pts"] < PLATEAU_BAR_PTS)},
        "target_accuracy": float(per_run["target_accuracy"].iloc[0]),
        "by_batch_size": {str(int(r.batch_size)): {
            "final_accuracy": r.final_accuracy, "final_accuracy_ci": [r.final_accuracy_lo, r.final_accuracy_hi],
            "total_time_s": r.total_time_s, "throughput_samples_per_s": r.throughput_samples_per_s,
            "time_to_target_censored_s": r.time_to_target_censored_s,
        } for r in agg.itertuples()},
    }  # fmt: skip
    io.write_json(out / "summary.json", summary)
    write_manifest(out, cfg, NAME, {"cluster_spec": e.cluster})
    return summary


def figures(out_dir: str | Path, fig_dir: str | Path) -> list[Path]:
    out, fig = Path(out_dir), Path(fig_dir)
    runs = pd.read_csv(out / "runs.csv")
    per_run = pd.read_csv(out / "summary.csv")
    manifest = read_manifest(out)
    e = manifest["config"]["experiments"]
    per_window = curves(runs, ["policy", "seed"])
    plots.baselines_accuracy_vs_time(per_window, fig / "accuracy_vs_time")
    agg = stats.aggregate(per_run, ["batch_size"], ["throughput_samples_per_s"], e["ci"])
    plots.baselines_throughput_vs_batch(agg.sort_values("batch_size"), fig / "throughput_vs_batch")
    return [fig / "accuracy_vs_time.png", fig / "throughput_vs_batch.png"]
