"""The metric suite: registry and names, relevance rules, chunk-qrels IR metrics (trec_eval
via ir-measures, cross-checked against ranx), item recall, PrecisionΩ, token-budget recall and
document-level metrics. Expected values are worked out by hand in the comments."""

from __future__ import annotations

import math
import random

import pytest

from harness.chunkers.fixed import FixedChunker
from harness.evaluation.metrics import FAMILIES, METRICS, metric_names, mlflow_key, parse_metric, parse_name
from harness.evaluation.metrics.budget import budget_recall
from harness.evaluation.metrics.ir import (
    ChunkIndex,
    chunk_ir_metrics,
    chunk_qrels,
    document_metrics,
    document_run,
    ir_per_query,
    item_recall,
    precision_omega,
)
from harness.evaluation.metrics.ranking import RELEVANCE_RULES, is_relevant, query_metrics
from harness.experiment.pipeline import EvaluationTools, evaluate
from harness.experiment.settings import default_metric_settings
from harness.retrievers.base import Retriever
from harness.retrievers.bm25 import BM25Retriever
from harness.text.units import WordCounter
from harness.types import Chunk, Dataset, Document, Evidence, Query

DOC = Document("a", "x" * 100)


def chunk(*spans, doc=DOC, text=None):
    return Chunk.from_spans(doc, list(spans), text=text)


# --------------------------------------------------------------------------- registry


def test_every_family_is_documented_and_every_name_round_trips():
    for pattern, fam in FAMILIES.items():
        assert fam.formula and fam.source and fam.range in ("[0, 1]", "[0, ∞)"), pattern
        assert fam.range == "[0, 1]" or fam.name == "context_tokens"
    names = metric_names([1, 5, 10], [256, 512], level="document")
    assert len(names) == len(set(names))
    keys = [mlflow_key(n) for n in names]
    assert len(keys) == len(set(keys)) and not any("@" in k for k in keys)
    for n in names:
        assert str(parse_name(n)) == n
    assert {"recall@5", "ndcg@10", "item_recall@1", "recall@512tok", "budget_filled@256tok", "precision_omega", "doc_ndcg@10"} <= set(names)
    assert "doc_recall@5" not in metric_names([5], level="chunk")


def test_name_formats_and_mlflow_keys():
    assert mlflow_key("recall@512tok") == "recall_at_512tok"
    assert mlflow_key("ndcg@10") == "ndcg_at_10"
    assert mlflow_key("precision_omega") == "precision_omega"
    p = parse_name("recall@512tok")
    assert (p.family.name, p.k, p.budget) == ("recall", None, 512)
    assert parse_name("ndcg@10").k == 10
    assert parse_metric("ndcg@10") == ("ndcg", 10)  # rank cut-off families work as objectives
    assert "precision_omega" not in METRICS
    for bad in ("precision_omega@5", "recall@0tok", "ndcg@0", "ndcg@512tok", "bogus", "recall"):
        with pytest.raises(ValueError, match="unknown metric"):
            parse_name(bad)
    with pytest.raises(ValueError, match="unknown metric"):
        parse_metric("recall@512tok")


# --------------------------------------------------------------------------- acceptance


def test_two_identical_chunks_covering_half_the_evidence():
    q = Query("q", "?", (Evidence("a", 0, 20),))
    c = chunk((0, 10))
    m = query_metrics(q, [c, c], ks=[2])
    assert m["recall@2"] == 0.5  # 10 of 20 evidence chars, counted once
    assert m["precision@2"] == 1.0  # union is 10 chars, all evidence
    assert item_recall(q, [c, c], [2])["item_recall@2"] == 1.0  # 10 >= 0.5 * min(10, 20)
    words = WordCounter()
    b = budget_recall(q, [c, c], [1000], lambda ch: [e for _, e in words.atoms(ch.text).spans], {"a": DOC})
    assert b["recall@1000tok"] == 0.5


