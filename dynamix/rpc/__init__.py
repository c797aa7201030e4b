"""The gRPC arbitrator: the paper's centralized agent as a network service.

- :mod:`dynamix.rpc.codegen`     stubs from ``protos/dynamix/rpc/v1/arbitrator.proto`` (built at setup)
- :mod:`dynamix.rpc.arbitrator`  the logic in plain Python: registration, per-window barrier, policy calls
- :mod:`dynamix.rpc.validate`    range and consistency checks on reports (errors name the field)
- :mod:`dynamix.rpc.convert`     messages <-> :mod:`dynamix.metrics.schema` dataclasses
- :mod:`dynamix.rpc.server`      the thin servicer, health service, token/TLS, ``serve()``
- :mod:`dynamix.rpc.client`      worker side: deadlines, bounded retries, fail-open, reconnect
- :mod:`dynamix.rpc.source`      ``RemoteDecisionSource`` for the engine (``dynamix launch --arbitrator``)
- :mod:`dynamix.rpc.cli`         ``dynamix arbitrator serve``

This package's ``__init__`` imports nothing so that ``python -m dynamix.rpc.codegen`` runs without stubs.
"""
