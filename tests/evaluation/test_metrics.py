"""Metric values on small hand-worked examples, and range/monotonicity properties."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.evaluation.metrics import mlflow_key, parse_metric
from harness.evaluation.metrics.ranking import is_relevant, query_metrics
from harness.types import Chunk, Document, Evidence, Query

DOC = Document("a", "x" * 100)
DOC_B = Document("b", "y" * 100)


def chunk(*spans, doc=DOC):
    return Chunk.from_spans(doc, list(spans))


def test_span_metrics_hand_worked():
    # evidence [10, 20) (10 chars); chunk 1 = [0, 15), chunk 2 = [12, 30)
    q = Query("q", "?", (Evidence("a", 10, 20),))
    m = query_metrics(q, [chunk((0, 15)), chunk((12, 30))], ks=[1, 2])
    # k=1: retrieved [0,15): overlap [10,15) = 5 chars
    assert m["recall@1"] == pytest.approx(5 / 10)
    assert m["precision@1"] == pytest.approx(5 / 15)
    assert m["iou@1"] == pytest.approx(5 / 20)  # union [0,20)
    # k=2: retrieved union [0,30) = 30 chars (the 3 shared chars are counted once)
    assert m["recall@2"] == pytest.approx(1.0)
    assert m["precision@2"] == pytest.approx(10 / 30)
    assert m["iou@2"] == pytest.approx(10 / 30)


def test_duplicate_chunks_do_not_double_count():
    q = Query("q", "?", (Evidence("a", 0, 10),))
    m = query_metrics(q, [chunk((0, 20)), chunk((0, 20)), chunk((5, 20))], ks=[3])
    assert m["recall@3"] == 1.0
    assert m["precision@3"] == pytest.approx(10 / 20)


def test_evidence_in_two_documents():
    # evidence: a[0,10) and b[50,60); retrieved: a[0,10) only -> half the evidence
    q = Query("q", "?", (Evidence("a", 0, 10), Evidence("b", 50, 60)))
    m = query_metrics(q, [chunk((0, 10)), chunk((50, 60), doc=DOC)], ks=[1, 2])
    assert m["recall@1"] == pytest.approx(0.5)
    assert m["precision@1"] == 1.0
    # second chunk is in document a at the same offsets as the b evidence: not evidence
    assert m["recall@2"] == pytest.approx(0.5)
    assert m["precision@2"] == pytest.approx(10 / 20)


def test_context_precision_and_mrr_hand_worked():
    # relevance pattern [0, 1, 0, 1]
    q = Query("q", "?", (Evidence("a", 40, 50), Evidence("a", 80, 90)))
    ranked = [chunk((0, 10)), chunk((40, 50)), chunk((10, 20)), chunk((80, 90))]
    m = query_metrics(q, ranked, ks=[1, 2, 4])
    assert m["context_precision@1"] == 0.0
    assert m["context_precision@2"] == pytest.approx((1 / 2) / 1)
    assert m["context_precision@4"] == pytest.approx((1 / 2 + 2 / 4) / 2)
    assert m["mrr@1"] == 0.0
    assert m["mrr@4"] == pytest.approx(0.5)


def test_relevance_rule_uses_half_of_the_smaller_span():
    q = Query("q", "?", (Evidence("a", 0, 10),))
    assert is_relevant(chunk((5, 15)), q, 0.5)  # overlap 5 >= 0.5 * min(10, 10)
    assert not is_relevant(chunk((6, 16)), q, 0.5)  # overlap 4 < 5
    assert is_relevant(chunk((8, 9)), q, 0.5)  # a tiny chunk fully inside the evidence
    assert not is_relevant(chunk((9, 90)), q, 0.5)  # overlap 1 < 0.5 * 10
    assert is_relevant(chunk((9, 90)), q, 0.0)  # f = 0: any overlap
    assert not is_relevant(chunk((10, 20)), q, 0.0)  # touching is not overlapping


def test_multi_span_chunk_is_scored_on_its_spans():
    q = Query("q", "?", (Evidence("a", 20, 30),))
    c = chunk((0, 5), (20, 25))  # 10 chars, 5 of them evidence
    m = query_metrics(q, [c], ks=[1])
    assert m["recall@1"] == pytest.approx(0.5)
    assert m["precision@1"] == pytest.approx(0.5)
    assert is_relevant(c, q, 0.5)


def test_nothing_retrieved_scores_zero():
    q = Query("q", "?", (Evidence("a", 0, 10),))
    m = query_metrics(q, [], ks=[1, 5], count_tokens=len)
    assert all(v == 0.0 for v in m.values())
    assert set(m) == {f"{f}@{k}" for f in ("recall", "precision", "iou", "context_precision", "mrr", "context_tokens") for k in (1, 5)}


def test_context_tokens_sums_top_k_texts():
    q = Query("q", "?", (Evidence("a", 0, 10),))
    m = query_metrics(q, [chunk((0, 10)), chunk((10, 30))], ks=[1, 2, 5], count_tokens=len)
    assert (m["context_tokens@1"], m["context_tokens@2"], m["context_tokens@5"]) == (10, 30, 30)


def test_metric_names():
    assert mlflow_key("recall@5") == "recall_at_5"
    assert mlflow_key("context_precision@10") == "context_precision_at_10"
    assert parse_metric("mrr@3") == ("mrr", 3)
    with pytest.raises(ValueError, match="unknown metric"):
        parse_metric("recall5")
    with pytest.raises(ValueError):
        parse_metric("bogus@5")


span_st = st.tuples(st.integers(0, 99), st.integers(1, 30)).map(lambda t: (t[0], min(100, t[0] + t[1])))


@settings(max_examples=300, deadline=None)
@given(evidence=st.lists(span_st, min_size=1, max_size=3), retrieved=st.lists(span_st, min_size=0, max_size=8))
def test_metrics_in_unit_interval_and_recall_monotone(evidence, retrieved):
    q = Query("q", "?", tuple(Evidence("a", s, e) for s, e in evidence))
    ranked = [chunk(sp) for sp in retrieved]
    ks = [1, 2, 3, 5, 8]
    m = query_metrics(q, ranked, ks=ks)
    for name, v in m.items():
        assert 0.0 <= v <= 1.0, (name, v)
    recalls = [m[f"recall@{k}"] for k in ks]
    assert recalls == sorted(recalls)
    # brute force over a character mask
    ev = set().union(*(set(range(s, e)) for s, e in evidence))
    got = set().union(*(set(range(s, e)) for s, e in retrieved[:5])) if retrieved else set()
    assert m["recall@5"] == pytest.approx(len(ev & got) / len(ev))
    assert m["iou@5"] == pytest.approx(len(ev & got) / len(ev | got))
    assert m["precision@5"] == pytest.approx(len(ev & got) / len(got) if got else 0.0)
