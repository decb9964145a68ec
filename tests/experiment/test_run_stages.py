"""Each stage of one run and of the evaluation pipeline, called on its own with real parts
(BM25, the bundled dataset, the packaged tokenizer); the whole sequence is covered by
``test_end_to_end.py``."""

from __future__ import annotations

import math

import pytest
from conftest import compose

from harness.chunkers.fixed import FixedChunker
from harness.evaluation.scoring import per_query_table
from harness.experiment import run as stages
from harness.experiment.pipeline import EvaluationTools, evaluate, retrieve, search_depth
from harness.experiment.settings import default_metric_settings, metric_settings
from harness.retrievers.bm25 import BM25Retriever
from harness.types import Chunk, Dataset, Document, Evidence, Query

BM25 = ["retriever=bm25", "chunker=fixed", "chunker.chunk_size=200", "stats.bootstrap=0", "embedding.show_progress=false"]


def _cfg(tmp_path, *overrides):
    return compose([*BM25, f"cache.dir={tmp_path / 'cache'}", *overrides])


def test_prepare_reads_both_groups_and_fails_on_either():
    s = stages.prepare(compose(["metrics.ks=[1,5]", "stats.bootstrap=10"]))
    assert (s.metrics.ks, s.metrics.objective, s.stats.bootstrap) == ((1, 5), "recall@5", 10)
    with pytest.raises(ValueError, match=r"stats.confidence must be in \(0, 1\)"):
        stages.prepare(compose(["stats.confidence=2"]))


def test_build_components_knows_what_embeds(tmp_path):
    cfg = _cfg(tmp_path)
    parts = stages.build_components(cfg, metric_settings(cfg))
    assert (parts.chunker.name, parts.retriever.name, parts.compressor, parts.embeds) == ("fixed", "bm25", None, False)
    assert parts.context_counter.count("port 8450") == 3  # WordPiece: "port", "84", "##50"
    assert parts.encoder.n_encoded == 0  # nothing embedded by building
    dense = _cfg(tmp_path, "retriever=faiss")
    assert stages.build_components(dense, metric_settings(dense)).embeds
    compressed = _cfg(tmp_path, "compression.enabled=true")
    parts = stages.build_components(compressed, metric_settings(compressed))
    assert parts.compressor is not None and parts.embeds
    with pytest.raises(ValueError, match="chunker.chunk_size"):
        stages.build_components(_cfg(tmp_path, "chunker.chunk_size=0"), metric_settings(cfg))


def test_load_dataset_times_the_load_and_tags_describe_it(tmp_path):
    timings: dict[str, float] = {}
    dataset = stages.load_dataset(_cfg(tmp_path), timings)
    assert set(timings) == {"load"} and timings["load"] > 0
    tags = stages.dataset_tags(dataset)
    # the bundled kestrel_kb: 9 documents, 191 labelled queries
    assert (tags["dataset"], tags["n_documents"], tags["n_queries"]) == ("kestrel_kb", 9, 191)
    assert tags["dataset_fingerprint"] == dataset.fingerprint() and tags["dataset_source"].endswith("kestrel_kb")


def test_pipeline_metric_groups_and_intervals(tmp_path):
    cfg = _cfg(tmp_path, "metrics.ks=[10,1,5]", "stats.bootstrap=200")
    settings = stages.prepare(cfg)
    parts = stages.build_components(cfg, settings.metrics)
    dataset = stages.load_dataset(cfg, {})
    ev = stages.run_pipeline(cfg, dataset, parts, settings.metrics)
    assert list(ev.timings) == ["chunk", "index", "search", "score", "diagnostics"]
    assert len(ev.per_query) == 191 and ev.cache["chunks_cached"] == 0.0 and ev.cache["chunks_stored"] == 1.0
    again = stages.run_pipeline(cfg, dataset, stages.build_components(cfg, settings.metrics), settings.metrics)
    assert again.cache == {"chunks_cached": 1.0} and again.metrics == ev.metrics  # the chunk cache changes nothing

    groups = stages.metric_groups(ev, parts, dataset.load_report, settings)
    curve = [(step, g["recall_curve"]) for g, step in groups if "recall_curve" in g]
    assert curve == [(10, ev.metrics["recall@10"]), (1, ev.metrics["recall@1"]), (5, ev.metrics["recall@5"])]  # config order
    step0 = {k: v for g, step in groups if step == 0 for k, v in g.items()}
    assert step0["cache.embedded_texts"] == 0 and step0["chunks.n_chunks"] == len(ev.chunks)
    assert step0["dataset.queries_without_evidence"] >= 0
    for name in ("recall@5", "ndcg@10", "recall@512tok"):
        assert step0[f"{name}_ci_low"] <= ev.metrics[name] <= step0[f"{name}_ci_high"], name
    no_boot = stages.metric_groups(ev, parts, None, stages.prepare(_cfg(tmp_path, "metrics.ks=[10,1,5]")))
    assert not any(k.endswith("_ci_low") for g, _ in no_boot for k in g)
    assert not any(k.startswith("dataset.") for g, _ in no_boot for k in g)


