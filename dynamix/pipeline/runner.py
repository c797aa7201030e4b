"""The whole pipeline of one profile into its own results root, outside DVC.

``dvc repro`` runs the pipeline of the profile in ``params.yaml`` into ``results/`` (the quick default
profile, tracked by ``dvc.lock``). Another profile, such as the converged ``cpu`` profile, runs the
same notebooks in the same order with :func:`run_pipeline`, into a results root of its own, so the
default profile's tracked results stay as they are:

    dynamix pipeline --profile cpu                      # -> results/profiles/cpu, resumable
    dynamix pipeline --profile cpu --publish            # then copy the headline files to docs/expected/cpu

Publishing lives in :mod:`dynamix.pipeline.publish`.

Each stage's notebook is executed by papermill with ``profile`` and ``results_dir`` injected and
``$DYNAMIX_RESULTS`` pointing at the root, so policies and the run cache
(:func:`dynamix.evaluation.plan.run_cache`) land there too. An interrupted run, started again,
redoes only the simulations that were in flight: finished runs come back from the run cache and
policy training resumes from its checkpoints. Several sittings make one run:

- ``stage_times.csv`` in the root records each stage's wall time (``stage, seconds, started_utc,
  config_hash, complete``). An attempt that fails or is interrupted (Ctrl-C, SIGTERM) adds its time
  to its stage's row, left incomplete; the attempt that completes the stage adds its own, so
  ``seconds`` is the stage's wall time over every sitting.
- A stage already complete under the same profile settings (``config_hash``) is skipped when the
  pipeline is started again; naming it in ``stages`` runs it again, its time starting from zero. An
  incomplete stage carries its time on whether named or not: its next attempt reuses the runs the
  interrupted one finished, so both attempts are the stage's cost.
- ``selection`` chooses among the policies ``policy_training`` trained, so it runs again whenever
  ``policy_training`` ran in this sitting, complete or named or not: a choice among other policies
  would name an artifact that has changed (:func:`dynamix.evaluation.policy_names.trained_policy`
  refuses it).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import signal
import time
from pathlib import Path
from typing import Iterator, Sequence

import pandas as pd

from dynamix import config, io, paths
from dynamix.pipeline import notebooks as gen

log = logging.getLogger(__name__)

STAGES = tuple(spec.experiment for spec in gen.NOTEBOOKS)
"""The stages in pipeline order (one notebook each, as in dvc.yaml), the rows of ``stage_times.csv``."""

FOLLOWS = {"selection": "policy_training"}
"""Stage -> the stage whose outputs it chooses among: it runs again whenever that one ran (module
docstring)."""


def default_root(profile: str) -> Path:
    """Where a profile's pipeline writes: ``results/`` for the DVC-tracked default, else ``results/profiles/<profile>``."""
    return paths.RESULTS if profile == "default" else paths.RESULTS / "profiles" / profile


@contextlib.contextmanager
def _results_env(root: Path) -> Iterator[None]:
    old = os.environ.get("DYNAMIX_RESULTS")
    os.environ["DYNAMIX_RESULTS"] = str(root)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("DYNAMIX_RESULTS", None)
        else:
            os.environ["DYNAMIX_RESULTS"] = old


def check_stages(stages: Sequence[str]) -> list[str]:
    """``stages`` in pipeline order; a ValueError naming the allowed ones for an unknown stage."""
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        raise ValueError(f"stage {unknown[0]!r} is unknown: must be one of {', '.join(STAGES)}")
    return [s for s in STAGES if s in set(stages)]


TIME_COLUMNS = ["stage", "seconds", "started_utc", "config_hash", "complete"]
"""The columns of ``stage_times.csv`` (one row per stage, pipeline order)."""


