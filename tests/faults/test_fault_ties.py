"""Issue 13, class 5: ties that score as hits.

A lexical retriever must never rank a chunk that shares no token with the query: such a
chunk has no evidence of relevance, and returning it in corpus order (all scores 0) lets a
query like ``???`` "find" whatever evidence happens to sit first. Every term that occurs in
the corpus keeps a positive IDF (Lucene's BM25 IDF), ties among positive scores are broken
by ascending chunk id (the rule of :func:`harness.retrievers.base.ranked`), and chunks or
queries of the wrong type are refused with a ``TypeError`` naming the parameter.

Expected scores come from the Lucene BM25 formula written out below, independently of the
library the retriever uses:

    idf(t)    = ln(1 + (N - n_t + 0.5) / (n_t + 0.5))
    score(d)  = sum over query tokens t in d of idf(t) * tf / (tf + k1 * (1 - b + b * |d| / avgdl))
"""

from __future__ import annotations

import math
import random

import pytest

from harness.chunkers.fixed import FixedChunker
from harness.experiment.pipeline import evaluate
from harness.experiment.settings import MetricSettings
from harness.retrievers.base import ranked
from harness.retrievers.bm25 import BM25Retriever, bm25_tokenize
from harness.types import Chunk, Dataset, Document, Evidence, Query

# Four lines of six tokens each: "port" and "the" occur in exactly half of them, which
# gives rank-bm25's BM25Okapi an IDF of ln((4 - 2 + 0.5) / (2 + 0.5)) = 0.
LINES = [
    "The broker listens on port 8450.",
    "Workers send heartbeats every fifteen seconds.",
    "The dashboard runs on port 8460.",
    "Retry backoff is exponential by default.",
]
DOC = Document("kb.txt", "\n".join(LINES))


def line_chunks() -> list[Chunk]:
    out, pos = [], 0
    for line in LINES:
        out.append(Chunk.from_spans(DOC, [(pos, pos + len(line))]))
        pos += len(line) + 1
    return out


def q(text: str, qid: str = "q1") -> Query:
    return Query(qid, text, (Evidence("kb.txt", 0, 5),))


def lucene_scores(query: str, texts: list[str], k1: float = 1.5, b: float = 0.75) -> list[float]:
    """Lucene BM25 written out from the formula (independent of the retriever's library)."""
    docs = [bm25_tokenize(t) for t in texts]
    n_docs = len(docs)
    avgdl = sum(len(d) for d in docs) / n_docs
    out = []
    for d in docs:
        s = 0.0
        for t in bm25_tokenize(query):
            tf = d.count(t)
            if tf == 0:
                continue
            n_t = sum(1 for other in docs if t in other)
            idf = math.log(1 + (n_docs - n_t + 0.5) / (n_t + 0.5))
            s += idf * tf / (tf + k1 * (1 - b + b * len(d) / avgdl))
        out.append(s)
    return out


def test_term_in_half_the_chunks_ranks_only_the_chunks_that_contain_it():
    cs = line_chunks()
    retr = BM25Retriever()
    retr.index(cs)
    run = retr.search([q("Which port?")], k=10)
    # "which" is not in the corpus; "port" is in lines 0 and 2 (n=2 of N=4), all lines 6 tokens:
    # idf = ln(1 + 2.5/2.5) = ln 2, tf part = 1 / (1 + 1.5) -> ln(2) / 2.5 for both
    assert set(run["q1"]) == {cs[0].chunk_id, cs[2].chunk_id}
    for cid in run["q1"]:
        assert run["q1"][cid] == pytest.approx(math.log(2) / 2.5, rel=1e-6)


@pytest.mark.parametrize("text", ["???", "!!! ... ---", "zebra unicorn"])
def test_query_sharing_no_token_with_the_corpus_gets_no_hits(text):
    retr = BM25Retriever()
    retr.index(line_chunks())
    run = retr.search([q(text), q("heartbeats", "q2")], k=5)
    assert run["q1"] == {}  # present, empty: scored 0 by every metric, never a hit
    assert list(run["q2"]) == [line_chunks()[1].chunk_id]


