"""Choosing the policy that ships (dynamix/evaluation/selection.py; the selection stage,
dynamix/experiments/selection.py):
scored with the real math on validation clusters beside the LB-BSP sweep, a miss censored, and every
later stage's ``dynamix`` the choice until its artifact changes."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from dynamix import cluster as clusters, config
from dynamix.cli import main as cli_main
from dynamix.config import ConfigError
from dynamix.evaluation import plan, selection, targets, tuning
from dynamix.evaluation.policy_names import policy_dir, resolve_policy
from dynamix.experiments import policy_training
from dynamix.experiments import selection as select_stage


def test_a_candidate_that_misses_cannot_win_and_the_rule_is_scored_beside_it():
    # cluster a: the candidate "fast" stops early without the target; "slow" and the rule reach it
    t = pd.DataFrame({"cluster": ["a", "a", "a", "b", "b", "b"],
                      "policy": ["fast", "slow", "lbbsp:batch=512"] * 2,
                      "time_to_target_s": [math.nan, 12.0, 10.0, 5.0, 6.0, 8.0],
                      "total_time_s": [9.0, 20.0, 15.0, 9.0, 20.0, 15.0]})
    t["time_to_target_censored_s"] = targets.censored_time(t)
    s = selection.scores(t, ["fast", "slow", "lbbsp:batch=512"])
    assert s["fast"] == pytest.approx(math.sqrt(20.0 / 10.0 * 1.0))  # the miss counts at a's horizon, 20 s
    assert s["slow"] == pytest.approx(math.sqrt(12.0 / 10.0 * 6.0 / 5.0))
    assert s["lbbsp:batch=512"] == pytest.approx(math.sqrt(1.0 * 8.0 / 5.0))
    assert selection.choose(s, ["fast", "slow"]) == "slow"


def test_select_policy_scores_the_seeds_and_later_stages_use_the_choice(tmp_path, capsys):
    over = {"experiments": {"seeds": 1, "jobs": 1, "epochs": 0.05, "eval_every": 2, "eval_samples": 200,
                            "baselines": {"batch_sizes": [32, 128]}, "policy_training": {"seeds": 2},
                            "inference": {"tune_clusters": ["clusters/validation/val-ps-4.yaml"],
                                          "tune_global_batches": [256, 512], "tune_seeds": 1}},
            "rl": {"timesteps": 16, "snapshots": [0.0]}}  # fmt: skip
    cfg = config.load(profile="smoke", overrides=over)
    root = tmp_path / "results"
    policy_training.run(cfg, root / "policy_training")
    pdir = policy_dir(root / "policy_training")
    assert resolve_policy("dynamix", pdir, "dynamix") == f"dynamix:{pdir / 'dynamix.zip'}"  # no selection yet
    summary = select_stage.run(cfg, root / "selection", progress=False, choose=True)
    mine = ["dynamix", "dynamix-s1", "dynamix-at0", "dynamix-s1-at0"]  # each seed's warm start is a candidate too
    assert list(summary["scores"]) == mine + ["lbbsp:batch=256", "lbbsp:batch=512"]  # finals, then snapshots
    chosen = summary["ships"].removesuffix(".zip")
    assert summary["scores"][chosen] == min(summary["scores"][m] for m in mine)
    assert min(summary["scores"].values()) == pytest.approx(1.0)  # one cluster: its fastest policy scores 1
    table = pd.read_csv(root / "selection" / "selection.csv")
    assert set(table["policy"]) == set(summary["scores"]) and table["cluster"].unique().tolist() == ["val-ps-4"]
    assert table.loc[table["candidate"], "policy"].nunique() == 4
    # one target per validation cluster: the tuned rules' sweeps (both, from the run cache) read the same
    spec = clusters.load("clusters/validation/val-ps-4.yaml")
    e = cfg.experiments.inference
    (run_cfg,) = plan.budgeted(cfg, [(spec, plan.sim_config(cfg, optim=plan.optimizer(cfg, e.optimizers[0])))],
                               root / "selection")
    sweeps = tuning.sweeps([(spec, run_cfg)],
                           {"per_worker_batch": e.tune_batches, "global_batch": e.tune_global_batches}, [0],
                           cache=plan.run_cache(root / "selection"), progress=False)
    finals = pd.concat([sweeps["per_worker_batch"], table])["final_accuracy"]
    assert table["target_accuracy"].unique() == pytest.approx([cfg.evaluation.target_fraction * finals.max()])
    assert sweeps["global_batch"]["target_accuracy"].unique() == pytest.approx(table["target_accuracy"].unique())
    assert resolve_policy("dynamix", pdir, "dynamix") == f"dynamix:{pdir / summary['ships']}"
    # a retrained (changed) artifact is not what was scored: refused, naming the record
    with open(pdir / summary["ships"], "ab") as fh:
        fh.write(b"\0")
    with pytest.raises(ConfigError, match="selection.json chose .* which has changed since"):
        resolve_policy("dynamix", pdir, "dynamix")
    # the command: the same choice (its runs are cached), one JSON line
    (pdir / summary["ships"]).write_bytes((pdir / summary["ships"]).read_bytes()[:-1])
    assert cli_main(["select-policy", "--profile", "smoke", "--results", str(root), "--no-progress",
                     *[f"--set={k}={json.dumps(v)}" for k, v in {
                         "experiments.seeds": 1, "experiments.jobs": 1, "experiments.epochs": 0.05,
                         "experiments.eval_every": 2, "experiments.eval_samples": 200,
                         "experiments.baselines.batch_sizes": [32, 128], "experiments.policy_training.seeds": 2,
                         "experiments.inference.tune_clusters": ["clusters/validation/val-ps-4.yaml"],
                         "experiments.inference.tune_global_batches": [256, 512],
                         "experiments.inference.tune_seeds": 1, "rl.timesteps": 16,
                         "rl.snapshots": [0.0]}.items()]]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["ships"] == summary["ships"]
    (png,) = select_stage.figures(root / "selection", tmp_path / "figures")
    assert png.stat().st_size > 1000 and png.with_suffix(".pdf").exists()
    # a profile that does not select: the stage scores nothing and records what the later stages run,
    # the choice made by hand above, else the first seed's final policy (and draws nothing)
    unselected = config.with_overrides(cfg, {"experiments": {"policy_training": {"select": False}}})
    record = (root / "selection" / "selection.json").read_text()
    kept = select_stage.run(unselected, root / "selection", progress=False)
    assert kept == {"name": "dynamix", "selected": False, "ships": summary["ships"], "chosen_before": True}
    assert (root / "selection" / "selection.json").read_text() == record  # the scores stay
    (root / "selection" / "selection.json").unlink()
    assert select_stage.run(unselected, root / "selection", progress=False)["ships"] == "dynamix.zip"
    assert json.loads((root / "selection" / "selection.json").read_text())["selected"] is False
    assert pd.read_csv(root / "selection" / "selection.csv").empty
    (png,) = select_stage.figures(root / "selection", tmp_path / "none")  # what ships, no bars
    assert png.stat().st_size > 1000


def test_recording_what_ships_before_any_policy_is_trained_is_refused_in_one_line(tmp_path):
    cfg = config.load(profile="smoke")  # select off: the stage records seed 0's final policy
    with pytest.raises(ConfigError, match=r"^no trained policy dynamix in .*policies: run the "
                                          r"policy_training stage first$"):
        select_stage.run(cfg, tmp_path / "results" / "selection", progress=False)
    assert not (tmp_path / "results" / "selection" / "selection.json").exists()


def _pair(times: dict[str, list[float]], clusters=("a", "b")) -> pd.DataFrame:
    """The two policies' runs on each cluster, seed by seed; NaN: the run missed (horizon 30 s)."""
    rows = [{"cluster": c, "policy": p, "seed": s, "time_to_target_s": t, "total_time_s": 20.0, "horizon_s": 30.0}
            for c in clusters for p, ts in times.items() for s, t in enumerate(ts)]
    t = pd.DataFrame(rows)
    t["time_to_target_censored_s"] = targets.censored_time(t)
    return t


