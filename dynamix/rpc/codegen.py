"""Generate the gRPC stubs of ``protos/dynamix/rpc/v1/arbitrator.proto`` (not committed: built at setup).

Usage::

    python -m dynamix.rpc.codegen              # regenerate unconditionally
    python -m dynamix.rpc.codegen --if-stale   # regenerate only if missing or the proto changed (make protos)
    python -m dynamix.rpc.codegen --check      # exit 1 (and say why) if the stubs are missing or stale

``protoc`` runs with proto path ``protos/`` and output at the repository root, so the folder tree
``protos/dynamix/rpc/v1/`` yields the package ``dynamix.rpc.v1`` and the generated modules import each
other as ``dynamix.rpc.v1.arbitrator_pb2`` (the Flower layout). Staleness is decided by content, not
mtimes (a ``git checkout`` touches mtimes): a stamp file beside the stubs records the SHA-256 of the
proto and the grpcio-tools version that generated them. ``dynamix.rpc.v1`` checks the stamp on import
and raises :class:`StaleStubsError` with the command to run. Generation writes to a temporary folder
and renames into place, so a concurrent import never sees half-written stubs.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.resources
import logging
import os
import sys
import tempfile
from pathlib import Path

from dynamix import paths

log = logging.getLogger(__name__)

PROTO_REL = Path("dynamix/rpc/v1/arbitrator.proto")
"""The proto, relative to the proto root; its folder is the generated package's path."""

STUB_SUFFIXES = ("_pb2.py", "_pb2_grpc.py", "_pb2.pyi")
STAMP_NAME = "arbitrator.stamp"
REGENERATE_HINT = "regenerate with `python -m dynamix.rpc.codegen` (or `make protos`) from the repo root"


class StaleStubsError(ImportError):
    """The generated stubs are missing or were generated from another version of the proto."""


def stub_paths(out_root: Path) -> list[Path]:
    """The three generated files under ``out_root`` (the repository root by default)."""
    stem = out_root / PROTO_REL.with_suffix("")
    return [stem.parent / (stem.name + s) for s in STUB_SUFFIXES]


def _stamp_path(out_root: Path) -> Path:
    return out_root / PROTO_REL.parent / STAMP_NAME


def proto_digest(proto_root: Path) -> str:
    """SHA-256 of the proto source."""
    return hashlib.sha256((proto_root / PROTO_REL).read_bytes()).hexdigest()


def _tools_version() -> str:
    return importlib.metadata.version("grpcio-tools")


def expected_stamp(proto_root: Path) -> str:
    return f"{proto_digest(proto_root)} grpcio-tools=={_tools_version()}\n"


def problems(proto_root: Path = paths.PROTOS, out_root: Path = paths.ROOT, tools: bool = True) -> list[str]:
    """Why the stubs under ``out_root`` do not match the proto under ``proto_root`` (empty: fresh).

    ``tools=False`` ignores a grpcio-tools version change (the import-time check: only the proto's
    content decides whether stubs are wrong; a tools upgrade is picked up by ``--if-stale``).
    """
    missing = [str(p.relative_to(out_root)) for p in stub_paths(out_root) if not p.exists()]
    if missing:
        return [f"missing generated file(s): {', '.join(missing)}"]
    stamp = _stamp_path(out_root)
    if not stamp.exists():
        return [f"missing stamp {stamp.relative_to(out_root)} (stubs not made by this tool)"]
    have = stamp.read_text().split()
    want = expected_stamp(proto_root).split()
    if have[:1] != want[:1]:
        return [f"{PROTO_REL} changed since the stubs were generated"]
    if tools and have[1:] != want[1:]:
        return [f"stubs made by {' '.join(have[1:]) or 'unknown'}, installed is {' '.join(want[1:])}"]
    return []


def generate(proto_root: Path = paths.PROTOS, out_root: Path = paths.ROOT) -> list[Path]:
    """Run protoc (python, grpc and pyi outputs) and move the stubs into ``out_root``; returns them."""
    from grpc_tools import protoc

    include = str(importlib.resources.files("grpc_tools") / "_proto")
    out_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="dynamix-codegen-", dir=out_root) as tmp:
        argv = [
            "grpc_tools.protoc",
            f"--proto_path={proto_root}",
            f"--proto_path={include}",
            f"--python_out={tmp}",
            f"--grpc_python_out={tmp}",
            f"--pyi_out={tmp}",
            str(proto_root / PROTO_REL),
        ]
        rc = protoc.main(argv)
        if rc != 0:
            raise RuntimeError(f"protoc failed with exit code {rc} on {proto_root / PROTO_REL}")
        tmp_root = Path(tmp)
        targets = stub_paths(out_root)
        for src, dst in zip(stub_paths(tmp_root), targets):
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dst)
        stamp_tmp = tmp_root / STAMP_NAME
        stamp_tmp.write_text(expected_stamp(proto_root))
        os.replace(stamp_tmp, _stamp_path(out_root))
    log.info("generated %s", ", ".join(str(t.relative_to(out_root)) for t in targets))
    return targets


def ensure_fresh() -> None:
    """Raise :class:`StaleStubsError` unless the in-tree stubs match the proto (called on import).

    When the proto is absent (an installed package without the source tree) only presence is checked.
    """
    if not (paths.PROTOS / PROTO_REL).exists():
        missing = [p for p in stub_paths(paths.ROOT) if not p.exists()]
        if missing:
            raise StaleStubsError(f"gRPC stubs missing ({missing[0]}); {REGENERATE_HINT}")
        return
    found = problems(tools=False)
    if found:
        raise StaleStubsError(f"gRPC stubs for {PROTO_REL} are not usable: {found[0]}; {REGENERATE_HINT}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dynamix.rpc.codegen", description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--if-stale", action="store_true", help="regenerate only if missing or stale")
    mode.add_argument("--check", action="store_true", help="only report; exit 1 if missing or stale")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    found = problems()
    if args.check:
        for p in found:
            log.error("%s; %s", p, REGENERATE_HINT)
        return 1 if found else 0
    if args.if_stale and not found:
        log.info("gRPC stubs are up to date")
        return 0
    generate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
