"""The headroom of a residual agent in its training world (dynamix.rl.headroom, ``dynamix headroom``),
on the committed cpu-agent surrogate and policies."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from dynamix import cli, config
from dynamix.policies.base import Bounds
from dynamix.rl.actions import ActionScheme, scheme_of
from dynamix.rl.domain import sample_set
from dynamix.rl.artifact import load_policy
from dynamix.rl.headroom import BASE, headroom, members, summarize

ROOT = Path(__file__).resolve().parents[1] / "results/profiles/cpu-agent"
SURROGATE = ROOT / "surrogate/tiny-cnn-w0.5-sgd.json"
WARM_START = ROOT / "policies/dynamix-at0.zip"  # the shipped agent: its base rule, bit for bit


def _cfg() -> config.Config:
    return config.load(profile="cpu-agent", overrides={"sim": {"surrogate": str(SURROGATE)}})


def test_the_members_are_one_move_of_each_factor_and_two_phase_moves_to_the_span_edges():
    names = [(m.name, m.moves) for m in members(scheme_of(_cfg()), phase_epochs=(8,))]
    assert names == [("x1", ()), ("x0.5", ((0.0, 0),)), ("x0.8", ((0.0, 1),)), ("x1.25", ((0.0, 3),)),
                     ("x2", ((0.0, 4),)), ("x0.5@8", ((8.0, 0),)), ("x2@8", ((8.0, 4),))]
    with pytest.raises(config.ConfigError, match="needs rl.action = 'global'"):
        members(ActionScheme.of("worker", (-100, -25, 0, 25, 100), Bounds(32, 1024)))


def test_headroom_runs_every_member_on_common_seeds_and_the_base_rule_agent_realises_none_of_it():
    """On a 2- and an 8-worker training cluster: x1 holds m(N) = max(512, 64 N) = 512 samples, x2 and
    x0.5 the span's edges (768, 342), x0.8 410; the shipped warm start is its base rule, so its episodes
    cost what x1's do, to the bit; the best member is never worse than x1, and the same call gives the
    same rows."""
    cfg = _cfg()
    specs = sample_set(cfg.rl, 2, 1, (2, 8), cfg.rl.episode_epochs, 10_000, cfg.batch.initial, prefix="t")
    model, _ = load_policy(WARM_START)
    frame = headroom(cfg, specs, 1, {"warm": model}, phase_epochs=(8,))
    assert len(frame) == 2 * (7 + 1) and set(frame["kind"]) == {"open-loop", "policy"}
    first = frame.set_index(["cluster", "member"])
    for spec in specs:
        batch = first.loc[spec.name, "mean_global_batch"]
        assert batch[BASE] == 512 and batch["x0.8"] == 410 and batch["x2"] == 768 and batch["x0.5"] == 342
        assert 512 < batch["x2@8"] < 768 and 342 < batch["x0.5@8"] < 512
        assert first.loc[(spec.name, "warm"), "cost"] == first.loc[(spec.name, BASE), "cost"]
    summary = summarize(frame)
    assert summary["clusters"] == 2 and summary["best_over_base_geomean"] <= 1.0
    assert all(c["best_over_base"] <= 1.0 for c in summary["per_cluster"].values())
    warm = summary["per_policy"]["warm"]
    assert warm["over_base_geomean"] == 1.0 and all(v == 0.0 for v in warm["realised_share"].values())
    assert frame.equals(headroom(cfg, specs, 1, {"warm": model}, phase_epochs=(8,)))


def test_headroom_command_writes_the_rows_and_summary_and_refuses_a_policy_of_another_state(tmp_path, capsys):
    args = ["headroom", "--profile", "cpu-agent", "--set", f"sim.surrogate={SURROGATE}", "--n", "1",
            "--workers", "4", "--seeds", "1", "--policy", str(WARM_START)]
    assert cli.main(args + ["--out", str(tmp_path / "h")]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["per_policy"]["dynamix-at0"]["over_base_geomean"] == 1.0
    written = json.loads((tmp_path / "h/headroom.json").read_text())
    assert written["clusters"] == 1 and (tmp_path / "h/headroom.csv").exists()
    assert math.isclose(written["per_cluster"]["head-00-4w"]["best_over_base"],
                        written["best_over_base_geomean"])
    val = str(Path(__file__).resolve().parents[1] / "clusters/validation/val-ps-4.yaml")
    assert cli.main(args + ["--cluster", val, "--out", str(tmp_path / "v")]) == 0  # given specs, not a draw
    assert list(json.loads((tmp_path / "v/headroom.json").read_text())["per_cluster"]) == ["val-ps-4"]
    other = Path(__file__).resolve().parents[1] / "results/profiles/cpu/policies/dynamix.zip"
    assert cli.main(args[:-1] + [str(other), "--out", str(tmp_path / "o")]) == cli.EXIT_USAGE
    assert "this profile's environment has rl.state = 'schedule' and rl.action = 'global'" in capsys.readouterr().err
    assert cli.main(args + ["--policy", str(WARM_START), "--out", str(tmp_path / "d")]) == cli.EXIT_USAGE
    assert "another policy is named 'dynamix-at0'" in capsys.readouterr().err
