"""Where the model math runs: ``train.device``, ``train.amp`` and ``train.channels_last`` resolved once.

Every real-math path (the simulator, ``dynamix train``, ``calibrate``, ``evaluate``, the engine)
builds its :class:`~dynamix.train.core.Trainer` from :func:`compute_settings`, so one setting moves
all of them. ``auto`` is CUDA when torch sees a GPU, else the CPU; on the CPU the default settings
run exactly the float32, NCHW math of a plain PyTorch loop, so same-seed runs stay bit-identical.

Batches are built on the CPU (the augmentation generators are CPU generators, so a seed fixes the
same crops and flips on any device) and moved to the device per worker batch.
"""

from __future__ import annotations

import os

import torch

from dynamix.config import ConfigError, TrainConfig

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}

# cuBLAS picks its reduction order per call unless a fixed workspace is configured, and reads this
# when its first handle is made: every real-math path imports this module before its first CUDA matmul.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def deterministic_cuda() -> None:
    """Same seed, same bits on a GPU too, as on the CPU: cuDNN's deterministic algorithms without
    autotuning, and torch's deterministic kernels where it has them (``warn_only``: an op without
    one warns instead of failing the run). Without this, same-seed runs of the tiny CNN on an H200
    parted in the fourth decimal of the training loss within four windows. The switches are
    process-wide: CPU work later in a process that trained on CUDA runs under them too (torch then
    also fills the memory of new tensors)."""
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True, warn_only=True)


def resolve_device(spec: str = "auto") -> str:
    """``train.device`` -> a concrete torch device string (``cpu`` or ``cuda:N``).

    Raises :class:`ConfigError` naming the field when CUDA is asked for but absent or the index is
    out of range.
    """
    if spec == "auto":
        spec = "cuda" if torch.cuda.is_available() else "cpu"
    if spec == "cpu":
        return "cpu"
    if not (spec == "cuda" or spec.startswith("cuda:")):
        raise ConfigError(f"train.device = {spec!r} is not allowed: must be one of 'auto', 'cpu', 'cuda', "
                          "'cuda:N' (N a GPU index)")
    if not torch.cuda.is_available():
        raise ConfigError(f"train.device = {spec!r} but torch sees no CUDA device: use 'auto' or 'cpu'")
    count = torch.cuda.device_count()
    index = torch.cuda.current_device() if spec == "cuda" else int(spec.split(":", 1)[1])
    if index >= count:
        raise ConfigError(f"train.device = {spec!r} is out of range: torch sees {count} CUDA device(s), "
                          f"cuda:0..cuda:{count - 1}")
    return f"cuda:{index}"


def check_amp(amp: str, device: str) -> str:
    """``train.amp`` on the resolved ``device``: mixed precision is CUDA only (a clear error on CPU)."""
    if amp == "none":
        return amp
    if amp not in AMP_DTYPES:
        raise ConfigError(f"train.amp = {amp!r} is not allowed: must be one of 'none', 'bf16', 'fp16'")
    if not device.startswith("cuda"):
        raise ConfigError(f"train.amp = {amp!r} needs a CUDA device, but train.device resolves to {device!r}: "
                          "set train.amp = none on the CPU")
    if amp == "bf16" and not torch.cuda.is_bf16_supported():
        raise ConfigError(f"train.amp = 'bf16' is not supported by {torch.cuda.get_device_name(device)}: "
                          "use fp16 or none")
    return amp


def compute_settings(train: TrainConfig, device: str | None = None) -> dict:
    """Keyword arguments of :class:`~dynamix.train.core.Trainer` for ``train`` (``device`` overrides
    ``train.device``, e.g. the engine's per-rank GPU): ``device``, ``amp``, ``channels_last``."""
    dev = resolve_device(train.device) if device is None else device
    return {"device": dev, "amp": check_amp(train.amp, dev), "channels_last": train.channels_last}


def synchronize(device: str) -> None:
    """Wait for queued kernels on ``device`` (CUDA launches are asynchronous: time after this)."""
    if str(device).startswith("cuda"):
        torch.cuda.synchronize(device)
