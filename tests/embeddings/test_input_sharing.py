"""One vector per model input: texts whose token ids after truncation agree are embedded
once (the packaged MiniLM, its 256-word-piece window), texts whose ids differ never share,
and the counters add up. The expected ids come from the model folder's own tokenizer
(``transformers.AutoTokenizer``, truncation at the window), not from the encoder."""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.cache import EmbeddingCache
from harness.embeddings.base import input_key, text_key
from harness.embeddings.model import Encoder, default_model_path

WORDS = ("river", "stone", "maple", "quartz", "lantern", "orbit", "cedar", "pixel", "harbor", "meadow", "signal", "copper")


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(default_model_path()))


def _ids(tokenizer, text: str, window: int = 256) -> tuple[int, ...]:
    """The ids all-MiniLM-L6-v2 reads for ``text``: its tokenizer, cut at the window, special tokens included."""
    return tuple(tokenizer(text.strip(), truncation=True, max_length=window)["input_ids"])


def _fresh(encoder, **kwargs) -> Encoder:
    """A new encoder (empty memory cache, zero counters) on the session's loaded model."""
    fresh = Encoder(show_progress=False, on_truncate="ignore", **kwargs)
    fresh._model = encoder.model
    return fresh


@st.composite
def text_sets(draw):
    """Texts of which some share their first 256 word pieces: a long base (over the
    window), the base with other endings, its upper-case and re-spaced forms (the model is
    uncased and strips), prefixes of it (some under the window) and short texts."""
    words = st.sampled_from(WORDS)
    base = draw(st.lists(words, min_size=260, max_size=300))
    texts = [" ".join(base)]
    for tail in draw(st.lists(st.lists(words, min_size=1, max_size=30), max_size=3)):
        texts.append(" ".join(base + tail))
    if draw(st.booleans()):
        texts.append(" ".join(base).upper())
    if draw(st.booleans()):
        texts.append("  " + "   ".join(base) + " ")
    for cut in draw(st.lists(st.integers(1, 300), max_size=3)):
        texts.append(" ".join(base[:cut]))
    texts += [" ".join(s) for s in draw(st.lists(st.lists(words, min_size=1, max_size=8), max_size=3))]
    return draw(st.permutations(texts + draw(st.lists(st.sampled_from(texts), max_size=2))))  # repeats too


@pytest.mark.slow
@settings(max_examples=6)
@given(texts=text_sets())
def test_equal_ids_share_one_vector_and_different_ids_never_do(encoder, tokenizer, texts):
    fresh = _fresh(encoder)
    vecs = fresh.encode(texts)
    ids = [_ids(tokenizer, t) for t in texts]
    for i in range(len(texts)):
        for j in range(i + 1, len(texts)):
            if ids[i] == ids[j]:
                assert np.array_equal(vecs[i], vecs[j]), (texts[i][:40], texts[j][:40])
    distinct_texts = len(set(texts))
    distinct_ids = len(set(ids))
    assert fresh.n_encoded == distinct_ids  # one embedding per input: nothing with other ids was shared
    assert fresh.n_shared == distinct_texts - distinct_ids
    assert fresh.n_cache_hits == 0
    assert fresh.n_encoded + fresh.n_cache_hits + fresh.n_shared == distinct_texts


@pytest.mark.slow
@settings(max_examples=4)
@given(first=text_sets(), second=text_sets())
def test_counters_add_up_across_a_disk_cache(encoder, tokenizer, tmp_path_factory, first, second):
    cache = tmp_path_factory.mktemp("cache")
    a = _fresh(encoder, cache_dir=cache)
    a.encode(first)
    b = _fresh(encoder, cache_dir=cache)
    asked = list(second) + list(first[:2])
    b.encode(asked)
    b.encode(asked)  # asked again: served from memory, counted once
    assert b.n_encoded + b.n_cache_hits + b.n_shared == len(set(asked))
    known = {_ids(tokenizer, t) for t in first}
    new_ids = {_ids(tokenizer, t) for t in asked} - known
    assert b.n_encoded == len(new_ids)  # an input embedded by the first encoder is read, not embedded again


def test_a_truncated_sibling_gets_the_vector_it_would_get_alone(encoder):
    base = " ".join(WORDS * 30)  # ~360 word pieces
    a, b = base[:2000], base  # both over the window, the same first 256 word pieces
    fresh = _fresh(encoder)
    shared = fresh.encode([a, b, "a short question?"])
    alone = _fresh(encoder).encode([b])
    np.testing.assert_allclose(shared[1], alone[0], atol=1e-6)
    assert (fresh.n_encoded, fresh.n_shared) == (2, 1)
    assert fresh.run_metrics()["embedding.texts_shared"] == 1.0


def test_rows_keyed_by_text_alone_still_hit_without_loading_the_model(tmp_path, encoder):
    """A cache written before input keys existed (text rows only) is read by text, and a warm
    encoder never tokenises or loads the model."""
    texts = ["what the cache held before", "and a second text"]
    writer = Encoder(show_progress=False)
    vecs = _fresh(encoder).encode(texts)
    EmbeddingCache(tmp_path / "embeddings").put(writer.embedding_key, {text_key(t): v for t, v in zip(texts, vecs)})
    reader = Encoder(show_progress=False, cache_dir=tmp_path)
    got = reader.encode(texts)
    assert np.array_equal(got, vecs)
    assert (reader.n_cache_hits, reader.n_encoded, reader._model) == (2, 0, None)


def test_every_vector_is_stored_under_its_text_and_its_input(tmp_path, encoder, tokenizer):
    base = " ".join(WORDS * 30)
    first = _fresh(encoder, cache_dir=tmp_path)
    first.encode([base])
    store = EmbeddingCache(tmp_path / "embeddings")
    keys = [text_key(base), input_key(_ids(tokenizer, base))]
    assert set(store.get(first.embedding_key, keys)) == set(keys)
    second = _fresh(encoder, cache_dir=tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no damaged-row warning: the rows verify
        second.encode([base[:1900]])
    assert (second.n_encoded, second.n_cache_hits, second.n_shared) == (0, 0, 1)  # another text's vector, read by input
    assert set(store.get(first.embedding_key, [text_key(base[:1900])]))  # stored by text too: the next run needs no tokenising


def test_an_encoder_that_cannot_tell_its_input_shares_nothing(encoder):
    fresh = _fresh(encoder)
    fresh._input_keys = lambda texts: None  # what a backend without token ids answers (the API backend)
    fresh.encode(["Same words", "same   WORDS"])
    assert (fresh.n_encoded, fresh.n_shared) == (2, 0)


def test_forget_drops_the_vectors_in_memory_so_the_next_encode_embeds_again(encoder):
    """A timing round starts cold: after ``forget`` neither a text nor its model input is
    served from memory (a long text and its longer sibling share one input)."""
    enc = _fresh(encoder)
    base = " ".join(WORDS[i % len(WORDS)] for i in range(300))
    texts = [base, base + " river stone"]
    first = enc.encode(texts)
    assert (enc.n_encoded, enc.n_shared) == (1, 1)
    enc.forget()
    again = enc.encode(texts)
    assert (enc.n_encoded, enc.n_shared) == (2, 2)  # embedded again, not read from memory
    assert np.allclose(first, again, atol=1e-6)