def test_context_precision_first_and_second():
    q = Query("q", "?", (Evidence("a", 40, 50),))
    rel, irr = chunk((40, 50)), chunk((0, 10))
    assert query_metrics(q, [rel, irr], ks=[2])["context_precision@2"] == 1.0  # P@1 * 1 / 1
    assert query_metrics(q, [irr, rel], ks=[2])["context_precision@2"] == 0.5  # P@2 * 1 / 1


@pytest.mark.parametrize("position", [0, 1, 2, 3])
def test_chunk_precision_at_4_with_one_relevant_chunk_in_any_position(position):
    q = Query("q", "?", (Evidence("a", 40, 50),))
    ranking = [chunk((0, 10)), chunk((10, 20)), chunk((20, 30))]
    ranking.insert(position, chunk((40, 50)))
    qrels = chunk_qrels([q], ChunkIndex(ranking))
    assert qrels == {"q": {"a#40-50": 1}}
    m = chunk_ir_metrics(qrels, {"q": [c.chunk_id for c in ranking]}, ks=[4])["q"]
    assert m["chunk_precision@4"] == 0.25  # 1 relevant / 4
    assert m["hit_rate@4"] == 1.0
    assert m["map@4"] == pytest.approx(1 / (position + 1))  # P@rank / 1 relevant
    assert m["ndcg@4"] == pytest.approx(1 / math.log2(position + 2))  # IDCG = 1


def test_a_query_that_retrieves_nothing_scores_zero_and_is_counted():
    doc = Document("d", "alpha beta gamma delta. " * 4)  # 96 chars; chunks [0, 23), [24, 47), ... (space dropped)
    queries = (Query("q1", "first", (Evidence("d", 0, 23),)), Query("q2", "second", (Evidence("d", 24, 47),)))
    ds = Dataset("tiny", (doc,), queries)

    class FirstQueryOnly(Retriever):
        """Returns the first chunk for q1 and nothing for any other query."""

        name = "first-only"

        def index(self, chunks):
            self.first = chunks[0].chunk_id

        def search(self, queries, k):
            return {q.query_id: ({self.first: 1.0} if q.query_id == "q1" else {}) for q in queries}

    ev = evaluate(
        ds,
        FixedChunker(chunk_size=24, unit="chars"),
        FirstQueryOnly(),
        default_metric_settings(ks=[1, 4], budgets=[8]),
        EvaluationTools(context_tokenizer=WordCounter()),
        progress=False,
    )
    pq = ev.per_query.set_index("query_id")
    for name in (
        "recall@1",
        "precision@1",
        "context_precision@1",
        "mrr@1",
        "chunk_precision@4",
        "item_recall@4",
        "hit_rate@4",
        "ndcg@4",
        "map@4",
        "recall@8tok",
    ):
        assert pq.loc["q1", name] > 0, name
        assert pq.loc["q2", name] == 0.0, name
    assert len(pq) == 2
    assert ev.metrics["recall@1"] == 0.5  # (1 + 0) / 2: the empty query stays in the mean
    assert ev.metrics["chunk_precision@4"] == pytest.approx((1 / 4 + 0) / 2)
    assert ev.metrics["context_precision@4"] == 0.5
    # PrecisionΩ depends on the chunking only: both queries have an exact chunk
    assert pq["precision_omega"].tolist() == [1.0, 1.0]
    # the budget of 8 words was not filled for either query (4 words; nothing)
    assert ev.metrics["budget_filled@8tok"] == 0.0


# --------------------------------------------------------------------------- relevance rules


def test_relevance_rules_hand_worked():
    # evidence [10, 30) = 20 chars
    q = Query("q", "?", (Evidence("a", 10, 30),))
    A = chunk((0, 15))  # overlap 5; 5 < 0.5 * min(15, 20) = 7.5
    B = chunk((5, 40))  # overlap 20: holds the whole span
    C = chunk((12, 28))  # overlap 16 >= 0.5 * min(16, 20) = 8, inside the evidence
    D = chunk((30, 40))  # touches, no overlap
    expected = {"any_overlap": [A, B, C], "overlap_fraction": [B, C], "contains_evidence": [B]}
    assert set(expected) == set(RELEVANCE_RULES)
    for rule, rel in expected.items():
        assert [c for c in (A, B, C, D) if is_relevant(c, q, 0.5, rule)] == rel, rule
        qrels = chunk_qrels([q], ChunkIndex([A, B, C, D]), 0.5, rule)
        assert qrels["q"] == {c.chunk_id: 1 for c in rel}, rule
    with pytest.raises(ValueError, match="metrics.relevance must be one of"):
        is_relevant(A, q, 0.5, "partial")
    with pytest.raises(ValueError, match="metrics.relevance must be one of"):
        query_metrics(q, [A], ks=[1], relevance="partial")


