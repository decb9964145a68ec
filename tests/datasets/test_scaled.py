"""Scaled datasets: N exact copies of each document, the same questions, evidence in every copy."""

from __future__ import annotations

import pytest

from harness.datasets.scaled import copy_id, load_chroma_scaled, scale_dataset
from harness.datasets.validate import DatasetError
from harness.types import Dataset, Document, Evidence, Query


@pytest.fixture(scope="module")
def small() -> Dataset:
    docs = (Document("a", "alpha beta gamma delta"), Document("b", "one two three"))
    queries = (
        Query("q1", "which greek letter?", (Evidence("a", 6, 10, "beta"),)),
        Query("q2", "numbers?", (Evidence("b", 4, 7, "two"), Evidence("a", 0, 5, "alpha"))),
    )
    return Dataset("toy", docs, queries, source="mem")


def test_factor_one_is_the_dataset_itself(small):
    assert scale_dataset(small, 1) is small


@pytest.mark.parametrize("factor", [2, 11])
def test_copies_are_exact_and_evidence_points_into_every_copy(small, factor):
    scaled = scale_dataset(small, factor)
    assert scaled.name == f"toy-x{factor}"
    assert len(scaled.documents) == factor * len(small.documents)
    assert scaled.n_chars == factor * small.n_chars
    assert [q.query_id for q in scaled.queries] == ["q1", "q2"]
    by_id = scaled.by_id
    assert len(by_id) == len(scaled.documents)
    for q, orig in zip(scaled.queries, small.queries):
        assert len(q.evidence) == factor * len(orig.evidence)
        for ev in q.evidence:
            assert by_id[ev.doc_id].text[ev.start : ev.end] == ev.text
        # every copy of every original evidence document is named exactly once
        assert sorted({ev.doc_id for ev in q.evidence}) == sorted(copy_id(e.doc_id, i, factor) for e in orig.evidence for i in range(factor))
    ids = [d.doc_id for d in scaled.documents]
    assert ids[:2] == ["a", "b"]
    assert ids[-1] == ("b~1" if factor == 2 else "b~10")
    assert scale_dataset(small, factor).fingerprint() == scaled.fingerprint()  # deterministic


def test_bad_factor_and_colliding_ids_are_refused(small):
    for bad in (0, -1, 1.5, True, "10"):
        with pytest.raises(ValueError, match="dataset.factor must be an int >= 1"):
            scale_dataset(small, bad)
    clash = Dataset("clash", (Document("a", "xyz"), Document("a~1", "xyz")), (Query("q", "?", (Evidence("a", 0, 1, "x"),)),))
    with pytest.raises(DatasetError, match="copy ids collide"):
        scale_dataset(clash, 2)


def test_chroma_scaled_loader(chroma):
    from tests.conftest import CHROMA_PATH

    scaled = load_chroma_scaled(3, path=CHROMA_PATH)
    assert scaled.name == "chroma_general-x3"
    assert scaled.n_chars == 3 * chroma.n_chars
    assert len(scaled.queries) == len(chroma.queries)
    assert load_chroma_scaled(1, path=CHROMA_PATH).fingerprint() == chroma.fingerprint()
    with pytest.raises(ValueError, match="dataset.factor"):
        load_chroma_scaled(0, path="/nonexistent")


def test_load_scaled_from_a_nested_dataset_config_and_one_line(kestrel):
    from hydra.utils import instantiate

    from harness.datasets.scaled import one_line

    node = {"_target_": "harness.datasets.scaled.load_scaled", "factor": 2, "base": {"_target_": "harness.datasets.native.load_native", "path": kestrel.source}}
    scaled = instantiate(node)
    assert scaled.n_chars == 2 * kestrel.n_chars and len(scaled.queries) == len(kestrel.queries)
    joined = one_line(scaled)
    (doc,) = joined.documents
    assert len(doc.text) == scaled.n_chars + len(scaled.documents) - 1
    assert "\n" not in doc.text and "\r" not in doc.text
    assert sum(len(q.evidence) for q in joined.queries) == sum(len(q.evidence) for q in scaled.queries)
    for q in joined.queries:  # check_dataset ran too; spans still hold their (line-break free) excerpts
        assert all(doc.text[e.start : e.end] == e.text for e in q.evidence)
    from harness.datasets.scaled import load_scaled

    with pytest.raises(ValueError, match="dataset.base must be a dataset config"):
        load_scaled({"path": "x"}, 2)


# -- distinct copies: perturb_text and scale_dataset(perturb=...) ------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from harness.datasets.scaled import WORD, perturb_text, vocabulary_by_length  # noqa: E402

#: Texts with letters of several scripts, digits, punctuation, underscores and line breaks.
_TEXTS = st.text(st.characters(categories=("L", "N", "P", "Zs"), include_characters="_\n\t'é"), max_size=300)


