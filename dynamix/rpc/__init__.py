"""The gRPC arbitrator: the paper's centralized agent as a network service.

It sits on the policies (:mod:`dynamix.policies`) and the window state
(:mod:`dynamix.metrics.schema`); the engine asks it for batch sizes
(``dynamix launch --arbitrator``), ``dynamix arbitrator serve`` (:mod:`dynamix.commands.arbitrator`)
serves it, and sim2real and the inference experiment run one in process.

Modules, in data-flow order (a worker's window report in, its next batch size out):

- ``codegen``     stubs from ``protos/dynamix/rpc/v1/arbitrator.proto`` (built at setup) into
                  ``v1``, which refuses to import missing or stale stubs
- ``source``      ``RemoteDecisionSource`` for the engine (``dynamix launch --arbitrator``)
- ``client``      worker side: deadlines, bounded retries, fail-open, reconnect
- ``server``      the thin servicer on grpc's asyncio server, health service, token/TLS
- ``convert``     messages <-> :mod:`dynamix.metrics.schema` dataclasses
- ``validate``    range and consistency checks on reports (errors name the field)
- ``arbitrator``  the logic in plain Python: registration, per-window barrier, policy calls
- ``snapshots``   each run's latest policy-state snapshot, kept across arbitrator restarts
                  (``--state-file``; JSON, data only)
- ``local``       an arbitrator on loopback for one process's lifetime (experiments, tests)

Usage (one arbitrator, workers started by the engine from the same profile)::

    dynamix arbitrator serve --policy lbbsp --port 50051 --profile smoke --state-file results/tmp/arb.json
    dynamix launch --nproc 4 --profile smoke --arbitrator 127.0.0.1:50051 --out results/tmp/engine-arb

For RL training construct :class:`~dynamix.rpc.arbitrator.Arbitrator` with
``on_decision=callback``: it receives ``(workers, glob, decision)`` after every window, in order.

This package's ``__init__`` imports nothing so that ``python -m dynamix.rpc.codegen`` runs without
stubs.
"""