def test_contains_evidence_across_a_multi_span_chunk():
    q = Query("q", "?", (Evidence("a", 20, 25),))
    assert is_relevant(chunk((0, 5), (20, 25)), q, rule="contains_evidence")
    assert not is_relevant(chunk((0, 5), (21, 30)), q, rule="contains_evidence")  # 4 of 5


# --------------------------------------------------------------------------- item recall, Ω


def test_item_recall_hand_worked():
    # items: a[0,10) (listed twice: one item) and a[50,60)
    q = Query("q", "?", (Evidence("a", 0, 10), Evidence("a", 0, 10), Evidence("a", 50, 60)))
    first, dup, second = chunk((0, 10)), chunk((0, 10)), chunk((50, 60))
    m = item_recall(q, [first, dup, second], [1, 2, 3])
    assert (m["item_recall@1"], m["item_recall@2"], m["item_recall@3"]) == (0.5, 0.5, 1.0)
    # one chunk [0, 60) holds both items: overlap 10 >= 0.5 * min(60, 10) = 5 for each
    big = chunk((0, 60))
    assert item_recall(q, [big], [1])["item_recall@1"] == 1.0
    assert item_recall(q, [big], [1], rule="any_overlap")["item_recall@1"] == 1.0
    assert item_recall(q, [big], [1], rule="contains_evidence")["item_recall@1"] == 1.0
    assert item_recall(q, [chunk((5, 55))], [1], rule="contains_evidence")["item_recall@1"] == 0.0
    assert item_recall(q, [], [1])["item_recall@1"] == 0.0


def test_precision_omega_hand_worked():
    chunks = [chunk((0, 25)), chunk((25, 50)), chunk((50, 75)), chunk((75, 100))]
    index = ChunkIndex(chunks)
    # evidence [20, 30) touches [0,25) and [25,50): Ω = [0, 50), 10 of 50 chars are evidence
    assert precision_omega(Query("q", "?", (Evidence("a", 20, 30),)), index) == pytest.approx(10 / 50)
    # plus [60, 70) inside [50, 75): Ω = [0, 75), 20 evidence chars
    assert precision_omega(Query("q", "?", (Evidence("a", 20, 30), Evidence("a", 60, 70))), index) == pytest.approx(20 / 75)
    # evidence in a document that was not chunked: nothing overlaps
    assert precision_omega(Query("q", "?", (Evidence("b", 0, 10),)), index) == 0.0
    # overlapping chunks are counted once: adding [10, 40) changes nothing in Ω = [0, 50)
    assert precision_omega(Query("q", "?", (Evidence("a", 20, 30),)), ChunkIndex([*chunks, chunk((10, 40))])) == pytest.approx(10 / 50)


# --------------------------------------------------------------------------- budgets

WORDS = Document("w", "aa bb cc dd ee ff gg hh")  # words start at 0, 3, ..., 21; 23 chars
X = Chunk.from_spans(WORDS, [(0, 11)])  # "aa bb cc dd": 4 words
Y = Chunk.from_spans(WORDS, [(12, 23)])  # "ee ff gg hh": 4 words
EV_EF = Query("q", "?", (Evidence("w", 12, 17),))  # "ee ff", 5 chars
_W = WordCounter()


def _ends(c):
    return [e for _, e in _W.atoms(c.text).spans]


