"""Same commit, same table: `make repro` in fresh clones, their claims compared with each other or
with the committed ones.

    python3 benchmarks/repro_twice.py [--workdir /tmp/repro] [--keep]
    python3 benchmarks/repro_twice.py --against-committed [--clone DIR]

Each clone builds its own venv from the pins and runs the default profile (about 40 min each on 2
cores); two run one after the other so neither shares the cores. The virtual clock reads the
committed reference calibrations (calibrations/), so nothing in the table depends on how busy the
machine was. ``--against-committed`` runs one clone (or reads ``--clone``, a finished one) and compares
its ``results/summary.json`` claims with this checkout's committed ``results/summary.json``
(:func:`dynamix.experiments.claims.disagreements`). On the CPU model that made the committed table
(``summary.json``'s ``cpu``) the rerun must give the same table: every verdict, miss count and seed count
equal, every estimate and interval end within ``claims.REPRO_REL_TOL``. On another model, every
verdict and seed count equal and each estimate inside the other's interval. The last line is one JSON
object: ``identical`` (two clones: claims.csv byte for byte) or ``agrees`` (against the committed, by
the rule it names), the differences or digests, and each run's wall time. Not a `bench_*` file, so
`make bench` leaves it out (it takes most of an hour per clone).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
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


def summary_of(root: Path) -> dict:
    return json.loads((root / "results" / "summary.json").read_text())


def against_committed(clone: Path, run: bool) -> dict:
    sys.path.insert(0, str(ROOT))
    from dynamix.experiments.claims import disagreements, same_cpu_model

    seconds = round(repro(clone), 1) if run else None
    fresh, committed = summary_of(clone), summary_of(ROOT)
    same = same_cpu_model(fresh.get("cpu"), committed.get("cpu"))
    diff = disagreements(fresh["claims"], committed["claims"], same_cpu=same)
    return {"agrees": not diff, "rule": "identical" if same else "another CPU model: within intervals",
            "cpu": {"rerun": fresh.get("cpu"), "committed": committed.get("cpu")},
            "disagreements": diff, "claims": len(committed["claims"]), "seconds": seconds}


def twice(work: Path) -> dict:
    seconds, digests = {}, {}
    for name in ("a", "b"):
        seconds[name] = round(repro(work / name), 1)
        table = (work / name / "results" / "claims" / "claims.csv").read_bytes()
        digests[name] = hashlib.sha256(table).hexdigest()
    return {"identical": digests["a"] == digests["b"], "sha256": digests, "seconds": seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", default="/tmp/dynamix-repro", help="where the clones go")
    ap.add_argument("--keep", action="store_true", help="keep the clones afterwards")
    ap.add_argument("--against-committed", action="store_true", help="one clone against the committed claims")
    ap.add_argument("--clone", help="with --against-committed: a clone that has run make repro already")
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    if args.against_committed:
        result = against_committed(Path(args.clone) if args.clone else work / "a", run=not args.clone)
    else:
        result = twice(work)
    if not args.keep and not args.clone:
        shutil.rmtree(work)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
