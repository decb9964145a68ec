"""Miss reasons, chunk-set statistics and the degenerate-chunking flag on hand-worked cases,
with the real model tokenizer for the truncation window and real data for cross-checks."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.evaluation.diagnostics import (
    REASONS,
    aggregate_reasons,
    chunk_set_statistics,
    content_spans,
    degenerate_warning,
    diagnose_queries,
    embedded_char_limit,
    embedded_spans,
    is_degenerate,
    miss_reason,
    reason_counts,
)
from harness.evaluation.metrics.ranking import query_metrics
from harness.text.units import get_counter
from harness.types import Chunk, Document, Evidence, Query

# Offsets of A: aaaa [0,4) bbbb [5,9) cccc [10,14) dddd [15,19) eeee [20,24) ffff [25,29)
A = Document("A", "aaaa bbbb cccc dddd eeee ffff")
B = Document("B", "gggg hhhh")
DOCS = {"A": A, "B": B}
A1 = Chunk.from_spans(A, [(0, 9)])  # "aaaa bbbb"
A2 = Chunk.from_spans(A, [(10, 19)])  # "cccc dddd"
A3 = Chunk.from_spans(A, [(20, 29)])  # "eeee ffff"
B1 = Chunk.from_spans(B, [(0, 9)])
INDEX = [A1, A2, A3, B1]


def query(*spans, doc="A"):
    return Query("q", "?", tuple(Evidence(doc, s, e) for s, e in spans))


def test_content_spans():
    assert content_spans(" ab  c\n", 0, 7) == [(1, 3), (5, 6)]
    assert content_spans(" ab  c\n", 2, 5) == [(2, 3)]
    assert content_spans("   ", 0, 3) == []


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from(list("ab \t\n\r\x0b\x0c\x1c\x1f\x85\xa0\u1680\u2000\u2028\u3000\u200bé")), max_size=40),
    data=st.data(),
)
def test_content_spans_are_the_runs_of_non_isspace_characters(text, data):
    """Against a character-by-character scan with ``str.isspace`` (the module's definition),
    over every whitespace kind Python knows and a zero-width space, which is not whitespace."""
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, len(text)))
    expected, run = [], None
    for i in range(start, end):
        if not text[i].isspace() and run is None:
            run = i
        elif text[i].isspace() and run is not None:
            expected.append((run, i))
            run = None
    if run is not None:
        expected.append((run, end))
    assert content_spans(text, start, end) == expected


# ---------------------------------------------------------------- miss reasons


def test_fully_recalled_has_no_reason():
    q = query((10, 14))  # "cccc" inside A2
    assert miss_reason(q, DOCS, INDEX, [A2], k=1) is None


def test_rank_miss():
    q = query((10, 14))
    # A2 holds the evidence but is ranked 2nd: missed at k=1, found at k=2
    assert miss_reason(q, DOCS, INDEX, [B1, A2], k=1) == "rank_miss"
    assert miss_reason(q, DOCS, INDEX, [B1, A2], k=2) is None
    # nothing retrieved at all: still a rank miss (the chunk exists)
    assert miss_reason(q, DOCS, INDEX, [], k=5) == "rank_miss"


def test_boundary_split():
    q = query((5, 14))  # "bbbb cccc": bbbb in A1, cccc in A2, no chunk holds both
    assert miss_reason(q, DOCS, INDEX, [A1], k=1) == "boundary_split"
    assert miss_reason(q, DOCS, INDEX, [B1], k=1) == "boundary_split"


def test_whitespace_only_gap_is_not_a_miss():
    # Both pieces retrieved: every content character is recalled; only the space at
    # offset 9 (in no chunk) is missing, so span recall is 8/9 but the query is not missed.
    q = query((5, 14))
    assert query_metrics(q, [A1, A2], ks=[2])["recall@2"] == pytest.approx(8 / 9)
    assert miss_reason(q, DOCS, INDEX, [A1, A2], k=2) is None
    # Outer whitespace of an excerpt (" cccc ") does not make it split or uncovered.
    q = query((9, 15))
    assert miss_reason(q, DOCS, INDEX, [A2], k=1) is None
    assert miss_reason(q, DOCS, INDEX, [A1], k=1) == "rank_miss"


def test_not_covered_when_strategy_drops_text():
    q = query((10, 14))
    dropped = [A1, A3, B1]  # nothing covers [10, 19)
    assert miss_reason(q, DOCS, dropped, [A1, A3, B1], k=3) == "not_covered"
    # partly covered evidence "bbbb cccc": cccc is in no chunk -> not_covered wins over split
    assert miss_reason(query((5, 14)), DOCS, dropped, [A1], k=1) == "not_covered"


def test_precedence_over_evidence_spans():
    assert REASONS == ("not_covered", "boundary_split", "truncated", "rank_miss")
    # span 1 "eeee" rank-missed, span 2 "bbbb cccc" split -> boundary_split
    q = query((20, 24), (5, 14))
    assert miss_reason(q, DOCS, INDEX, [B1], k=1) == "boundary_split"
    # span 1 "gggg" in B fully retrieved, span 2 "eeee" rank-missed -> rank_miss
    q = Query("q", "?", (Evidence("B", 0, 4), Evidence("A", 20, 24)))
    assert miss_reason(q, DOCS, INDEX, [B1], k=1) == "rank_miss"
    # split + not covered -> not_covered
    q = query((5, 14), (15, 19))
    assert miss_reason(q, DOCS, [A1, A3, B1], [B1], k=1) == "not_covered"


def test_miss_reason_errors():
    with pytest.raises(ValueError, match="k must be"):
        miss_reason(query((10, 14)), DOCS, INDEX, [A2], k=0)
    with pytest.raises(ValueError, match="'Z'"):
        miss_reason(query((0, 2), doc="Z"), DOCS, INDEX, [A2], k=1)


# ---------------------------------------------------------------- truncation

# "the cat sat on the mat": the [0,3) cat [4,7) sat [8,11) on [12,14) the [15,18) mat [19,22)
C = Document("C", "the cat sat on the mat")
C_ALL = Chunk.from_spans(C, [(0, 22)])


@pytest.fixture(scope="module")
def tok():
    counter = get_counter("tokens", "model")
    # precondition of the hand-worked offsets: each of these words is one word piece
    assert [counter.count(w) for w in ("the", "cat", "sat", "on", "mat", "title", "river")] == [1] * 7
    return counter


def test_embedded_char_limit_small_window(tok):
    # max_seq_length 5 -> 3 word pieces after [CLS]/[SEP]: "the cat sat" ends at 11
    assert embedded_char_limit(C.text, 5) == 11
    assert embedded_char_limit(C.text, 8) == 22  # 6 pieces fit in 6
    assert embedded_char_limit(C.text, 7) == 18  # 5 pieces: up to the second "the"
    with pytest.raises(ValueError, match="max_seq_length"):
        embedded_char_limit(C.text, 2)


def test_embedded_spans_with_prefix_and_joiner(tok):
    titled = Chunk.from_spans(C, [(0, 22)], text="Title\n\n" + C.text, metadata={"prefix": "Title\n\n"})
    # 3 pieces: "title the cat" -> 14 characters of text, 7 of them source -> [0, 7)
    assert embedded_spans(titled, 5) == [(0, 7)]
    assert embedded_spans(C_ALL, 5) == [(0, 11)]
    assert embedded_spans(C_ALL, None) == [(0, 22)]
    # two spans "cat" and "mat" joined by "\n": 1 piece keeps "cat", 2 pieces keep both
    joined = Chunk.from_spans(C, [(4, 7), (19, 22)], text="cat\nmat", metadata={"joiner": "\n"})
    assert embedded_spans(joined, 3) == [(4, 7)]
    assert embedded_spans(joined, 4) == [(4, 7), (19, 22)]
    broken = Chunk.from_spans(C, [(0, 22)], text="something else")
    with pytest.raises(ValueError, match="cannot map"):
        embedded_spans(broken, 5)


def test_truncated_vs_rank_miss_small_window(tok):
    other = Chunk.from_spans(B, [(0, 9)])
    docs = {"C": C, "B": B}
    mat = Query("q", "?", (Evidence("C", 19, 22),))
    cat = Query("q", "?", (Evidence("C", 4, 7),))
    # "mat" lies beyond the 3-piece window of the only chunk holding it
    assert miss_reason(mat, docs, [C_ALL, other], [other], k=1, max_seq_length=5) == "truncated"
    # without a window (sparse retriever) it is a plain rank miss
    assert miss_reason(mat, docs, [C_ALL, other], [other], k=1) == "rank_miss"
    # "cat" is inside the window
    assert miss_reason(cat, docs, [C_ALL, other], [other], k=1, max_seq_length=5) == "rank_miss"
    # a second chunk "on the mat" (3 pieces) embeds "mat" fully -> rank_miss
    tail = Chunk.from_spans(C, [(12, 22)])
    assert miss_reason(mat, docs, [C_ALL, tail, other], [other], k=1, max_seq_length=5) == "rank_miss"
    # retrieved truncated chunk: its spans count for recall, so nothing is missed
    assert miss_reason(mat, docs, [C_ALL, other], [C_ALL], k=1, max_seq_length=5) is None
    # truncated ranks below split, above rank_miss
    two = Query("q", "?", (Evidence("C", 19, 22), Evidence("C", 4, 7)))
    assert miss_reason(two, docs, [C_ALL, other], [other], k=1, max_seq_length=5) == "truncated"


def test_truncated_long_chunk_real_window(tok, encoder):
    # 300 words "river", each one word piece; word i occupies [6i, 6i + 5)
    doc = Document("L", " ".join(["river"] * 300))
    assert len(doc.text) == 1799
    long_chunk = Chunk.from_spans(doc, [(0, 1799)])
    short = Chunk.from_spans(B, [(0, 9)])
    docs = {"L": doc, "B": B}
    limit = encoder.max_seq_length
    assert limit == 256
    # 254 pieces are read: the last is word 253, ending at 6 * 253 + 5 = 1523
    assert embedded_char_limit(doc.text, limit) == 1523
    assert embedded_spans(long_chunk, limit) == [(0, 1523)]
    end = Query("end", "?", (Evidence("L", 1794, 1799),))  # the last word
    start = Query("start", "?", (Evidence("L", 0, 5),))
    straddle = Query("mid", "?", (Evidence("L", 1518, 1529),))  # words 253 and 254
    kw = dict(k=1, max_seq_length=limit)
    assert miss_reason(end, docs, [long_chunk, short], [short], **kw) == "truncated"
    assert miss_reason(start, docs, [long_chunk, short], [short], **kw) == "rank_miss"
    assert miss_reason(straddle, docs, [long_chunk, short], [short], **kw) == "truncated"


# ---------------------------------------------------------------- aggregation


def test_diagnose_and_aggregate():
    q1 = Query("q1", "?", (Evidence("A", 10, 14),))  # in A2
    q2 = Query("q2", "?", (Evidence("A", 5, 14),))  # split
    q3 = Query("q3", "?", (Evidence("A", 20, 24),))  # in A3
    q4 = Query("q4", "?", (Evidence("B", 0, 4),))  # in B1, retrieved nothing
    ranked = {"q1": [B1, A2], "q2": [A1, A2], "q3": [A3]}
    reasons = diagnose_queries([q1, q2, q3, q4], DOCS, INDEX, ranked, ks=[1, 2])
    assert reasons == {
        "q1": {1: "rank_miss", 2: None},
        "q2": {1: "boundary_split", 2: None},
        "q3": {1: None, 2: None},
        "q4": {1: "rank_miss", 2: "rank_miss"},
    }
    m = aggregate_reasons(reasons, ks=[1, 2])
    assert m["diagnostics.rank_miss@1"] == 0.5
    assert m["diagnostics.boundary_split@1"] == 0.25
    assert m["diagnostics.not_covered@1"] == 0.0
    assert m["diagnostics.truncated@1"] == 0.0
    assert m["diagnostics.missed@1"] == 0.75
    assert m["diagnostics.rank_miss@2"] == 0.25
    assert m["diagnostics.missed@2"] == 0.25
    assert len(m) == 10
    assert reason_counts(reasons, ks=[1])[1] == {
        "not_covered": 0,
        "boundary_split": 1,
        "truncated": 0,
        "rank_miss": 2,
        "missed": 3,
        "queries": 4,
    }
    assert aggregate_reasons({}, ks=[1])["diagnostics.missed@1"] == 0.0


# ---------------------------------------------------------------- chunk statistics

# Chunks for statistics: overlap (S2 shares "bbbb" with S1), dropped text ("dddd"),
# a duplicate text ("aaaa" in A and in B).
SB = Document("B", "gggg aaaa")
S1 = Chunk.from_spans(A, [(0, 9)])  # "aaaa bbbb"
S2 = Chunk.from_spans(A, [(5, 14)])  # "bbbb cccc"
S3 = Chunk.from_spans(A, [(20, 29)])  # "eeee ffff"
S4 = Chunk.from_spans(A, [(0, 4)])  # "aaaa"
S5 = Chunk.from_spans(SB, [(5, 9)])  # "aaaa"
S6 = Chunk.from_spans(SB, [(0, 4)])  # "gggg"
STAT_CHUNKS = [S1, S2, S3, S4, S5, S6]


def words(texts):
    counter = get_counter("words")
    return [counter.count(t) for t in texts]


def test_chunk_set_statistics_hand_worked():
    queries = [
        Query("q1", "?", (Evidence("A", 10, 14),)),  # cccc: inside S2 -> contained
        Query("q2", "?", (Evidence("A", 0, 14),)),  # aaaa bbbb cccc: no single chunk -> split
        Query("q3", "?", (Evidence("A", 15, 19), Evidence("A", 19, 25))),  # dddd: uncovered; " eeee " in S3
    ]
    st = chunk_set_statistics([A, SB], STAT_CHUNKS, words, max_seq_length=1, queries=queries)
    assert st["n_chunks"] == 6 and st["n_documents"] == 2
    # chars [9, 9, 9, 4, 4, 4]: mean 6.5, every deviation 2.5
    assert st["chars_mean"] == 6.5
    assert st["chars_std"] == pytest.approx(2.5)
    assert (st["chars_min"], st["chars_max"]) == (4, 9)
    # sorted [4,4,4,9,9,9]; p50 at position 2.5 -> 4 + 0.5 * 5; p90 at 4.5 and p99 at 4.95 -> 9
    assert st["chars_p50"] == st["chars_median"] == 6.5
    assert st["chars_p90"] == 9 and st["chars_p99"] == 9
    # words [2, 2, 2, 1, 1, 1]
    assert st["tokens_mean"] == 1.5 and st["tokens_std"] == pytest.approx(0.5)
    assert st["tokens_p50"] == 1.5 and st["tokens_max"] == 2 and st["tokens_min"] == 1
    assert st["n_truncated"] == 3 and st["truncated_fraction"] == 0.5 and st["max_seq_length"] == 1
    # covered: A [0,14) + [20,29) = 23, B [0,4) + [5,9) = 8 -> 31 of 38 characters
    assert st["coverage"] == pytest.approx(31 / 38)
    # non-whitespace: A has 24 (misses dddd), B has 8 -> 28 of 32
    assert st["coverage_nonspace"] == pytest.approx(28 / 32)
    assert st["redundancy"] == pytest.approx(39 / 31)
    assert st["n_duplicate_texts"] == 2  # "aaaa" twice
    assert st["single_chunk_documents"] == 0.0
    # 4 evidence spans: contained (q1, q3's second), split (q2), uncovered (q3's first)
    assert st["n_evidence_spans"] == 4
    assert st["evidence_contained_rate"] == 0.5
    assert st["boundary_split_rate"] == 0.25
    assert st["evidence_uncovered_rate"] == 0.25


def test_chunk_set_statistics_optional_parts_and_errors():
    c = Document("C", "hi")
    st = chunk_set_statistics([A, c], [S1, Chunk.from_spans(c, [(0, 2)])])
    assert "tokens_mean" not in st and "n_truncated" not in st and "boundary_split_rate" not in st
    assert st["single_chunk_documents"] == 1.0  # A has one chunk, C has one
    assert st["n_duplicate_texts"] == 0
    three = [S4, S5, Chunk.from_spans(Document("D", "aaaa"), [(0, 4)])]
    assert chunk_set_statistics([A, SB, Document("D", "aaaa")], three)["n_duplicate_texts"] == 3
    with pytest.raises(ValueError, match="chunks must not be empty"):
        chunk_set_statistics([A], [])
    with pytest.raises(ValueError, match="max_seq_length"):
        chunk_set_statistics([A], [S1], words, max_seq_length=0)


def test_statistics_and_reasons_on_real_data(kestrel):
    """Cross-check on kestrel_kb with fixed 400-character windows (no overlap) and BM25."""
    from harness.chunkers.fixed import FixedChunker
    from harness.retrievers.base import ranked
    from harness.retrievers.bm25 import BM25Retriever

    chunker = FixedChunker(chunk_size=400, chunk_overlap=0, unit="chars")
    chunks = chunker.chunk_all(kestrel.documents)
    st = chunk_set_statistics(kestrel.documents, chunks, queries=kestrel.queries)
    assert st["coverage_nonspace"] == 1.0  # the strategy drops no text
    assert st["evidence_uncovered_rate"] == 0.0
    assert st["redundancy"] == 1.0  # no overlap
    # split rate computed another way: windows partition each document, so a span is
    # split iff its first and last non-space characters fall in different windows
    by_doc = {}
    for c in chunks:
        by_doc.setdefault(c.doc_id, []).append(c)

    def window(doc_id, pos):
        return next(i for i, c in enumerate(by_doc[doc_id]) if c.start <= pos < c.end)

    split = n = 0
    for q in kestrel.queries:
        for ev in q.evidence:
            text = kestrel.by_id[ev.doc_id].text[ev.start : ev.end]
            first = ev.start + (len(text) - len(text.lstrip()))
            last = ev.end - 1 - (len(text) - len(text.rstrip()))
            n += 1
            split += window(ev.doc_id, first) != window(ev.doc_id, last)
    assert st["boundary_split_rate"] == pytest.approx(split / n)
    assert 0 < split < n

    retriever = BM25Retriever()
    retriever.index(chunks)
    run = retriever.search(kestrel.queries, 5)
    by_id = {c.chunk_id: c for c in chunks}
    ranking = {q.query_id: [by_id[cid] for cid in ranked(run, q.query_id)] for q in kestrel.queries}
    reasons = diagnose_queries(kestrel.queries, kestrel.by_id, chunks, ranking, ks=[1, 5])
    for q in kestrel.queries:
        m = query_metrics(q, ranking[q.query_id], ks=[1, 5])
        for k in (1, 5):
            r = reasons[q.query_id][k]
            assert r in (None, "boundary_split", "rank_miss")  # no truncation check, nothing dropped
            if m[f"recall@{k}"] == 1.0:
                assert r is None
            if r is not None:
                assert m[f"recall@{k}"] < 1.0
    agg = aggregate_reasons(reasons, ks=[1, 5])
    assert math.isclose(sum(agg[f"diagnostics.{r}@5"] for r in REASONS), agg["diagnostics.missed@5"])
    assert agg["diagnostics.missed@5"] <= agg["diagnostics.missed@1"]


# ---------------------------------------------------------------- degenerate chunking


def test_is_degenerate():
    docs = [A, B]  # A: 29 chars / 6 words, B: 9 chars / 2 words
    assert is_degenerate(docs, ("chars", "model", 29)) is True
    assert is_degenerate(docs, ("chars", "model", 28)) is False
    assert is_degenerate(docs, ("words", "model", 6)) is True
    assert is_degenerate(docs, ("words", "model", 5)) is False
    assert is_degenerate(docs, None) is False
    assert is_degenerate([], ("chars", "model", 10)) is False
    with pytest.raises(ValueError, match="limit"):
        is_degenerate(docs, ("chars", "model", 0))
    with pytest.raises(ValueError, match="unit"):
        is_degenerate(docs, ("lines", "model", 10))
    assert "all 2 documents are at most 29 chars" in degenerate_warning(docs, ("chars", "model", 29))


def test_is_degenerate_counts_structural_splits():
    # both documents fit the limit, but a structure-aware strategy cut A in two: not degenerate
    whole = [Chunk.from_spans(A, [(0, len(A.text))]), Chunk.from_spans(B, [(0, len(B.text))])]
    split = [Chunk.from_spans(A, [(0, 10)]), Chunk.from_spans(A, [(10, len(A.text))]), whole[1]]
    assert is_degenerate([A, B], ("chars", "model", 100), whole) is True
    assert is_degenerate([A, B], ("chars", "model", 100), split) is False


def test_is_degenerate_model_tokens(tok):
    docs = [C, Document("D", "the cat")]  # 6 and 2 word pieces
    assert is_degenerate(docs, ("tokens", "model", 6)) is True
    assert is_degenerate(docs, ("tokens", "model", 5)) is False


@settings(max_examples=400, deadline=None)
@given(
    runs=st.lists(st.tuples(st.integers(0, 60), st.integers(1, 6)), max_size=6),
    spans=st.lists(st.tuples(st.integers(0, 60), st.integers(0, 12)), max_size=8),
)
def test_covered_agrees_with_a_character_set(runs, spans):
    """``_covered`` against sets of character positions, for normalised spans and any
    sorted, disjoint runs."""
    from harness.evaluation.diagnostics import _covered
    from harness.evaluation.metrics.span import merge

    run_list = merge((s, s + n) for s, n in runs)
    span_list = merge((s, s + n) for s, n in spans)
    chars = {i for s, e in span_list for i in range(s, e)}
    expected = all(i in chars for s, e in run_list for i in range(s, e))
    assert _covered(run_list, span_list) == expected
