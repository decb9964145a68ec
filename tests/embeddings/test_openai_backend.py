"""The OpenAI-compatible embedding backend (``embedding=openai``) against real local servers.

* a scripted ``http.server`` in a thread (tests/embeddings/embedding_servers.py): batching,
  truncation before sending, the key header, the disk cache, retries (429 + Retry-After,
  5xx, timeouts), refused and malformed replies, counters and cost;
* the packaged MiniLM behind ``/v1/embeddings``: a full run equals ``embedding=minilm``;
* llama-cpp-python's server in embedding mode (skipped without the ``llm`` extra);
* runs that stop before chunking on a missing key variable or an unreachable endpoint.
"""

from __future__ import annotations

import email.utils
import inspect
import json
import math
import re
import time
import warnings

import mlflow
import numpy as np
import pytest
import yaml
from conftest import PROJECT_ROOT, compose
from embedding_servers import EmbeddingServer, minilm_embed, reply, start_llama_embedding_server, text_vector
from llm_servers import free_port, stop_process

from harness.cache import EmbeddingCache
from harness.embeddings.openai import (
    EmbeddingRequestError,
    EmbeddingResponseError,
    EmbeddingUnavailableError,
    OpenAIEncoder,
    normalize_base_url,
    retry_after_seconds,
)

KEY_ENV = "HARNESS_TEST_EMBEDDING_KEY"
KEY = "sk-test-0123456789abcdef-secret"
TEXTS = ["Kestrel's broker listens on port 8450.", "naïve café — 日本語", "The retention period is 14 days.", "Alerts go to #ops."]


@pytest.fixture()
def key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    return KEY


def make(server: EmbeddingServer, **kwargs) -> OpenAIEncoder:
    settings = {"base_url": server.base_url, "model": "scripted-model", "api_key_env": KEY_ENV, "show_progress": False, "backoff": 0.01, "backoff_max": 2.0}
    return OpenAIEncoder(**{**settings, **kwargs})


def unit(v) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    return (v / np.linalg.norm(v)).astype(np.float32)


# -- settings ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "setting, value, message",
    [
        ("base_url", "127.0.0.1:8080", r"embedding\.base_url must be an http\(s\) URL"),
        ("base_url", "https://user:pw@api.example.com/v1", r"embedding\.base_url must not carry credentials"),
        ("base_url", "https://api.example.com/v1?x=1", r"embedding\.base_url must be the endpoint root"),
        ("model", "", "embedding.model"),
        ("dimensions", 0, r"embedding\.dimensions must be an integer >= 1 or null"),
        ("batch_size", 0, "embedding.batch_size"),
        ("max_batch_tokens", 100, r"embedding\.max_batch_tokens \(100\) must be >= embedding\.max_input_tokens \(8191\)"),
        ("max_input_tokens", 0, "embedding.max_input_tokens"),
        ("tokenizer", "cl100k", r"embedding\.tokenizer must be one of 'cl100k_base'.*did you mean"),
        ("normalize", "yes", "embedding.normalize"),
        ("timeout", 0, "embedding.timeout"),
        ("max_retries", -1, "embedding.max_retries"),
        ("backoff", -1, "embedding.backoff"),
        ("backoff_max", 0.5, r"embedding\.backoff_max must be a number of seconds >= embedding\.backoff"),
        ("price_per_million_tokens", -0.02, "embedding.price_per_million_tokens"),
        ("on_truncate", "truncate", "embedding.on_truncate"),
    ],
)
def test_bad_settings_are_named(setting, value, message):
    with pytest.raises(ValueError, match=message):
        OpenAIEncoder(**{setting: value})


def test_a_key_given_as_api_key_env_is_refused_without_echoing_it():
    with pytest.raises(ValueError, match=r"embedding\.api_key_env must be the NAME") as info:
        OpenAIEncoder(api_key_env=KEY)
    assert KEY not in str(info.value)


def test_config_file_keys_are_the_constructor_arguments_with_their_defaults():
    cfg = yaml.safe_load((PROJECT_ROOT / "conf" / "embedding" / "openai.yaml").read_text())
    params = inspect.signature(OpenAIEncoder).parameters
    assert cfg.pop("_target_") == "harness.embeddings.openai.OpenAIEncoder"
    assert set(cfg) == set(params) - {"cache_dir"}  # cache_dir is injected by build_encoder
    assert {k: v for k, v in cfg.items()} == {k: params[k].default for k in cfg}
    built = compose(["embedding=openai"])
    from harness.experiment.build import build_encoder

    encoder = build_encoder(built)
    assert isinstance(encoder, OpenAIEncoder) and encoder.cache_dir is not None and encoder.max_seq_length == 8191


