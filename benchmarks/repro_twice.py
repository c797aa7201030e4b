"""Same commit, same table: `make repro` in two fresh clones, then the two claims tables compared byte
for byte.

    python3 benchmarks/repro_twice.py [--workdir /tmp/repro] [--keep]

Each clone builds its own venv from the pins and runs the default profile (about 23 min each on 2
cores); they run one after the other so neither shares the cores. The virtual clock reads the
committed reference calibrations (calibrations/), so nothing in the table depends on how busy the
machine was. The last line is one JSON object: ``identical`` (claims.csv byte for byte), the sha256 of
each, and each run's wall time. Not a `bench_*` file, so `make bench` leaves it out (it takes most of an hour).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def repro(clone: Path) -> float:
    """Clone the committed HEAD into ``clone``, run `make repro` there; returns its wall seconds."""
    if clone.exists():
        shutil.rmtree(clone)
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    start = time.monotonic()
    subprocess.run(["make", "repro"], cwd=clone, check=True)
    return time.monotonic() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", default="/tmp/dynamix-repro", help="where the two clones go")
    ap.add_argument("--keep", action="store_true", help="keep the clones afterwards")
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    seconds, digests = {}, {}
    for name in ("a", "b"):
        seconds[name] = round(repro(work / name), 1)
        table = (work / name / "results" / "claims" / "claims.csv").read_bytes()
        digests[name] = hashlib.sha256(table).hexdigest()
    if not args.keep:
        shutil.rmtree(work)
    print(json.dumps({"identical": digests["a"] == digests["b"], "sha256": digests, "seconds": seconds}))


if __name__ == "__main__":
    main()
