"""Issue 13, class 6 (edge input): an empty index answers every query with no hits.

``index([])`` is a valid (if useless) index for FAISS and BM25: every query id is in the
run with an empty result, which every metric scores 0. The libraries themselves fail here
(rank-bm25 divides by zero; FAISS pads with id -1), so the retrievers must handle it. The
dataset loaders and the pipeline still refuse an empty corpus or an empty chunk set with a
message naming the dataset, so a real run never silently scores nothing.
"""

from __future__ import annotations

import json

import pytest

from harness.chunkers.fixed import FixedChunker
from harness.datasets.native import load_native
from harness.datasets.validate import DatasetError
from harness.experiment.pipeline import evaluate
from harness.experiment.settings import default_metric_settings
from harness.retrievers.bm25 import BM25Retriever
from harness.retrievers.faiss import FaissRetriever
from harness.types import Chunk, Dataset, Document, Evidence, Query

DOC = Document("kb.txt", "The broker listens on port 8450.\nWorkers send heartbeats.")
QUERIES = [Query("q1", "Which port?", (Evidence("kb.txt", 0, 5),)), Query("q2", "???", (Evidence("kb.txt", 0, 5),))]


def make(kind, encoder):
    return FaissRetriever(encoder=encoder) if kind == "faiss" else BM25Retriever()


@pytest.mark.parametrize("kind", ["faiss", "bm25"])
@pytest.mark.parametrize("k", [1, 5, 100])
def test_empty_index_returns_no_hits_for_every_query(kind, k, encoder):
    retr = make(kind, encoder)
    retr.index([])
    assert retr.search(QUERIES, k=k) == {"q1": {}, "q2": {}}
    assert retr.search([], k=k) == {}


@pytest.mark.parametrize("kind", ["faiss", "bm25"])
def test_reindexing_with_no_chunks_forgets_the_previous_index(kind, encoder):
    retr = make(kind, encoder)
    retr.index([Chunk.from_spans(DOC, [(0, 32)]), Chunk.from_spans(DOC, [(33, len(DOC.text))])])
    assert len(retr.search(QUERIES[:1], k=5)["q1"]) >= 1
    retr.index([])
    assert retr.search(QUERIES, k=5) == {"q1": {}, "q2": {}}


@pytest.mark.parametrize("kind", ["faiss", "bm25"])
def test_search_before_index_and_bad_k_still_raise(kind, encoder):
    retr = make(kind, encoder)
    with pytest.raises(ValueError, match="before index"):
        retr.search(QUERIES, k=3)
    retr.index([])
    with pytest.raises(ValueError, match="top-k"):
        retr.search(QUERIES, k=0)


@pytest.mark.parametrize("kind", ["faiss", "bm25"])
def test_k_beyond_index_size_never_pads(kind, encoder):
    retr = make(kind, encoder)
    cs = [Chunk.from_spans(DOC, [(0, 32)]), Chunk.from_spans(DOC, [(33, len(DOC.text))])]
    retr.index(cs)
    run = retr.search(QUERIES[:1], k=50)
    ids = {c.chunk_id for c in cs}
    assert set(run["q1"]) <= ids and 1 <= len(run["q1"]) <= 2


def _native(root, files: dict[str, str], questions: list[dict]):
    (root / "corpus").mkdir(parents=True)
    for name, text in files.items():
        (root / "corpus" / name).write_text(text, encoding="utf-8", newline="")
    (root / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions), encoding="utf-8")
    return root


def test_loader_refuses_an_empty_corpus_naming_the_dataset(tmp_path):
    root = _native(tmp_path / "empty_ds", {}, [{"query_id": "a", "query": "x?", "evidence": [{"doc_id": "a.txt", "start": 0, "end": 1}]}])
    with pytest.raises(DatasetError, match=r"empty_ds.*no documents"):
        load_native(root)


def test_loader_refuses_evidence_in_an_empty_corpus_file(tmp_path):
    root = _native(tmp_path / "blank_ds", {"a.txt": ""}, [{"query_id": "a", "query": "x?", "evidence": [{"doc_id": "a.txt", "start": 0, "end": 1}]}])
    with pytest.raises(DatasetError, match=r"blank_ds.*'a\.txt'.*length 0"):
        load_native(root)


def test_pipeline_refuses_a_corpus_that_yields_no_chunks():
    doc = Document("ws.txt", "   \n\n  ")
    ds = Dataset(name="blank", documents=(doc,), queries=(Query("q", "x?", (Evidence("ws.txt", 0, 3),)),))
    with pytest.raises(ValueError, match=r"produced no chunks for dataset 'blank'"):
        evaluate(ds, FixedChunker(chunk_size=5, unit="words"), BM25Retriever(), default_metric_settings(ks=(1,), budgets=()), progress=False)
