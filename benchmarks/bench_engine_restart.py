"""Iterations lost when a worker dies under ``torchrun --max-restarts``.

Runs the engine (2 workers, mlp) under the real launcher, SIGKILLs rank 1 once ``progress.json``
reports ``--kill-after`` iterations, and lets torchrun restart the group from ``checkpoint.pt``.
Reports the checkpoint it resumed from, the iterations redone (``iterations_lost``: last window end
reached minus the checkpoint; the kill can land up to k-1 iterations after that window end), and
whether the final test loss equals an uninterrupted run's.

    .venv/bin/python benchmarks/bench_engine_restart.py [--checkpoint-every 10 --kill-after 25]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from dynamix import config as config_mod
from dynamix import paths
from dynamix.engine import run_local

sys.path.insert(0, str(paths.ROOT / "tests"))  # tests/helpers/: shared with the tests, not part of the package
from helpers.engine import kill_rank_under_torchrun  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=80)
    ap.add_argument("--window", type=int, default=5)
    ap.add_argument("--checkpoint-every", type=int, default=10)
    ap.add_argument("--kill-after", type=int, default=25)
    args = ap.parse_args()
    cfg = config_mod.load(profile="smoke", overrides=[
        "model.name=mlp", "model.width=0.0625", f"train.max_iters={args.iters}", f"batch.window={args.window}",
        f"train.checkpoint_every={args.checkpoint_every}", "train.eval_every=40", "train.eval_samples=200"])
    with tempfile.TemporaryDirectory() as tmp:
        ref = run_local(cfg, None, "static:32", Path(tmp) / "ref", 2, method="torchrun")
        run = kill_rank_under_torchrun(cfg, Path(tmp) / "killed", 2, kill_after_iteration=args.kill_after,
                                       policy_spec="static:32")
    (resume,) = run["resumes"]
    print(json.dumps({
        "benchmark": "engine_restart", "iterations": run["iterations"], "window": args.window,
        "checkpoint_every": args.checkpoint_every, "killed_at_iteration": run["killed_at_iteration"],
        "resumed_from_iteration": resume["from_iteration"], "iterations_lost": run["iterations_lost"],
        "final_test_loss": run["final_test_loss"], "uninterrupted_final_test_loss": ref["final_test_loss"],
        "same_result": abs(run["final_test_loss"] - ref["final_test_loss"]) <= 1e-6,
    }))


if __name__ == "__main__":
    main()