def test_budget_recall_cuts_the_crossing_chunk_at_the_budget():
    m = budget_recall(EV_EF, [X, Y], [4, 5, 6, 8, 100], _ends, {"w": WORDS})
    assert m["recall@4tok"] == 0.0  # X only
    assert m["recall@5tok"] == pytest.approx(2 / 5)  # X + "ee" = [12, 14)
    assert m["recall@6tok"] == 1.0  # X + "ee ff" = [12, 17)
    assert m["recall@100tok"] == 1.0
    assert (m["budget_filled@8tok"], m["budget_filled@100tok"]) == (1.0, 0.0)  # 8 words in all
    # duplicates spend budget but never count a character twice
    assert budget_recall(EV_EF, [Y, Y], [8], _ends, {"w": WORDS})["recall@8tok"] == 1.0
    assert budget_recall(EV_EF, [], [8], _ends, {"w": WORDS}) == {"recall@8tok": 0.0, "budget_filled@8tok": 0.0}
    with pytest.raises(ValueError, match="metrics.budgets"):
        budget_recall(EV_EF, [X], [0], _ends, {"w": WORDS})


def test_budget_recall_with_added_context_and_unmappable_text():
    prefixed = Chunk.from_spans(WORDS, [(12, 23)], text="T: ee ff gg hh")  # "T:" ends at 2, "ee" at 5
    # budget 2: "T:" + "ee" -> 5 - 3 = 2 source chars [12, 14)
    assert budget_recall(EV_EF, [prefixed], [1, 2], _ends, {"w": WORDS}) == {
        "recall@1tok": 0.0,
        "budget_filled@1tok": 1.0,
        "recall@2tok": pytest.approx(2 / 5),
        "budget_filled@2tok": 1.0,
    }
    rewritten = Chunk.from_spans(WORDS, [(12, 23)], text="EE FF GG HH")  # cannot be mapped
    assert budget_recall(EV_EF, [rewritten], [2, 4], _ends, {"w": WORDS})["recall@2tok"] == 0.0  # crossing: nothing
    assert budget_recall(EV_EF, [rewritten], [4], _ends, {"w": WORDS})["recall@4tok"] == 1.0  # fits: all spans


def test_budget_recall_over_two_spans():
    doc = Document("d", "aa bb cc dd ee ff")
    c = Chunk.from_spans(doc, [(0, 6), (12, 17)])  # text "aa bb " + "ee ff": words end at 2, 5, 8, 11
    q = Query("q", "?", (Evidence("d", 12, 17),))
    m = budget_recall(q, [c], [2, 3], _ends, {"d": doc})
    assert m["recall@2tok"] == 0.0  # 5 source chars: [0, 5)
    # 3 words end at text offset 8 -> 8 source chars: [0, 6) + [12, 14): 2 of 5 evidence chars
    assert m["recall@3tok"] == pytest.approx(2 / 5)


# --------------------------------------------------------------------------- document level


def test_document_level_max_pooling_hand_worked():
    run = {"q": {"a#0-10": 0.9, "b#0-10": 0.8, "a#10-20": 0.7, "c#0-10": 0.6, "c#10-20": 0.95}}
    chunk_doc = {cid: cid.split("#")[0] for cid in run["q"]}
    # best chunk per document: c 0.95, a 0.9, b 0.8
    assert document_run(run, chunk_doc) == {"q": {"c": 3.0, "a": 2.0, "b": 1.0}}
    q = Query("q", "?", (Evidence("a", 0, 5), Evidence("b", 0, 5)))
    m = document_metrics([q], run, chunk_doc, ks=[1, 2, 3])["q"]
    assert (m["doc_recall@1"], m["doc_recall@2"], m["doc_recall@3"]) == (0.0, 0.5, 1.0)
    # relevant at ranks 2 and 3: DCG = 1/log2(3) + 1/log2(4); IDCG@3 = 1 + 1/log2(3)
    assert m["doc_ndcg@3"] == pytest.approx((1 / math.log2(3) + 0.5) / (1 + 1 / math.log2(3)))
    assert m["doc_ndcg@1"] == 0.0


# --------------------------------------------------------------------------- trec_eval (ours) vs ranx