def test_embedding_key_covers_what_changes_a_vector_and_never_the_key(monkeypatch):
    base = OpenAIEncoder(base_url="https://API.OpenAI.com:443/v1/")
    assert base.base_url == "https://api.openai.com/v1" == normalize_base_url("https://api.openai.com/v1/embeddings")
    same = [
        OpenAIEncoder(base_url="https://api.openai.com/v1"),
        OpenAIEncoder(api_key_env="OTHER_KEY"),
        OpenAIEncoder(batch_size=7, max_batch_tokens=9000, timeout=3, max_retries=0, price_per_million_tokens=1.0, on_truncate="error"),
    ]
    assert {e.embedding_key for e in same} == {base.embedding_key}
    different = [
        OpenAIEncoder(base_url="http://127.0.0.1:8080/v1"),
        OpenAIEncoder(model="text-embedding-3-large"),
        OpenAIEncoder(dimensions=256),
        OpenAIEncoder(max_input_tokens=512),
        OpenAIEncoder(max_input_tokens=None),
        OpenAIEncoder(normalize=False),
    ]
    keys = [e.embedding_key for e in different]
    assert len(set(keys)) == len(keys) and base.embedding_key not in keys
    monkeypatch.setenv("OPENAI_API_KEY", KEY)  # setting the key changes nothing and shows nowhere
    assert OpenAIEncoder().embedding_key == base.embedding_key
    assert KEY not in repr(OpenAIEncoder()) and KEY not in json.dumps(OpenAIEncoder()._describe())


def test_retry_after_parses_seconds_dates_and_milliseconds():
    now = time.time()
    assert retry_after_seconds({"retry-after": "2"}) == 2.0
    assert retry_after_seconds({"retry-after": email.utils.formatdate(now + 30, usegmt=True)}, now=now) == pytest.approx(30, abs=1)
    assert retry_after_seconds({"retry-after": email.utils.formatdate(now - 30, usegmt=True)}, now=now) == 0.0
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_seconds({"retry-after": "soon"}) is None and retry_after_seconds({}) is None


# -- requests ------------------------------------------------------------------------------
def test_requests_carry_the_key_and_respect_batch_size_and_token_budget(key):
    texts = [f"text number {i} " + "word " * (i % 5) * 10 for i in range(12)]
    with EmbeddingServer() as server:
        enc = make(server, batch_size=4, max_batch_tokens=60, max_input_tokens=50, dimensions=8)
        vecs = enc.encode(texts)
    counts = dict(zip(texts, enc.count_tokens(texts)))
    sent = server.inputs()
    assert sorted(t for batch in sent for t in batch) == sorted(texts)  # every text once
    for batch in sent:
        assert 1 <= len(batch) <= 4 and sum(counts[t] for t in batch) <= 60
    assert any(len(b) == 4 for b in sent) and any(sum(counts[t] for t in b) > 40 for b in sent)  # both limits bind
    assert {h["authorization"] for h in server.headers} == {f"Bearer {key}"}
    assert all(r["model"] == "scripted-model" and r["dimensions"] == 8 for r in server.requests)
    # replies list data in reverse order: the client sorted by index and normalised
    np.testing.assert_allclose(vecs, np.stack([unit(text_vector(t)) for t in texts]), atol=1e-6)
    assert vecs.dtype == np.float32 and vecs.shape == (12, 8)


def test_texts_over_the_limit_are_reported_and_cut_before_sending(key):
    long = "The broker retries delivery with exponential backoff. " * 40
    limit = 32
    with EmbeddingServer() as server:
        enc = make(server, max_input_tokens=limit, max_batch_tokens=1000)
        with pytest.warns(UserWarning, match=rf"truncates 1 of 2 texts .* {limit}-token window .*cl100k_base tokens, counted by the client"):
            enc.encode([long, "short text"])
        cut = [t for batch in server.inputs() for t in batch if t != "short text"][0]
        assert long.startswith(cut) and len(cut) < len(long)
        assert enc.count_tokens([cut]) == [limit]
        assert enc.run_metrics()["embedding.texts_over_window"] == 1 and enc.run_metrics()["embedding.texts_cut"] == 1
        # error: refused before anything is sent
        strict = make(server, max_input_tokens=limit, max_batch_tokens=1000, on_truncate="error")
        before = len(server.requests)
        with pytest.raises(ValueError, match=rf"embedding\.on_truncate=error: 1 of 1 texts .* {limit}-token window"):
            strict.encode([long + " again"])
        assert len(server.requests) == before
        # ignore: no warning, still cut so the request cannot fail
        quiet = make(server, max_input_tokens=limit, max_batch_tokens=1000, on_truncate="ignore")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            quiet.encode([long + " once more"])
        assert quiet.count_tokens([server.inputs()[-1][0]]) == [limit]


