"""Loopback servers for the tests (127.0.0.1 only, nothing leaves the machine).

* :func:`free_port`: a TCP port on 127.0.0.1 that was free a moment ago.
* :class:`LoopbackServer`: Python's threaded ``http.server`` on an ephemeral port with one
  JSON ``POST`` route and ``GET /v1/models``. It records every request body and header set
  (under a lock) and asks the subclass for each answer (:meth:`LoopbackServer.take`,
  :meth:`LoopbackServer.answer`). The scripted chat server (``tests/llm_servers.py``) and
  the scripted embeddings server (``tests/embeddings/embedding_servers.py``) are the two.
* :func:`start_server_process` / :func:`stop_process`: start a real server as a
  subprocess in its own session, wait until ``GET <base_url>/models`` answers 200, and end
  its whole process group.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LoopbackServer:
    """An OpenAI-style JSON server on 127.0.0.1 in a daemon thread; a context manager.

    Subclasses set :attr:`route` (the one ``POST`` path), :attr:`model_id` (listed by
    ``GET /v1/models``), :attr:`protocol_version` and the 404 bodies, and implement
    :meth:`take` and :meth:`answer`.

    Attributes:
        port: the ephemeral port bound.
        base_url: ``http://127.0.0.1:<port>/v1``.
        requests: JSON bodies received on :attr:`route`, in order.
        headers: the request headers of each of those, lower-cased names.
    """

    route = "/v1"
    model_id = "loopback"
    protocol_version = "HTTP/1.0"
    not_found = b'{"error": "not found"}'

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = owner.protocol_version

            def log_message(self, *args):  # keep test output quiet
                pass

            def send(self, status: int, body: bytes, headers: dict | None = None) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout tests)
                    pass

            def do_GET(self):
                if self.path.rstrip("/") == "/v1/models":
                    self.send(200, json.dumps({"object": "list", "data": [{"id": owner.model_id, "object": "model"}]}).encode())
                else:
                    self.send(404, owner.not_found)

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path != owner.route:
                    self.send(404, owner.no_route(self.path))
                    return
                body = json.loads(raw or b"{}")
                with owner._lock:
                    owner.requests.append(body)
                    owner.headers.append({k.lower(): v for k, v in self.headers.items()})
                    item = owner.take(body)
                self.send(*owner.answer(item, body))

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def no_route(self, path: str) -> bytes:
        """The 404 body for a ``POST`` to another path than :attr:`route`."""
        return self.not_found

    def take(self, body: dict) -> Any:
        """The script item for the request ``body`` (called under the lock, after recording it)."""
        raise NotImplementedError

    def answer(self, item: Any, body: dict) -> tuple[int, bytes, dict]:
        """``(status, body bytes, headers)`` for one request and its script ``item``."""
        raise NotImplementedError

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop serving and close the socket (later connections are refused)."""
        self._server.shutdown()
        self._server.server_close()


def start_server_process(cmd: list[str], base_url: str, log_path: Path, timeout: float = 120.0, name: str = "llama_cpp.server") -> subprocess.Popen:
    """Start ``cmd`` in its own session (output to ``log_path``) and wait until
    ``GET <base_url>/models`` answers 200; returns the process (end it with :func:`stop_process`).

    Raises:
        RuntimeError: the process exits, or does not answer within ``timeout`` seconds
            (then it is stopped); the message names ``name`` and ends with the last 2,000
            characters of its log.
    """
    import httpx

    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}: {Path(log_path).read_text()[-2000:]}")
            try:
                if httpx.get(base_url + "/models", timeout=2.0, trust_env=False).status_code == 200:
                    return proc
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        stop_process(proc)
        raise RuntimeError(f"{name} did not answer on {base_url} within {timeout} s: {Path(log_path).read_text()[-2000:]}")
    finally:
        log.close()


def stop_process(proc: subprocess.Popen) -> None:
    """End a process started with ``start_new_session=True`` and its group (TERM, then KILL)."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)