def _random_case(rng: random.Random, n_queries: int):
    qrels, run = {}, {}
    for i in range(n_queries):
        qid = f"q{i}"
        docs = [f"d{j}" for j in range(rng.randint(1, 30))]
        rel = rng.sample(docs, rng.randint(1, min(6, len(docs))))
        qrels[qid] = {d: 1 for d in rel}
        n_run = rng.randint(0, len(docs))
        if n_run:
            ranked = rng.sample(docs, n_run)
            scores = rng.sample(range(1, 10_000), n_run)  # distinct: no tie-breaking differences
            run[qid] = {d: float(s) for d, s in zip(ranked, scores)}
    return qrels, run


@pytest.mark.slow
def test_ir_metrics_agree_with_ranx_on_generated_cases():
    """ir_per_query (trec_eval through ir-measures) against ranx, an independent (numba)
    implementation, per query and metric on 300 generated queries."""
    from ranx import Qrels as RQrels
    from ranx import Run as RRun
    from ranx import evaluate

    qrels, run = _random_case(random.Random(20261130), 300)
    ks = (1, 3, 5, 10)
    names = [f"{m}@{k}" for m in ("precision", "recall", "ndcg", "mrr", "map", "hit_rate") for k in ks]
    ours = ir_per_query(qrels, run, names)
    assert set(ours) == set(qrels)
    rq = RQrels.from_dict(qrels)
    ranx_values = evaluate(rq, RRun.from_dict(run), names, return_mean=False, make_comparable=True)  # absent queries score 0
    theirs = {name: dict(zip(rq.keys(), ranx_values[name])) for name in names}  # per query, in ranx's qrels order
    checked = 0
    for qid in qrels:
        for name in names:
            expected = theirs[name][qid]
            assert ours[qid][name] == pytest.approx(expected, abs=1e-9), (qid, name)
            assert 0.0 <= ours[qid][name] <= 1.0
            checked += 1
    assert checked == 300 * len(names)
    assert sum(1 for q in qrels if q not in run) > 0  # the generator did produce empty runs
    assert len({round(ours[q]["ndcg@10"], 6) for q in qrels}) > 20  # and varied values


def test_ir_per_query_hand_worked_and_rejects_unknown_names():
    # q1: ranking x, a, b with a and b relevant; q2: c (grade 2) at rank 1; q3: nothing ranked
    qrels = {"q1": {"a": 1, "b": 1}, "q2": {"c": 2}, "q3": {"d": 1}}
    run = {"q1": {"x": 3.0, "a": 2.0, "b": 1.0}, "q2": {"c": 1.0}}
    m = ir_per_query(qrels, run, ["precision@3", "mrr@1", "mrr@3", "map@3", "ndcg@3", "hit_rate@1", "recall@2"])
    assert m["q1"]["precision@3"] == pytest.approx(2 / 3)
    assert m["q1"]["mrr@1"] == 0.0 and m["q1"]["mrr@3"] == pytest.approx(1 / 2)
    assert m["q1"]["map@3"] == pytest.approx((1 / 2 + 2 / 3) / 2)
    # DCG = 1/log2(3) + 1/log2(4); IDCG = 1 + 1/log2(3)
    assert m["q1"]["ndcg@3"] == pytest.approx((1 / math.log2(3) + 0.5) / (1 + 1 / math.log2(3)))
    assert m["q1"]["hit_rate@1"] == 0.0 and m["q1"]["recall@2"] == pytest.approx(1 / 2)
    assert m["q2"]["ndcg@3"] == 1.0 and m["q2"]["precision@3"] == pytest.approx(1 / 3)
    assert all(v == 0.0 for v in m["q3"].values())
    with pytest.raises(ValueError, match="unknown rank metric 'ndcg10'"):
        ir_per_query(qrels, run, ["ndcg10"])
    with pytest.raises(ValueError, match="unknown rank metric 'bpref@5'"):
        ir_per_query(qrels, run, ["bpref@5"])