def test_cut_is_a_prefix_at_a_code_point_for_multibyte_text():
    enc = OpenAIEncoder(max_input_tokens=7, max_batch_tokens=100)
    for text in ["日本語のテキスト" * 20, "naïve café 🙂🙂🙂 " * 10, "x" * 1000]:
        cut = enc.fit(text)
        assert text.startswith(cut) and 0 < enc.count_tokens([cut])[0] <= 7


def test_a_second_encoder_with_the_same_cache_dir_sends_nothing(key, tmp_path):
    with EmbeddingServer() as server:
        first = make(server, cache_dir=tmp_path)
        a = first.encode(TEXTS)
        n = len(server.requests)
        second = make(server, cache_dir=tmp_path, batch_size=1, api_key_env=None)  # batching and key do not key the cache
        b = second.encode(TEXTS)
        assert len(server.requests) == n
        np.testing.assert_array_equal(a, b)
        assert second.run_metrics()["embedding.cache_hits"] == len(TEXTS) and second.run_metrics()["embedding.requests"] == 0
        other = make(server, cache_dir=tmp_path, dimensions=4)  # another dimension is another embedding function
        assert other.encode(TEXTS[:1]).shape == (1, 4) and len(server.requests) == n + 1


def test_prompts_are_sent_and_empty_texts_need_no_request(key):
    with EmbeddingServer() as server:
        enc = make(server, query_prompt="query: ", document_prompt="passage: ")
        q = enc.encode(["where?"], role="query")
        d = enc.encode(["", "here"])
    assert server.inputs()[0] == ["query: where?"] and sorted(server.inputs()[1]) == ["passage: ", "passage: here"]
    np.testing.assert_allclose(q[0], unit(text_vector("query: where?")), atol=1e-6)
    np.testing.assert_allclose(d, np.stack([unit(text_vector("passage: ")), unit(text_vector("passage: here"))]), atol=1e-6)


def test_an_empty_text_gets_the_zero_vector_without_a_request(key):
    with EmbeddingServer() as server:
        enc = make(server)
        v = enc.encode(["", "word"])
    assert server.inputs() == [["word"]]
    assert not v[0].any() and np.linalg.norm(v[1]) == pytest.approx(1.0, abs=1e-6)


# -- retries -------------------------------------------------------------------------------
def test_429_with_retry_after_seconds_is_retried_after_the_wait(key):
    with EmbeddingServer([(429, {"Retry-After": "1"})]) as server:
        enc = make(server)
        vecs = enc.encode(TEXTS[:2])
    assert len(server.requests) == 2 and server.times[1] - server.times[0] >= 0.95
    assert server.requests[0] == server.requests[1]
    m = enc.run_metrics()
    assert m["embedding.requests"] == 2 and m["embedding.retries"] == 1 and vecs.shape == (2, 8)


def test_429_with_an_http_date_is_honoured(key):
    when = email.utils.formatdate(time.time() + 2, usegmt=True)  # whole seconds: waits 1-2 s
    with EmbeddingServer([(429, {"Retry-After": when})]) as server:
        make(server).encode(TEXTS[:1])
    assert len(server.requests) == 2 and server.times[1] - server.times[0] >= 0.9


def test_5xx_and_timeouts_are_retried_with_backoff(key):
    with EmbeddingServer([500, 502, ("sleep", 1.5)]) as server:
        enc = make(server, timeout=0.5, max_retries=3, backoff=0.05)
        vecs = enc.encode(TEXTS[:2])
    assert len(server.requests) == 4 and vecs.shape == (2, 8)
    gaps = np.diff(server.times)
    assert gaps[0] >= 0.04 and gaps[1] >= 0.09  # 0.05 s, then 0.1 s
    assert enc.run_metrics()["embedding.retries"] == 3


