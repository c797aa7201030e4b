"""params.yaml -> frozen dataclasses: profiles, overrides and errors that name the field."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from dynamix import config, paths


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
    cfg = config.load()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.train.seed = 3  # type: ignore[misc]
    assert cfg.hash() == config.load().hash()
    assert cfg.hash() != config.load(overrides=["train.seed=1"]).hash()


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
        config.load(overrides=[override])


def test_unknown_profile_lists_the_defined_ones():
    with pytest.raises(config.ConfigError, match="profile = 'huge' is not defined: must be one of default, paper, rl-eval, smoke"):
        config.load(profile="huge")
