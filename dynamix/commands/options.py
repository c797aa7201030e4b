"""What several commands share: their common options and how a run's identity names a cluster and a
policy (:mod:`dynamix.rundir`). Here, not in :mod:`dynamix.cli`, so that no command imports the entry
point that imports it."""

from __future__ import annotations

import argparse


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """``--params``, ``--profile`` and ``--set``: the options every config-driven command shares
    (``args.params``, ``args.profile``, ``args.overrides`` for :func:`dynamix.config.load`)."""
    parser.add_argument("--params", default=None, help="params.yaml to read (default: the repo's)")
    parser.add_argument("--profile", default=None, help="profile in params.yaml (default: its `profile`)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override any params.yaml value (repeatable)")


def add_progress_argument(parser: argparse.ArgumentParser) -> None:
    """``--no-progress``: no tqdm bar (``args.no_progress``)."""
    parser.add_argument("--no-progress", action="store_true", help="no tqdm bar")


def add_out_arguments(parser: argparse.ArgumentParser, help_: str) -> None:
    """``--out`` (required; one run per folder, :mod:`dynamix.rundir`) and ``--force``."""
    parser.add_argument("--out", required=True, help=help_ + "; a folder holds one run: the same run resumes")
    parser.add_argument("--force", action="store_true",
                        help="replace the run OUT holds by this one, from the start")


def cluster_id(spec) -> str:
    """A cluster spec in a run's identity: its name and a hash of its content."""
    import hashlib
    import json

    from dynamix.cluster import to_yaml_dict

    blob = json.dumps(to_yaml_dict(spec), sort_keys=True, default=str).encode()
    return f"{spec.name}@{hashlib.sha256(blob).hexdigest()[:12]}"


def policy_id(policy) -> str:
    """A policy in a run's identity: its spec name, and a trained policy's artifact hash."""
    sha = getattr(policy, "meta", {}).get("zip_sha256", "")
    return f"{policy.name}@{sha[:12]}" if sha else policy.name