def test_retries_run_out_with_a_message_naming_endpoint_and_model(key, tmp_path):
    with EmbeddingServer([503, 503, 503]) as server:
        enc = make(server, max_retries=2, cache_dir=tmp_path)
        with pytest.raises(EmbeddingUnavailableError, match=r"scripted-model.*after 3 attempt\(s\).*HTTP 503: scripted 503.*embedding\.max_retries") as info:
            enc.encode(TEXTS)
    assert server.base_url + "/embeddings" in str(info.value)
    assert len(server.requests) == 3 and EmbeddingCache(tmp_path / "embeddings").count() == 0


def test_a_retry_after_longer_than_backoff_max_ends_the_retries(key):
    with EmbeddingServer([(429, {"Retry-After": "120"})]) as server:
        with pytest.raises(EmbeddingUnavailableError, match=r"asks to wait 120 s \(Retry-After\), more than embedding\.backoff_max=2"):
            make(server).encode(TEXTS[:1])
    assert len(server.requests) == 1


def test_refused_request_names_status_and_server_message_but_never_the_key(key):
    message = f"Incorrect API key provided: {KEY}. You can find your API key at ..."
    with EmbeddingServer([(401, {}, message)]) as server:
        with pytest.raises(EmbeddingRequestError, match=rf"HTTP 401: Incorrect API key provided: <redacted>.*\${KEY_ENV} \(embedding\.api_key_env\)") as info:
            make(server).encode(TEXTS[:1])
    text = str(info.value)
    assert KEY not in text and "\n" not in text and info.value.status == 401
    assert len(server.requests) == 1  # 4xx is not retried


# -- reply validation ----------------------------------------------------------------------
def _vectors(texts, dim=8):
    return [text_vector(t, dim) for t in texts]


BAD_REPLIES = {
    "not JSON": (("raw", b"<html>502 Bad Gateway</html>"), r"body is not JSON"),
    "no data": (lambda texts, body: {"object": "list"}, r"no 'data' list"),
    "error in a 200": (
        lambda texts, body: {"error": {"message": f"upstream failed for {KEY}"}},
        r"no 'data' list \(the body holds an error: upstream failed for <redacted>\)",
    ),
    "too few": (lambda texts, body: reply(_vectors(texts)[:-1]), r"1 embeddings for 2 inputs"),
    "duplicate index": (lambda texts, body: reply(_vectors(texts), [0, 0]), r"'index' fields are not 0\.\.1"),
    "index out of range": (lambda texts, body: reply(_vectors(texts), [1, 2]), r"'index' fields are not 0\.\.1"),
    "not numbers": (lambda texts, body: reply([["0.1"] * 8, _vectors(texts)[1]]), r"not a list of numbers"),
    "base64 string": (lambda texts, body: reply(["AAAA", "AAAA"]), r"not a list of numbers \(str\)"),
    "booleans": (lambda texts, body: reply([[True] * 8, [False] * 8]), r"not a list of numbers"),
    "ragged": (lambda texts, body: reply([_vectors(texts)[0], _vectors(texts)[1][:4]]), r"vectors of different lengths \[4, 8\]"),
    "wrong dimensions": (lambda texts, body: reply(_vectors(texts, 16)), r"16-dimensional vectors but embedding\.dimensions=8"),
    "NaN": (("raw", b'{"data": [{"index": 0, "embedding": [NaN, 1.0]}, {"index": 1, "embedding": [1.0, 1.0]}]}'), r"non-finite"),
}


@pytest.mark.parametrize("case", list(BAD_REPLIES))
def test_invalid_replies_are_refused_and_nothing_is_cached(case, key, tmp_path):
    item, message = BAD_REPLIES[case]
    with EmbeddingServer([item]) as server:
        enc = make(server, cache_dir=tmp_path, dimensions=8 if case == "wrong dimensions" else None)
        with pytest.raises(EmbeddingResponseError, match=message) as info:
            enc.encode(TEXTS[:2])
    assert f"{server.base_url}/embeddings (embedding.model='scripted-model')" in str(info.value)
    assert ("nothing of it was cached" in str(info.value) or "nothing was cached" in str(info.value)) and KEY not in str(info.value)
    assert EmbeddingCache(tmp_path / "embeddings").count() == 0 and enc.n_encoded == 0
    assert len(server.requests) == 1  # a bad reply is not retried