def read_times(root: Path) -> pd.DataFrame:
    """``root/stage_times.csv`` (empty when absent); rows written before ``complete`` existed count as complete."""
    path = root / "stage_times.csv"
    if not path.exists():
        return pd.DataFrame(columns=TIME_COLUMNS)
    table = pd.read_csv(path, keep_default_na=False)
    for col, default in (("config_hash", ""), ("complete", True)):
        if col not in table:
            table[col] = default
    table["complete"] = table["complete"].astype(str).str.lower().isin(["true", "1"])
    return table[TIME_COLUMNS]


def record_time(root: Path, stage: str, seconds: float, started: str, config_hash: str,
                complete: bool) -> pd.DataFrame:
    """Add ``seconds`` to ``stage``'s row of ``root/stage_times.csv`` (a new row when it has none, or
    when its earlier time was for other settings or already complete) and mark it ``complete``;
    returns the table in pipeline order."""
    old = read_times(root)
    prev = old[old["stage"] == stage]
    carry = (not prev.empty and not bool(prev["complete"].iloc[0])
             and prev["config_hash"].iloc[0] == config_hash)
    total = seconds + (float(prev["seconds"].iloc[0]) if carry else 0.0)
    first = str(prev["started_utc"].iloc[0]) if carry else started
    rows = old[old["stage"] != stage].to_dict("records") + [{
        "stage": stage, "seconds": round(total, 1), "started_utc": first, "config_hash": config_hash,
        "complete": complete}]
    table = pd.DataFrame(rows, columns=TIME_COLUMNS).sort_values("stage", key=lambda s: s.map(STAGES.index))
    io.write_csv(table, root / "stage_times.csv")
    return table


def completed(root: Path, config_hash: str) -> set[str]:
    """The stages ``stage_times.csv`` records as complete under ``config_hash``."""
    t = read_times(root)
    return set(t[t["complete"] & (t["config_hash"] == config_hash)]["stage"])


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt, so a stopped sitting still records the time it spent."""
    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    try:
        old = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def run_pipeline(profile: str, root: str | Path | None = None, stages: Sequence[str] | None = None,
                 cwd: Path = paths.ROOT, log_output: bool = False) -> Path:
    """Execute the notebooks of ``stages`` (default: every stage not yet complete under the profile's
    settings) in order with ``profile`` into ``root`` (default :func:`default_root`); returns the root.
    Executed notebooks go to ``root/notebooks``; each stage's time goes to ``stage_times.csv``."""
    import papermill

    root = Path(root) if root is not None else default_root(profile)
    cfg = config.load(profile=profile)
    cfg_hash = cfg.hash()
    todo = check_stages(stages) if stages else list(STAGES)
    done = set() if stages else completed(root, cfg_hash)
    root.mkdir(parents=True, exist_ok=True)

    def timed(name: str, step) -> None:
        started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        log.info("pipeline %s: stage %s", profile, name)
        t0 = time.perf_counter()
        complete = False
        try:
            step()
            complete = True
        finally:  # an interrupted or failed attempt keeps its time too
            record_time(root, name, time.perf_counter() - t0, started, cfg_hash, complete)

    def notebook(spec: gen.NotebookSpec) -> None:
        out = root / "notebooks" / f"{spec.stem}.ipynb"
        out.parent.mkdir(parents=True, exist_ok=True)
        papermill.execute_notebook(
            str(gen.path(spec)), str(out), parameters={"profile": profile, "results_dir": str(root)},
            kernel_name="python3", cwd=str(cwd), progress_bar=False, log_output=log_output,
        )  # fmt: skip

    ran: set[str] = set()
    with _results_env(root), _sigterm_as_interrupt():
        for spec in gen.NOTEBOOKS:
            stage = spec.experiment
            if stage not in todo and FOLLOWS.get(stage) not in ran:
                continue
            if stage in done and FOLLOWS.get(stage) not in ran:
                log.info("pipeline %s: stage %s is complete (stage_times.csv); --stages %s reruns it",
                         profile, stage, stage)
                continue
            timed(stage, lambda: notebook(spec))
            ran.add(stage)
    return root
