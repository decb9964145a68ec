"""``harness server``: a local MLflow tracking server.

The library is :mod:`harness.tracking.server`.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from typing import Sequence

from harness.tracking.server import DEFAULT_START_TIMEOUT_S, backend_uri, start_server


def _parser() -> argparse.ArgumentParser:
    from harness.experiment.build import PROJECT_ROOT

    p = argparse.ArgumentParser(
        prog="harness server",
        description=(
            "Start a local MLflow tracking server (SQLite backend, artifacts served through the server). "
            "Send runs to it with: python -m harness.run tracking.uri=http://HOST:PORT"
        ),
    )
    p.add_argument("--port", type=int, default=5000, help="TCP port (default 5000; 0 = any free port)")
    p.add_argument(
        "--root",
        default=str(PROJECT_ROOT / "mlruns" / "server"),
        help="folder for mlflow.db, artifacts/ and server.log (default: <project>/mlruns/server)",
    )
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1; the server has no authentication)")
    p.add_argument(
        "--timeout", type=float, default=DEFAULT_START_TIMEOUT_S, help=f"seconds to wait for the server to answer (default {DEFAULT_START_TIMEOUT_S:g})"
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: start the server, print its URL, keep it running until Ctrl-C or SIGTERM.

    Returns the exit code: 0 after a requested stop, 1 when the server could not start or
    died, 2 on bad arguments.
    """
    args = _parser().parse_args(argv)
    if not 0 <= args.port <= 65535:
        print(f"error: --port must be in 0..65535, got {args.port}", file=sys.stderr)
        return 2
    if not args.timeout > 0:
        print(f"error: --timeout must be > 0 seconds, got {args.timeout}", file=sys.stderr)
        return 2
    try:
        server = start_server(args.root, port=args.port or None, host=args.host, timeout=args.timeout)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"MLflow tracking server: {server.url}  (UI and REST API)")
    print(f"backend store:          {backend_uri(server.root)}")
    print(f"artifacts:              {server.root / 'artifacts'} (served through the server)")
    print(f"log:                    {server.log_path}")
    print(f"process group:          {server.process.pid}")
    print(f"log runs to it with:    python -m harness.run tracking.uri={server.url}")
    print("Ctrl-C stops it.")
    sys.stdout.flush()

    def _terminate(signum, frame):  # noqa: ARG001 - signal handler signature
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _terminate)
    try:
        while server.alive():
            time.sleep(0.5)
    except KeyboardInterrupt:
        server.stop()
        print("server stopped")
        return 0
    print(f"error: the server exited with code {server.process.returncode}; end of {server.log_path}:\n{server.log_tail()}", file=sys.stderr)
    server.stop()
    return 1


def run_command(argv: Sequence[str]) -> int:
    """``harness server ARGV``: the exit code of :func:`main`."""
    return main(list(argv))
