"""A finished pipeline's headline files and figures, copied to ``docs/expected/<profile>/``.

    dynamix pipeline --profile cpu --publish            # results/profiles/cpu -> docs/expected/cpu

Published numbers must be reproducible from a commit, so every stage's outputs are checked against
HEAD first (:func:`dynamix.pipeline.manifest.provenance_problem`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from dynamix import io, paths
from dynamix.errors import UserError
from dynamix.pipeline.manifest import provenance_problem, read_manifest
from dynamix.pipeline.runner import STAGES, default_root

PUBLISHED = {
    "claims/claims.csv": "claims.csv",
    "claims/claims.md": "claims.md",
    "claims/per_cluster.csv": "per_cluster.csv",
    "claims/held_out.md": "held_out.md",
    "claims/per_policy.csv": "per_policy.csv",
    "claims/per_policy.md": "per_policy.md",
    "claims/goal.csv": "goal.csv",
    "claims/goal.md": "goal.md",
    "scalability/summary.csv": "scalability_summary.csv",
    "baselines/summary.csv": "baselines_summary.csv",
    "inference/summary.csv": "inference_summary.csv",
    "inference/levels.csv": "inference_levels.csv",
    "inference/tuning.csv": "inference_tuning.csv",
    "inference/tuning_global.csv": "inference_tuning_global.csv",
    "inference/clusters.csv": "clusters.csv",
    "transfer/summary.csv": "transfer_summary.csv",
    "transfer/summary.json": "transfer_summary.json",
    "compression/summary.csv": "compression_summary.csv",
    "compression/compression.csv": "compression.csv",
    "stage_times.csv": "stage_times.csv",
    "claims/manifest.json": "claims_manifest.json",
}
"""Results-root file -> its name in ``docs/expected/<profile>/`` (:func:`publish`). The claims stage's
manifest carries the settings the published claims were computed with, so they can be recomputed after
``params.yaml`` has moved on (``tests/test_expected.py``)."""


def publish(profile: str, root: str | Path | None = None, dest: str | Path | None = None,
            check_provenance: bool = True) -> list[Path]:
    """Copy a finished pipeline's headline files (:data:`PUBLISHED`) and figures (PNG) to
    ``docs/expected/<profile>/`` (or ``dest``), with ``PROFILE`` holding the profile's name.

    Every stage's outputs must come from a clean commit whose code and params the stage reads are
    HEAD's (:func:`~dynamix.pipeline.manifest.provenance_problem`); the first that does not is
    refused with one line naming the stage (``check_provenance=False`` skips this, for tests that
    publish a throwaway run from a working tree)."""
    root = Path(root) if root is not None else default_root(profile)
    dest = Path(dest) if dest is not None else paths.ROOT / "docs" / "expected" / profile
    missing = [src for src in PUBLISHED if not (root / src).exists()]
    if missing:
        raise FileNotFoundError(f"{root} lacks {', '.join(missing)}: run the whole pipeline first "
                                f"(dynamix pipeline --profile {profile})")
    for stage in STAGES if check_provenance else ():
        if (root / stage / "manifest.json").exists():
            problem = provenance_problem(stage, read_manifest(root / stage))
            if problem:
                raise UserError(f"not published: {problem}")
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    for src, name in PUBLISHED.items():
        written.append(Path(shutil.copyfile(root / src, dest / name)))
    for png in sorted((root / "figures").glob("*/*.png")):
        written.append(Path(shutil.copyfile(png, dest / f"{png.parent.name}_{png.name}")))
    io.write_text(dest / "PROFILE", profile + "\n")
    written.append(dest / "PROFILE")
    return written