def test_a_trained_choice_ships_only_if_it_beats_its_warm_start_on_the_seeds_it_was_not_chosen_on():
    # faster on the seed it was chosen on (0), slower on the two fresh ones: the warm start ships
    lucky = selection.verdict(_pair({"ppo": [9.0, 12.0, 11.0], "warm": [10.0, 10.0, 10.0]}), "ppo", "warm")
    assert lucky["ships"] == "warm" and lucky["ratio"] > 1.0 and lucky["seeds"] == [0, 1, 2]
    # faster on every seed, with its interval below 1: it ships, its pooled paired ratio the geometric
    # mean of 0.9, 0.85, 0.88
    better = selection.verdict(_pair({"ppo": [9.0, 8.5, 8.8], "warm": [10.0, 10.0, 10.0]}), "ppo", "warm")
    assert better["ships"] == "ppo" and better["ratio"] == pytest.approx((0.9 * 0.85 * 0.88) ** (1 / 3))
    assert better["ci_lo"] < better["ratio"] < better["ci_hi"] < 1.0 and better["missed"] == {"ppo": 0, "warm": 0}
    # faster on every seed, but too unevenly for three seeds to tell (0.9, 0.8, 0.9): the warm start ships
    unsure = selection.verdict(_pair({"ppo": [9.0, 8.0, 9.0], "warm": [10.0, 10.0, 10.0]}), "ppo", "warm")
    assert unsure["ratio"] < 1.0 < unsure["ci_hi"] and unsure["ships"] == "warm"
    # faster in the mean but missing the target once more than the warm start: the warm start ships
    t = _pair({"ppo": [5.0, 5.0, 5.0], "warm": [10.0, 10.0, 10.0]})
    t.loc[(t["policy"] == "ppo") & (t["cluster"] == "a") & (t["seed"] == 1), "time_to_target_s"] = math.nan
    t["time_to_target_censored_s"] = targets.censored_time(t)
    risky = selection.verdict(t, "ppo", "warm")
    assert risky["ratio"] < 1.0 and risky["missed"] == {"ppo": 1, "warm": 0} and risky["ships"] == "warm"


