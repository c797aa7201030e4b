"""Single-process training with a static batch size: ``dynamix train``.

The reference loop: the distributed engine and the simulator generalise it to many workers, but a
run here is the ground truth they are tested against. Outputs in ``out_dir``:

- ``iterations.csv``: one row per iteration, columns :data:`ITER_COLUMNS` (units in the names;
  ``test_*`` are empty except on evaluation iterations);
- ``summary.json``: final test accuracy and loss, best test accuracy, wall time, samples/s, config hash;
- ``checkpoint.pt``: model, optimiser, sampler and augmentation RNG state, written atomically every
  ``train.checkpoint_every`` iterations. Re-running the same command resumes from it and ends with
  the same weights as an uninterrupted run (rows after the checkpoint are discarded and redone).
"""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from dynamix.config import Config, TrainConfig
from dynamix.csvlog import append_rows, truncate_rows
from dynamix.data import BatchMaker, GlobalSampler, load_cifar10
from dynamix.models import build_model
from dynamix.seeding import derive_seed, seed_everything
from dynamix.train import checkpoint
from dynamix.train.core import Trainer
from dynamix.train.device import compute_settings, synchronize

log = logging.getLogger(__name__)

ITER_COLUMNS = [
    "iteration", "epoch", "batch_size", "lr", "loss", "batch_acc", "grad_norm",
    "iter_time_ms", "elapsed_s", "test_loss", "test_acc",
]


def total_iterations(cfg: Config, n_train: int, batch: int) -> int:
    """The run's length: ``train.max_iters`` when set, else ceil(epochs * n_train / batch)."""
    if cfg.train.max_iters:
        return cfg.train.max_iters
    return max(1, math.ceil(cfg.train.epochs * n_train / batch))


def epoch_cap(cfg: Config, epochs: float) -> float:
    """The safety cap on epochs of a time-budgeted run that would take ``epochs`` at ``batch.initial``:
    within the same time, batches up to ``batch.max`` fit at most ``batch.max / batch.initial`` times
    the samples."""
    return epochs * max(1.0, cfg.batch.max / cfg.batch.initial)


def schedule_progress(train: TrainConfig, iteration: int, epochs_done: float) -> float:
    """p of the learning-rate schedule, in [0, 1]: the run's own progress, iterations / ``max_iters``
    when set, else its epochs over ``schedule_epochs`` (0: ``epochs``). Never virtual time: under a
    shared time budget every policy would decay at the same second and cross a target together."""
    if train.max_iters:
        return min(1.0, iteration / train.max_iters)
    return min(1.0, epochs_done / max(train.schedule_epochs or train.epochs, 1e-12))


def eval_subset(n_test: int, samples: int) -> torch.Tensor:
    """Fixed, class-mixed test indices (the first ``samples`` of a seed-0 permutation; all if 0)."""
    if samples <= 0 or samples >= n_test:
        return torch.arange(n_test)
    g = torch.Generator().manual_seed(derive_seed(0, "eval-subset"))
    return torch.randperm(n_test, generator=g)[:samples].sort().values


def run_training(cfg: Config, out_dir: str | Path, progress: bool = True) -> dict:
    """Train ``cfg.model`` on ``cfg.data`` at ``cfg.train.batch_size``; resume if a checkpoint exists."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    settings = compute_settings(cfg.train)  # a bad device fails before the data are decoded
    data = load_cifar10(cfg.data)
    b = cfg.train.batch_size
    n_iters = total_iterations(cfg, len(data.train_y), b)
    seed_everything(cfg.train.seed)
    trainer = Trainer(build_model(cfg.model.name, cfg.model.width), cfg.optim, n_iters, **settings)
    sampler = GlobalSampler(len(data.train_y), cfg.train.seed)
    maker = BatchMaker(data.train_x, data.train_y, cfg.data.augment, cfg.train.seed)
    test_idx = eval_subset(len(data.test_y), cfg.train.eval_samples)
    test_x, test_y = data.test_x[test_idx], data.test_y[test_idx]

    ckpt_path, csv_path = out / "checkpoint.pt", out / "iterations.csv"
    state = checkpoint.load(ckpt_path, expect={"config_hash": cfg.hash()})
    elapsed, rows_done, best = 0.0, 0, 0.0
    if state is not None:
        trainer.load_state_dict(state["trainer"])
        sampler.load_state_dict(state["sampler"])
        maker.load_state_dict(state["maker"])
        elapsed, rows_done, best = state["elapsed_s"], state["rows"], state["best_test_acc"]
        log.info("resuming %s at iteration %d", out, trainer.iteration)
    truncate_rows(csv_path, rows_done)

    pending: list[dict] = []
    last_test = (math.nan, math.nan)
    bar = tqdm(total=n_iters, initial=trainer.iteration, desc=f"train {cfg.model.name} b={b}",
               unit="it", disable=not progress, mininterval=1.0)
    while trainer.iteration < n_iters:
        t0 = time.perf_counter()
        (idx,) = sampler.next([b])
        x, y = maker(idx)
        stats = trainer.step(x, y)
        synchronize(trainer.device)
        dt = time.perf_counter() - t0
        elapsed += dt
        it = trainer.iteration
        row = {"iteration": it, "epoch": sampler.epochs_done, "batch_size": b, "lr": trainer.lr,
               "loss": stats.loss, "batch_acc": stats.acc, "grad_norm": math.sqrt(stats.grad_sqnorm),
               "iter_time_ms": dt * 1e3, "elapsed_s": elapsed, "test_loss": "", "test_acc": ""}
        if it % cfg.train.eval_every == 0 or it == n_iters:
            last_test = trainer.evaluate(test_x, test_y)
            best = max(best, last_test[1])
            row["test_loss"], row["test_acc"] = last_test
            bar.set_postfix(test_acc=f"{last_test[1]:.3f}", loss=f"{stats.loss:.3f}")
        pending.append(row)
        bar.update(1)
        if it % cfg.train.checkpoint_every == 0 or it == n_iters:
            rows_done += append_rows(csv_path, pending, ITER_COLUMNS)
            pending = []
            checkpoint.save(ckpt_path, {
                "config_hash": cfg.hash(), "trainer": trainer.state_dict(), "sampler": sampler.state_dict(),
                "maker": maker.state_dict(), "elapsed_s": elapsed, "rows": rows_done, "best_test_acc": best,
            })
    bar.close()
    if math.isnan(last_test[1]):  # resumed after the final checkpoint: evaluate once more
        last_test = trainer.evaluate(test_x, test_y)
    summary = {
        "model": cfg.model.name, "batch_size": b, "iterations": trainer.iteration,
        "epochs": sampler.epochs_done, "final_test_acc": last_test[1], "final_test_loss": last_test[0],
        "best_test_acc": max(best, last_test[1]), "train_time_s": elapsed,
        "throughput_samples_per_s": trainer.iteration * b / max(elapsed, 1e-9),
        "data_source": data.source, "config_hash": cfg.hash(), "seed": cfg.train.seed,
        "device": trainer.device,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary

