"""The surrogate's measured accuracy (dynamix.sim.measured; ProgressModel's table; sim.learning: measured).

Runs on hand-made run tables and the hand-written model of tests/helpers/surrogate.py: no model math.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pandas as pd
import pytest

from dynamix import config
from dynamix import cluster as clusters
from dynamix.config import ConfigError
from dynamix.rl.env import training_config
from dynamix.sim import measured, progress
from dynamix.sim.progress import SurrogateArtifactError
from dynamix.sim.surrogate import SurrogateCluster
from helpers.surrogate import COST, make_model


def run_rows(run_id: str, batches: list[int], accs: list[float], per_epoch: float = 1.0,
             lr: list[float] | None = None) -> pd.DataFrame:
    """A run of len(batches) windows, ``per_epoch`` epochs each, tested at every window, two workers, at
    learning rates ``lr`` (the ``cfg`` fixture's full step, 0.05, by default)."""
    rows = []
    for w, (b, a, r) in enumerate(zip(batches, accs, lr or [0.05] * len(batches))):
        for rank in range(2):
            rows.append({"run_id": run_id, "window": w, "rank": rank, "epoch": (w + 1) * per_epoch,
                         "global_batch": b, "test_acc": a, "lr": r})
    return pd.DataFrame(rows)


def test_table_is_the_mean_curve_of_each_constant_batch_and_ignores_moving_runs():
    runs = pd.concat([run_rows("a", [128] * 4, [0.2, 0.4, 0.5, 0.6]), run_rows("b", [128] * 4, [0.4, 0.4, 0.7, 0.6]),
                      run_rows("c", [512] * 4, [0.1, 0.2, 0.3, 0.4]),
                      run_rows("moving", [128, 256, 512, 512], [0.9, 0.9, 0.9, 0.9])])
    grid, log2b, table = measured.accuracy_table(runs, epochs=4.0)
    assert grid[0] == 0.0 and grid[-1] == 4.0 and np.allclose(np.diff(grid), measured.GRID_STEP)
    assert log2b == (7.0, 9.0)
    at = {e: i for i, e in enumerate(grid)}
    assert table[0, at[3.0]] == pytest.approx(0.6) and table[0, at[4.0]] == pytest.approx(0.6)
    assert table[0, at[2.5]] == pytest.approx((0.45 + 0.55) / 2)  # each run interpolated, then the mean
    assert table[1, at[0.0]] == pytest.approx(0.1)  # before the first test: held at it
    with pytest.raises(measured.TableError, match="constant global batch"):
        measured.accuracy_table(run_rows("moving", [128, 256], [0.1, 0.2]), epochs=2.0)


def test_schedule_errors_read_a_moving_run_against_the_table_at_each_memory(cfg):
    model = _measured_model(cfg)  # 128: 0.2 -> 0.6 over 10 epochs, 1024: 0.1 -> 0.4
    small = list(np.linspace(0.2, 0.6, 10))
    runs = pd.concat([run_rows("const", [128] * 10, small),  # the table's own curve: no error at any m
                      run_rows("switch", [1024] * 5 + [128] * 5, small)])  # large early, then the small batch's curve
    errors = measured.schedule_errors(model, runs, cfg.optim, memories=(0, 4),
                                      after_epoch=6.0).set_index(["run_id", "memory_epochs"])
    assert not errors.loc[("const", 0.0), "moving"] and errors.loc[("switch", 0.0), "moving"]
    for m in (0.0, 4.0):
        assert errors.loc[("const", m), ["bias", "mae", "final_error"]].abs().max() < 1e-6  # the table: 6 decimals
    # no memory: after the switch the table reads the small batch's curve, which the run follows
    assert abs(errors.loc[("switch", 0.0), "bias"]) < 1e-6
    # a memory of 4 epochs still remembers part of 1024 after the switch: it predicts less than the run did
    assert errors.loc[("switch", 4.0), "bias"] < -0.01 and errors.loc[("switch", 4.0), "final_error"] < 0


def test_a_batch_dropped_after_a_decay_is_remembered_longer(cfg):
    """The memory's clock runs at the schedule's factor: after a 0.1 decay the table keeps more of the
    batch the run left than after the same drop at the full step."""
    model = _measured_model(cfg)
    small, switch = list(np.linspace(0.2, 0.6, 10)), [1024] * 5 + [128] * 5
    runs = pd.concat([run_rows("full", switch, small), run_rows("decayed", switch, small, lr=[0.05] * 5 + [0.005] * 5)])
    errors = measured.schedule_errors(model, runs, cfg.optim, memories=(4,), after_epoch=6.0).set_index("run_id")
    assert errors.loc["decayed", "bias"] < errors.loc["full", "bias"] < -0.01


def _measured_model(cfg):
    runs = pd.concat([run_rows("small", [128] * 10, list(np.linspace(0.2, 0.6, 10))),
                      run_rows("large", [1024] * 10, list(np.linspace(0.1, 0.4, 10)))])
    return measured.with_table(make_model(cfg), runs, epochs=10.0)


@pytest.fixture
def cfg() -> config.Config:
    return training_config(config.load(profile="base", overrides={"model": {"name": "mlp", "width": 0.25}}))


def test_a_measured_model_round_trips_and_a_bad_table_is_refused_naming_it(cfg, tmp_path):
    model = _measured_model(cfg)
    assert model.measured and model.provenance["measured"]["global_batches"] == [128, 1024]
    path = progress.save(model, tmp_path / "m.json")
    again = progress.load(path)
    assert again.checksum() == model.checksum() and again.table_accuracy(5.0, 7.0) == model.table_accuracy(5.0, 7.0)
    raw = json.loads(path.read_text())
    raw["model"]["acc_table"][0][3] = 0.99  # altered after fitting
    path.write_text(json.dumps(raw))
    with pytest.raises(SurrogateArtifactError, match="checksum mismatch"):
        progress.load(path)
    raw["model"]["acc_table"] = raw["model"]["acc_table"][:1]  # one batch row for two batches
    path.write_text(json.dumps(raw))
    with pytest.raises(SurrogateArtifactError, match="acc_table: shape"):
        progress.load(path)


def test_a_fitted_only_model_keeps_its_checksum(cfg):
    """Artifacts written before the table existed still load: their body has no table fields."""
    model = make_model(cfg)
    assert not model.measured and not set(progress.TABLE_FIELDS) & set(model.body())


def test_effective_batch_relaxes_over_memory_epochs(cfg):
    model = _measured_model(cfg)
    m = model.memory_epochs
    assert model.effective_log2b(math.nan, 9.0, 1.0) == 9.0  # the start: the batch itself
    moved = model.effective_log2b(7.0, 10.0, m)  # m epochs at 1024 from 128: 1 - 1/e of the way
    assert moved == pytest.approx(10.0 - 3.0 / math.e)
    assert model.table_accuracy(10.0, 8.5) == pytest.approx((0.6 + 0.4) / 2)  # halfway in log2 B
    assert model.table_accuracy(50.0, 12.0) == pytest.approx(0.4)  # clamped to the table's ends


def test_surrogate_test_accuracy_is_the_table_at_the_tested_epochs(cfg):
    """A constant-batch run on the surrogate reads the table at its own epochs; a run that drops from
    1024 to 128 reads it at an effective batch between the two, closer to 1024 at first."""
    model = _measured_model(cfg)
    spec = clusters.homogeneous(4)
    run_cfg = config.with_overrides(cfg, {"train": {"epochs": 10, "eval_every": cfg.batch.window}})
    cluster = SurrogateCluster(spec, run_cfg, model, cost=COST)
    while not cluster.done:
        cluster.run_window([32] * 4)  # 128 samples
        epochs = cluster.samples / cluster.n_train
        assert cluster.test_acc == pytest.approx(model.table_accuracy(epochs, 7.0))
    cluster = SurrogateCluster(spec, run_cfg, model, cost=COST)
    cluster.run_window([256] * 4)
    cluster.run_window([32] * 4)
    epochs = cluster.samples / cluster.n_train
    assert model.table_accuracy(epochs, 7.0) > cluster.test_acc > model.table_accuracy(epochs, 10.0)
    # the same drop after a 0.1 decay of the learning rate keeps more of 1024: the clock runs at the factor
    after_drop = {}
    for schedule in ("constant", "multistep"):
        at = config.with_overrides(run_cfg, {"optim": {"schedule": schedule, "milestones": [0.5]}})
        cluster = SurrogateCluster(spec, at, model, cost=COST)
        while cluster.samples / cluster.n_train < 6.0:
            cluster.run_window([256] * 4)
        cluster.run_window([32] * 4)
        after_drop[schedule] = cluster.test_acc
    assert after_drop["multistep"] < after_drop["constant"]


def test_learning_is_a_config_choice():
    assert config.load(profile="base", overrides={"sim": {"learning": "measured"}}).sim.learning == "measured"
    with pytest.raises(ConfigError, match="sim.learning = 'table'.*'measured'"):
        config.load(profile="base", overrides={"sim": {"learning": "table"}})
    assert measured.sweep((32, 64, 128, 256, 512)) == [32, 64, 96, 128, 160, 192, 256, 512]


def test_the_seed_plan_gives_table_seeds_where_asked_and_refuses_a_batch_outside_the_sweep():
    sizes = (32, 64, 128, 256, 512)
    assert measured.seed_plan(sizes, 5) == {b: 5 for b in measured.sweep(sizes)}
    assert measured.seed_plan(sizes, 5, table_seeds=12) == {b: 12 for b in measured.sweep(sizes)}
    plan = measured.seed_plan(sizes, 5, table_seeds=10, table_seed_batches=(96, 128))
    assert plan[96] == plan[128] == 10 and plan[32] == plan[512] == 5
    with pytest.raises(measured.TableError, match=r"sim.table_seed_batches = \[100\]: \[100\] not in"):
        measured.seed_plan(sizes, 5, table_seeds=10, table_seed_batches=(100,))
    with pytest.raises(ConfigError, match="sim.table_seeds"):
        config.load(profile="base", overrides={"sim": {"table_seeds": -1}})


def test_the_artifact_records_runs_per_batch_and_a_fit_with_another_seed_plan_is_stale(cfg):
    from dynamix.evaluation.surrogate_fit import stale_table

    runs = pd.concat([run_rows(f"small{i}", [128] * 10, list(np.linspace(0.2, 0.6, 10))) for i in range(3)]
                     + [run_rows("large", [1024] * 10, list(np.linspace(0.1, 0.4, 10)))])
    sizes = cfg.experiments.baselines.batch_sizes
    asked = config.with_overrides(cfg, {"sim": {"learning": "measured", "table_seeds": 10,
                                                "table_seed_batches": [measured.sweep(sizes)[0]]}})
    plan = measured.seed_plan(sizes, cfg.experiments.seeds, 10, (measured.sweep(sizes)[0],))
    model = measured.with_table(make_model(cfg), runs, epochs=10.0, plan=plan)
    assert model.provenance["measured"]["runs"] == [3, 1]
    assert stale_table(model, asked) == ""
    default = config.with_overrides(cfg, {"sim": {"learning": "measured"}})
    assert f"not {{'{sizes[0]}': {cfg.experiments.seeds}" in stale_table(model, default)  # every batch at experiments.seeds
    unplanned = measured.with_table(make_model(cfg), runs, epochs=10.0)  # from before the plan was recorded
    assert stale_table(unplanned, default) == "" and f"not {{'{sizes[0]}': 10" in stale_table(unplanned, asked)
    assert stale_table(dataclasses.replace(model, acc_spread=()), asked) == "its table has no spread between seeds"


def test_a_surrogate_run_reads_the_table_spread_by_its_seed(cfg, tmp_path):
    """Three seeds at 128 samples end at 0.55, 0.60 and 0.65: the table keeps their standard deviation,
    and training runs of many seeds scatter around the mean by it, each seed the same on every rerun."""
    ends = (0.55, 0.60, 0.65)
    runs = pd.concat([run_rows(f"s{i}", [128] * 10, list(np.linspace(0.2, end, 10))) for i, end in enumerate(ends)]
                     + [run_rows("large", [1024] * 10, list(np.linspace(0.1, 0.4, 10)))])
    model = measured.with_table(make_model(cfg), runs, epochs=10.0)
    assert model.table_spread(10.0, 7.0) == pytest.approx(np.std(ends, ddof=1), abs=1e-6)
    assert model.table_spread(10.0, 10.0) == 0.0  # one run: no spread
    run_cfg = config.with_overrides(cfg, {"train": {"epochs": 10, "eval_every": cfg.batch.window}})

    def final(seed, spread=True):
        cluster = SurrogateCluster(clusters.homogeneous(4), run_cfg, model, seed=seed, cost=COST, seed_spread=spread)
        while not cluster.done:
            cluster.run_window([32] * 4)
        return cluster.test_acc

    finals = np.array([final(seed) for seed in range(120)])
    assert final(7) == finals[7]
    z = (finals - model.table_accuracy(10.0, 7.0)) / model.table_spread(10.0, 7.0)
    assert abs(z.mean()) < 0.3 and 0.75 < z.std() < 1.25
    assert 0.05 < (z > 1).mean() < 0.3  # about one run in six above mean + s, as a normal seed effect gives
    assert final(7, spread=False) == pytest.approx(model.table_accuracy(10.0, 7.0))  # outside training: the mean
    again = progress.load(progress.save(model, tmp_path / "spread.json"))
    assert again.checksum() == model.checksum() and again.table_spread(10.0, 7.0) == model.table_spread(10.0, 7.0)


def test_lbbsp_rows_run_the_rule_on_the_table_cluster_and_a_judged_or_colliding_cluster_is_refused(cfg, tmp_path):
    from dynamix.evaluation.surrogate_fit import sources, stale_table, table_plan, table_rows

    sizes, base = cfg.experiments.baselines.batch_sizes, cfg.experiments.baselines.cluster
    decide = measured.sweep(sizes)[1]
    lbbsp = {"learning": "measured", "table_policy": "lbbsp", "table_cluster": "clusters/mixed-4.yaml",
             "table_seed_batches": [decide]}
    asked = config.with_overrides(cfg, {"sim": lbbsp})
    rows = table_rows(asked)
    assert rows[decide] == ("clusters/mixed-4.yaml", f"lbbsp:batch={4 * decide}", cfg.experiments.seeds)
    assert all(row == (base, f"static:{b}", cfg.experiments.seeds) for b, row in rows.items() if b != decide)
    runs = pd.concat([run_rows(f"r{b}", [4 * b] * 10, list(np.linspace(0.2, 0.6, 10))) for b in rows])
    model = measured.with_table(make_model(cfg), runs, epochs=10.0, plan=table_plan(asked), sources=sources(rows))
    static = config.with_overrides(cfg, {"sim": {"learning": "measured"}})
    assert stale_table(model, asked) == ""
    assert f"lbbsp:batch={4 * decide} on clusters/mixed-4.yaml" in stale_table(model, static)
    assert stale_table(measured.with_table(make_model(cfg), runs, 10.0, table_plan(static)), asked) != ""
    for judged in (cfg.experiments.inference.clusters[0], cfg.experiments.ablation.heldout[0]):
        with pytest.raises(measured.TableError, match=f"sim.table_cluster = {judged}: .* judge or validate on"):
            table_rows(config.with_overrides(cfg, {"sim": {**lbbsp, "table_cluster": judged}}))
    two = tmp_path / "two.yaml"  # 2 workers: the row at 64 per worker is 128 samples, the static row at 32
    two.write_text("name: two\nseed: 0\narchitecture: {kind: ring}\nworkers:\n"
                   "  - {count: 2, device: reference, bandwidth_gbps: 10, latency_ms: 0.05}\n")
    with pytest.raises(measured.TableError, match="global batches that the static rows"):
        table_rows(config.with_overrides(cfg, {"sim": {**lbbsp, "table_cluster": str(two), "table_seed_batches": [64]}}))
    with pytest.raises(ConfigError, match="sim.table_policy"):
        config.load(profile="base", overrides={"sim": {"table_policy": "gns"}})


def test_training_episodes_spread_the_table_by_their_run_seed(cfg, tmp_path):
    from dynamix.rl.env import DynamixEnv

    path = progress.save(_measured_model(cfg), tmp_path / "measured.json")
    on = config.load(profile="base", overrides={"model": {"name": "mlp", "width": 0.25}, "rl": {"episode_epochs": 0.5},
                                                   "sim": {"backend": "surrogate", "surrogate": str(path)}})
    env = DynamixEnv(training_config(on), cost=COST)
    env.reset(seed=0)
    assert env.cluster.seed_spread