def test_term_in_every_chunk_keeps_a_positive_idf():
    texts = ["alpha beta", "alpha gamma", "alpha delta delta", "alpha"]
    doc = Document("d", " ".join(texts))
    cs, pos = [], 0
    for t in texts:
        cs.append(Chunk.from_spans(doc, [(pos, pos + len(t))]))
        pos += len(t) + 1
    retr = BM25Retriever()
    retr.index(cs)
    run = retr.search([q("alpha")], k=4)
    expected = lucene_scores("alpha", texts)
    assert all(e > 0 for e in expected)  # ln(1 + 0.5 / 4.5) > 0
    assert len(run["q1"]) == 4
    for c, e in zip(cs, expected):
        assert run["q1"][c.chunk_id] == pytest.approx(e, rel=1e-5)


def test_single_chunk_corpus_scores_a_matching_query_positive_and_nothing_else():
    # N = n = 1: Robertson's IDF ln((1 - 1 + 0.5) / 1.5) is negative; Lucene's is ln(1 + 1/3)
    doc = Document("one.md", "Kestrel broker")
    c = Chunk.from_spans(doc, [(0, len(doc.text))])
    retr = BM25Retriever()
    retr.index([c])
    run = retr.search([q("broker?"), q("dashboard?", "q2")], k=3)
    # |d| = avgdl: tf part 1 / (1 + 1.5)
    assert run["q1"] == {c.chunk_id: pytest.approx(math.log(1 + 1 / 3) / 2.5, rel=1e-9)}
    assert run["q2"] == {}


@pytest.mark.parametrize("k1, b", [(0.0, 0.0), (0.0, 1.0), (1.2, 1.0), (3.0, 0.3)])
def test_chunks_without_tokens_are_indexed_but_never_returned(k1, b):
    texts = ["---", "broker broker port", "|  |  |", "port"]
    doc = Document("t.md", "\n".join(texts))
    cs, pos = [], 0
    for t in texts:
        cs.append(Chunk.from_spans(doc, [(pos, pos + len(t))]))
        pos += len(t) + 1
    retr = BM25Retriever(k1=k1, b=b)
    retr.index(cs)
    run = retr.search([q("port"), q("---", "q2"), q("port broker port", "q3")], k=4)
    assert set(run["q1"]) == {cs[1].chunk_id, cs[3].chunk_id}
    assert run["q2"] == {}
    assert list(run["q3"]) == [cs[1].chunk_id, cs[3].chunk_id]
    for qid, text in (("q1", "port"), ("q3", "port broker port")):
        expected = lucene_scores(text, texts, k1=k1, b=b)
        for c, e in zip(cs, expected):
            if c.chunk_id in run[qid]:
                assert run[qid][c.chunk_id] == pytest.approx(e, rel=1e-9) and e > 0
    # a corpus in which no chunk has a token answers every query with nothing
    only_marks = [cs[0], cs[2]]
    retr.index(only_marks)
    assert retr.search([q("port"), q("---", "q2")], k=2) == {"q1": {}, "q2": {}}


def test_pipeline_recall_of_a_query_without_matching_tokens_is_zero():
    """The issue's example end to end: before, ``???`` got recall@5 = 1.0 from corpus order."""
    queries = (
        Query("punct", "???", (Evidence("kb.txt", 0, len(LINES[0])),)),
        # "port" occurs in lines 0 and 2 only; the evidence is line 1
        Query("port", "Which port?", (Evidence("kb.txt", len(LINES[0]) + 1, len(LINES[0]) + 1 + len(LINES[1])),)),
        Query("hb", "How often are heartbeats sent?", (Evidence("kb.txt", len(LINES[0]) + 1, len(LINES[0]) + 1 + len(LINES[1])),)),
    )
    ds = Dataset(name="tiny", documents=(DOC,), queries=queries)
    chunker = FixedChunker(chunk_size=6, chunk_overlap=0, unit="words")
    ev = evaluate(ds, chunker, BM25Retriever(), MetricSettings.defaults(ks=(5,), budgets=()), progress=False)
    assert [c.text for c in ev.chunks] == LINES
    per = ev.per_query.set_index("query_id")
    assert per.loc["punct", "recall@5"] == 0.0
    assert per.loc["punct", "retrieved"] == ""
    assert per.loc["port", "recall@5"] == 0.0
    assert per.loc["hb", "recall@5"] == 1.0
    assert ev.metrics["recall@5"] == pytest.approx(1 / 3)


