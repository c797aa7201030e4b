"""params.yaml -> frozen dataclasses: profiles, overrides and errors that name the field."""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
import typing

import pytest
import yaml

from dynamix import config, paths
from tools import paramsgen


def write_params(tmp_path, mutate) -> str:
    raw = yaml.safe_load(paths.PARAMS.read_text())
    mutate(raw)
    p = tmp_path / "params.yaml"
    p.write_text(yaml.safe_dump(raw))
    return str(p)


@pytest.mark.parametrize("profile", sorted(config.read_params()["profiles"]))
def test_every_profile_loads(profile):
    cfg = config.load(profile=profile)
    assert cfg.profile == profile
    assert cfg.batch.min <= cfg.batch.initial <= cfg.batch.max


def test_profile_overrides_base_and_cli_overrides_profile():
    base = config.load(profile="default")
    smoke = config.load(profile="smoke")
    assert smoke.train.max_iters != base.train.max_iters
    assert smoke.model == base.model  # untouched sections stay at base values
    cfg = config.load(profile="smoke", overrides=["train.seed=7", "optim.name=adam"])
    assert (cfg.train.seed, cfg.optim.name) == (7, "adam")


def test_config_is_frozen_and_hash_tracks_values():
    cfg = config.load(profile="base")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.train.seed = 3  # type: ignore[misc]
    assert cfg.hash() == config.load(profile="base").hash()
    assert cfg.hash() != config.load(profile="base", overrides=["train.seed=1"]).hash()


def test_negative_batch_size_names_the_field(tmp_path):
    path = write_params(tmp_path, lambda r: r["train"].__setitem__("batch_size", -4))
    with pytest.raises(config.ConfigError, match=r"train\.batch_size = -4 is out of range: must be in \[1, 65536\]"):
        config.load(path)


def test_unknown_key_is_an_error_listing_allowed_keys(tmp_path):
    path = write_params(tmp_path, lambda r: r["optim"].__setitem__("learning_rate", 0.1))
    with pytest.raises(config.ConfigError, match=r"unknown key\(s\) optim\.learning_rate; allowed in optim: .*lr"):
        config.load(path)


@pytest.mark.parametrize(
    "override, message",
    [
        ("optim.name=rmsprop", r"optim\.name = 'rmsprop' is not allowed: must be one of 'sgd', 'adam'"),
        ("train.seed=abc", r"train\.seed must be an integer"),
        ("data.augment=3", r"data\.augment must be true or false"),
        ("batch.actions=[1, x]", r"batch\.actions\[1\] must be an integer"),
        ("batch.min=2000", r"batch\.min = 2000 exceeds batch\.max = 1024"),
        ("optim.lr=.nan", r"optim\.lr is NaN"),
    ],
)
def test_bad_values_name_field_and_range(override, message):
    with pytest.raises(config.ConfigError, match=message):
        config.load(profile="base", overrides=[override])


@pytest.mark.parametrize(
    "override, message",
    [
        ("rl.time_signal=busy", "rl.time_signal = 'busy' is not allowed: must be one of '', 'iteration', 'imbalance'"),
        ("rl.time_signal=marginal",
         "rl.time_signal = 'marginal' is not allowed: must be one of '', 'iteration', 'imbalance'"),
        ("rl.warm_start_grow=0.5", "rl.warm_start_grow = 0.5 is not allowed: the setting was removed (a stored "
                                   "config may hold only its last value, 1.0)"),
        ("rl.warm_start_workers=[2, 3]", "rl.warm_start_workers = [2, 3] is not allowed: the setting was removed "
                                         "(a stored config may hold only its last value, [])"),
        ("rl.algo=simple", "rl.algo = 'simple' is not allowed: the setting was removed (a stored config may hold "
                           'only its last value, "ppo")'),
        ("rl.frame_stack=3", "rl.frame_stack = 3 is not allowed: the setting was removed (a stored config may hold "
                             "only its last value, 1)"),
        ("rl.episodes=engine", "rl.episodes = 'engine' is not allowed: the setting was removed (a stored config may "
                               'hold only its last value, "sim")'),
    ],
)
def test_the_dropped_agent_variants_are_refused_in_one_line(override, message):
    """busy, marginal, warm_start_grow and warm_start_workers were dropped (docs/journal/rl.md, ablation
    table); the simplified policy gradient, the frame stack and engine episodes were removed unrun."""
    with pytest.raises(config.ConfigError) as err:
        config.load(profile="base", overrides=[override])
    assert str(err.value) == message