def test_a_part_of_a_cell_is_censored_at_its_whole_cells_horizon():
    # the miss ran 20 s, but the cell's longest run (of a sweep not in this table) took 30 s
    t = _pair({"ppo": [math.nan], "warm": [10.0]}, clusters=("a",))
    assert list(targets.censored_time(t)) == [30.0, 10.0]
    t.loc[0, "total_time_s"] = 40.0  # a run longer than the sweep's longest moves the cell's tau
    assert list(targets.censored_time(t)) == [40.0, 10.0]


def test_the_confirmation_runs_the_fresh_seeds_at_each_validation_clusters_target(tmp_path):
    over = {"experiments": {"seeds": 2, "jobs": 1, "epochs": 0.05, "eval_every": 2, "eval_samples": 200,
                            "inference": {"tune_clusters": ["clusters/validation/val-ps-4.yaml"],
                                          "tune_global_batches": [256, 512], "tune_seeds": 1, "confirm_seeds": 2}}}
    cfg = config.load(profile="smoke", overrides=over)
    spec = clusters.load("clusters/validation/val-ps-4.yaml")
    e = cfg.experiments.inference
    groups = list(zip([spec], plan.budgeted(cfg, [(spec, plan.sim_config(cfg, optim=plan.optimizer(cfg, "sgd")))],
                                            tmp_path)))
    cands = {"big": "static:128", "small": "static:32"}
    sweeps = {"per_worker_batch": e.tune_batches, "global_batch": e.tune_global_batches}
    cache = plan.run_cache(tmp_path)
    _, table = selection.run_and_score(groups, cands, sweeps, [0], cache=cache, progress=False)
    record, added = selection.confirm(groups, table, ("big", cands["big"]), ("small", cands["small"]), [0, 1],
                                      cache=cache, progress=False)
    assert list(added.columns) == selection.TABLE_COLUMNS and added["confirm"].all()
    assert sorted(added["policy"]) == ["big", "small"] and set(added["seed"]) == {1}  # seed 0 is the table's
    assert added["target_accuracy"].unique() == pytest.approx(table["target_accuracy"].unique())
    assert (added["horizon_s"] >= table["horizon_s"].iloc[0]).all() and record["seeds"] == [0, 1]
    assert record["ships"] in ("big", "small") and set(record["missed"]) == {"big", "small"}
    both = pd.concat([table[table["policy"].isin(list(cands))], added], ignore_index=True)
    both["horizon_s"] = both["horizon_s"].max()
    both["time_to_target_censored_s"] = targets.censored_time(both)
    assert selection.verdict(both, "big", "small") == record  # the record is the two runs' verdict


def test_a_confirmation_must_run_seeds_the_choice_was_not_made_on():
    with pytest.raises(ConfigError, match=r"experiments.inference.confirm_seeds = 1 must be 0 \(no check\) or more "
                                          r"than tune_seeds = 1"):
        config.load(profile="smoke", overrides={"experiments": {"inference": {"confirm_seeds": 1}}})
