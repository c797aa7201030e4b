"""Generated stubs of ``dynamix.rpc.v1`` (``arbitrator_pb2``, ``arbitrator_pb2_grpc``); not committed.

Importing this package checks that the stubs exist and match the proto, and otherwise raises
:class:`dynamix.rpc.codegen.StaleStubsError` saying how to regenerate them.
"""

from dynamix.rpc.codegen import ensure_fresh

ensure_fresh()
