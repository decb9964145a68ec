"""Chat completions from an OpenAI-compatible HTTP server: retries, a reply cache, counters.

One small client for every strategy that asks a language model (the ``agentic`` chunker,
``harness generate``). It speaks the OpenAI chat-completions protocol
(``POST {base_url}/chat/completions`` with ``model``, ``messages``, ``temperature``,
``max_tokens`` and optionally ``seed``; the reply text is ``choices[0].message.content``),
which llama.cpp's server, vLLM, Ollama, LM Studio and hosted APIs all accept. HTTP goes
through httpx; retries through tenacity.

* **API key**: read from the environment variable named by ``api_key_env`` at request time
  and sent as ``Authorization: Bearer ...`` when the variable is set (local servers need
  none). The key is never stored on the client, never part of a cache key or cache entry,
  and never appears in configs, params or error messages.
* **Retries**: a connection error, a timeout, HTTP 408, 429 or any 5xx is retried up to
  ``retries`` times with exponential backoff: the n-th retry waits
  ``min(backoff_max, backoff * 2 ** (n - 1))`` seconds, or the server's ``Retry-After``
  (seconds) when that is longer, still capped at ``backoff_max``. Any other 4xx fails at
  once (:class:`LLMRequestError`); no answer after the last attempt raises
  :class:`LLMUnavailableError` naming ``<config path>.base_url``.
* **Reply cache**: replies are keyed by :func:`harness.cache.reply_key` of the endpoint,
  model, messages and sampling parameters (sha256), kept in memory and, with a
  ``cache_dir``, on disk under ``<cache_dir>/llm`` (:class:`harness.cache.ReplyCache`:
  atomic JSON files, verified on read). A second identical call is answered from the
  cache without contacting the server.
* **Counters** (:meth:`LLMClient.stats`): ``llm.calls`` (chat requests asked of the
  client), ``llm.cache_hits``, ``llm.server_requests`` (HTTP requests sent, retries
  included), ``llm.retries``, ``llm.invalid_responses`` (HTTP 200 without a chat message),
  ``llm.prompt_tokens`` and ``llm.completion_tokens`` (as reported by the server's
  ``usage``, 0 when it reports none).
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any, Mapping, Sequence
from urllib.parse import urlsplit

from harness.params import Param, check_all, is_int

#: Default endpoint: a local OpenAI-compatible server (llama.cpp's listens on 8080).
DEFAULT_BASE_URL = "http://127.0.0.1:8080/v1"
#: Names accepted as LLM settings (the keys of ``conf/llm/default.yaml``).
SETTINGS = (
    "base_url",
    "model",
    "api_key_env",
    "temperature",
    "max_tokens",
    "seed",
    "timeout",
    "retries",
    "backoff",
    "backoff_max",
    "cache",
)
#: HTTP statuses that are retried besides every 5xx.
RETRY_STATUSES = frozenset({408, 429})
_ROLES = ("system", "user", "assistant")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: The numeric settings of :class:`LLMClient` (``<config_path>.<name>``), checked in this order;
#: ``backoff_max`` (>= ``backoff``) and ``cache`` are checked after them.
PARAMS = (
    Param("temperature", "number", low=0, high=2, desc="sampling temperature"),
    Param("max_tokens", "int", low=1, desc="completion tokens per reply"),
    Param("seed", "int", allow_none=True, desc="sampling seed sent to the server"),
    Param("timeout", "number", low=0, low_open=True, noun="a number of seconds", desc="seconds per request"),
    Param("retries", "int", low=0, desc="retries of a failed request"),
    Param("backoff", "number", low=0, noun="a number of seconds", desc="first wait between retries"),
)


class LLMError(RuntimeError):
    """Base class of the errors raised by :class:`LLMClient`."""


class LLMUnavailableError(LLMError):
    """The server did not answer (connection refused, timeout, 5xx, 429) after every retry."""


class LLMRequestError(LLMError):
    """The server refused the request with a non-retryable status (400, 401, 404, ...)."""


class LLMResponseError(LLMError):
    """The server answered 200 with a body that is not a chat completion with a text message."""


class _Retryable(Exception):
    """Internal: one failed attempt that may be retried (carries ``Retry-After`` seconds)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def check_settings(settings: Mapping[str, Any], path: str = "llm") -> dict[str, Any]:
    """Plain copy of LLM settings after checking that every key is known.

    Args:
        settings: mapping of :data:`SETTINGS` names to values (a subset is fine).
        path: config path used in error messages (``llm`` or ``chunker.llm``).

    Raises:
        TypeError: ``settings`` is not a mapping, or holds a key not in :data:`SETTINGS`
            (the message names ``<path>.<key>`` and the known keys).
    """
    if not isinstance(settings, Mapping):
        raise TypeError(f"{path} must be a mapping of LLM settings, got {type(settings).__name__}")
    unknown = sorted(str(k) for k in settings if k not in SETTINGS)
    if unknown:
        raise TypeError(f"unknown LLM setting(s) {', '.join(f'{path}.{k}' for k in unknown)}; known: {list(SETTINGS)}")
    return {str(k): settings[k] for k in settings}


