"""The LLM client: requests, reply cache, retries with backoff, errors and key handling.

Against a scripted OpenAI-compatible server in a thread (replies, statuses and timings under
the test's control) and against llama-cpp-python's real server (see tests/llm_servers.py).
"""

from __future__ import annotations

import json
import time
import warnings

import pytest
from llm_servers import INVALID, FakeLLM, free_port, llama  # noqa: F401  (llama is a fixture)

from harness.cache import Cache, ReplyCache, reply_key
from harness.llm import LLMClient, LLMRequestError, LLMResponseError, LLMUnavailableError, check_settings

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}]


@pytest.mark.parametrize(
    "setting, value, message",
    [
        ("base_url", "127.0.0.1:8080", r"llm\.base_url must be an http\(s\) URL"),
        ("base_url", "ftp://host/v1", "llm.base_url"),
        ("model", "", "llm.model"),
        ("api_key_env", "sk-not-a-name!", "llm.api_key_env"),
        ("temperature", 2.5, r"llm.temperature must be a number in \[0, 2\]"),
        ("max_tokens", 0, "llm.max_tokens"),
        ("seed", 1.5, "llm.seed"),
        ("timeout", 0, "llm.timeout"),
        ("retries", -1, "llm.retries"),
        ("backoff", -0.1, "llm.backoff"),
        ("backoff_max", 0.1, r"llm.backoff_max must be a number of seconds >= llm.backoff"),
        ("cache", "yes", "llm.cache"),
    ],
)
def test_bad_settings_are_named(setting, value, message):
    with pytest.raises(ValueError, match=message):
        LLMClient(**{setting: value})


def test_unknown_setting_is_named():
    with pytest.raises(TypeError, match=r"chunker\.llm\.tempreature"):
        check_settings({"tempreature": 0.0}, "chunker.llm")


def test_request_reaches_the_server_and_the_reply_comes_back(tmp_path):
    with FakeLLM(["blue"]) as server:
        client = LLMClient(base_url=server.base_url, model="m1", temperature=0.0, max_tokens=16, seed=3, cache_dir=tmp_path)
        assert client.chat(MESSAGES) == "blue"
    assert len(server.requests) == 1
    body = server.requests[0]
    assert body == {"model": "m1", "messages": MESSAGES, "temperature": 0.0, "max_tokens": 16, "seed": 3}
    stats = client.stats()
    assert stats["llm.calls"] == 1 and stats["llm.server_requests"] == 1 and stats["llm.cache_hits"] == 0
    assert stats["llm.prompt_tokens"] == 7 and stats["llm.completion_tokens"] == 3  # the fake server's usage


def test_identical_call_is_answered_from_the_cache_even_with_the_server_gone(tmp_path):
    with FakeLLM(["first reply", "second reply"]) as server:
        client = LLMClient(base_url=server.base_url, cache_dir=tmp_path)
        assert client.chat(MESSAGES) == "first reply"
        assert client.chat(MESSAGES) == "first reply"  # same request: not sent again
        assert len(server.requests) == 1
        other = [*MESSAGES[:1], {"role": "user", "content": "Name a fruit."}]
        assert client.chat(other) == "second reply"
        assert len(server.requests) == 2
    # server stopped: a fresh client (empty memory) still answers from the disk cache
    fresh = LLMClient(base_url=server.base_url, cache_dir=tmp_path, retries=0)
    assert fresh.chat(MESSAGES) == "first reply"
    assert fresh.stats()["llm.cache_hits"] == 1 and fresh.stats()["llm.server_requests"] == 0
    assert client.stats()["llm.calls"] == 3 and client.stats()["llm.cache_hits"] == 1
    assert Cache(tmp_path).info()["llm"]["entries"] == 2
    # an uncached request now fails, naming the setting to fix
    with pytest.raises(LLMUnavailableError, match=rf"llm\.base_url=http://127\.0\.0\.1:{server.port}/v1"):
        fresh.chat([{"role": "user", "content": "never asked before"}])


