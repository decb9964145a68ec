"""Tracking server mode: ``harness server [--port 5000] [--root mlruns/server]``.

A thin wrapper around ``mlflow server`` for a local, single-user lab server:

- backend store ``sqlite:///<root>/mlflow.db`` (``root`` made absolute);
- artifacts stored under ``<root>/artifacts`` and *served through the server*
  (``--serve-artifacts --artifacts-destination``): new experiments get the
  ``mlflow-artifacts:/`` root, so a client that only reaches the server over HTTP can
  upload and download artifacts;
- bound to ``127.0.0.1`` by default, one worker, background job execution off
  (``MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false``), started in its own process group so
  :meth:`ServerHandle.stop` ends the server and its worker together.

Send runs to it with ``python -m harness.run tracking.uri=http://127.0.0.1:5000`` (or
``MLFLOW_TRACKING_URI``) and open the same address in a browser for the MLflow UI.
MLflow's server has no authentication here: keep it on the loopback interface unless the
network is trusted.

Python API (used by the tests)::

    from harness.tracking.server import start_server
    with start_server("/tmp/lab") as server:     # free loopback port, waits for /health
        print(server.url)                          # http://127.0.0.1:PORT
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from harness.params import Param, check_all

#: Seconds :func:`start_server` waits for ``/health`` (startup migrates a fresh DB, ~5 s here).
DEFAULT_START_TIMEOUT_S = 90.0

#: Characters of the server log quoted in an error when the server does not come up.
LOG_TAIL_CHARS = 4000

#: Attempts with a new free port when an automatically chosen port was taken meanwhile.
PORT_ATTEMPTS = 3


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (the OS picks it; it may be taken
    again before the server binds it, which :func:`start_server` retries)."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def backend_uri(root: str | Path) -> str:
    """``sqlite:///<absolute root>/mlflow.db``: the server's backend store for ``root``."""
    return f"sqlite:///{Path(root).resolve() / 'mlflow.db'}"


def server_command(root: str | Path, port: int, host: str = "127.0.0.1", workers: int = 1) -> list[str]:
    """The ``mlflow server`` command line for a server rooted at ``root``.

    Args:
        root: folder holding ``mlflow.db`` and ``artifacts/`` (made absolute; not created here).
        port: TCP port, 1..65535.
        host: interface to bind; ``127.0.0.1`` keeps the server local.
        workers: uvicorn worker processes, >= 1.

    Raises:
        ValueError: ``port`` outside 1..65535 or ``workers`` < 1.
    """
    check_all((Param("port", "int", low=1, high=65535, need="an integer in 1..65535"), Param("workers", "int", low=1)), {"port": port, "workers": workers})
    root = Path(root).resolve()
    return [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--backend-store-uri",
        backend_uri(root),
        "--serve-artifacts",
        "--artifacts-destination",
        str(root / "artifacts"),
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        str(workers),
    ]


def server_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for the server: ``base`` (default ``os.environ``) with background job
    execution switched off and the artifact progress bar silenced."""
    env = dict(os.environ if base is None else base)
    env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
    env.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    return env


@dataclass
class ServerHandle:
    """A running ``mlflow server`` started by :func:`start_server`.

    Attributes:
        url: base URL, e.g. ``http://127.0.0.1:5000``; use it as ``tracking.uri``.
        host, port: where it listens.
        root: absolute folder of its ``mlflow.db``, ``artifacts/`` and ``server.log``.
        process: the ``mlflow server`` process, leader of its own process group.
        log_path: the file receiving the server's stdout and stderr.
    """

    url: str
    host: str
    port: int
    root: Path
    process: subprocess.Popen = field(repr=False)
    log_path: Path

    @property
    def tracking_uri(self) -> str:
        """The tracking URI clients use (same as :attr:`url`)."""
        return self.url

    def alive(self) -> bool:
        """True while the server process has not exited."""
        return self.process.poll() is None

    def log_tail(self, chars: int = LOG_TAIL_CHARS) -> str:
        """The last ``chars`` characters of the server log ('' when there is none)."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, timeout: float = 15.0) -> int | None:
        """Stop the server and its workers: SIGTERM to the process group, SIGKILL after
        ``timeout`` seconds. Idempotent; returns the server's exit code (None if unknown)."""
        proc = self.process
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=timeout)
        # workers outlive a leader killed from outside: clear what is left of the group
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        return proc.returncode

    def __enter__(self) -> "ServerHandle":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _healthy(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout) as resp:  # noqa: S310 - loopback URL we built
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def start_server(
    root: str | Path,
    port: int | None = None,
    host: str = "127.0.0.1",
    timeout: float = DEFAULT_START_TIMEOUT_S,
    workers: int = 1,
) -> ServerHandle:
    """Start ``mlflow server`` for ``root`` in a new process group and wait until it answers.

    Args:
        root: folder for ``mlflow.db``, ``artifacts/`` and ``server.log`` (created).
        port: TCP port; None picks a free one on ``host`` (retried up to
            :data:`PORT_ATTEMPTS` times if another process takes it first).
        host: interface to bind (default loopback).
        timeout: seconds to wait for ``GET /health`` to answer 200, > 0.
        workers: uvicorn workers, >= 1.

    Returns:
        A :class:`ServerHandle`; call ``stop()`` (or use it as a context manager).

    Raises:
        ValueError: bad ``port``, ``workers`` or ``timeout``.
        RuntimeError: the server exited or did not answer within ``timeout``; the message
            holds the command and the tail of ``server.log``.
    """
    if not timeout > 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
    root = Path(root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    (root / "artifacts").mkdir(exist_ok=True)
    attempts = PORT_ATTEMPTS if port is None else 1
    error = None
    for _ in range(attempts):
        chosen = free_port(host) if port is None else port
        handle, error = _start_once(root, chosen, host, timeout, workers)
        if handle is not None:
            return handle
    raise RuntimeError(error)


def _start_once(root: Path, port: int, host: str, timeout: float, workers: int) -> tuple[ServerHandle | None, str]:
    cmd = server_command(root, port, host=host, workers=workers)
    log_path = root / "server.log"
    with open(log_path, "ab") as log:
        log.write(f"\n--- {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd)}\n".encode())
        log.flush()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=server_env(), start_new_session=True)
    url = f"http://{host}:{port}"
    handle = ServerHandle(url=url, host=host, port=port, root=root, process=proc, log_path=log_path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not handle.alive():
            handle.stop()
            return None, (
                f"mlflow server exited with code {proc.returncode} before answering on {url}/health "
                f"(command: {' '.join(cmd)}); end of {log_path}:\n{handle.log_tail()}"
            )
        if _healthy(url):
            return handle, ""
        time.sleep(0.25)
    handle.stop()
    return None, (f"mlflow server did not answer on {url}/health within {timeout:g} s (command: {' '.join(cmd)}); end of {log_path}:\n{handle.log_tail()}")
