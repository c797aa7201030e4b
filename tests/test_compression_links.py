"""The compression stage's ``links.csv`` (dynamix/experiments/compression.py): the measured link record
beside the simulated clusters, built here from a hand-made record and a hand-made per-run summary (no
model math). Measured values are copied, never filled in where a side does not cover a link speed; the
best static batch follows the stage's censoring rule; a missing record leaves the simulated clusters
alone in the table with one log line; a malformed record is refused naming its field."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from dynamix.errors import InputFileError
from dynamix.experiments import compression

RECORD = {
    "workers": 4, "source": "hand-made for tests", "numel": 4194304, "wall_s": 100.0,
    "agg_speedup_1gbps_0.1pct": 8.0, "model_agg_speedup_1gbps_0.1pct": 8.0,
    "agg_speedup_1gbps_1pct": 4.0, "model_agg_speedup_1gbps_1pct": 5.0,
    "agg_speedup_1gbps_1pct_ps": 16.0, "model_agg_speedup_1gbps_1pct_ps": 12.0,
    "agg_speedup_10gbps_1pct": 0.8,  # no prediction: its column stays empty
    "agg_speedup_unshaped_1pct": 0.9, "agg_speedup_2workers_1gbps_1pct": 9.0,  # no rate / other N: left out
    "iter_speedup_1gbps_ncf": 2.0, "model_iter_speedup_1gbps_ncf": 2.2, "iter_speedup_1gbps_lstm_lm": 1.6,
}  # fmt: skip
LINKS = {"fast-1g": compression.ClusterLink("ring", 1.0, 4), "slow-025": compression.ClusterLink("ring", 0.25, 4),
         "one-static": compression.ClusterLink("ps", 1.0, 4)}
NAN = math.nan
DROP = object()
"""A field left out of a record."""


def _runs(cluster: str, compression: str, policy: str, times: list[float], total: float = 40.0,
          workload: str = "ncf") -> list[dict]:
    return [{"workload": workload, "cluster": cluster, "compression": compression, "policy": policy, "seed": seed,
             "time_to_target_s": t, "total_time_s": total} for seed, t in enumerate(times)]


def per_run() -> pd.DataFrame:
    """fast-1g: static:256 is best without compression, static:64 with it (gns, faster, is not static);
    slow-025: static:256 either way, its misses counted at the cluster's longest run (40 s);
    one-static: a single static batch size, nothing to rank."""
    rows = [
        *_runs("fast-1g", "none", "static:64", [10, 12]), *_runs("fast-1g", "none", "static:256", [8, 8]),
        *_runs("fast-1g", "lhc", "static:64", [3, 3]), *_runs("fast-1g", "lhc", "static:256", [5, 5]),
        *_runs("fast-1g", "none", "gns", [1, 1]), *_runs("fast-1g", "lhc", "gns", [1, 1]),
        *_runs("slow-025", "none", "static:64", [20, NAN]), *_runs("slow-025", "none", "static:256", [25, 25]),
        *_runs("slow-025", "lhc", "static:64", [5, NAN]), *_runs("slow-025", "lhc", "static:256", [4, NAN]),
        *_runs("one-static", "none", "static:64", [9, 9]), *_runs("one-static", "lhc", "static:64", [2, 2]),
        *_runs("one-static", "none", "lbbsp", [8, 8]), *_runs("one-static", "lhc", "lbbsp", [2, 2]),
    ]  # fmt: skip
    return pd.DataFrame(rows)


def _row(table: pd.DataFrame, arch: str, gbps: float, density: float | None, workload: str = "ncf") -> pd.Series:
    d = table["density"].isna() if density is None else table["density"] == density
    rows = table[(table["workload"] == workload) & (table["arch"] == arch) & (table["gbps"] == gbps) & d]
    assert len(rows) == 1, rows
    return rows.iloc[0]


def test_measured_links_sit_beside_the_model_and_each_clusters_best_static_batch():
    table = compression.links_table(RECORD, per_run(), LINKS)
    assert list(table.columns) == compression.LINK_COLUMNS
    assert len(table) == 5  # ring 0.25 (simulated), ring 1 x 2 densities, ring 10, ps 1

    r = _row(table, "ring", 1.0, 0.01)
    assert r["coverage"] == "measured and simulated" and r["cluster"] == "fast-1g" and r["workers_measured"] == 4
    assert (r["agg_speedup"], r["model_agg_speedup"], r["agg_model_error_pct"]) == pytest.approx((4.0, 5.0, 25.0))
    assert (r["iter_speedup"], r["model_iter_speedup"]) == (2.0, 2.2)  # the stage's workload, not lstm-lm
    assert (r["best_batch_none"], r["best_batch_lhc"], r["best_changes"]) == (256, 64, True)
    assert (r["margin_none"], r["margin_lhc"]) == pytest.approx((11 / 8, 5 / 3))
    assert (r["unreached_none"], r["unreached_lhc"]) == (0, 0)
    assert _row(table, "ring", 1.0, 0.001)["agg_speedup"] == 8.0

    slow = _row(table, "ring", 0.25, None)  # simulated at a speed the record did not measure: said, not filled
    assert slow["coverage"] == "simulated only" and slow["cluster"] == "slow-025"
    assert slow[["workers_measured", "agg_speedup", "model_agg_speedup", "iter_speedup"]].isna().all()
    # static:64 without compression: 20 and a miss at 40 (mean 30) against static:256's 25
    assert (slow["best_batch_none"], slow["best_batch_lhc"], slow["best_changes"]) == (256, 256, False)
    assert slow["margin_none"] == pytest.approx(30 / 25) and slow["unreached_lhc"] == 1

    ten = _row(table, "ring", 10.0, 0.01)  # measured, not simulated
    assert ten["coverage"] == "measured only" and ten["agg_speedup"] == 0.8
    assert ten[["model_agg_speedup", "iter_speedup", "cluster", "best_batch_none", "best_changes"]].isna().all()

    ps = _row(table, "ps", 1.0, 0.01)  # the engine runs a ring: no iteration speed-up through a server
    assert ps["agg_speedup"] == 16.0 and math.isnan(ps["iter_speedup"])
    assert ps["best_batch_none"] == 64 and pd.isna(ps["best_changes"]) and math.isnan(ps["margin_none"])


def test_each_workload_has_its_own_rows_best_batch_density_and_censoring_horizon():
    """lstm-lm beside ncf: its own measured iteration speed-up, its own best static batch and merged
    density at it, and its long runs (400 s) on slow-025 do not stretch the horizon at which ncf's
    misses there count (40 s: the workload and the cluster make one cell)."""
    lstm = [
        *_runs("slow-025", "none", "static:64", [100, 100], 400, "lstm-lm"),
        *_runs("slow-025", "none", "static:256", [300, 300], 400, "lstm-lm"),
        *_runs("slow-025", "lhc", "static:64", [50, 50], 400, "lstm-lm"),
        *_runs("slow-025", "lhc", "static:256", [NAN, 60], 400, "lstm-lm"),
    ]  # fmt: skip
    runs = pd.concat([per_run(), pd.DataFrame(lstm)], ignore_index=True)
    density = pd.DataFrame([
        {"workload": "ncf", "batch_per_worker": 64, "workers": 4, "density_merged": 0.02},
        {"workload": "ncf", "batch_per_worker": 256, "workers": 4, "density_merged": 0.05},
        {"workload": "lstm-lm", "batch_per_worker": 64, "workers": 4, "density_merged": 0.04},
        {"workload": "lstm-lm", "batch_per_worker": 64, "workers": 8, "density_merged": 0.07},  # another N
    ])  # fmt: skip
    table = compression.links_table(RECORD, runs, LINKS, density)
    assert list(table.columns) == compression.LINK_COLUMNS
    assert list(dict.fromkeys(table["workload"])) == ["ncf", "lstm-lm"]

    r = _row(table, "ring", 1.0, 0.01, "lstm-lm")  # measured, its own speed-up; no lstm-lm run at 1 Gbit/s
    assert r["coverage"] == "measured only" and r["iter_speedup"] == 1.6 and math.isnan(r["model_iter_speedup"])
    slow = _row(table, "ring", 0.25, None, "lstm-lm")
    assert (slow["best_batch_none"], slow["best_batch_lhc"], slow["best_changes"]) == (64, 64, False)
    assert slow["margin_lhc"] == pytest.approx(((400 + 60) / 2) / 50)  # its miss counted at its own 400 s
    assert (slow["merged_density_none"], slow["merged_density_lhc"]) == (0.04, 0.04)

    ncf = _row(table, "ring", 1.0, 0.01)
    assert (ncf["best_batch_none"], ncf["best_batch_lhc"], ncf["iter_speedup"]) == (256, 64, 2.0)
    assert (ncf["merged_density_none"], ncf["merged_density_lhc"]) == (0.05, 0.02)
    assert _row(table, "ring", 0.25, None)["margin_none"] == pytest.approx(30 / 25)  # ncf's horizon: 40 s
    assert _row(table, "ps", 1.0, 0.01)["merged_density_lhc"] == 0.02
    assert math.isnan(_row(table, "ring", 10.0, 0.01)["merged_density_lhc"])  # measured only: no batch


def test_links_csv_is_written_with_its_documented_columns_and_summary_values(tmp_path):
    record = tmp_path / "links.json"
    record.write_text(json.dumps(RECORD))
    specs = [compression.cluster.homogeneous(4, bandwidth_gbps=1.0)]
    runs = per_run().replace({"cluster": {"fast-1g": specs[0].name}})
    runs = runs[runs["cluster"] == specs[0].name]
    table = compression.write_links(runs, specs, tmp_path, record_path=record)
    written = pd.read_csv(tmp_path / "links.csv")
    assert list(written.columns) == compression.LINK_COLUMNS and len(written) == len(table) == 4
    for col in compression.LINK_COLUMNS:
        assert f"``{col}``" in compression.__doc__, f"{col} is not documented in the module docstring"
    best = compression.best_batches(table)
    assert best == {"ncf": {specs[0].name: {"arch": "ring", "gbps": 1.0, "none": 256, "lhc": 64, "changes": True}}}
    json.dumps(best)  # plain values for summary.json


def test_cluster_link_is_the_slowest_link_on_the_reductions_path():
    ring = compression.cluster.from_dict({"name": "r", "workers": [
        {"count": 2, "bandwidth_gbps": 10.0}, {"count": 1, "bandwidth_gbps": 1.0}]})
    ps = compression.cluster.from_dict({"name": "p", "architecture": {"kind": "ps", "server_bandwidth_gbps": 0.5},
                                        "workers": [{"count": 2, "bandwidth_gbps": 1.0}]})
    assert compression.cluster_link(ring) == ("ring", 1.0, 3)
    assert compression.cluster_link(ps) == ("ps", 0.5, 2)


def test_a_missing_record_leaves_the_simulated_clusters_and_one_log_line(tmp_path, caplog):
    caplog.set_level("INFO", logger=compression.__name__)
    specs = [compression.cluster.homogeneous(4, bandwidth_gbps=1.0)]
    runs = per_run().replace({"cluster": {"fast-1g": specs[0].name}})
    runs = runs[runs["cluster"] == specs[0].name]
    table = compression.write_links(runs, specs, tmp_path, record_path=tmp_path / "absent.json")
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "absent.json" in warnings[0].getMessage()
    assert list(table["coverage"]) == ["simulated only"] and table["agg_speedup"].isna().all()
    assert (table.iloc[0]["best_batch_none"], table.iloc[0]["best_batch_lhc"]) == (256, 64)
    assert (tmp_path / "links.csv").exists()


@pytest.mark.parametrize("change,field", [
    ({"agg_speedup_1gbps_1pct": "fast"}, "agg_speedup_1gbps_1pct"),
    ({"model_agg_speedup_1gbps_1pct": -1.0}, "model_agg_speedup_1gbps_1pct"),
    ({"iter_speedup_1gbps_ncf": None}, "iter_speedup_1gbps_ncf"),
    ({"workers": DROP}, "workers"),
    ({"workers": 1}, "workers"),
    ({"source": ""}, "source"),
    ({"skipped": "network namespaces and tc need root"}, "skipped"),
])  # fmt: skip
def test_a_malformed_record_is_refused_naming_the_field(tmp_path, change, field):
    path = tmp_path / "links.json"
    path.write_text(json.dumps({k: v for k, v in {**RECORD, **change}.items() if v is not DROP}))
    with pytest.raises(InputFileError, match=f"{path}: .*'{field}'"):
        compression.read_links(path)


def test_a_record_without_a_link_with_a_rate_or_not_an_object_is_refused(tmp_path):
    path = tmp_path / "links.json"
    path.write_text(json.dumps({k: v for k, v in RECORD.items() if not k.startswith("agg_speedup_")}))
    with pytest.raises(InputFileError, match=r"agg_speedup_<G>gbps_<P>pct"):
        compression.read_links(path)
    path.write_text("[4.5]")
    with pytest.raises(InputFileError, match="JSON object"):
        compression.read_links(path)
    path.write_text("{not json")
    with pytest.raises(InputFileError, match="not a measured link record"):
        compression.read_links(path)


def test_the_committed_record_is_read_and_says_where_it_came_from():
    record = compression.read_links()
    assert "bench_links.py" in record["source"]
    r = _row(compression.measured_links(record, "ncf").assign(workload="ncf"), "ring", 1.0, 0.01)
    assert (r["agg_speedup"], r["model_agg_speedup"], r["iter_speedup"]) == (4.534, 4.569, 2.024)