def test_cache_off_sends_every_call(tmp_path):
    with FakeLLM(default="x") as server:
        client = LLMClient(base_url=server.base_url, cache=False, cache_dir=tmp_path)
        client.chat(MESSAGES)
        client.chat(MESSAGES)
    assert len(server.requests) == 2 and client.stats()["llm.cache_hits"] == 0
    assert Cache(tmp_path).info()["llm"]["entries"] == 0


def test_cache_key_changes_with_model_and_sampling_but_never_holds_the_key(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_TEST_LLM_KEY", "sk-secret-value-123")
    with FakeLLM(default="ok") as server:
        a = LLMClient(base_url=server.base_url, model="a", api_key_env="HARNESS_TEST_LLM_KEY", cache_dir=tmp_path)
        b = LLMClient(base_url=server.base_url, model="b", api_key_env="HARNESS_TEST_LLM_KEY", cache_dir=tmp_path)
        c = LLMClient(base_url=server.base_url, model="a", temperature=0.7, api_key_env="HARNESS_TEST_LLM_KEY", cache_dir=tmp_path)
        for client in (a, b, c):
            client.chat(MESSAGES)
    assert len(server.requests) == 3  # three different requests, no cache hit
    assert [h["authorization"] for h in server.headers] == ["Bearer sk-secret-value-123"] * 3
    stored = "".join(p.read_text() for p in (tmp_path / "llm").rglob("*.json"))
    assert stored.count('"reply": "ok"') == 3
    assert "sk-secret" not in stored and "sk-secret" not in repr(a) and "sk-secret" not in json.dumps(a.request_for(MESSAGES))


def test_no_authorization_header_without_the_variable(monkeypatch):
    monkeypatch.delenv("HARNESS_TEST_LLM_KEY", raising=False)
    with FakeLLM(default="ok") as server:
        LLMClient(base_url=server.base_url, api_key_env="HARNESS_TEST_LLM_KEY").chat(MESSAGES)
    assert "authorization" not in server.headers[0]


def test_500_twice_then_200_is_retried_with_exponential_backoff():
    with FakeLLM([500, 500, "finally"]) as server:
        client = LLMClient(base_url=server.base_url, retries=3, backoff=0.3, backoff_max=5.0)
        t0 = time.monotonic()
        assert client.chat(MESSAGES) == "finally"
        elapsed = time.monotonic() - t0
    assert len(server.requests) == 3
    assert client.stats()["llm.retries"] == 2 and client.stats()["llm.server_requests"] == 3
    assert 0.9 <= elapsed < 3.0  # waits 0.3 s then 0.6 s


def test_retry_after_of_a_429_is_honoured():
    with FakeLLM([(429, {"Retry-After": "1"}), "ok"]) as server:
        client = LLMClient(base_url=server.base_url, retries=1, backoff=0.01, backoff_max=5.0)
        t0 = time.monotonic()
        assert client.chat(MESSAGES) == "ok"
        assert time.monotonic() - t0 >= 1.0
    assert client.stats()["llm.retries"] == 1


def test_gives_up_after_the_last_retry_naming_base_url():
    with FakeLLM([503] * 10) as server:
        client = LLMClient(base_url=server.base_url, retries=2, backoff=0.0, config_path="chunker.llm")
        with pytest.raises(LLMUnavailableError, match=r"chunker\.llm\.base_url=.* after 3 attempt\(s\) \(HTTP 503\)"):
            client.chat(MESSAGES)
    assert len(server.requests) == 3


def test_connection_refused_is_retried_then_reported():
    port = free_port()  # nothing listens there
    client = LLMClient(base_url=f"http://127.0.0.1:{port}/v1", retries=2, backoff=0.05)
    with pytest.raises(LLMUnavailableError, match=rf"127\.0\.0\.1:{port}/v1 after 3 attempt\(s\) \(ConnectError"):
        client.chat(MESSAGES)
    assert client.stats()["llm.retries"] == 2 and client.stats()["llm.server_requests"] == 3


def test_client_error_is_not_retried():
    with FakeLLM([404, "never"]) as server:
        client = LLMClient(base_url=server.base_url, retries=3, backoff=0.0)
        with pytest.raises(LLMRequestError, match="HTTP 404"):
            client.chat(MESSAGES)
    assert len(server.requests) == 1 and client.stats()["llm.retries"] == 0


def test_http_200_without_a_completion_is_counted_and_not_cached(tmp_path):
    with FakeLLM([INVALID, "good"]) as server:
        client = LLMClient(base_url=server.base_url, cache_dir=tmp_path)
        with pytest.raises(LLMResponseError, match="without a chat completion"):
            client.chat(MESSAGES)
        assert client.chat(MESSAGES) == "good"  # the bad answer was not cached
    assert client.stats()["llm.invalid_responses"] == 1


@pytest.mark.parametrize("messages", [[], "hello", [{"role": "robot", "content": "x"}], [{"role": "user"}]])
def test_malformed_messages_are_refused_before_sending(messages):
    with pytest.raises(ValueError, match="messages"):
        LLMClient().chat(messages)


def test_reply_cache_entries_are_verified_on_read(tmp_path):
    cache = ReplyCache(tmp_path)
    request = {"base_url": "http://127.0.0.1:1/v1", "model": "m", "messages": MESSAGES}
    key = cache.put(request, "the reply")
    assert key == reply_key(request) and cache.get(request) == "the reply"
    path = cache.path(key)
    entry = json.loads(path.read_text())
    entry["reply"] = "tampered"
    path.write_text(json.dumps(entry))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cache.get(request) is None
    assert "does not match its sha256" in str(caught[0].message)
    entry["reply"] = "the reply"
    entry["request"]["model"] = "other"  # an entry moved under a foreign key
    path.write_text(json.dumps(entry))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cache.get(request) is None
    assert "does not hash to its key" in str(caught[0].message)
    path.write_text('{"truncated')
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert cache.get(request) is None
    assert not list(tmp_path.rglob("*.tmp"))  # writes leave no temporary files


def test_cache_cli_counts_and_clears_replies(tmp_path, capsys):
    from harness.cli.cache import main

    ReplyCache(tmp_path / "llm").put({"model": "m", "messages": MESSAGES}, "r")
    assert main(["info", "--dir", str(tmp_path), "--kind", "llm"]) == 0
    assert "1 replies" in " ".join(capsys.readouterr().out.split())
    assert main(["clear", "--dir", str(tmp_path), "--kind", "llm"]) == 0
    assert Cache(tmp_path).info()["llm"]["entries"] == 0


# -- the real llama-cpp-python server -------------------------------------------------------
@pytest.mark.slow
def test_llama_server_answers_and_the_second_call_is_cached(llama, tmp_path):  # noqa: F811
    client = LLMClient(base_url=llama, model="tinycoder", max_tokens=24, cache_dir=tmp_path)
    reply = client.chat(MESSAGES)
    assert isinstance(reply, str)
    stats = client.stats()
    assert stats["llm.server_requests"] == 1 and stats["llm.prompt_tokens"] > 0  # the server counted our prompt
    assert client.chat(MESSAGES) == reply
    assert client.stats()["llm.server_requests"] == 1 and client.stats()["llm.cache_hits"] == 1
    fresh = LLMClient(base_url=llama, model="tinycoder", max_tokens=24, cache_dir=tmp_path)
    assert fresh.chat(MESSAGES) == reply and fresh.stats()["llm.server_requests"] == 0
    uncached = LLMClient(base_url=llama, model="tinycoder", max_tokens=24, cache=False)
    assert uncached.chat(MESSAGES) == reply  # temperature 0: the server itself is deterministic