def _doc_and_queries():
    text = "alpha beta gamma. delta epsilon zeta. eta theta iota. kappa lambda mu."
    doc = Document("d", text)
    q1 = Query("q1", "delta epsilon", (Evidence("d", text.index("delta"), text.index("delta") + 13),))
    q2 = Query("q2", "nothing here", (Evidence("d", 0, 5),))
    return Dataset("tiny", (doc,), (q1, q2))


def test_search_depth_hand_worked():
    doc = Document("d", "abc")
    chunks = [Chunk.from_spans(doc, [(i, i + 1)]) for i in range(3)]
    token_ends = lambda c: list(range(1, 11))  # noqa: E731 - every chunk has 10 context tokens
    assert search_depth([1, 5], [], None, chunks, token_ends) == 5
    assert search_depth([1, 5], [100], None, chunks, token_ends) == 20  # 2 * ceil(100 / 10)
    assert search_depth([1, 5], [100], 3, chunks, token_ends) == 5  # max(ks) wins
    assert search_depth([1, 5], [10**6], None, chunks, token_ends) == 1000  # capped


def test_retrieve_never_asks_for_more_than_there_are_chunks():
    ds = _doc_and_queries()
    chunker = FixedChunker(chunk_size=3, chunk_overlap=0, unit="words")
    chunks = chunker.chunk_all(ds.documents, progress=False)
    retriever = BM25Retriever()
    retriever.index(chunks)
    run = retrieve(ds, chunker, retriever, len(chunks), depth=50)
    assert len(chunks) == 4 and max(len(r) for r in run.values()) <= 4
    assert len(retrieve(ds, chunker, retriever, len(chunks), depth=1)["q1"]) <= 1


def test_per_query_table_orders_columns_and_averages_metrics():
    rows = [
        {"query_id": "a", "query": "x", "recall@1": 1.0, "precision_omega": 0.5, "n_relevant_chunks": 2, "retrieved": "c1"},
        {"query_id": "b", "query": "y", "recall@1": 0.0, "precision_omega": 0.25, "n_relevant_chunks": 0, "retrieved": ""},
    ]
    table, means = per_query_table(rows)
    assert list(table.columns)[-1] == "retrieved" and list(table.columns)[:2] == ["query_id", "query"]
    assert means == {"recall@1": 0.5, "precision_omega": 0.375, "queries.n_failed": 0.0}  # counts and ids are not averaged; no query failed


def test_evaluate_takes_settings_and_tools():
    ds = _doc_and_queries()
    chunker = FixedChunker(chunk_size=3, chunk_overlap=0, unit="words")
    ev = evaluate(ds, chunker, BM25Retriever(), default_metric_settings(ks=[1, 2], budgets=[]), EvaluationTools(context_token_counter=len), progress=False)
    pq = ev.per_query.set_index("query_id")
    # chunk 1 is "delta epsilon zeta." and holds all 13 evidence characters: recall@1 = 1 for q1
    assert ev.chunks[1].text == "delta epsilon zeta."
    assert pq.loc["q1", "retrieved"].split(";")[0] == ev.chunks[1].chunk_id
    assert pq.loc["q1", "recall@1"] == 1.0
    assert pq.loc["q1", "context_tokens@1"] == len("delta epsilon zeta.")  # counter = len: characters
    assert ev.metrics["recall@1"] == pytest.approx((1.0 + pq.loc["q2", "recall@1"]) / 2)
    assert not any(k.endswith("tok") for k in ev.metrics)  # no budgets asked: no recall@<B>tok
    assert math.isclose(ev.metrics["precision_omega"], pq["precision_omega"].mean())
