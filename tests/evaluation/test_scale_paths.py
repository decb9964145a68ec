"""Fast paths for large corpora equal the straightforward computations they replace (property tests)."""

from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.evaluation import diagnostics as dg
from harness.evaluation.metrics import span as sp
from harness.types import Chunk, Document

DOC = Document("d", "x" * 400)


@functools.cache
def model_counter():
    """The embedding model's WordPiece counter, loaded once for the module."""
    from harness.text import units

    return units.get_counter("tokens", "model")


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@st.composite
def chunk_sets(draw):
    """Chunks of one 400-character document: overlapping, nested and multi-span ones included."""
    chunks = {}
    for _ in range(draw(st.integers(1, 25))):
        cuts = sorted(draw(st.sets(st.integers(0, 400), min_size=2, max_size=6)))
        spans = [(a, b) for a, b in zip(cuts[::2], cuts[1::2]) if b > a]
        if spans:
            c = Chunk.from_spans(DOC, spans)
            chunks.setdefault(c.chunk_id, c)
    return list(chunks.values())


@st.composite
def run_lists(draw):
    cuts = sorted(draw(st.sets(st.integers(0, 400), min_size=2, max_size=6)))
    return [(a, b) for a, b in zip(cuts[::2], cuts[1::2]) if b > a] or [(cuts[0], cuts[0] + 1)]


@settings(max_examples=40, deadline=None)
@given(chunks=chunk_sets(), queries=st.lists(run_lists(), min_size=1, max_size=8))
def test_containing_equals_a_scan_of_every_chunk(chunks, queries):
    lookup = dg.ChunkLookup(chunks)
    for runs in queries:
        lo, hi = runs[0][0], runs[-1][1]
        expected = [c for c in chunks if c.start <= lo and c.end >= hi and all(any(s <= a and b <= e for s, e in sp.merge(c.spans)) for a, b in runs)]
        assert lookup.containing("d", runs) == expected
        assert lookup.containing("other", runs) == []


_ALPHABET = st.sampled_from(list("abc xyz ,.;!?\n\t\r ' \"-é ü ß 東京 ̀ x1 42 ") + ["  ", "\u00a0", "\u2028", "hello", "world", "##", "un", "believable"])


@settings(max_examples=40, deadline=None)
@given(parts=st.lists(_ALPHABET, min_size=0, max_size=400), block=st.integers(3, 40))
def test_blocked_tokenisation_equals_one_call_on_the_whole_text(parts, block, monkeypatch_module):
    from harness.text import units

    text = "".join(parts)
    counter = model_counter()
    enc = counter._tok.encode(text, add_special_tokens=False)
    whole_atoms = counter._atom_lists(enc.offsets, enc.word_ids)
    monkeypatch_module.setattr(units, "ENCODE_BLOCK", block)
    offsets, words = counter._encode(text)
    assert offsets == enc.offsets
    assert counter._atom_lists(offsets, words) == whole_atoms
    layout = counter.layout(text)
    for s, e in [(0, len(text)), (len(text) // 3, len(text)), (1, max(1, len(text) // 2))]:
        assert layout.count(s, e) == counter.count(text[s:e])


@settings(max_examples=15, deadline=None)
@given(texts=st.lists(st.lists(_ALPHABET, max_size=60).map("".join), max_size=12))
def test_batched_atoms_and_token_ends_equal_one_text_at_a_time(texts):
    from harness.experiment.pipeline import _token_ends

    counter = model_counter()
    assert counter.atoms_many(texts) == [counter.atoms(t) for t in texts]
    doc = Document("d", "".join(texts) or "x")
    chunks, pos = [], 0
    for t in texts:
        if t:
            chunks.append(Chunk.from_spans(doc, [(pos, pos + len(t))]))
        pos += len(t)
    batched, single = _token_ends(counter), _token_ends(counter)
    batched.prefill(chunks)
    assert [batched(c) for c in chunks] == [[e for _, e in counter.atoms(c.text).spans] for c in chunks] == [single(c) for c in chunks]


@settings(max_examples=60, deadline=None)
@given(
    scores=st.lists(st.sampled_from([0.0, 0.0, 0.5, 1.0, 1.0, 2.25, 3.0, 7.5]) | st.floats(0, 10, allow_nan=False), max_size=60),
    k=st.integers(1, 70),
    seed=st.integers(0, 2**16),
)
def test_bm25_partial_top_k_equals_sorting_every_hit(scores, k, seed):
    import numpy as np

    from harness.retrievers.bm25 import top_k

    arr = np.asarray(scores, dtype=np.float64)
    tie_rank = np.random.default_rng(seed).permutation(len(arr))
    expected = sorted((i for i in range(len(arr)) if arr[i] > 0), key=lambda i: (-arr[i], tie_rank[i]))[:k]
    assert top_k(arr, tie_rank, k).tolist() == expected


@settings(max_examples=40, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from(list("ab \t\n\r\x0b\x0c\x1c\x1f\x85\u00a0\u2028\u3000é")), min_size=1, max_size=300),
    cuts=st.lists(st.tuples(st.integers(0, 300), st.integers(1, 60)), min_size=1, max_size=12),
)
def test_nonspace_coverage_equals_counting_each_character(text, cuts):
    doc = Document("d", text)
    chunks = {}
    for start, length in cuts:
        s, e = min(start, len(text) - 1), min(start + length, len(text))
        if e > s:
            c = Chunk.from_spans(doc, [(s, e)])
            chunks[c.chunk_id] = c
    if not chunks:
        return
    stats = dg.chunk_set_statistics([doc, Document("other", " x ")], list(chunks.values()))
    inside = {i for c in chunks.values() for s, e in c.spans for i in range(s, e)}
    content = [i for i, ch in enumerate(text) if not ch.isspace()]
    n_nonspace = len(content) + 1  # "x" of the other document
    assert stats["coverage_nonspace"] == (sum(1 for i in content if i in inside) / n_nonspace)