class LLMClient:
    """OpenAI-compatible chat-completions client with retries, a reply cache and counters.

    Constructing it only validates settings (no connection is made). See the module
    docstring for the protocol, retry, cache and key-handling rules.

    Args:
        base_url: endpoint root up to and including the API version, e.g.
            ``http://127.0.0.1:8080/v1``; ``http`` or ``https`` with a host.
        model: model name sent with each request (a local single-model server may ignore it).
        api_key_env: name of the environment variable holding the API key (not the key);
            ``None`` or ``""`` sends no key.
        temperature: sampling temperature in [0, 2]; 0 asks for greedy, reproducible output.
        max_tokens: upper bound on reply tokens, >= 1.
        seed: sampling seed sent to servers that accept one, or None (not sent).
        timeout: seconds per HTTP request (connect and read), > 0.
        retries: retries after the first attempt, >= 0.
        backoff: first retry delay in seconds, >= 0 (doubles with each retry).
        backoff_max: longest delay in seconds, >= ``backoff``.
        cache: reuse replies to identical requests (memory, plus disk with ``cache_dir``).
        cache_dir: the project cache folder (``cache.dir``); replies go to
            ``<cache_dir>/llm``. None keeps them in memory only. Injected by the caller,
            not a config key (it does not change results).
        config_path: config path of these settings, used in error messages.

    Raises:
        ValueError: a setting outside its range (the message names ``<config_path>.<key>``).
    """

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        model: str = "local",
        api_key_env: str | None = "OPENAI_API_KEY",
        temperature: float = 0.0,
        max_tokens: int = 512,
        seed: int | None = None,
        timeout: float = 60.0,
        retries: int = 3,
        backoff: float = 0.5,
        backoff_max: float = 8.0,
        cache: bool = True,
        cache_dir: str | os.PathLike | None = None,
        config_path: str = "llm",
    ) -> None:
        p = config_path
        parts = urlsplit(str(base_url)) if isinstance(base_url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{p}.base_url must be an http(s) URL with a host, e.g. {DEFAULT_BASE_URL}, got {base_url!r}")
        if not isinstance(model, str) or not model.strip():
            raise ValueError(f"{p}.model must be a non-empty string, got {model!r}")
        if api_key_env not in (None, "") and (not isinstance(api_key_env, str) or not _ENV_NAME.match(api_key_env)):
            raise ValueError(f"{p}.api_key_env must name an environment variable (letters, digits, _), got {api_key_env!r}")
        values = {"temperature": temperature, "max_tokens": max_tokens, "seed": seed, "timeout": timeout, "retries": retries, "backoff": backoff}
        check_all(PARAMS, values, p)
        Param("backoff_max", "number", low=backoff, low_name=f"{p}.backoff ({backoff})", noun="a number of seconds").check(backoff_max, p)
        Param("cache", "bool").check(cache, p)
        self.base_url = str(base_url).rstrip("/")
        self.model = model
        self.api_key_env = api_key_env or None
        self.temperature = float(temperature)
        self.max_tokens = max_tokens
        self.seed = seed
        self.timeout = float(timeout)
        self.retries = retries
        self.backoff = float(backoff)
        self.backoff_max = float(backoff_max)
        self.cache = cache
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.config_path = config_path
        self._memory: dict[str, str] = {}
        self._http = None
        self.counters = {
            "calls": 0,
            "cache_hits": 0,
            "server_requests": 0,
            "retries": 0,
            "invalid_responses": 0,
            "prompt_tokens": 0,
            "completion_tokens": 0,
        }

    def __repr__(self) -> str:  # never shows the key (it is not stored anyway)
        return f"LLMClient(base_url={self.base_url!r}, model={self.model!r}, api_key_env={self.api_key_env!r})"

    # -- public ---------------------------------------------------------------------------
    def request_for(self, messages: Sequence[Mapping[str, str]]) -> dict[str, Any]:
        """Everything that determines the reply to ``messages`` (the reply-cache key input).

        Returns:
            ``{"base_url", "model", "messages", "temperature", "max_tokens", "seed"}`` as
            JSON values; no API key.

        Raises:
            ValueError: ``messages`` is not a non-empty list of ``{"role", "content"}``
                with a role in system/user/assistant and string content.
        """
        if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
            raise ValueError("LLM messages must be a non-empty list of {'role', 'content'} objects")
        clean = []
        for i, m in enumerate(messages):
            if not isinstance(m, Mapping) or set(m) != {"role", "content"}:
                raise ValueError(f"LLM messages[{i}] must have exactly the keys 'role' and 'content', got {m!r}")
            if m["role"] not in _ROLES or not isinstance(m["content"], str):
                raise ValueError(f"LLM messages[{i}] needs a role in {list(_ROLES)} and string content, got {m!r}")
            clean.append({"role": m["role"], "content": m["content"]})
        return {
            "base_url": self.base_url,
            "model": self.model,
            "messages": clean,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
        }

    def chat(self, messages: Sequence[Mapping[str, str]]) -> str:
        """The reply text (``choices[0].message.content``) to ``messages``.

        Answered from the reply cache when an identical request was made before (with
        ``cache`` on); otherwise sent to the server (with retries) and cached.

        Raises:
            ValueError: malformed ``messages`` (see :meth:`request_for`).
            LLMUnavailableError: no answer after ``retries`` retries (names the base_url setting).
            LLMRequestError: a non-retryable HTTP status (status and a body excerpt named).
            LLMResponseError: HTTP 200 without a string ``choices[0].message.content``.
        """
        from harness.cache import ReplyCache, reply_key

        request = self.request_for(messages)
        self.counters["calls"] += 1
        key = reply_key(request) if self.cache else None
        disk = ReplyCache(self.cache_dir / "llm") if self.cache and self.cache_dir is not None else None
        if key is not None:
            hit = self._memory.get(key)
            if hit is None and disk is not None:
                hit = disk.get(request)
            if hit is not None:
                self.counters["cache_hits"] += 1
                self._memory[key] = hit
                return hit
        reply = self._send(request)
        if key is not None:
            self._memory[key] = reply
            if disk is not None:
                disk.put(request, reply)
        return reply

    def stats(self) -> dict[str, float]:
        """Counters as ``{"llm.calls": n, ...}`` (floats, ready to log as metrics)."""
        return {f"llm.{k}": float(v) for k, v in self.counters.items()}

    def close(self) -> None:
        """Close the HTTP connection pool (the client reopens it on the next request)."""
        if self._http is not None:
            self._http.close()
            self._http = None

    def __enter__(self) -> "LLMClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- HTTP -----------------------------------------------------------------------------
    def _client(self):
        if self._http is None:
            import httpx

            self._http = httpx.Client(base_url=self.base_url + "/", timeout=self.timeout, trust_env=False)
        return self._http

    def _wait(self, retry_state) -> float:
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        delay = self.backoff * 2 ** (retry_state.attempt_number - 1)
        if isinstance(exc, _Retryable) and exc.retry_after is not None:
            delay = max(delay, exc.retry_after)
        return min(self.backoff_max, delay)

    def _count_retry(self, retry_state) -> None:
        self.counters["retries"] += 1

    def _send(self, request: Mapping[str, Any]) -> str:
        from tenacity import RetryError, Retrying, retry_if_exception_type, stop_after_attempt

        body: dict[str, Any] = {
            "model": request["model"],
            "messages": request["messages"],
            "temperature": request["temperature"],
            "max_tokens": request["max_tokens"],
        }
        if request["seed"] is not None:
            body["seed"] = request["seed"]
        retrying = Retrying(
            stop=stop_after_attempt(self.retries + 1),
            wait=self._wait,
            retry=retry_if_exception_type(_Retryable),
            before_sleep=self._count_retry,
            reraise=False,
        )
        try:
            return retrying(self._attempt, body)
        except RetryError as exc:
            last = exc.last_attempt.exception()
            attempts = exc.last_attempt.attempt_number
            raise LLMUnavailableError(
                f"no answer from the LLM server at {self.config_path}.base_url={self.base_url} after {attempts} "
                f"attempt(s) ({last}); start an OpenAI-compatible server there or set {self.config_path}.base_url"
            ) from None

    def _attempt(self, body: Mapping[str, Any]) -> str:
        import httpx

        headers = {}
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self.counters["server_requests"] += 1
        try:
            resp = self._client().post("chat/completions", json=body, headers=headers)
        except httpx.TransportError as exc:  # refused, reset, timeouts, protocol errors
            raise _Retryable(f"{type(exc).__name__}: {exc}") from None
        status = resp.status_code
        if status in RETRY_STATUSES or status >= 500:
            raise _Retryable(f"HTTP {status}", _retry_after(resp.headers.get("retry-after")))
        if status != 200:
            hint = f"; is {self.api_key_env} set?" if status in (401, 403) and self.api_key_env else ""
            raise LLMRequestError(f"LLM server at {self.config_path}.base_url={self.base_url} refused the request: HTTP {status}: {resp.text[:300]!r}{hint}")
        try:
            data = resp.json()
            content = data["choices"][0]["message"]["content"]
            if not isinstance(content, str):
                raise TypeError(f"message content is {type(content).__name__}")
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            self.counters["invalid_responses"] += 1
            raise LLMResponseError(
                f"LLM server at {self.config_path}.base_url={self.base_url} sent HTTP 200 without a chat "
                f"completion ({type(exc).__name__}: {exc}); body starts {resp.text[:200]!r}"
            ) from None
        usage = data.get("usage") if isinstance(data, dict) else None
        if isinstance(usage, dict):
            for name in ("prompt_tokens", "completion_tokens"):
                value = usage.get(name)
                if is_int(value) and value >= 0:
                    self.counters[name] += value
        return content


def _retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header given in seconds (HTTP dates are ignored)."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 and math.isfinite(seconds) else None
