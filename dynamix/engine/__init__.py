"""The distributed engine: torch.distributed workers with per-worker batch sizes, weighted gradients,
ring and parameter-server synchronisation, heterogeneity emulation and per-window metrics.

Entry points: ``dynamix launch`` (:mod:`dynamix.engine.launch`), :func:`run_local` (notebooks,
experiments, simulator validation), :class:`~dynamix.engine.worker.Engine` (one rank), and
:func:`dynamix.engine.world.spawn_world` (N local gloo ranks in one call).
"""

from dynamix.engine.launch import build_torchrun_command, run_local  # noqa: F401