def test_span_derived_qrels_mrr_matches_our_mrr_and_properties_hold():
    """Random chunkings and evidence: trec_eval's mrr@k on span-derived qrels equals the mrr@k of
    query_metrics; hit_rate >= chunk_precision; rules are nested (contains ⊆ fraction ⊆ any)."""
    rng = random.Random(7)
    for _ in range(60):
        starts = sorted(rng.sample(range(0, 95), rng.randint(2, 12)))
        chunks = [chunk((s, min(100, s + rng.randint(3, 40)))) for s in starts]
        chunks = list({c.chunk_id: c for c in chunks}.values())
        evs = [rng.randint(0, 90) for _ in range(rng.randint(1, 3))]
        q = Query("q", "?", tuple(Evidence("a", s, s + rng.randint(1, 10)) for s in evs))
        ranking = rng.sample(chunks, rng.randint(0, len(chunks)))
        per_rule = {}
        for rule in RELEVANCE_RULES:
            qrels = chunk_qrels([q], ChunkIndex(chunks), 0.5, rule)
            trec_mrr = ir_per_query(qrels, {"q": {c.chunk_id: float(len(ranking) - i) for i, c in enumerate(ranking)}}, ["mrr@5"])["q"]["mrr@5"]
            assert trec_mrr == pytest.approx(query_metrics(q, ranking, ks=[5], relevance=rule)["mrr@5"])
            m = chunk_ir_metrics(qrels, {"q": [c.chunk_id for c in ranking]}, ks=[5])["q"]
            assert m["hit_rate@5"] >= m["chunk_precision@5"]
            assert all(0.0 <= v <= 1.0 for v in m.values())
            per_rule[rule] = set(qrels["q"])
        assert per_rule["contains_evidence"] <= per_rule["overlap_fraction"] <= per_rule["any_overlap"]


# --------------------------------------------------------------------------- pipeline


def test_evaluate_reports_the_whole_suite_on_kestrel(kestrel):
    kw, tools = dict(ks=[1, 5, 10], budgets=[64, 256]), EvaluationTools(context_tokenizer=WordCounter())
    chunker = FixedChunker(chunk_size=400, unit="chars")
    ev = evaluate(kestrel, chunker, BM25Retriever(), default_metric_settings(level="document", **kw), tools, progress=False)
    expected = set(metric_names([1, 5, 10], [64, 256], level="document", context_tokens=False))
    assert expected <= set(ev.metrics)
    for name, v in ev.metrics.items():
        assert 0.0 <= v <= 1.0, name
    m = ev.metrics
    assert m["item_recall@1"] <= m["item_recall@5"] <= m["item_recall@10"]
    assert m["recall@64tok"] <= m["recall@256tok"]
    assert m["hit_rate@10"] >= m["chunk_precision@10"]
    assert m["doc_recall@10"] >= m["doc_recall@1"]
    assert len(ev.per_query) == len(kestrel.queries)
    assert list(ev.budget_table().columns) == ["@64tok", "@256tok"]
    assert {"ndcg", "item_recall", "doc_recall"} <= set(ev.table().index)
    # PrecisionΩ depends on the chunking only; the relevance rules are nested per query
    by_rule = {
        r: evaluate(kestrel, chunker, BM25Retriever(), default_metric_settings(relevance=r, **kw), tools, progress=False).per_query for r in RELEVANCE_RULES
    }
    assert by_rule["any_overlap"]["precision_omega"].tolist() == ev.per_query["precision_omega"].tolist()
    assert (by_rule["contains_evidence"]["hit_rate@5"] <= by_rule["overlap_fraction"]["hit_rate@5"]).all()
    assert (by_rule["overlap_fraction"]["hit_rate@5"] <= by_rule["any_overlap"]["hit_rate@5"]).all()
    assert by_rule["overlap_fraction"]["recall@5"].tolist() == ev.per_query["recall@5"].tolist()  # span recall ignores the rule


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"relevance": "partial"}, "metrics.relevance must be one of"),
        ({"level": "passage"}, "metrics.level must be"),
        ({"budgets": [0]}, "metrics.budgets"),
        ({"budget_depth": 0}, "metrics.budget_depth"),
    ],
)
def test_evaluate_rejects_bad_metric_settings(kestrel, kwargs, message):
    with pytest.raises(ValueError, match=message):
        evaluate(kestrel, FixedChunker(chunk_size=400, unit="chars"), BM25Retriever(), default_metric_settings(**kwargs), progress=False)
