"""Published numbers come from a commit: ``dynamix pipeline --publish`` refuses outputs made from a
modified working tree, with no commit, or at a commit whose code or params the stage reads differ."""

from __future__ import annotations

import json
import subprocess

import pytest

from dynamix import cli, paths
from dynamix.paths import git_sha
from dynamix.pipeline.manifest import provenance_problem
from dynamix.pipeline.publish import PUBLISHED


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=paths.ROOT, capture_output=True, text=True, check=True).stdout.strip()


def _finished_run(root, sha: str):
    """A results root holding every published file and a claims stage whose manifest names ``sha``."""
    for src in PUBLISHED:
        (root / src).parent.mkdir(parents=True, exist_ok=True)
        (root / src).write_text("x\n")
    (root / "claims" / "manifest.json").write_text(json.dumps({"experiment": "claims", "git_sha": sha}))
    return root


def test_a_stage_run_from_a_modified_tree_or_no_commit_is_refused_by_name():
    head = _git("rev-parse", "HEAD")
    assert "modified working tree" in provenance_problem("inference", {"git_sha": head + "-dirty"})
    assert provenance_problem("inference", {"git_sha": "unknown"}).startswith("stage inference")
    assert provenance_problem("inference", {"git_sha": head}) is None
    assert "does not have" in provenance_problem("claims", {"git_sha": "0" * 40})


def test_a_stage_run_at_a_commit_whose_code_changed_since_is_refused():
    first_code_change = _git("log", "-1", "--format=%H", "--", "dynamix/evaluation/targets.py")
    before = _git("rev-parse", f"{first_code_change}~1") if first_code_change else ""
    if not before:
        pytest.skip("the clone has no history before the last change to targets.py")
    problem = provenance_problem("claims", {"git_sha": before})
    assert problem and problem.startswith(f"stage claims was run at {before[:12]}") and "changed since" in problem


def test_publish_refuses_a_dirty_run_with_one_line_and_writes_nothing(tmp_path, capsys):
    root = _finished_run(tmp_path / "results", _git("rev-parse", "HEAD") + "-dirty")
    dest = paths.ROOT / "docs" / "expected" / "smoke"
    assert not dest.exists()
    code = cli.main(["pipeline", "--profile", "smoke", "--publish", "--results", str(root)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith("dynamix pipeline: error: not published: stage claims was run from a modified")
    assert not dest.exists()


def test_manifests_record_the_commit_and_whether_the_tree_was_clean():
    sha = git_sha()
    assert sha.split("-")[0] == _git("rev-parse", "HEAD")
    assert sha.endswith("-dirty") == bool(_git("status", "--porcelain", "--untracked-files=no"))



def test_only_what_a_stage_reads_can_make_its_run_dirty(tmp_path, monkeypatch):
    """A committed results root (the cpu profile's) is rewritten as its stages run: the tracked outputs a
    stage, or an earlier one, wrote must not mark its manifest dirty; a change to what it reads must."""
    repo = tmp_path / "repo"
    (repo / "dynamix").mkdir(parents=True)
    (repo / "results").mkdir()
    (repo / "dynamix" / "code.py").write_text("x = 1\n")
    (repo / "results" / "claims.md").write_text("table\n")
    for args in (["init", "-q"], ["add", "."], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c"]):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    monkeypatch.setattr(paths, "ROOT", repo)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    (repo / "results" / "claims.md").write_text("another table\n")  # an output, rewritten
    assert git_sha() == head + "-dirty"
    assert git_sha(["dynamix", "params.yaml"]) == head
    (repo / "dynamix" / "code.py").write_text("x = 2\n")  # what the stage reads, modified
    assert git_sha(["dynamix", "params.yaml"]) == head + "-dirty"