def test_a_removed_setting_at_its_last_value_is_dropped_and_keeps_the_hash():
    """What a stored config holds for a removed setting, as YAML or JSON writes it, asks for nothing
    that changed: it builds, to the hash of the config without it."""
    default = config.load(profile="base")
    kept = config.load(profile="base", overrides=["rl.warm_start_grow=1", "rl.warm_start_workers=[]", "arbitrator.max_threads=64",
                                  "rl.algo=ppo", "rl.frame_stack=1", "rl.episodes=sim"])
    assert kept == default and kept.hash() == default.hash()
    with pytest.raises(config.ConfigError, match=r"^arbitrator\.max_threads = True is not allowed: the setting was"):
        config.load(profile="base", overrides=["arbitrator.max_threads=true"])


STORED = sorted(paths.ROOT.glob("results/profiles/*/policies/dynamix.json")) + sorted(
    paths.ROOT.glob("results/profiles/*/*/manifest.json"))
"""Committed policy artifacts and stage records of the converged profiles: configs stored with their hash."""

OLD_PLACES = {"sim.surrogate": "rl.surrogate", "sim.learning": "rl.learning",
              "evaluation.target_accuracy": "rl.target_accuracy",
              "evaluation.target_fraction": "rl.target_fraction", "evaluation.budget": "rl.eval_budget"}
"""Where the moved settings were (``rl``), besides rl.backend: a stored config's layout, written out here."""
OLD_BACKEND = {"math": "sim", "surrogate": "surrogate"}
"""rl.backend's value for sim.backend."""


def _old_layout(cfg: config.Config) -> dict:
    """``cfg`` as a config stored before the simulator's and the evaluation's settings left ``rl``."""
    tree = cfg.to_dict()
    for new, old in OLD_PLACES.items():
        section, key = new.split(".")
        tree["rl"][old.split(".")[1]] = tree[section].pop(key)
    tree["rl"]["backend"] = OLD_BACKEND[tree["sim"].pop("backend")]
    added = tree.pop("sim")  # settings added to sim after the move: stored there, left out at their neutral values
    assert set(added) <= set(config.HASH_NEUTRAL["sim"]) and tree.pop("evaluation") == {}
    changed = {k: v for k, v in added.items() if v != config.HASH_NEUTRAL["sim"][k]}
    if changed:
        tree["sim"] = changed
    return tree


@pytest.mark.parametrize("path", STORED, ids=lambda p: str(p.relative_to(paths.ROOT / "results/profiles")))
def test_a_stored_config_builds_to_the_hash_it_was_stored_with(path):
    """Settings moved (config.HASH_MOVED), removed or added since a config was stored keep its hash."""
    record = json.loads(path.read_text())
    assert config.build(config.Config, record["config"]).hash() == record["config_hash"]


@pytest.mark.parametrize("profile", sorted(config.read_params()["profiles"]))
def test_a_config_in_the_layout_from_before_the_moves_builds_to_the_same_config_and_hash(profile):
    """The simulator's settings (sim.*) and the evaluation's (evaluation.*) moved out of rl: a stored
    config in the old layout (policy artifacts, run folders, manifests) builds to the same config."""
    cfg = config.load(profile=profile)
    stored = json.loads(json.dumps(_old_layout(cfg)))
    built = config.build(config.Config, stored)
    assert built == cfg and built.hash() == cfg.hash()
    assert config.build(config.RLConfig, stored["rl"], prefix="rl") == cfg.rl


def test_the_moved_backend_hashes_as_the_old_value_it_stands_for():
    stored = _old_layout(config.load(profile="base"))
    for old, sets in (("sim", []), ("surrogate", ["sim.backend=surrogate"])):
        built = config.build(config.Config, {**stored, "rl": {**stored["rl"], "backend": old}})
        assert built == config.load(profile="base", overrides=sets) and built.hash() == config.load(profile="base", overrides=sets).hash()
    assert config.load(profile="base", overrides=["sim.backend=surrogate"]).hash() != config.load(profile="base").hash()
    # the agent's episodes on real workers (rl.backend: engine, later rl.episodes: engine) were removed
    with pytest.raises(config.ConfigError, match=r"^rl\.backend = 'engine' is not allowed: must be one of 'sim', "
                                                 r"'surrogate' \(a stored config's; rl\.backend is now sim\.backend"):
        config.build(config.Config, {**stored, "rl": {**stored["rl"], "backend": "engine"}})


@pytest.mark.parametrize("override, message", [
    ("rl.backend=surrogate", "rl.backend is now sim.backend (a setting lives in the section where it acts): "
                             "rl.backend = surrogate is sim.backend = surrogate"),
    ("rl.backend=sim", "rl.backend = sim is sim.backend = math"),
    ("rl.surrogate=x.json", "rl.surrogate is now sim.surrogate (a setting lives in the section where it "
                            "acts): set sim.surrogate instead"),
    ("rl.learning=measured", "set sim.learning instead"),
    ("rl.target_accuracy=0.5", "set evaluation.target_accuracy instead"),
    ("rl.target_fraction=0.8", "set evaluation.target_fraction instead"),
    ("rl.eval_budget=epochs", "set evaluation.budget instead"),
])
def test_a_moved_setting_given_by_a_user_is_refused_naming_its_new_key(override, message):
    with pytest.raises(config.ConfigError) as err:
        config.load(profile="base", overrides=[override])
    assert message in str(err.value)


