"""Append-only CSV logs that stay aligned with checkpoints.

A run appends its rows when it writes a checkpoint and stores the row count in the checkpoint; on
resume, :func:`truncate_rows` drops the rows written after that checkpoint (they are redone), so a
crashed and resumed run's CSV has every row exactly once. Used by ``dynamix train`` and the engine.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Sequence


def append_rows(path: Path, rows: list[dict], columns: Sequence[str]) -> int:
    """Append ``rows`` (writing the header first if the file is new or empty); returns len(rows)."""
    new = not path.exists() or path.stat().st_size == 0
    with open(path, "a", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(columns))
        if new:
            w.writeheader()
        w.writerows(rows)
    return len(rows)


def truncate_rows(path: Path, rows: int) -> None:
    """Keep the header and the first ``rows`` data rows (those the checkpoint covers)."""
    if not path.exists():
        return
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[: rows + 1]) if rows else "")
