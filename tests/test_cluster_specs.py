"""The example cluster specs load, cover the cases the docs promise, and bad specs fail with errors
that name the field."""

from __future__ import annotations

import pytest

from dynamix import cluster as clusters
from dynamix import paths
from dynamix.config import ConfigError

SPECS = sorted(paths.CLUSTERS.rglob("*.yaml"))  # examples, heldout/ and validation/


@pytest.mark.parametrize("path", SPECS, ids=[str(p.relative_to(paths.CLUSTERS)) for p in SPECS])
def test_every_example_spec_loads(path):
    spec = clusters.load(path)
    assert spec.n_workers >= 1 and spec.name
    assert len(spec.speeds) == spec.n_workers


def test_the_documented_examples_exist_with_their_shape():
    by_name = {p.stem: clusters.load(p) for p in SPECS}
    assert set(by_name) >= {"homogeneous-4", "mixed-gpu", "noisy-spot", "bandwidth-constrained",
                            "slow-worker-4", "scale-32", "scale-128"}
    assert len(set(by_name["homogeneous-4"].speeds)) == 1
    assert len(set(by_name["mixed-gpu"].speeds)) >= 3
    noisy = by_name["noisy-spot"]
    assert noisy.stragglers.probability > 0 and noisy.jitter > 0 and noisy.events
    assert by_name["bandwidth-constrained"].architecture.kind == "ps"
    assert sorted(by_name["slow-worker-4"].speeds) == [pytest.approx(1 / 3), 1.0, 1.0, 1.0]
    assert by_name["scale-32"].n_workers == 32 and by_name["scale-128"].n_workers == 128


def test_validation_and_heldout_specs_are_distinct_heterogeneous_clusters():
    """Policy selection (validation/) never looks at the clusters results are reported on (heldout/)."""
    held = [clusters.load(p) for p in sorted((paths.CLUSTERS / "heldout").glob("*.yaml"))]
    val = [clusters.load(p) for p in sorted((paths.CLUSTERS / "validation").glob("*.yaml"))]
    assert len(held) >= 3 and len(val) >= 3
    assert not {s.name for s in held} & {s.name for s in val}
    for spec in held + val:
        assert len(set(spec.speeds)) >= 2, spec.name
    held_shapes = {(s.architecture, s.workers) for s in held}
    assert not any((s.architecture, s.workers) in held_shapes for s in val)


def test_round_trip_through_yaml_dict():
    spec = clusters.load(paths.CLUSTERS / "noisy-spot.yaml")
    assert clusters.from_dict(clusters.to_yaml_dict(spec)) == spec


@pytest.mark.parametrize("data,field", [
    ({"workers": []}, "workers"),
    ({"workers": [{"count": 2, "device": "tpu9"}]}, "workers[0].device"),
    ({"workers": [{"count": 0}]}, "workers[0].count"),
    ({"workers": [{"bandwidth_gbps": -1}]}, "workers[0].bandwidth_gbps"),
    ({"workers": [{"device": {"name": "x", "speed": 0}}]}, "workers[0].device.speed"),
    ({"workers": [{"count": 2}], "architecture": {"kind": "mesh"}}, "architecture.kind"),
    ({"workers": [{"count": 2}], "jitter": 3}, "jitter"),
    ({"workers": [{"count": 2}], "events": [{"kind": "slowdown", "workers": [5]}]}, "events[0].workers"),
    ({"workers": [{"count": 2}], "events": [{"kind": "reboot"}]}, "events[0].kind"),
    ({"workers": [{"count": 2}], "stragglers": {"probability": 1.5}}, "stragglers.probability"),
    ({"workers": [{"count": 2}], "colour": "blue"}, "colour"),
])
def test_bad_specs_name_the_field(data, field):
    with pytest.raises(ConfigError, match=field.replace("[", r"\[").replace("]", r"\]")):
        clusters.from_dict(data, source="bad.yaml")


def test_missing_file_points_at_the_examples():
    with pytest.raises(ConfigError, match="clusters"):
        clusters.load("clusters/does-not-exist.yaml")
