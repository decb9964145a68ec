"""Pipeline-level properties over small generated corpora (:mod:`corpora`), through
:func:`harness.experiment.pipeline.evaluate` (chunk -> index -> search -> score, no Hydra,
no MLflow) with real chunkers and real BM25.

* permuting the documents and/or the queries changes no per-query metric and no mean;
* retrieving every chunk gives recall 1 for every query of a strategy whose chunks cover
  the document, and ``1 - uncovered / evidence`` characters otherwise;
* every value the pipeline reports is finite and inside the range its registry entry
  documents.
"""

from __future__ import annotations

import math
import warnings

import pandas as pd
import pytest
from conftest import PROJECT_ROOT, compose
from corpora import datasets
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.chunkers.fixed import FixedChunker
from harness.chunkers.recursive import RecursiveChunker
from harness.chunkers.sentence import SentenceChunker
from harness.evaluation.metrics import is_metric_name, value_bounds
from harness.experiment.build import build_chunker
from harness.experiment.pipeline import EvaluationTools, evaluate
from harness.experiment.settings import default_metric_settings
from harness.retrievers.base import Retriever, check_chunks, check_k, check_queries
from harness.retrievers.bm25 import BM25Retriever
from harness.types import Dataset, Document, Evidence, Query

KS = [1, 3, 5]
PROPERTY = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
CHUNKERS = {
    "fixed": lambda: FixedChunker(chunk_size=40, chunk_overlap=10, unit="chars"),
    "recursive": lambda: RecursiveChunker(chunk_size=8, unit="words"),
    "sentence": lambda: SentenceChunker(max_chunk_size=12, unit="words"),
}


def _evaluate(dataset: Dataset, chunker_name: str, **metric_changes):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # degenerate chunkings of one-sentence corpora warn; they are still scored
        return evaluate(dataset, CHUNKERS[chunker_name](), BM25Retriever(), default_metric_settings(ks=KS, budgets=[], **metric_changes), progress=False)


def _numbers(ev) -> dict[tuple[str, str], float]:
    """Every numeric per-query value keyed by (query id, column)."""
    table = ev.per_query.set_index("query_id")
    numeric = [c for c in table.columns if pd.api.types.is_numeric_dtype(table[c])]
    return {(qid, c): float(table.at[qid, c]) for qid in table.index for c in numeric}


def _assert_same(a: dict, b: dict, what: str) -> None:
    assert a.keys() == b.keys(), what
    for key in a:
        assert math.isclose(a[key], b[key], rel_tol=0.0, abs_tol=1e-12), f"{what}: {key}: {a[key]} != {b[key]}"


@PROPERTY
@given(dataset=datasets(), chunker=st.sampled_from(sorted(CHUNKERS)), data=st.data())
def test_permuting_documents_or_queries_changes_no_metric(dataset, chunker, data):
    docs = data.draw(st.permutations(dataset.documents), label="documents")
    queries = data.draw(st.permutations(dataset.queries), label="queries")
    permuted = Dataset(name=dataset.name, documents=tuple(docs), queries=tuple(queries))
    before, after = _evaluate(dataset, chunker), _evaluate(permuted, chunker)
    _assert_same(_numbers(before), _numbers(after), "per-query value")
    _assert_same(before.metrics, after.metrics, "mean")
    _assert_same(before.chunk_stats, after.chunk_stats, "chunk statistic")
    retrieved = lambda ev: dict(zip(ev.per_query["query_id"], ev.per_query["retrieved"]))  # noqa: E731
    assert retrieved(before) == retrieved(after)  # the same units in the same order, not only the same numbers


class EveryChunk(Retriever):
    """Returns every indexed chunk for every query, all with score 1.0 (so the ranking is the
    shared tie rule alone): the retriever of the retrieve-all property."""

    name = "every_chunk"

    def index(self, chunks):
        self._ids = [c.chunk_id for c in check_chunks(chunks)]

    def search(self, queries, k):
        check_k(k)
        return {q.query_id: dict.fromkeys(self._ids[:k], 1.0) for q in check_queries(queries)}


#: The shipped strategies that run without a model or an LLM, with sizes small enough to
#: cut the generated documents into several chunks (every size in the strategy's own unit).
NO_MODEL_STRATEGIES = {
    "fixed": ["chunker.chunk_size=12", "chunker.chunk_overlap=3"],
    "recursive": ["chunker.chunk_size=12"],
    "sentence": ["chunker.max_chunk_size=16"],
    "paragraph": ["chunker.max_chunk_size=16"],
    "markdown": ["chunker.max_chunk_size=16"],
    "code": ["chunker.max_chunk_size=16"],
    "faq": ["chunker.max_chunk_size=16"],
    "table": ["chunker.max_chunk_size=16"],
    "timestamp": [],
    "hierarchical": ["chunker.parent_size=40", "chunker.child_size=10"],
    "chonkie": ["chunker.kwargs.chunk_size=60"],
    "langchain": ["chunker.kwargs.chunk_size=60", "chunker.kwargs.chunk_overlap=10"],
    "modality": ["chunker.text_chunker.chunk_size=12"],
    "adaptive": [f"chunker.routes.{r}.max_chunk_size=16" for r in ("code", "markdown", "table", "faq", "chat")] + ["chunker.routes.prose.chunk_size=12"],
}
ALL = 1000  # a cut-off above any generated chunk count


def _covered(chunks) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for c in chunks:
        for s, e in c.spans:
            out.setdefault(c.doc_id, set()).update(range(s, e))
    return out


def test_every_no_model_strategy_is_in_the_retrieve_all_property():
    shipped = {p.stem for p in (PROJECT_ROOT / "conf" / "chunker").glob("*.yaml")}
    model_backed = {"semantic", "cluster_semantic", "topic", "agentic"}  # embed sentences or ask an LLM
    assert shipped - model_backed == set(NO_MODEL_STRATEGIES)