def test_a_change_of_dimension_between_replies_is_refused(key, tmp_path):
    with EmbeddingServer([None, lambda texts, body: reply(_vectors(texts, 16))]) as server:
        enc = make(server, cache_dir=tmp_path, batch_size=1)
        enc.encode(TEXTS[:1])
        with pytest.raises(EmbeddingResponseError, match=r"16-dimensional vectors but earlier replies \(or the disk cache for this model\) had 8"):
            enc.encode(TEXTS[1:2])
        # a fresh encoder learns the dimension from the disk cache of this endpoint + model
        fresh = make(server, cache_dir=tmp_path)
        server.script = [lambda texts, body: reply(_vectors(texts, 16))]
        with pytest.raises(EmbeddingResponseError, match=r"16-dimensional vectors but .* had 8"):
            fresh.encode(TEXTS[2:3])
    assert EmbeddingCache(tmp_path / "embeddings").count() == 1


def test_vectors_of_requests_before_a_failure_are_kept(key, tmp_path):
    with EmbeddingServer([None, 400]) as server:
        enc = make(server, batch_size=2, cache_dir=tmp_path)
        with pytest.raises(EmbeddingRequestError, match="HTTP 400: scripted 400"):
            enc.encode(TEXTS)  # one block, two requests: the second fails
        assert EmbeddingCache(tmp_path / "embeddings").count() == 2
        again = make(server, batch_size=2, cache_dir=tmp_path)
        again.encode(TEXTS)
    assert len(server.requests) == 3 and again.run_metrics()["embedding.cache_hits"] == 2


# -- counters and cost ---------------------------------------------------------------------
def test_tokens_come_from_usage_else_from_the_client_count_and_price_gives_cost(key):
    with EmbeddingServer() as server:
        enc = make(server, price_per_million_tokens=0.02)
        enc.encode(TEXTS)
    words = sum(len(t.split()) for t in TEXTS)  # what this server reports as usage
    m = enc.run_metrics()
    assert m["embedding.tokens_embedded"] == words and m["embedding.requests"] == 1
    assert m["embedding.cost_usd"] == pytest.approx(words * 0.02 / 1e6)
    assert m["embedding.texts_embedded"] == len(TEXTS) and m["embedding.retries"] == 0
    with EmbeddingServer(usage=False) as server:
        enc = make(server)
        enc.encode(TEXTS)
    assert enc.run_metrics()["embedding.tokens_embedded"] == sum(enc.count_tokens(TEXTS))
    assert "embedding.cost_usd" not in enc.run_metrics()


# -- preflight -----------------------------------------------------------------------------
def test_preflight_checks_key_variable_endpoint_and_dimension(key, monkeypatch):
    with EmbeddingServer() as server:
        enc = make(server, dimensions=8)
        enc.preflight()
        assert server.inputs() == [["ping"]] and enc.dim == 8
        monkeypatch.delenv(KEY_ENV)
        with pytest.raises(ValueError, match=rf"embedding\.api_key_env='{KEY_ENV}': the environment variable {KEY_ENV} is not set"):
            make(server).preflight()
        assert len(server.requests) == 1
        server.script = [(404, {}, "The model `nope` does not exist")]
        with pytest.raises(ValueError, match=r"embedding preflight failed: .*HTTP 404: The model `nope` does not exist; check embedding\.model"):
            make(server, api_key_env=None).preflight()


def test_preflight_on_a_closed_port_fails_at_once_naming_base_url(key):
    port = free_port()
    enc = OpenAIEncoder(base_url=f"http://127.0.0.1:{port}/v1", api_key_env=KEY_ENV, max_retries=5, backoff=1.0)
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=rf"embedding\.base_url=http://127\.0\.0\.1:{port}/v1 is unreachable \(ConnectError"):
        enc.preflight()
    assert time.perf_counter() - t0 < 2.0  # no retries on a refused connection before the run


