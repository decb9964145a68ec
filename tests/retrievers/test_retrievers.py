"""Real FAISS and real BM25 (bm25s, Lucene variant): ranking, k beyond the index size, empty input."""

import numpy as np
import pytest

from harness.retrievers.base import ranked
from harness.retrievers.bm25 import BM25Retriever, bm25_tokenize
from harness.retrievers.faiss import FaissRetriever
from harness.types import Chunk, Document, Evidence, Query

TEXTS = [
    "The broker stores jobs in PostgreSQL and listens on port 8450.",
    "Workers execute jobs and send heartbeats every fifteen seconds.",
    "The dashboard shows queue depth and runs on port 8460.",
    "Retry backoff is exponential by default with a base delay of two seconds.",
]
DOC = Document("kb", "\n".join(TEXTS))


def chunks():
    out, pos = [], 0
    for t in TEXTS:
        out.append(Chunk.from_spans(DOC, [(pos, pos + len(t))]))
        pos += len(t) + 1
    return out


def q(text, qid="q1"):
    return Query(qid, text, (Evidence("kb", 0, 5),))


def test_bm25_tokenizer_is_documented_behaviour():
    assert bm25_tokenize("Kestrel's 2.3.1 Broker") == ["kestrel", "s", "2", "3", "1", "broker"]


@pytest.mark.parametrize("make", ["faiss", "bm25"])
def test_top1_is_the_matching_chunk_and_k_beyond_size_has_no_padding(make, encoder):
    retr = FaissRetriever(encoder=encoder) if make == "faiss" else BM25Retriever()
    cs = chunks()
    retr.index(cs)
    run = retr.search([q("How often do workers send heartbeats?"), q("Which port does the dashboard use?", "q2")], k=10)
    assert ranked(run, "q1")[0] == cs[1].chunk_id
    assert ranked(run, "q2")[0] == cs[2].chunk_id
    for qid in ("q1", "q2"):
        # k=10 > 4 chunks: every candidate once, no -1 ids. FAISS scores every chunk; BM25
        # only those sharing a token with the query ("the", "port" are in chunks 0 and 2)
        expected = {c.chunk_id for c in cs} if make == "faiss" else {"q1": {cs[1].chunk_id}, "q2": {cs[0].chunk_id, cs[2].chunk_id}}[qid]
        assert set(run[qid]) == expected
        scores = [run[qid][c] for c in ranked(run, qid)]
        assert scores == sorted(scores, reverse=True)


def test_faiss_scores_are_cosine_similarities(encoder):
    retr = FaissRetriever(encoder=encoder)
    cs = chunks()
    retr.index(cs)
    query = "What database does the broker use?"
    run = retr.search([q(query)], k=4)
    qv = encoder.encode([query])[0]
    cv = encoder.encode([c.text for c in cs])
    expected = cv @ qv / (np.linalg.norm(cv, axis=1) * np.linalg.norm(qv))
    for c, e in zip(cs, expected):
        assert run["q1"][c.chunk_id] == pytest.approx(float(e), abs=1e-5)


@pytest.mark.parametrize("make", ["faiss", "bm25"])
def test_empty_index_gives_no_hits_and_bad_k_raises(make, encoder):
    retr = FaissRetriever(encoder=encoder) if make == "faiss" else BM25Retriever()
    with pytest.raises(ValueError, match="before index"):
        retr.search([q("x")], k=3)
    retr.index([])
    assert retr.search([q("x")], k=3) == {"q1": {}}
    retr.index(chunks())
    with pytest.raises(ValueError, match="top-k"):
        retr.search([q("x")], k=0)


def test_bm25_parameter_validation():
    with pytest.raises(ValueError, match="retriever.b"):
        BM25Retriever(b=1.5)
    with pytest.raises(ValueError, match="retriever.k1"):
        BM25Retriever(k1=-1)