@pytest.mark.parametrize("strategy", sorted(NO_MODEL_STRATEGIES))
def test_retrieving_every_chunk_recalls_all_covered_evidence(strategy):
    chunker = build_chunker(compose([f"chunker={strategy}", *NO_MODEL_STRATEGIES[strategy]]))

    @settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(dataset=datasets())
    def check(dataset):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ev = evaluate(dataset, chunker, EveryChunk(), default_metric_settings(ks=[ALL], budgets=[]), progress=False)
        table = ev.per_query.set_index("query_id")
        # what the strategy can hand back of each document: its indexed chunks, or what they expand to (parents)
        covered = _covered(chunker.expand(list(ev.chunks), dataset.by_id))
        for q in dataset.queries:
            evidence = {(e.doc_id, i) for e in q.evidence for i in range(e.start, e.end)}
            uncovered = sum(1 for d, i in evidence if i not in covered.get(d, ()))
            assert table.at[q.query_id, "evidence_chars"] == len(evidence)
            assert table.at[q.query_id, "evidence_uncovered_chars"] == uncovered, (strategy, q.query_id)
            expected = 1.0 - uncovered / len(evidence)
            assert math.isclose(table.at[q.query_id, f"recall@{ALL}"], expected, abs_tol=1e-12), (strategy, q.query_id, table.at[q.query_id, "retrieved"])
        total = sum(int(v) for v in table["evidence_uncovered_chars"])
        assert ev.chunk_stats["evidence_uncovered_chars"] == total

    check()


def test_uncovered_evidence_characters_by_hand():
    # "alpha beta": a recursive split at 5 characters keeps "alpha" [0, 5) and "beta" [6, 10)
    # and drops the space between them; evidence "ha be" [3, 8) has 5 characters, 1 of them
    # (the space at 5) in no chunk: recall can reach 4/5 and no more
    doc = Document("d1.md", "alpha beta")
    dataset = Dataset("hand", (doc,), (Query("q0", "alpha", (Evidence("d1.md", 3, 8, "ha be"),)),))
    ev = evaluate(dataset, RecursiveChunker(chunk_size=5, unit="chars"), EveryChunk(), default_metric_settings(ks=[1, 2], budgets=[]), progress=False)
    assert [c.spans for c in ev.chunks] == [((0, 5),), ((6, 10),)]
    row = ev.per_query.iloc[0]
    assert (row["evidence_chars"], row["evidence_uncovered_chars"]) == (5, 1)
    assert row["recall@2"] == pytest.approx(4 / 5) and ev.chunk_stats["evidence_uncovered_chars"] == 1.0


def _context_tools() -> EvaluationTools:
    from harness.text.units import get_counter

    counter = get_counter("tokens", "model")  # the packaged MiniLM WordPiece tokenizer, as metrics.context_tokenizer=model
    return EvaluationTools(context_tokenizer=counter, context_token_counter=counter.count)


#: Per-query columns that are not metrics: counts in characters, spans or units.
COUNT_COLUMNS = ("n_evidence", "evidence_chars", "n_relevant_chunks", "evidence_uncovered_chars")


@PROPERTY
@given(
    dataset=datasets(),
    chunker=st.sampled_from(sorted(CHUNKERS)),
    level=st.sampled_from(["chunk", "document"]),
    convention=st.sampled_from(["harness", "chroma"]),
    relevance=st.sampled_from(["overlap_fraction", "any_overlap", "contains_evidence"]),
)
def test_every_reported_value_is_finite_and_in_its_documented_range(dataset, chunker, level, convention, relevance):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ev = evaluate(
            dataset,
            CHUNKERS[chunker](),
            BM25Retriever(),
            default_metric_settings(ks=KS, budgets=[8, 64], level=level, convention=convention, relevance=relevance),
            _context_tools(),
            progress=False,
        )
    values = {**ev.metrics, **{f"chunks.{k}": v for k, v in ev.chunk_stats.items()}}
    for name, value in values.items():
        lo, hi = value_bounds(name)  # raises for a value nothing documents
        assert math.isfinite(value) and lo <= value <= hi, (name, value, (lo, hi))
    for column in ev.per_query.columns:
        if column in COUNT_COLUMNS:
            assert all(float(v).is_integer() and v >= 0 for v in ev.per_query[column]), column
        elif is_metric_name(column) or "@" in column:
            lo, hi = value_bounds(column)
            assert all(math.isfinite(v) and lo <= v <= hi for v in ev.per_query[column]), (column, list(ev.per_query[column]))
    assert (ev.per_query["evidence_uncovered_chars"] <= ev.per_query["evidence_chars"]).all()


@pytest.mark.slow
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(dataset=datasets(), data=st.data())
def test_permuting_documents_or_queries_changes_no_metric_dense(dataset, data):
    """The same property with the real MiniLM encoder and exact FAISS search; a new encoder
    per evaluation, so no vector comes from the other evaluation's in-memory cache."""
    from harness.embeddings.model import Encoder
    from harness.retrievers.faiss import FaissRetriever

    docs = data.draw(st.permutations(dataset.documents), label="documents")
    queries = data.draw(st.permutations(dataset.queries), label="queries")
    permuted = Dataset(name=dataset.name, documents=tuple(docs), queries=tuple(queries))

    def run(ds):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            retriever = FaissRetriever(encoder=Encoder(show_progress=False))
            return evaluate(ds, CHUNKERS["fixed"](), retriever, default_metric_settings(ks=KS, budgets=[]), progress=False)

    before, after = run(dataset), run(permuted)
    _assert_same(_numbers(before), _numbers(after), "per-query value")
    _assert_same(before.metrics, after.metrics, "mean")