# -- runs ----------------------------------------------------------------------------------
def _runs(uri):
    client = mlflow.MlflowClient(uri)
    exp = client.get_experiment_by_name("kestrel_kb")
    return client, client.search_runs([exp.experiment_id])


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["embedding.api_key_env=HARNESS_TEST_NO_SUCH_VARIABLE"], r"embedding\.api_key_env='HARNESS_TEST_NO_SUCH_VARIABLE'"),
        ([f"embedding.base_url=http://127.0.0.1:{free_port()}/v1"], r"embedding\.base_url=http://127\.0\.0\.1:\d+/v1 is unreachable"),
    ],
    ids=["missing key variable", "closed port"],
)
def test_run_stops_before_chunking(overrides, message, key, tracking_uri):
    cfg = compose(["embedding=openai", f"embedding.api_key_env={KEY_ENV}", *overrides, f"tracking.uri={tracking_uri}", "embedding.show_progress=false"])
    with pytest.raises(ValueError, match=message) as info:
        from harness.experiment.run import execute

        execute(cfg)
    assert KEY not in str(info.value)
    # refused with the configuration, before the dataset loads and before any run opens
    client = mlflow.MlflowClient(tracking_uri)
    experiments = client.search_experiments()
    runs = client.search_runs([e.experiment_id for e in experiments]) if experiments else []
    assert runs == []


@pytest.mark.slow
def test_run_through_a_minilm_server_equals_embedding_minilm(tracking_uri, tmp_path):
    """Chunks of up to 1024 word pieces (few chunks, a quick test): both MiniLMs read the first
    256 word pieces of each; the client counts every chunk within 8191 cl100k tokens and cuts nothing."""
    from harness.experiment.run import execute

    common = [
        "chunker=recursive",
        "chunker.chunk_size=1024",
        "retriever=faiss",
        f"tracking.uri={tracking_uri}",
        "embedding.show_progress=false",
        "stats.bootstrap=0",
    ]
    local = execute(compose([*common, "embedding=minilm", "embedding.on_truncate=ignore", "tracking.run_name=local"]))
    with EmbeddingServer(embed=minilm_embed()) as server:
        remote = execute(
            compose(
                [
                    *common,
                    "embedding=openai",
                    f"embedding.base_url={server.base_url}",
                    "embedding.model=all-MiniLM-L6-v2",
                    "embedding.api_key_env=null",
                    "embedding.max_input_tokens=8191",  # cl100k tokens, checked by the client: nothing is cut here
                    "embedding.on_truncate=error",
                    "embedding.batch_size=64",
                    "embedding.price_per_million_tokens=0.02",
                    f"cache.dir={tmp_path / 'cache'}",
                    "tracking.run_name=remote",
                ]
            )
        )
    a = local["evaluation"].per_query.set_index("query_id")
    b = remote["evaluation"].per_query.set_index("query_id").loc[a.index]
    assert len(a) >= 100
    for k in (1, 3, 5, 10):
        np.testing.assert_allclose(b[f"recall@{k}"].to_numpy(), a[f"recall@{k}"].to_numpy(), atol=1e-6, rtol=0)
    client, runs = _runs(tracking_uri)
    from harness.tracking.runs import run_metrics

    m = run_metrics(tracking_uri, {r.info.run_name: r.info.run_id for r in runs}["remote"])  # embedding.* are in the metrics table
    served = sum(len(batch) for batch in server.inputs())
    assert m["embedding.texts_embedded"] == served - 1  # every text the run embedded, plus the preflight ping
    assert m["embedding.requests"] == len(server.requests) and m["embedding.retries"] == 0
    assert m["embedding.tokens_embedded"] > served  # word pieces as reported in usage
    assert m["embedding.cost_usd"] == pytest.approx(m["embedding.tokens_embedded"] * 0.02 / 1e6)
    assert math.isfinite(m["recall_at_5"]) and m["recall_at_5"] == pytest.approx(local["metrics"]["recall@5"], abs=1e-6)


@pytest.mark.slow
def test_llama_cpp_server_in_embedding_mode(tmp_path):
    texts = ["def add(a, b): return a + b", "The broker listens on port 8450.", "naïve café", "retention: 14 days"]
    proc, base_url = start_llama_embedding_server(tmp_path / "pooled.log")  # mean pooling: one vector per text
    try:
        enc = OpenAIEncoder(
            base_url=base_url, model="tinycoder", api_key_env=None, max_input_tokens=None, show_progress=False, cache_dir=tmp_path, batch_size=2
        )
        enc.preflight()
        assert enc.dim == 16  # the GGUF's embedding_length
        vecs = enc.encode(texts)
        assert vecs.shape == (4, 16) and vecs.dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
        assert len({v.tobytes() for v in vecs}) == 4  # different texts, different vectors
        m = enc.run_metrics()
        assert m["embedding.requests"] == 3 and m["embedding.texts_embedded"] == 4  # preflight + 2 requests of 2 texts
        uncached = OpenAIEncoder(base_url=base_url, model="tinycoder", api_key_env=None, max_input_tokens=None, show_progress=False)
        np.testing.assert_allclose(uncached.encode(texts[:1])[0], vecs[0], atol=1e-5)  # deterministic: the same vector again
        assert m["embedding.tokens_embedded"] > 4  # the server's own token counts (usage)
    finally:
        stop_process(proc)
    proc, base_url = start_llama_embedding_server(tmp_path / "unpooled.log", pooling=None)  # the GGUF as shipped
    try:
        enc = OpenAIEncoder(base_url=base_url, model="tinycoder", api_key_env=None, max_input_tokens=None, show_progress=False)
        with pytest.raises(ValueError, match=r"embedding 0 is a list of \d+ per-token vectors, not one vector: the server does not pool"):
            enc.preflight()
    finally:
        stop_process(proc)


