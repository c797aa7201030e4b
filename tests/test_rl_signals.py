"""The agent's schedule signals (rl.state: schedule) and global-batch action (rl.action: global): the
features' values, the speed split, a trained round trip on the simulator and the surrogate, older
artifacts unchanged, and the ablation rows that select them.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
from stable_baselines3.common.env_checker import check_env

from dynamix import config
from dynamix.cluster import homogeneous
from dynamix.config import ConfigError, OptimConfig
from dynamix.policies.base import Bounds, PolicyContext, make_policy
from dynamix.rl.actions import GLOBAL_FACTORS, ActionScheme
from dynamix.rl.artifact import PolicyArtifactError, artifact_paths, load_policy
from dynamix.rl.env import DynamixEnv, WorkerVecEnv, training_config
from dynamix.rl.learn import train_policy
from dynamix.rl.state import FEATURE_NAMES, OBS_DIM, SPECS, StateBuilder, apply_actions
from dynamix.rl.warmstart import teacher_global_actions
from dynamix.sim import progress
from dynamix.sim.run import simulate
from dynamix.train.optim import learning_rate
from helpers.rl import rl_cfg, tiny_cost, worker
from helpers.synthetic import SyntheticCluster, drive
from helpers.rl import glob as window
from helpers.surrogate import COST, make_model

BOUNDS = Bounds(32, 1024)
SCHED = SPECS["schedule"]
COL = {n: i for i, n in enumerate(SCHED.names)}


# ---- schedule signals --------------------------------------------------------------------------------


def test_progress_and_lr_phase_follow_the_run_and_its_multistep_decay():
    optim = OptimConfig(lr=0.1, schedule="multistep", milestones=(0.5, 0.75))
    sb = StateBuilder(BOUNDS, "schedule", epochs=4.0, base_lr=0.1)
    plain = StateBuilder(BOUNDS, "dynamix")
    workers = [worker(0, 64), worker(1, 128, compute=30.0)]
    for epoch, decays in ((0.0, 0), (1.0, 0), (2.5, 1), (3.5, 2), (4.0, 2)):
        lr = learning_rate(optim, 0, 1, 192, progress=epoch / 4.0)
        g = window(workers, epoch=epoch, lr=lr)
        obs = sb.observe(workers, g)
        assert obs.shape == (2, SCHED.obs_dim) and (obs >= SCHED.low).all() and (obs <= SCHED.high).all()
        assert obs[:, COL["g_progress"]] == pytest.approx([epoch / 4.0] * 2)
        assert obs[:, COL["g_lr_phase"]] == pytest.approx([math.log2(0.1 ** decays) / 8.0] * 2, abs=1e-6)
        # the dynamix features are v4's, bit for bit: schedule only appends
        np.testing.assert_array_equal(obs[:, :OBS_DIM], plain.observe(workers, g))
    # beyond the ranges: clipped to the bounds
    obs = sb.observe(workers, window(workers, epoch=100.0, lr=1e-9))
    assert obs[0, COL["g_progress"]] == 2.0 and obs[0, COL["g_lr_phase"]] == -1.0
    with pytest.raises(ValueError, match="epoch budget and base lr"):
        StateBuilder(BOUNDS, "schedule")


def _noisy(b_simple: float, b: int = 64):
    """Two workers at b whose gradient norms give B_simple = ``b_simple`` exactly (|G|^2 = 1)."""
    workers = [worker(i, b, grad_sqnorm=1.0 + b_simple / b) for i in range(2)]
    return workers, window(workers, agg=1.0 + b_simple / (2 * b))


def test_noise_trend_reads_the_growth_of_the_noise_scale_not_the_agents_batch():
    sb = StateBuilder(BOUNDS, "schedule", epochs=1.0, base_lr=0.05)
    trends = [sb.observe(*_noisy(100.0 * 2 ** (0.25 * t)))[0, COL["g_noise_trend"]] for t in range(80)]
    assert trends[0] == 0.0 and trends[-1] == pytest.approx(0.25, abs=1e-3)  # 0.25 log2 units per window
    held = sb.observe(*_noisy(-1.0))[0, COL["g_noise_trend"]]  # no positive estimate: the EMAs stand still
    assert held == pytest.approx(trends[-1])
    sb.reset()
    still = [sb.observe(*_noisy(300.0, b))[0] for b in (32, 64, 128, 256)]  # B grows, B_simple does not
    assert [o[COL["g_noise_trend"]] for o in still] == pytest.approx([0.0] * 4, abs=1e-6)
    assert still[0][COL["g_noise_scale"]] > still[-1][COL["g_noise_scale"]]  # ... while B_simple / B falls


# ---- global action -----------------------------------------------------------------------------------


def test_global_action_scales_the_global_batch_and_splits_it_by_speed():
    scheme = ActionScheme.of("global", (-100, -25, 0, 25, 100), BOUNDS)
    assert scheme.choices == GLOBAL_FACTORS and scheme.slots(4) == 1 and GLOBAL_FACTORS[scheme.stay] == 1.0
    workers = [worker(i, 100, compute=c) for i, c in enumerate((10.0, 20.0, 40.0, 80.0))]  # speeds 8:4:2:1
    speed = np.array([8.0, 4.0, 2.0, 1.0])
    for a, f in enumerate(GLOBAL_FACTORS):
        sizes = np.array(scheme.apply(workers, [a]))
        assert sizes.sum() == round(f * 400) and sizes.min() >= 32 and sizes.max() <= 1024
        free = sizes > 32  # workers not held at the minimum share the rest in proportion to speed
        want = (sizes[free].sum()) * speed[free] / speed[free].sum()
        assert np.abs(sizes[free] - want).max() <= 1.0, (f, sizes)
    # where no worker is held at a bound, the split at x1 is the lb_gap feature's b*_i
    unheld = [worker(i, 100, compute=c) for i, c in enumerate((10.0, 20.0, 40.0, 40.0))]  # 200, 100, 50, 50
    obs = StateBuilder(BOUNDS, "dynamix").observe(unheld, window(unheld))
    b_star = 100 * np.exp2(obs[:, FEATURE_NAMES.index("lb_gap")])
    assert scheme.apply(unheld, [scheme.stay]) == (200, 100, 50, 50) and b_star == pytest.approx([200, 100, 50, 50])
    # the global batch is clamped to N x bounds, every worker to the bounds
    big = [worker(i, 1024) for i in range(4)]
    assert scheme.apply(big, [GLOBAL_FACTORS.index(2.0)]) == (1024,) * 4
    small = [worker(i, 40, compute=5.0 * (i + 1)) for i in range(4)]
    assert scheme.apply(small, [GLOBAL_FACTORS.index(0.5)]) == (32,) * 4
    # one decision per cluster, read off the workers' mean row
    rows = np.arange(8, dtype=np.float32).reshape(4, 2)
    np.testing.assert_array_equal(scheme.view(rows), [[3.0, 4.0]])
    with pytest.raises(ValueError, match="one action per window"):
        scheme.apply(workers, [2, 2, 2, 2])
    worker_scheme = ActionScheme.of("worker", (-100, -25, 0, 25, 100), BOUNDS)
    assert worker_scheme.apply(workers, [4, 0, 2, 1]) == apply_actions([100] * 4, [4, 0, 2, 1],
                                                                      (-100, -25, 0, 25, 100), BOUNDS)


def test_a_residual_span_starts_at_the_teachers_batch_and_keeps_every_decision_around_it():
    scheme = ActionScheme.of("global", (0,), BOUNDS, anchor=512, span=1.5)
    assert scheme.limits(4) == scheme.limits(32) == (342, 768) and scheme.initial(4) == (128,) * 4 and scheme.initial(3) == (171, 171, 170)
    assert scheme.initial(1) == (512,) and ActionScheme.of("global", (0,), BOUNDS).initial(4) is None
    workers = [worker(i, 128, compute=c) for i, c in enumerate((10.0, 20.0, 40.0, 80.0))]  # B = 512, speeds 8:4:2:1
    # doing nothing is LB-BSP's split of the teacher's batch; x2 and x0.5 stop at the span's edges
    assert sum(scheme.apply(workers, [scheme.stay])) == 512
    assert sum(scheme.apply(workers, [GLOBAL_FACTORS.index(2.0)])) == 768
    assert sum(scheme.apply(workers, [GLOBAL_FACTORS.index(0.5)])) == 342
    assert sum(scheme.apply(workers, [GLOBAL_FACTORS.index(1.25)])) == 640
    # the span never takes a worker outside the bounds: 2 workers hold at most 2 x 1024 whatever the span
    assert ActionScheme.of("global", (0,), BOUNDS, anchor=4096, span=2.0).initial(2) == (1024, 1024)
    with pytest.raises(ValueError, match="needs rl.action = 'global'"):
        ActionScheme.of("worker", (-25, 0, 25), BOUNDS, anchor=512, span=2.0)
    with pytest.raises(ConfigError, match=r"rl.residual_span = 2.0 .*rl.action = 'global' \(now 'worker'\)"):
        config.load(profile="base", overrides={"rl": {"residual_span": 2.0}})
    with pytest.raises(ConfigError, match=r"rl.residual_span = 0.5 must be 0 \(none\) or at least 1"):
        config.load(profile="base", overrides={"rl": {"residual_span": 0.5, "action": "global"}})


def _staying(scheme: ActionScheme, cluster: SyntheticCluster, n_workers: int, windows: int):
    """The sizes of each window when the agent always takes x1 from the scheme's start, and the last window's
    workers."""
    sizes, held = scheme.initial(n_workers), []
    for _ in range(windows):
        held.append(sizes)
        workers, _ = cluster.run_window(sizes)
        sizes = scheme.apply(workers, [scheme.stay])
    return held, workers


def test_doing_nothing_in_the_residual_span_is_a_plain_rule_lbbsp_on_the_last_window_alone():
    """The agent's x1 is its scheme's ``base_rule``, window for window: the held-out comparison runs that
    rule beside the agent, so what the agent adds to it is measured, not assumed."""
    scheme = ActionScheme.of("global", (0,), BOUNDS, anchor=512, span=1.5)
    assert scheme.base_rule == "lbbsp:batch=512,history=1,deadband=0"
    assert ActionScheme.of("global", (0,), BOUNDS).base_rule is None  # no span: x1 keeps whatever batch it has
    rule = make_policy(scheme.base_rule)
    ctx = PolicyContext(n_workers=5, initial_batch_sizes=(64,) * 5, bounds=BOUNDS)
    # a fixed cost per iteration, a worker slow enough to sit at the floor, and noisy windows
    a, c = (0.0, 2.0, 5.0, 1.0, 0.0), (0.05, 0.08, 0.2, 1.5, 0.1)
    sim_rule, sim_agent = (SyntheticCluster(a, c, comm_ms=3.0, jitter=0.2, seed=7) for _ in range(2))
    ruled = [sizes for sizes, _, _ in drive(rule, sim_rule, ctx, 40)]
    held, _ = _staying(scheme, sim_agent, 5, 40)
    assert held == ruled
    assert len(set(held)) > 10 and min(map(min, held)) == 32 and {sum(s) for s in held} == {512}


def test_a_floor_per_worker_grows_the_residual_start_with_the_cluster_and_the_base_rule_with_it():
    """m(N) = max(m, N p): on up to m / p workers the span is m's; beyond, every worker keeps p samples at the
    start and the span scales with N, instead of all of them sitting at batch.min (512 on 16 workers)."""
    fixed = ActionScheme.of("global", (0,), BOUNDS, anchor=512, span=1.5)
    scheme = ActionScheme.of("global", (0,), BOUNDS, anchor=512, span=1.5, per_worker=64)
    for n in (2, 4, 8):
        assert scheme.limits(n) == fixed.limits(n) and scheme.initial(n) == fixed.initial(n)
    assert scheme.start(16) == 1024 and scheme.limits(16) == (683, 1536) and scheme.initial(16) == (64,) * 16
    assert scheme.start(32) == 2048 and scheme.limits(32) == (1366, 3072)
    assert fixed.initial(16) == (32,) * 16  # the fixed start: every worker at the floor
    # the agent's decision x1 on 16 workers is the rule its base_rule spec names, window for window
    assert scheme.base_rule == "lbbsp:batch=512,per_worker=64,history=1,deadband=0"
    rule = make_policy(scheme.base_rule)
    ctx = PolicyContext(n_workers=16, initial_batch_sizes=(64,) * 16, bounds=BOUNDS)
    assert rule.unmet_request(16, BOUNDS) is None and make_policy("lbbsp:batch=512").unmet_request(24, BOUNDS)
    a, c = tuple(0.5 * (i % 3) for i in range(16)), tuple(0.05 * (1 + i % 5) for i in range(16))
    sim_rule, sim_agent = (SyntheticCluster(a, c, comm_ms=3.0, jitter=0.2, seed=3) for _ in range(2))
    ruled = [sizes for sizes, _, _ in drive(rule, sim_rule, ctx, 20)]
    held, workers = _staying(scheme, sim_agent, 16, 20)
    assert held == ruled and {sum(s) for s in held} == {1024} and len(set(held)) > 5
    # x2 stops at the span's top on 16 workers, 1536 samples (the fixed span's 768 is the floor there)
    assert sum(scheme.apply(workers, [GLOBAL_FACTORS.index(2.0)])) == 1536
    assert sum(fixed.apply(workers, [GLOBAL_FACTORS.index(2.0)])) == 768
    # the warm start's teacher aims at m(N): stay at 1024 on 16 workers, grow from 512
    for at, want in ((64, 1.0), (32, 2.0)):
        ws = [worker(i, at) for i in range(16)]
        row = scheme.view(StateBuilder(BOUNDS, "dynamix").observe(ws, window(ws)))
        pick = teacher_global_actions(row, GLOBAL_FACTORS, BOUNDS, global_batch=512, per_worker=64)
        assert GLOBAL_FACTORS[int(pick[0])] == want
    with pytest.raises(ConfigError, match="rl.residual_per_worker = 64 needs a residual span"):
        config.load(profile="base", overrides={"rl": {"residual_per_worker": 64}})


def test_global_teacher_moves_the_global_batch_towards_its_target():
    workers = [worker(i, 64) for i in range(4)]  # B = 256
    row = ActionScheme.of("global", (0,), BOUNDS).view(StateBuilder(BOUNDS, "dynamix").observe(workers, window(workers)))
    pick = [GLOBAL_FACTORS[int(teacher_global_actions(row, GLOBAL_FACTORS, BOUNDS, global_batch=m)[0])]
            for m in (512, 300, 256, 200, 0)]
    assert pick == [2.0, 1.25, 1.0, 0.8, 1.0]


# ---- config --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("field, value, allowed", [("action", "foo", "'worker', 'global'"),
                                                   ("state", "memory", "'schedule'")])
def test_invalid_values_fail_in_one_line_naming_the_field(field, value, allowed):
    with pytest.raises(ConfigError, match=f"rl.{field} = .*{allowed}") as exc:
        config.load(profile="base", overrides={"rl": {field: value}})
    assert "\n" not in str(exc.value)


def test_the_new_settings_at_their_defaults_keep_the_config_hash():
    """Settings added at their neutral values (config.HASH_NEUTRAL) keep the hashes that stage records,
    checkpoints and the published cpu run (config 09518d80d260, before its comparison gained the global
    rules) were made under; changed, they count."""
    base = config.load(profile="base")
    earlier_default = {"rl": dataclasses.asdict(base.rl), "sim": dataclasses.asdict(base.sim),  # the default profile then
                       "evaluation": dataclasses.asdict(base.evaluation),
                       "experiments": {"policy_training": {"seeds": 3, "select": False}, "compression": {"epochs": 2.0},
                                       "inference": {"policies": list(base.experiments.inference.policies),
                                                     "confirm_seeds": 0},
                                       "scalability": {"policies": list(base.experiments.scalability.policies)}}}
    cfg = config.load(profile="default", overrides=earlier_default)
    earlier = ["dynamix", "static:32", "static:64", "static:128", "static:256", "static:512", "lbbsp", "lbbsp:tuned", "gns"]
    oracle_then = {"oracle_batches": [32, 64, 128, 256], "oracle_seeds": 1, "oracle_refine": False,
                   "oracle_phase_epochs": []}  # the one-seed doubling grid it was published with
    cpu = config.load(profile="cpu", overrides={"experiments": {"inference": {"policies": earlier, **oracle_then}}})
    assert (cfg.hash(), cpu.hash()) == ("9da821755bef", "09518d80d260")
    assert config.load(profile="base", overrides={"rl": {"action": "global"}}).hash() != config.load(profile="base").hash()
    spanned = config.load(profile="base", overrides={"rl": {"action": "global", "residual_span": 2.0}}).hash()
    assert spanned != config.load(profile="base", overrides={"rl": {"action": "global"}}).hash()
    assert config.load(profile="base", overrides={"experiments": {"target_levels": [0.8]}}).hash() != config.load(profile="base").hash()


# ---- training, artifact, inference -----------------------------------------------------------------------


def _simulated_sizes(zip_path: Path, cfg: config.Config, cost) -> list[tuple[int, ...]]:
    runs = simulate(homogeneous(2), cfg, make_policy(f"dynamix:{zip_path}"), seed=1, progress=False, cost=cost)
    return [tuple(g["batch_size"]) for _, g in runs.groupby("window", sort=True)]


def test_round_trip_schedule_state_and_global_action_on_the_simulator(tmp_path):
    cost = tiny_cost()
    cfg = rl_cfg(state="schedule", action="global", n_steps=8, timesteps=8, warm_start="lbbsp",
                 warm_start_timesteps=8, warm_start_epochs=2)
    zip_path = train_policy(cfg, "signals", out_dir=tmp_path, cost=cost, progress=False)
    meta = json.loads(artifact_paths(zip_path)[1].read_text())
    assert meta["state_spec_version"] == "schedule-state-v1" and meta["features"] == list(SCHED.names)
    assert (meta["algo"], meta["frame_stack"], meta["obs_dim"]) == ("ppo", 1, SCHED.obs_dim)  # the format's fields
    assert meta["action"] == "global" and meta["action_choices"] == list(GLOBAL_FACTORS)
    assert meta["training"]["warm_start"]["transitions"] >= 8 and meta["training"]["timesteps"] == 8
    model, _ = load_policy(zip_path)
    assert model.observation_space.shape == (SCHED.obs_dim,) and model.action_space.n == len(GLOBAL_FACTORS)
    # inference: the state and the global action come from the artifact; deterministic; every window's global
    # batch is the last one's times a factor (within 2 x [8, 64], rounded)
    windows = _simulated_sizes(zip_path, cfg, cost)
    assert windows == _simulated_sizes(zip_path, cfg, cost) and len(windows) >= 3
    for before, after in zip(windows, windows[1:]):
        assert all(8 <= b <= 64 for b in after)
        assert sum(after) in {min(max(round(f * sum(before)), 16), 128) for f in GLOBAL_FACTORS}
    # fine-tuning it under another action is refused, in one line
    with pytest.raises(ConfigError, match="was trained with rl.action = 'global'; this run has 'worker'"):
        train_policy(dataclasses.replace(cfg, rl=dataclasses.replace(cfg.rl, action="worker")), "ft",
                     init=str(zip_path), out_dir=tmp_path, cost=cost, progress=False)


def test_a_policy_trained_with_a_residual_span_starts_and_stays_within_it_wherever_it_runs(tmp_path):
    cost = tiny_cost()
    cfg = rl_cfg(state="schedule", action="global", residual_span=1.25, warm_start_batch=48, n_steps=8,
                 timesteps=8, warm_start="lbbsp", warm_start_timesteps=8, warm_start_epochs=2)
    zip_path = train_policy(cfg, "span", out_dir=tmp_path, cost=cost, progress=False)
    json_path = artifact_paths(zip_path)[1]
    meta = json.loads(json_path.read_text())
    assert meta["residual"] == {"anchor": 48, "span": 1.25}
    windows = _simulated_sizes(zip_path, cfg, cost)  # 2 workers: the span [39, 60] within 2 x [8, 64]
    assert windows[0] == (24, 24) and len(windows) >= 3
    assert all(39 <= sum(w) <= 60 for w in windows)
    # where the workers cannot hold the span, the run is flagged as a rule's unheld batch is
    agent, bounds = make_policy(f"dynamix:{zip_path}"), Bounds(8, 64)
    assert agent.unmet_request(2, bounds) is None and agent.unmet_request(7, bounds) is None  # 56 <= 60
    assert agent.unmet_request(8, bounds) == (
        "dynamix:span asks for a global batch within [39, 60], which 8 workers cannot hold "
        "within batch.min, batch.max = [8, 64] (global [64, 512]): it runs at 64")
    assert agent.unmet_request(2, Bounds(8, 16)).endswith("(global [16, 32]): it runs at 32")  # the ceiling
    # a residual entry that is not a start and a span is refused, not half-loaded
    for bad in ({"anchor": 48}, {"anchor": 48, "span": 0.5}, {"anchor": "48", "span": 1.25}, [48, 1.25],
                {"anchor": 48, "span": 1.25, "per_worker": -1}, {"anchor": 48, "span": 1.25, "per_worker": 2.5},
                {"anchor": 48, "span": 1.25, "floor": 8}):
        json_path.write_text(json.dumps({**meta, "residual": bad}))
        with pytest.raises(PolicyArtifactError, match="residual = .*must be"):
            load_policy(zip_path)
    # a floor per worker in the artifact moves the span with the worker count: 8 x 16 = 128 on 8 workers
    json_path.write_text(json.dumps({**meta, "residual": {"anchor": 48, "span": 1.25, "per_worker": 16}}))
    floored = make_policy(f"dynamix:{zip_path}")
    assert floored.unmet_request(8, bounds) is None and floored.unmet_request(2, Bounds(8, 16)) is not None


def test_round_trip_on_the_surrogate(tmp_path):
    base = config.load(profile="base", overrides={"rl": {"episode_epochs": 0.5}})
    path = progress.save(make_model(training_config(base)), tmp_path / "surrogate.json")
    cfg = config.load(profile="base", overrides={"sim": {"backend": "surrogate", "surrogate": str(path)}, "rl": {
        "episode_epochs": 0.5, "state": "schedule", "action": "global", "n_steps": 16, "batch_size": 16, "timesteps": 32, "warm_start_timesteps": 16,
        "warm_start_epochs": 2, "net_arch": [16]}})
    env = DynamixEnv(training_config(cfg), cost=COST)
    check_env(env, warn=True, skip_render_check=True)
    assert WorkerVecEnv(env).num_envs == 1 and env.observation_space.shape == (1, SCHED.obs_dim)
    zip_path = train_policy(cfg, "signals-sur", out_dir=tmp_path, cost=COST, progress=False)
    _, meta = load_policy(zip_path)
    assert (meta["state_spec_version"], meta["action"]) == ("schedule-state-v1", "global")
    spec = dataclasses.replace(homogeneous(4), name="four")
    runs = simulate(spec, training_config(cfg), make_policy(f"dynamix:{zip_path}"), seed=0, progress=False,
                    cost=COST)  # the surrogate's workload
    assert runs["batch_size"].between(32, 1024).all() and runs["window"].nunique() >= 3


# a committed policy trained before the schedule state existed (and before its metadata recorded frame_stack)
COMMITTED_V4 = Path(__file__).resolve().parents[1] / "results/profiles/cpu/transfer/policies/tiny-cnn-0p5-sgd.zip"


def test_a_state_v4_artifact_loads_and_decides_as_before():
    """The committed v4 policy: DynamixPolicy gives the observations and steps the v4 code path gave
    (StateBuilder('dynamix'), argmax, apply_actions), window after window."""
    model, meta = load_policy(COMMITTED_V4)
    assert meta["state_spec_version"] == "dynamix-state-v4" and "frame_stack" not in meta
    policy = make_policy(f"dynamix:{COMMITTED_V4}")
    ctx = PolicyContext(n_workers=3, initial_batch_sizes=(64,) * 3)
    policy.reset(ctx)
    v4 = StateBuilder(BOUNDS, "dynamix")
    sizes = (64, 64, 64)
    for t in range(5):
        workers = [worker(i, b, compute=20.0 * (i + 1) * b / 64, iter_ms=200.0, wait=200.0 - 20.0 * (i + 1) * b / 64 - 10,
                          acc=0.3 + 0.05 * t) for i, b in enumerate(sizes)]
        g = window(workers, epoch=0.5 * t)
        obs = v4.observe(workers, g)
        actions, _ = model.predict(obs, deterministic=True)
        want = apply_actions(sizes, actions, tuple(meta["actions"]), BOUNDS)
        got = policy.decide(workers, g).batch_sizes
        assert got == want
        sizes = got


# the cpu pipeline's policy, trained while rl.warm_start_grow, rl.warm_start_workers, rl.algo and rl.frame_stack
# existed; the re-aimed agent's, while rl.episodes did
COMMITTED_CPU = Path(__file__).resolve().parents[1] / "results/profiles/cpu/policies/dynamix.zip"
COMMITTED_AGENT = Path(__file__).resolve().parents[1] / "results/profiles/cpu-agent/policies/dynamix.zip"
# the cpu-agent policy as published before rl.episodes was removed (its stored config holds episodes: sim)
EPISODES_AGENT = Path(__file__).resolve().parent / "data/policies/agent-episodes-sim.zip"


def test_a_committed_policy_trained_with_the_removed_teacher_settings_still_loads():
    """It loads and decides; its stored config builds again, the removed settings dropped at their
    last values, to the hash it was saved under; a removed setting at another value is refused."""
    model, meta = load_policy(COMMITTED_CPU)
    stored = meta["config"]
    assert (stored["rl"]["warm_start_grow"], stored["rl"]["warm_start_workers"]) == (1.0, [])
    assert (stored["rl"]["algo"], stored["rl"]["frame_stack"], meta["algo"], meta["frame_stack"]) == ("ppo", 1, "ppo", 1)
    assert config.build(config.Config, stored).hash() == meta["config_hash"]
    assert config.build(config.RLConfig, meta["training"]["rl"], prefix="rl").warm_start == "lbbsp"
    obs = np.zeros((3, OBS_DIM), dtype=np.float32)
    assert model.predict(obs, deterministic=True)[0].shape == (3,)
    changed = {**stored, "rl": {**stored["rl"], "warm_start_grow": 0.5}}
    with pytest.raises(ConfigError) as err:
        config.build(config.Config, changed)
    assert str(err.value) == ("rl.warm_start_grow = 0.5 is not allowed: the setting was removed (a stored config "
                              "may hold only its last value, 1.0)")
    _, agent = load_policy(EPISODES_AGENT)
    assert agent["config"]["rl"]["episodes"] == agent["training"]["rl"]["episodes"] == "sim"
    assert config.build(config.Config, agent["config"]).hash() == agent["config_hash"]
    assert config.build(config.RLConfig, agent["training"]["rl"], prefix="rl").action == "global"
    # the agent published now: trained after the removal, with the floored residual start
    _, agent = load_policy(COMMITTED_AGENT)
    assert "episodes" not in agent["config"]["rl"] and agent["residual"] == {"anchor": 512, "span": 1.5, "per_worker": 64}
    assert config.build(config.Config, agent["config"]).hash() == agent["config_hash"]


@pytest.mark.parametrize("field, value, removed", [
    ("frame_stack", 3, "rl.frame_stack (the observation of the last k windows) was removed; only 1 is read"),
    ("frame_stack", True, "rl.frame_stack (the observation of the last k windows) was removed; only 1 is read"),
    ("algo", "simple", "rl.algo (simple, the paper's simplified policy gradient) was removed; only \"ppo\" is read"),
])
def test_an_artifact_of_a_removed_agent_option_is_refused_in_one_line(tmp_path, field, value, removed):
    """A policy trained with the frame stack or the simplified policy gradient is refused, not
    half-loaded; the committed ones, at the values this code trains, load (above)."""
    for suffix in (".zip", ".json"):
        (tmp_path / f"p{suffix}").write_bytes(COMMITTED_CPU.with_suffix(suffix).read_bytes())
    json_path = tmp_path / "p.json"
    meta = json.loads(json_path.read_text())
    json_path.write_text(json.dumps({**meta, field: value}))
    with pytest.raises(PolicyArtifactError) as err:
        load_policy(tmp_path / "p.zip")
    assert str(err.value) == f"policy metadata {json_path}: {field} = {json.dumps(value)} is not supported: {removed}"
    json_path.write_text(json.dumps({k: v for k, v in meta.items() if k != "frame_stack"}))
    assert load_policy(tmp_path / "p.zip")[0].observation_space.shape == (OBS_DIM,)  # before frame_stack existed


# ---- the ablation rows -----------------------------------------------------------------------------------


def test_ablation_variants_are_one_change_each_to_the_default_and_selectable():
    from dynamix.experiments import ablation

    cfg = config.load(profile="base")
    variants = ablation.variant_configs(cfg)
    assert list(variants) == list(config.ABLATION_VARIANTS) == ["schedule", "global", "schedule-scratch",
                                                                "global-scratch"]
    scratch = {"warm_start": "none", "timesteps": cfg.rl.timesteps + cfg.rl.warm_start_timesteps}
    changed = {"schedule": {"state": "schedule"}, "global": {"action": "global"},
               "schedule-scratch": {"state": "schedule", **scratch}, "global-scratch": {"action": "global", **scratch}}
    for name, v in variants.items():
        diff = {f.name: getattr(v.rl, f.name) for f in dataclasses.fields(v.rl)
                if getattr(v.rl, f.name) != getattr(cfg.rl, f.name)}
        assert diff == changed[name] and dataclasses.replace(v, rl=cfg.rl) == cfg
    chosen = config.load(profile="base", overrides={"experiments": {"ablation": {"steps": ["dynamix", "schedule", "global"],
                                                                 "seeds": 1}}})
    planned = {t.policy for t in ablation.plan(chosen) if t.kind == "train"}
    assert planned == {"dynamix", "schedule", "global"}
    assert ablation._order(["lbbsp", "global", "dynamix", "schedule"]) == ["dynamix", "schedule", "global", "lbbsp"]
    with pytest.raises(ConfigError, match="experiments.ablation.steps.*'global-scratch'"):
        config.load(profile="base", overrides={"experiments": {"ablation": {"steps": ["memory"]}}})
    with pytest.raises(ConfigError, match="experiments.ablation.steps = \\['frame-stack'\\] is not allowed"):
        config.load(profile="base", overrides={"experiments": {"ablation": {"steps": ["frame-stack"]}}})  # removed, unrun