@settings(max_examples=60, deadline=None)
@given(text=_TEXTS, other=_TEXTS, copy=st.integers(0, 10**6), rate=st.floats(0, 1), seed=st.integers(0, 2**40), key=st.text(max_size=8))
def test_perturbation_keeps_length_and_every_non_letter_in_place(text, other, copy, rate, seed, key):
    vocabulary = vocabulary_by_length([text, other])
    out = perturb_text(text, copy, rate, vocabulary, key, seed)
    assert len(out) == len(text)
    for a, b in zip(text, out):
        if WORD.fullmatch(a) is None:  # spaces, digits, punctuation, "_" are never touched
            assert b == a
        else:
            assert WORD.fullmatch(b) is not None  # a letter stays a letter
    # the word runs sit at the same places, so every span of the original is a span of the copy
    assert [m.span() for m in WORD.finditer(out)] == [m.span() for m in WORD.finditer(text)]
    # every replaced word is a word of the vocabulary of its length
    for m, n in zip(WORD.finditer(text), WORD.finditer(out)):
        assert n.group() == m.group() or n.group() in vocabulary[len(m.group())]
    assert perturb_text(text, copy, rate, vocabulary, key, seed) == out  # deterministic
    assert perturb_text(text, 0, rate, vocabulary, key, seed) == text  # copy 0 is the original
    assert perturb_text(text, copy, 0.0, vocabulary, key, seed) == text


def test_perturbation_rate_is_the_share_of_words_replaced():
    words = [f"{a}{b}{c}" for a in "abcdefgh" for b in "ijklmnop" for c in "qrstuvwx"]  # 512 distinct 3-letter words
    text = " ".join(words * 4)
    vocabulary = vocabulary_by_length([text])
    for rate in (0.05, 0.15, 0.5):
        out = perturb_text(text, 3, rate, vocabulary)
        changed = sum(a != b for a, b in zip(text.split(), out.split()))
        # a replaced word equals the original with chance 1/512; the share drawn is binomial over 2048 words
        assert abs(changed / 2048 - rate * (1 - 1 / 512)) < 4 * (rate * (1 - rate) / 2048) ** 0.5 + 1e-9
    assert perturb_text(text, 1, 0.15, vocabulary) != perturb_text(text, 2, 0.15, vocabulary)  # copies differ


_DOCS = st.lists(st.text(st.characters(categories=("L", "N", "Zs"), include_characters=".,\n"), min_size=1, max_size=120), min_size=1, max_size=4)


@pytest.mark.filterwarnings("ignore:.*repeats? the text of another")  # short generated texts may coincide
@settings(max_examples=60, deadline=None)
@given(texts=_DOCS, data=st.data(), factor=st.integers(1, 5), rate=st.floats(0.01, 1))
def test_perturbed_copies_keep_every_evidence_span_exact(texts, data, factor, rate):
    docs = tuple(Document(f"d{i}", t) for i, t in enumerate(texts))
    evidence = []
    for i, t in enumerate(texts):
        start = data.draw(st.integers(0, len(t) - 1))
        end = data.draw(st.integers(start + 1, len(t)))
        evidence.append(Evidence(f"d{i}", start, end, t[start:end]))
    base = Dataset("gen", docs, (Query("q", "what?", tuple(evidence)),), source="mem")
    scaled = scale_dataset(base, factor, name="gen-p", perturb=rate, seed=7)
    by_id = scaled.by_id
    assert [d.text for d in scaled.documents[: len(docs)]] == list(texts)  # copy 0 is the original
    (q,) = scaled.queries
    assert len(q.evidence) == factor * len(evidence)
    for ev in q.evidence:
        copy = by_id[ev.doc_id]
        original = base.by_id[copy.metadata["copy_of"]]
        assert len(copy.text) == len(original.text)
        assert copy.text[ev.start : ev.end] == ev.text  # the excerpt is the copy's own text there
        src = next(e for e in evidence if e.doc_id == original.doc_id)
        assert (ev.start, ev.end) == (src.start, src.end)
    assert scale_dataset(base, factor, name="gen-p", perturb=rate, seed=7).fingerprint() == scaled.fingerprint()


def test_bad_perturbation_settings_are_refused(small):
    for bad in (-0.1, 1.5, float("nan"), True, "0.1"):
        with pytest.raises(ValueError, match=r"dataset.perturb must be a number in \[0, 1\]"):
            scale_dataset(small, 2, perturb=bad)
    with pytest.raises(ValueError, match="dataset.seed must be an integer >= 0"):
        scale_dataset(small, 2, perturb=0.1, seed=-1)
    with pytest.raises(ValueError, match=r"vocabulary\[4\] holds 'ab1c'"):
        perturb_text("abcd efgh", 1, 1.0, {4: ("ab1c",)})
