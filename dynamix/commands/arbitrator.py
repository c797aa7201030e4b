"""``dynamix arbitrator serve``: run the gRPC arbitrator with a batch-size policy.

Examples::

    dynamix arbitrator serve --policy static:128 --port 0      # prints the chosen port
    dynamix arbitrator serve --policy lbbsp --profile smoke --set arbitrator.barrier_timeout_s=0.5
    DYNAMIX_ARBITRATOR_TOKEN=secret dynamix arbitrator serve --host 0.0.0.0 --port 50051 --policy gns

Run settings (window k, bounds, actions) come from the ``batch`` section and the server's timing
from the ``arbitrator`` section of params.yaml (profile and ``--set section.key=value`` overrides), so
start workers from the same profile and overrides. The first stdout line is
``arbitrator listening on HOST:PORT`` (flushed) so scripts can wait for it. A policy the settings
cannot run (an artifact trained for other bounds or actions), a port in use and a ``--state-file``
the arbitrator did not write are refused at start, in one line with exit status 2.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import signal
import threading
from pathlib import Path

from dynamix import config
from dynamix.commands.options import add_config_arguments
from dynamix.errors import UserError
from dynamix.policies import make_live_policy

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    serve = sub.add_parser("serve", help="serve decisions until SIGINT/SIGTERM")
    serve.add_argument("--policy", help="policy spec, e.g. static:64, lbbsp, gns, ramp, dynamix:PATH "
                                        "(default: policy.spec of the profile)")
    serve.add_argument("--host", help="bind address (default: arbitrator.host, 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port; 0 picks a free one (default: arbitrator.port)")
    add_config_arguments(serve)
    serve.add_argument("--token-file", type=Path, help="file holding the shared token "
                                                        "(default: $DYNAMIX_ARBITRATOR_TOKEN)")
    serve.add_argument("--tls-cert", type=Path, help="PEM certificate chain (enables TLS)")
    serve.add_argument("--tls-key", type=Path, help="PEM private key for --tls-cert")
    serve.add_argument("--state-file", type=Path, help="persist the policy's state (JSON) after every decision and "
                                                       "restore it when workers re-join after a restart; a new "
                                                       "file, or one an arbitrator wrote")


def read_token(path: Path | None, env_value: str | None, env_name: str) -> str | None:
    """The shared token from ``--token-file`` or the environment; None when neither is given. An empty,
    blank or non-text token is an error: it would otherwise switch authentication off without a word."""
    if path is not None:
        try:
            token = path.read_bytes().decode("utf-8").strip()
        except UnicodeDecodeError:
            raise UserError(f"--token-file {path}: not a text file (UTF-8 token expected)") from None
        if not token:
            raise UserError(f"--token-file {path} is empty: the token must be a non-empty string")
        return token
    if env_value is not None and not env_value.strip():
        raise UserError(f"${env_name} is set but empty: set a non-empty token, or unset it")
    return env_value.strip() if env_value is not None else None


def main(args: argparse.Namespace) -> int:
    from dynamix.rpc.arbitrator import Arbitrator, PolicyFailure, RunSettings
    from dynamix.rpc.server import TOKEN_ENV, ArbitratorServer
    from dynamix.rpc.snapshots import PolicyStateStore

    overrides: dict = {}
    for text in args.overrides:
        overrides = config.deep_merge(overrides, config.parse_override(text))
    given = {"host": args.host, "port": args.port}  # taken as typed, not parsed as YAML
    overrides = config.deep_merge(overrides, {"arbitrator": {k: v for k, v in given.items() if v is not None}})
    cfg = config.load(args.params, args.profile, overrides)
    spec = args.policy or cfg.policy.spec
    policy = make_live_policy(spec, bounds=cfg.batch)  # a spec the run's bounds refuse never starts
    token = read_token(args.token_file, os.environ.get(TOKEN_ENV), TOKEN_ENV)
    if bool(args.tls_cert) != bool(args.tls_key):
        raise UserError("--tls-cert and --tls-key go together: give both or neither")
    tls = (args.tls_key.read_bytes(), args.tls_cert.read_bytes()) if args.tls_cert else None
    store = PolicyStateStore(args.state_file) if args.state_file else None  # refuses a file it did not write
    arbitrator = Arbitrator(policy, RunSettings.from_config(cfg), store=store)
    try:
        arbitrator.check_policy()
    except PolicyFailure as exc:
        raise UserError(f"--policy {spec}: {exc}") from None
    try:
        server = ArbitratorServer(arbitrator, cfg.arbitrator.host, cfg.arbitrator.port, token=token, tls=tls)
    except (ValueError, OSError) as exc:
        raise UserError(f"cannot serve on {cfg.arbitrator.host}:{cfg.arbitrator.port} "
                        f"(arbitrator.host, arbitrator.port): {exc}") from exc
    # Every report allocates a few dozen short-lived objects; the collector's full passes would otherwise
    # walk everything this process holds for life (grpc, protobuf, the policy) every so often: freeze
    # that, and collect the young generation ~30x less often (bench_rpc.py: the window at 32 workers
    # 1.31-1.36x the barrier floor, 1.38-1.40x without)
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)
    print(f"arbitrator listening on {server.target}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    log.info("shutting down after %d decisions", arbitrator.decisions)
    server.stop()
    if store is not None:
        store.close()
    return 0
