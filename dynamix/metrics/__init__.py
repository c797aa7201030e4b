"""Per-worker measurements and the window state every backend reports and every policy reads.

At the bottom of the layers (it imports only :mod:`dynamix.comm`, for the codec's counts): the
engine's workers measure through it, the simulator and the surrogate emit its dataclasses, and the
policies, the arbitrator, the agent's state and the evaluation read them.

Modules, in data-flow order (one worker's counters and gradients in, a window's row out):

- ``ebpf``       optional TCP retransmission counter: ``bpftrace`` on a kernel tracepoint (root);
- ``system``     network bytes and retransmissions of the worker's own sockets (TCP_INFO, /proc
                 fallback), CPU-time ratio, memory utilisation; never breaks training;
- ``gradstats``  gradient norms and the normalised gradient std / variance over a window;
- ``window``     one worker's per-iteration time split, training statistics and counters, aggregated
                 into a ``WorkerWindow`` every k iterations;
- ``schema``     ``WorkerWindow`` and ``GlobalWindow``, the window state, also the rows of
                 ``runs.csv`` (``RUNS_COLUMNS``).
"""
