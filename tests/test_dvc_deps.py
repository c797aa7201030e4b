"""dvc.yaml's params and deps are what each stage reads, so `dvc repro` reruns only what an edit touches.

``tools/dvcgen.py`` writes dvc.yaml from the stages' table (:mod:`dynamix.pipeline.stages`) and the
import graph; these tests keep the committed file equal to its output, the table true to params.yaml and
to the stage modules, and show with DVC itself, on a copy of the repository, which stages one edit makes
stale.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from dynamix import config, paths
from dynamix.pipeline import stages
from dynamix.pipeline.runner import STAGES
from tools import dvcgen


@pytest.fixture(scope="module")
def generated() -> str:
    return dvcgen.render()


def test_dvc_yaml_is_what_the_generator_writes(generated):
    committed = (paths.ROOT / "dvc.yaml").read_text()
    diff = "\n".join(list(difflib.unified_diff(committed.splitlines(), generated.splitlines(), "dvc.yaml",
                                               "tools/dvcgen.py", lineterm="", n=1))[:30])
    assert committed == generated, f"dvc.yaml is stale: run `make dvc-yaml`\n{diff}"


def test_the_table_has_every_stage_and_params_yaml_every_key_it_names():
    assert list(stages.READS) == list(STAGES)
    raw = config.read_params()
    for stage in STAGES:
        keys = stages.params(stage)
        assert keys[:2] == stages.ALWAYS
        for key in keys:
            node = raw
            for part in key.split("."):
                assert isinstance(node, dict) and part in node, f"stage {stage}: params.yaml has no {key}"
                node = node[part]
        assert "executor" not in {k.split(".")[0] for k in keys}, f"{stage}: executor says where, not what"


def _sections() -> dict[str, set[str]]:
    """Config section (and experiments subsection) -> its keys."""
    out = {}
    for f in dataclasses.fields(config.Config):
        value = getattr(config.Config(), f.name)
        if dataclasses.is_dataclass(value):
            out[f.name] = {g.name for g in dataclasses.fields(value)}
            for g in dataclasses.fields(value):
                if dataclasses.is_dataclass(getattr(value, g.name)):
                    out[f"{f.name}.{g.name}"] = {h.name for h in dataclasses.fields(getattr(value, g.name))}
    return out


def _reads(source: str) -> set[str]:
    """The params keys a stage module's text reads from a config named ``*cfg``: ``cfg.rl.model`` ->
    ``rl.model``; ``cfg.experiments.inference`` (a subsection taken whole) -> ``experiments.inference``."""
    sections, found = _sections(), set()
    for chain in re.findall(r"\b\w*cfg((?:\.[a-z_][a-z0-9_]*)+)", source):
        parts, key = chain.strip(".").split("."), ""
        for part in parts:
            candidate = f"{key}.{part}" if key else part
            if candidate in sections or (key in sections and part in sections[key]):
                key = candidate
            else:
                break
        if key and key != "executor" and not key.startswith("executor."):
            found.add(key)
        elif parts[0] == "profile":
            found.add("profile")
    return found


@pytest.mark.parametrize("stage", STAGES)
def test_every_key_a_stage_module_reads_is_in_its_params(stage):
    """A stage that starts reading another key from its config must say so in the table: each
    ``cfg.<section>.<key>`` in ``dynamix/experiments/<stage>.py`` is declared, itself or its section."""
    declared = stages.params(stage)
    source = (paths.ROOT / "dynamix" / "experiments" / f"{stage}.py").read_text()
    missing = sorted(k for k in _reads(source) if not any(k == d or k.startswith(d + ".") for d in declared))
    assert not missing, f"dynamix/experiments/{stage}.py reads {missing}: declare them in pipeline/stages.py"


def test_files_a_module_reads_or_names_for_import_are_followed():
    tracked = subprocess.run(["git", "ls-files", "--", "dynamix"], cwd=paths.ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    beside = {f for files in dvcgen.BESIDE.values() for f in files}
    data = [f for f in tracked if not f.endswith(".py")]
    assert sorted(data) == sorted(beside), "a file inside dynamix/ that no stage depends on: add it to BESIDE"
    launched = set(dvcgen.named_modules("dynamix.engine.launch"))  # python -m dynamix.engine(.torchrun)
    assert {"dynamix.engine.__main__", "dynamix.engine.torchrun"} <= launched
    assert "dynamix.rl.policy" in dvcgen.named_modules("dynamix.policies")  # registered lazily by its path
    for package, sources in dvcgen.GENERATED.items():
        assert dvcgen._source(package) is not None and all((paths.ROOT / s).exists() for s in sources)


def test_a_stage_depends_on_its_figure_module_alone():
    dvc = yaml.safe_load((paths.ROOT / "dvc.yaml").read_text())["stages"]
    for stage, spec in dvc.items():
        figures = {d for d in spec["deps"] if d.startswith("dynamix/plots/")}
        own = {f"dynamix/plots/{stage}.py", "dynamix/plots/__init__.py", "dynamix/plots/style.py"}
        assert own <= figures and figures - own <= {"dynamix/plots/curves.py", "dynamix/plots/bars.py"}, stage


# --------------------------------------------------------------------------------------------
# DVC on a copy of the repository
# --------------------------------------------------------------------------------------------


def _copy_repository(dest: Path) -> None:
    """The repository's files (committed, and new ones git does not ignore) without results/."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=paths.ROOT,
                            capture_output=True, text=True, check=True).stdout.splitlines()
    for rel in listed:
        src = paths.ROOT / rel
        if rel.startswith("results/") or not src.is_file():
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel)


