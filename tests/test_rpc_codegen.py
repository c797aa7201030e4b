"""Generated stubs match the proto; stale or missing stubs fail loudly on import; proto conventions."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from dynamix import paths
from dynamix.rpc import codegen, convert

PROTO = paths.PROTOS / codegen.PROTO_REL


def test_regenerated_stubs_equal_the_installed_ones(tmp_path):
    assert codegen.problems() == [], "in-tree stubs are stale: run `python -m dynamix.rpc.codegen`"
    fresh = codegen.generate(out_root=tmp_path)
    for new, old in zip(fresh, codegen.stub_paths(paths.ROOT)):
        assert new.read_bytes() == old.read_bytes(), f"{old.name} differs from a fresh generation"
    assert codegen.main(["--check"]) == 0


def test_check_reports_a_changed_proto(tmp_path):
    protos = tmp_path / "protos"
    shutil.copytree(paths.PROTOS, protos)
    codegen.generate(protos, tmp_path / "out")
    assert codegen.problems(protos, tmp_path / "out") == []
    (protos / codegen.PROTO_REL).write_text(PROTO.read_text() + "\n// an edit\n")
    assert codegen.problems(protos, tmp_path / "out") == [f"{codegen.PROTO_REL} changed since the stubs were generated"]
    codegen.stub_paths(tmp_path / "out")[0].unlink()
    assert "missing generated file(s)" in codegen.problems(protos, tmp_path / "out")[0]


def _tree_copy(tmp_path: Path) -> Path:
    """A copy of the package, protos and fresh stubs, importable from ``tmp_path``."""
    shutil.copytree(paths.ROOT / "dynamix", tmp_path / "dynamix",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(paths.PROTOS, tmp_path / "protos")
    return tmp_path


def _import_v1(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "import dynamix.rpc.v1.arbitrator_pb2"], cwd=root,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True)


def test_importing_stale_or_missing_stubs_says_how_to_regenerate(tmp_path):
    root = _tree_copy(tmp_path)
    assert _import_v1(root).returncode == 0
    proto = root / "protos" / codegen.PROTO_REL
    proto.write_text(proto.read_text().replace("int32 rank = 3;", "int64 rank = 3;", 1))
    stale = _import_v1(root)
    assert stale.returncode != 0
    assert "StaleStubsError" in stale.stderr and "changed since the stubs were generated" in stale.stderr
    assert "python -m dynamix.rpc.codegen" in stale.stderr
    for p in codegen.stub_paths(root):
        p.unlink()
    missing = _import_v1(root)
    assert "missing generated file(s)" in missing.stderr and "python -m dynamix.rpc.codegen" in missing.stderr
    regen = subprocess.run([sys.executable, "-m", "dynamix.rpc.codegen", "--if-stale"], cwd=root,
                           env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
    assert regen.returncode == 0, regen.stderr
    assert _import_v1(root).returncode == 0


def test_proto_conventions():
    """Package path mirrors the folder; a comment on every rpc, message, enum and field; enums start
    at *_UNSPECIFIED = 0; the messages mirror every schema field."""
    text = PROTO.read_text()
    assert re.search(r"^package dynamix\.rpc\.v1;$", text, re.M)
    lines = text.splitlines()
    for i, line in enumerate(lines):
        s = line.strip()
        if re.match(r"(rpc|message|enum|service) \w+", s):
            assert lines[i - 1].strip().startswith("//"), f"no comment above line {i + 1}: {s}"
        elif re.match(r"(repeated )?\w+ \w+ = \d+;", s):
            assert "//" in s, f"field without a comment on line {i + 1}: {s}"
    for enum in re.finditer(r"enum (\w+) \{\s*(\w+) = (\d+);", text):
        assert enum.group(2).endswith("_UNSPECIFIED") and enum.group(3) == "0", enum.group(1)
    assert convert.check_schema_mirror() == []
