"""The gRPC arbitrator: the paper's centralized agent as a network service.

- :mod:`dynamix.rpc.codegen`     stubs from ``protos/dynamix/rpc/v1/arbitrator.proto`` (built at setup)
- :mod:`dynamix.rpc.arbitrator`  the logic in plain Python: registration, per-window barrier, policy calls
- :mod:`dynamix.rpc.validate`    range and consistency checks on reports (errors name the field)
- :mod:`dynamix.rpc.convert`     messages <-> :mod:`dynamix.metrics.schema` dataclasses
- :mod:`dynamix.rpc.state`       optional policy-state persistence across arbitrator restarts (JSON, data only)
- :mod:`dynamix.rpc.server`      the thin servicer on grpc's asyncio server, health service, token/TLS
- :mod:`dynamix.rpc.client`      worker side: deadlines, bounded retries, fail-open, reconnect
- :mod:`dynamix.rpc.source`      ``RemoteDecisionSource`` for the engine (``dynamix launch --arbitrator``)
- :mod:`dynamix.commands.arbitrator` ``dynamix arbitrator serve``

Usage (one arbitrator, workers started by the engine from the same profile)::

    dynamix arbitrator serve --policy lbbsp --port 50051 --profile smoke --state-file results/tmp/arb.json
    dynamix launch --nproc 4 --profile smoke --arbitrator 127.0.0.1:50051 --out results/tmp/engine-arb

For RL training construct :class:`~dynamix.rpc.arbitrator.Arbitrator` with
``on_decision=callback``: it receives ``(workers, glob, decision)`` after every window, in order.

This package's ``__init__`` imports nothing so that ``python -m dynamix.rpc.codegen`` runs without stubs.
"""