def test_a_params_yaml_with_a_moved_setting_is_refused(tmp_path):
    path = write_params(tmp_path, lambda r: r["rl"].__setitem__("eval_budget", "epochs"))
    with pytest.raises(config.ConfigError, match=r"^rl\.eval_budget is now evaluation\.budget .*: set evaluation"):
        config.load(path)
    with pytest.raises(config.ConfigError, match=r"^rl\.backend is now sim\.backend"):
        config.with_overrides(config.load(profile="base"), {"rl": {"backend": "surrogate"}})  # code written for the old layout


def test_unknown_profile_lists_the_defined_ones():
    defined = ", ".join(sorted(config.read_params()["profiles"]))
    assert "default" in defined and "smoke" in defined
    with pytest.raises(config.ConfigError, match=re.escape(f"profile = 'huge' is not defined: must be one of {defined}")):
        config.load(profile="huge")


def _base_sections() -> dict:
    raw = config.read_params()
    raw.pop("profiles", None)
    raw.pop("profile", None)
    return raw


def _leaves(obj, prefix: str = "") -> dict:
    """Every dataclass field as {dotted name: value}, nested sections flattened."""
    out = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        name = f"{prefix}{f.name}"
        out.update(_leaves(value, name + ".") if dataclasses.is_dataclass(value) else {name: value})
    return out


def test_params_yaml_base_equals_the_dataclass_defaults():
    """One source of defaults: the base sections (no profile) build exactly Config()'s values."""
    from_yaml = _leaves(config.build(config.Config, _base_sections()))
    defaults = _leaves(config.Config())
    differing = [f"{k}: params.yaml {from_yaml[k]!r} != dataclass {defaults[k]!r}"
                 for k in sorted(defaults) if k != "profile" and from_yaml[k] != defaults[k]]
    assert not differing, "params.yaml base differs from the dataclass defaults:\n" + "\n".join(differing)


def test_every_setting_and_section_is_documented_in_config_py():
    """config.py is the one place a setting is documented: every field a ``setting(..., doc=...)``, every
    section a docstring (params.yaml's comments are written from them)."""
    def undocumented(cls, prefix=""):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            name = f"{prefix}{f.name}"
            if not config.doc_of(cls, f.name).strip():
                yield name
            if dataclasses.is_dataclass(hints[f.name]):
                yield from undocumented(hints[f.name], name + ".")
    missing = list(undocumented(config.Config))
    assert not missing, "settings without a doc in dynamix/config.py: " + ", ".join(missing)


def test_params_yaml_base_is_what_the_generator_writes():
    """params.yaml above ``profiles:`` is tools/paramsgen.py's output (make params-yaml): every field, its
    default and its doc from dynamix/config.py; profiles are kept as written."""
    text = paths.PARAMS.read_text()
    generated = paramsgen.render(text)
    diff = "\n".join(list(difflib.unified_diff(text.splitlines(), generated.splitlines(), "params.yaml",
                                               "tools/paramsgen.py", lineterm="", n=1))[:40])
    assert text == generated, f"params.yaml is stale: run `make params-yaml`\n{diff}"


def test_the_generator_keeps_the_profiles_and_the_profile_in_force():
    text = paths.PARAMS.read_text().replace("\nprofile: default\n", "\nprofile: smoke\n", 1)
    tail = text[text.index("\nprofiles:"):] + "  extra: {train: {seed: 1}}  # kept as written\n"
    out = paramsgen.render("# an old header\nprofile: smoke\ntrain: {seed: 9}\n" + tail)
    assert out.endswith(tail) and yaml.safe_load(out)["profile"] == "smoke"
    assert yaml.safe_load(out)["train"]["seed"] == 0


@pytest.mark.parametrize("value, text", [
    ("static:64", "static:64"), ("", '""'), ("true", '"true"'), ("1.0", '"1.0"'), ("a: b", '"a: b"'),
    ((), "[]"), (("static:32", "lbbsp", "x@1/sgd->y"), '["static:32", lbbsp, "x@1/sgd->y"]'),
    (0.0005, "0.0005"), (5.0, "5.0"), (False, "false"),
])
def test_the_generator_writes_values_yaml_reads_back(value, text):
    assert paramsgen.scalar(value) == text
    assert yaml.safe_load(f"k: {text}")["k"] == (list(value) if isinstance(value, tuple) else value)
