"""The distributed engine: torch.distributed workers with per-worker batch sizes, weighted gradients,
ring and parameter-server synchronisation, heterogeneity emulation and per-window metrics.

It sits on the trainer (:mod:`dynamix.train`), the cluster spec, the metrics, the policies and the
arbitrator's client (:mod:`dynamix.rpc`); ``dynamix launch``, simulator validation, sim2real and the
inference experiment run it.

Entry points: ``dynamix launch`` (:mod:`dynamix.engine.launch`), :func:`run_local` (notebooks,
experiments, simulator validation), :class:`~dynamix.engine.worker.Engine` (one rank), and
:func:`dynamix.engine.world.spawn_world` (N local gloo ranks in one call).

Modules, in data-flow order (a config and a cluster spec in, ``runs.csv`` and checkpoints out):

- ``launch``     write the run's config and spec, build and run the torchrun command; check its
                 inputs before any rank starts;
- ``netns``      ``engine.net_mode: netns``: a network namespace per rank, bandwidth shaped by
                 ``tc tbf`` (root only);
- ``world``      N local gloo ranks in one call (:func:`run_local` with ``method="spawn"``, tests);
- ``torchrun``   torchrun whose failure is one line, naming the first failed rank;
- ``__main__``   the per-rank entry point torchrun starts: its arguments -> an ``Engine``;
- ``worker``     one rank: the bulk-synchronous loop, window metrics, ``runs.csv``, evaluation,
                 checkpoints;
- ``hetero``     the spec's speeds emulated by time dilation, its network by injected time;
- ``sync``       the weighted gradient reduction: ring all-reduce, parameter server, LHC forms;
- ``decisions``  where the next window's batch sizes come from: a local policy or the arbitrator.
"""

from dynamix.engine.launch import build_torchrun_command, run_local  # noqa: F401