# -- a bad reply after the preflight: one line, the run FAILED with it ----------------------
def _one_vector(texts, body):
    return reply([text_vector(texts[0])])  # one embedding, whatever the batch size


def _nan_vectors(texts, body):
    return reply([[math.nan] * 8 for _ in texts])


@pytest.mark.parametrize(
    "bad, why",
    [(_one_vector, r"1 embeddings for 3 inputs"), (_nan_vectors, r"non-finite values"), (("raw", b"<html>busy</html>"), r"not JSON")],
    ids=["wrong count", "nan", "not json"],
)
def test_a_bad_reply_after_the_preflight_is_one_line_naming_endpoint_and_batch(bad, why, key):
    with EmbeddingServer(script=[None, bad]) as server:  # the preflight succeeds, the first batch gets the bad reply
        enc = make(server)
        enc.preflight()
        with pytest.raises(EmbeddingResponseError) as info:
            enc.encode(TEXTS[:3])
    message = str(info.value)
    assert "\n" not in message and KEY not in message and re.search(why, message), message
    assert f"{server.base_url}/embeddings" in message and "request 2 (a batch of 3 texts, first " in message, message
    assert enc.n_encoded == 0  # nothing of the bad reply was kept


@pytest.mark.slow
def test_a_bad_reply_after_the_preflight_fails_the_run_in_one_line_naming_endpoint_and_batch(key, tracking_uri):
    from harness.experiment.run import execute

    with EmbeddingServer(script=[None, _one_vector]) as server:  # the preflight succeeds, the first batch gets the bad reply
        cfg = compose(
            [
                "embedding=openai",
                f"embedding.base_url={server.base_url}",
                f"embedding.api_key_env={KEY_ENV}",
                "embedding.show_progress=false",
                "chunker=fixed",
                "retriever=faiss",
                "stats.bootstrap=0",
                f"tracking.uri={tracking_uri}",
                f"cache.dir={tracking_uri.removeprefix('sqlite:///')}.cache",
            ]
        )
        with pytest.raises(EmbeddingResponseError) as info:
            execute(cfg)
    message = str(info.value)
    assert "\n" not in message and KEY not in message
    assert server.base_url + "/embeddings" in message and re.search(r"1 embeddings for \d+ inputs", message), message
    assert re.search(r"request 2 \(a batch of \d+ texts, first '", message), message
    client, runs = _runs(tracking_uri)
    assert [r.info.status for r in runs] == ["FAILED"] and runs[0].data.tags["error"].endswith(message)


@pytest.mark.slow
def test_harness_run_prints_a_bad_reply_as_one_line_without_a_traceback(key, tmp_path):
    import os
    import subprocess
    import sys

    from conftest import KESTREL_PATH, fresh_store

    uri = fresh_store(tmp_path / "mlflow.db")
    with EmbeddingServer(script=[None, _one_vector]) as server:
        cmd = [sys.executable, "-m", "harness.run", "embedding=openai", f"embedding.base_url={server.base_url}", f"embedding.api_key_env={KEY_ENV}"]
        cmd += ["embedding.show_progress=false", "chunker=fixed", "retriever=faiss", "stats.bootstrap=0", f"dataset.path={KESTREL_PATH}"]
        cmd += [f"tracking.uri={uri}", f"cache.dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'out'}"]
        env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
        proc = subprocess.run(cmd, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("harness run: ")]
    assert len(lines) == 1 and "sent an invalid embeddings reply to request 2" in lines[0] and "1 embeddings for" in lines[0] and server.base_url in lines[0], (
        proc.stderr[-3000:]
    )