def test_ties_among_positive_scores_break_by_ascending_chunk_id_whatever_the_index_order():
    # the same text in two documents: identical positive scores for "broker"
    docs = [
        Document(n, t)
        for n, t in [
            ("b.txt", "broker stores jobs"),
            ("a.txt", "broker stores jobs"),
            ("c.txt", "workers run jobs"),
            ("d.txt", "dashboard shows queues"),
            ("e.txt", "retry with backoff"),
        ]
    ]
    cs = [Chunk.from_spans(d, [(0, len(d.text))]) for d in docs]
    for order in (cs, cs[::-1], [cs[0], cs[3], cs[1], cs[4], cs[2]]):
        retr = BM25Retriever()
        retr.index(order)
        top1 = retr.search([q("broker")], k=1)["q1"]
        assert list(top1) == ["a.txt#0-18"]  # "a.txt#..." < "b.txt#..."
        full = retr.search([q("broker")], k=5)
        assert ranked(full, "q1") == ["a.txt#0-18", "b.txt#0-18"]
        assert full["q1"]["a.txt#0-18"] == full["q1"]["b.txt#0-18"] > 0


def test_random_corpora_return_exactly_the_chunks_sharing_a_token_in_lucene_order():
    rng = random.Random(13)
    vocab = [f"w{i}" for i in range(12)] + ["the", "port", "ünïcode", "日本"]
    for trial in range(30):
        n = rng.randint(1, 9)
        texts = [" ".join(rng.choice(vocab) for _ in range(rng.randint(1, 8))) for _ in range(n)]
        doc = Document(f"doc{trial}", "\n".join(texts))
        cs, pos = [], 0
        for t in texts:
            cs.append(Chunk.from_spans(doc, [(pos, pos + len(t))]))
            pos += len(t) + 1
        cs = list({c.chunk_id: c for c in cs}.values())
        retr = BM25Retriever()
        retr.index(cs)
        query = " ".join(rng.choice(vocab + ["absent", "?"]) for _ in range(rng.randint(1, 4)))
        k = rng.randint(1, 12)
        run = retr.search([q(query)], k=k)["q1"]
        expected = dict(zip((c.chunk_id for c in cs), lucene_scores(query, [c.text for c in cs])))
        positive = {cid for cid, s in expected.items() if s > 0}
        qtok = set(bm25_tokenize(query))
        assert positive == {c.chunk_id for c in cs if qtok & set(bm25_tokenize(c.text))}
        assert len(run) == min(k, len(positive))
        assert set(run) <= positive
        for cid, s in run.items():
            assert s == pytest.approx(expected[cid], rel=1e-5)
        # nothing left out scores clearly better than the worst returned chunk
        if run:
            worst = min(run.values())
            assert all(expected[c] <= worst * (1 + 1e-5) for c in positive - set(run))
        assert ranked({"q1": run}, "q1") == list(run)  # the dict is already in ranking order


def test_plain_strings_instead_of_chunks_or_queries_raise_type_error_naming_the_parameter(encoder):
    from harness.retrievers.faiss import FaissRetriever

    for retr in (BM25Retriever(), FaissRetriever(encoder=encoder)):
        with pytest.raises(TypeError, match=r"chunks\[0\].*str.*Chunk"):
            retr.index(["a", "b"])
        with pytest.raises(TypeError, match=r"chunks.*str.*Chunk"):
            retr.index("broker stores jobs")
        retr.index(line_chunks())
        with pytest.raises(TypeError, match=r"queries\[0\].*str.*Query"):
            retr.search(["Which port?"], k=3)
        # two chunks with one id would merge into one result silently
        with pytest.raises(ValueError, match=r"chunks\[0\] and chunks\[2\] share chunk_id 'kb.txt#0-32'"):
            retr.index([line_chunks()[0], line_chunks()[1], line_chunks()[0]])