def _placeholders(root: Path) -> None:
    """Every stage's outs and metrics, as a small file (a folder holding one)."""
    for spec in yaml.safe_load((root / "dvc.yaml").read_text())["stages"].values():
        for out in spec.get("outs", []) + spec.get("metrics", []):
            path = root / (next(iter(out)) if isinstance(out, dict) else out)
            if path.suffix:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(f"placeholder for {path.name}\n")
            else:
                path.mkdir(parents=True, exist_ok=True)
                (path / "placeholder").write_text("placeholder\n")


@contextmanager
def _edited(path: Path, edit):
    before = path.read_text()
    path.write_text(edit(before))
    try:
        yield
    finally:
        path.write_text(before)


def _rl_timesteps(text: str) -> str:
    """params.yaml with ``rl.timesteps`` raised (the line in the ``rl`` section, not the profiles')."""
    lines = text.splitlines(keepends=True)
    start = lines.index(next(line for line in lines if line.startswith("rl:")))
    i = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("  timesteps:"))
    lines[i] = re.sub(r"timesteps: \d+", "timesteps: 4096", lines[i], count=1)
    return "".join(lines)


def test_dvc_reruns_only_the_stages_an_edit_touches(tmp_path, monkeypatch):
    """Lock a copy of the repository as if every stage had run (placeholder outputs, ``dvc commit``),
    then edit one thing at a time and ask ``dvc status`` which stages it made stale. (Stages downstream
    of a stale one rerun under ``dvc repro`` only if its outputs change.)"""
    repo_api = pytest.importorskip("dvc.repo")
    monkeypatch.setenv("DVC_NO_ANALYTICS", "1")
    _copy_repository(tmp_path)
    monkeypatch.chdir(tmp_path)  # DVC resolves a stage's paths from the working directory
    repo_api.Repo.init(str(tmp_path), no_scm=True, force=True)
    _placeholders(tmp_path)
    with repo_api.Repo(str(tmp_path)) as repo:
        repo.commit(force=True)

    def stale() -> set[str]:
        with repo_api.Repo(str(tmp_path)) as repo:
            return set(repo.status())

    comment = lambda text: text + "# a comment\n"  # noqa: E731
    edits = [
        ("dynamix/plots/claims.py", comment, {"claims"}),  # one stage's figures
        ("dynamix/plots/bars.py", comment, {"inference", "scalability", "transfer", "compression"}),  # bars
        ("dynamix/rl/learn.py", comment, {"policy_training", "transfer", "ablation"}),  # PPO training
        ("params.yaml", _rl_timesteps, {"policy_training", "transfer", "ablation"}),  # rl.timesteps
    ]
    for rel, edit, expected in edits:
        with _edited(tmp_path / rel, edit):
            assert stale() == expected, rel
