"""Scoring of one run: the ranked units of every query -> per-query rows -> table and means.

The score stage of :func:`harness.experiment.pipeline.evaluate`, without chunkers,
retrievers or config objects: it receives the retrieval run, the indexed chunks, the
chunker's ``expand`` (as a plain callable) and a
:class:`~harness.evaluation.settings.MetricSettings`.

* :func:`score_queries` ranks each query's returned units and computes every metric family
  by iterating the providers of the registry
  (:data:`harness.evaluation.metrics.providers.PROVIDERS`, each with its declared condition),
  plus the per-query counts ``n_relevant_chunks`` and ``evidence_uncovered_chars``.
* :func:`add_compression` adds the contextual-compression metrics of an enabled compressor.
* :func:`per_query_table` turns the rows into the per-query table and the means.
* :func:`diagnose` adds the miss reasons and computes the chunk-set statistics.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from harness.evaluation import diagnostics as dg
from harness.evaluation.audit import AuditRule, audit, misses_with_candidate
from harness.evaluation.metrics import is_metric_name
from harness.evaluation.metrics import span as sp
from harness.evaluation.metrics.ir import returnable_units
from harness.evaluation.metrics.providers import ScoringContext, provided
from harness.evaluation.settings import MetricSettings
from harness.types import Chunk, Dataset, Document, Query, Run, rank_order

#: ``expand(ranked, documents) -> units``: what a generator receives for ranked indexed chunks.
Expand = Callable[[list[Chunk], Mapping[str, Document]], list[Chunk]]


def score_queries(
    dataset: Dataset,
    run: Run,
    chunks: Sequence[Chunk],
    settings: MetricSettings,
    ks: Sequence[int],
    budgets: Sequence[int],
    depth: int,
    count_context: Callable[[str], int] | None,
    token_ends: Callable[[Chunk], list[int]] | None,
    progress: bool,
    *,
    expand: Expand | None = None,
    source: str = "chunker",
) -> tuple[list[dict[str, Any]], dict[str, list[Chunk]]]:
    """Every metric of every query over what the generator receives.

    Each query's ranked indexed chunks (``run``, best first) are mapped through ``expand``;
    the first ``max(ks)`` units are scored by the rank metrics, the first ``depth`` by the
    budget metrics. The values come from the providers of the metric registry
    (:func:`harness.evaluation.metrics.providers.provided`: span and rank metrics, item
    recall, the ``chroma_*`` metrics when ``settings.convention == "chroma"``, the budget
    metrics when ``budgets`` is not empty, the qrels metrics and PrecisionΩ over the
    returnable units in one trec_eval call, the document metrics at ``settings.level ==
    "document"``).

    Qrels-based metrics judge the units the strategy can hand back (the image of
    ``expand`` over the indexed chunks, see :mod:`harness.evaluation.metrics.ir`). A unit
    outside that image (an expand that merges hits) joins only the pool of the query it was
    returned for, with a warning.

    Args:
        dataset: the labelled queries and their documents.
        run: ``{query_id: {chunk_id: score}}`` over ``chunks``.
        chunks: the indexed chunks.
        settings: relevance rule and fraction, level and convention (``ks`` and ``budgets``
            are passed in resolved).
        ks: rank cut-offs, sorted, each >= 1.
        budgets: token budgets, sorted (empty: no budget metrics).
        depth: returned units read per query for the budget metrics (>= ``max(ks)``).
        count_context: tokens of one text for ``context_tokens@k`` (None omits it).
        token_ends: end offsets of a unit's context tokens (needed when ``budgets``).
        progress: show a progress bar over the queries.
        expand: the chunker's ``expand``; None for a strategy that returns the indexed
            chunks themselves.
        source: the chunker's name, for the warning.

    Returns:
        ``(rows, scored)``: one row per query in query order (``query_id``, ``query``,
        ``n_evidence``, ``evidence_chars``, the metrics in provider order,
        ``n_relevant_chunks``, ``evidence_uncovered_chars``, ``retrieved``: the scored unit
        ids ``;``-separated), and ``{query_id: the first max(ks) returned units}``.
    """
    by_id = {c.chunk_id: c for c in chunks}
    documents = dataset.by_id
    queries = dataset.queries
    if progress:
        from tqdm.auto import tqdm

        queries = tqdm(queries, desc="score queries", unit="query")
    scored: dict[str, list[Chunk]] = {}
    fetched: dict[str, list[Chunk]] = {}
    for q in queries:
        hits = [by_id[cid] for cid in rank_order(run.get(q.query_id, {}))]
        units = hits if expand is None else expand(hits, documents)  # what the generator receives
        scored[q.query_id] = units[: max(ks)]
        fetched[q.query_id] = units[:depth]
    units = returnable_units(chunks, expand, documents)
    unit_ids = {u.chunk_id for u in units}
    outside = {c.chunk_id for cs in scored.values() for c in cs if c.chunk_id not in unit_ids}
    if outside:
        warnings.warn(
            f"chunker {source!r}: {len(outside)} returned units are not the expansion of any single indexed chunk; "
            "each is judged only for the query it was returned for, so ndcg@k and map@k of other queries cannot count it",
            stacklevel=3,  # the caller of evaluate
        )
    ctx = ScoringContext(
        queries=dataset.queries,
        documents=documents,
        ranked=scored,
        fetched=fetched,
        run=run,
        chunks=chunks,
        units=units,
        ks=ks,
        budgets=budgets,
        relevance=settings.relevance,
        relevance_fraction=settings.relevance_fraction,
        level=settings.level,
        convention=settings.convention,
        count_context=count_context,
        token_ends=token_ends,
    )
    values = provided(ctx)
    returnable = sp.span_set((u.doc_id, s) for u in units for s in u.spans)
    rows = []
    for q in dataset.queries:
        rows.append(
            {
                "query_id": q.query_id,
                "query": q.text,
                "n_evidence": len(q.evidence),
                "evidence_chars": sp.size(sp.span_set((e.doc_id, e.span) for e in q.evidence)),
                **values[q.query_id],
                "n_relevant_chunks": len(ctx.qrels[q.query_id]),
                "evidence_uncovered_chars": uncovered_evidence_chars(q, returnable),
                "retrieved": ";".join(c.chunk_id for c in scored[q.query_id]),
            }
        )
    return rows, scored


def uncovered_evidence_chars(query: Query, returnable: sp.SpanSet) -> int:
    """Evidence characters of ``query`` (code points of the union of its evidence spans) that
    lie in no returnable unit (``returnable``: the normalised union of the spans of every
    unit ``chunker.expand`` can hand back, see :func:`harness.evaluation.metrics.ir.returnable_units`).

    Every character counts, whitespace too, as in span recall: the value is the recall
    ceiling of the chunking, ``recall@k <= 1 - uncovered / evidence_chars`` at every k, with
    equality once every returnable unit is retrieved. In ``[0, evidence_chars]``; 0 for a
    strategy whose units cover the document. (The miss reason ``not_covered`` ignores
    whitespace, see :mod:`harness.evaluation.diagnostics`.)
    """
    evidence = sp.span_set((e.doc_id, e.span) for e in query.evidence)
    return sp.size(evidence) - sp.intersection_size(evidence, returnable)


def add_compression(
    rows: list[dict[str, Any]],
    compressor: Any,
    queries: Sequence[Query],
    scored: Mapping[str, list[Chunk]],
    ks: Sequence[int],
    documents: Mapping[str, Document],
    count_context: Callable[[str], int] | None,
) -> None:
    """Add the contextual-compression metrics of each query to its row, in place
    (:meth:`harness.evaluation.compression.Compressor.evaluate`); no-op without an enabled
    compressor."""
    if compressor is None or not getattr(compressor, "enabled", False):
        return
    extra = compressor.evaluate(queries, scored, ks, documents, count_context)
    for row in rows:
        row.update(extra[row["query_id"]])


def per_query_table(rows: list[dict[str, Any]]) -> tuple[pd.DataFrame, dict[str, float]]:
    """The per-query rows as a DataFrame (id/text columns first, ``retrieved`` last) and the
    mean of every metric column (names with ``@`` or registered metric names) over every
    query (:func:`harness.evaluation.stats.query_mean`).

    A per-query value that is not finite (a metric that failed for that query) is set to 0
    in the table, so the table, its mean and the bootstrap CIs drawn from it agree, and
    warned about; ``queries.n_failed`` (always present) counts the queries with at least one
    such value."""
    from harness.evaluation.stats import query_mean

    per_query = pd.DataFrame(rows)
    if "retrieved" in per_query.columns:
        per_query = per_query[[c for c in per_query.columns if c != "retrieved"] + ["retrieved"]]
    metric_cols = [c for c in per_query.columns if "@" in c or is_metric_name(c)]
    ids = per_query["query_id"].tolist() if "query_id" in per_query.columns else None
    means: dict[str, float] = {}
    failed = np.zeros(len(per_query), dtype=bool)
    for c in metric_cols:
        values = pd.to_numeric(per_query[c], errors="coerce").to_numpy(dtype=float)
        means[c], n_failed = query_mean(values, c, ids)
        if n_failed:
            bad = ~np.isfinite(values)
            failed |= bad
            per_query[c] = np.where(bad, 0.0, values)
    means["queries.n_failed"] = float(failed.sum())
    return per_query, means


def diagnose(
    dataset: Dataset,
    chunks: Sequence[Chunk],
    scored: Mapping[str, list[Chunk]],
    ks: Sequence[int],
    per_query: pd.DataFrame,
    means: dict[str, float],
    *,
    chunk_token_counter: Callable[[Sequence[str]], list[int]] | None = None,
    max_seq_length: int | None = None,
    token_spans: Callable[[str], Sequence[tuple[int, int]]] | None = None,
    special_tokens: int = 2,
    embeds_chunks: bool = False,
) -> tuple[dict[str, dict[int, str | None]], dict[str, float], list[int] | None]:
    """Miss reasons and chunk-set statistics (see :mod:`harness.evaluation.diagnostics`).

    Adds a ``miss_reason_at_<k>`` column per k to ``per_query`` and the reason shares to
    ``means`` (in place), with ``diagnostics.miss_with_candidate@<k>``: the share of queries
    missed at k whose top k holds a likely unlabelled statement of the answer
    (:func:`harness.evaluation.audit.misses_with_candidate` over the scored ranking).

    Args:
        chunk_token_counter: embedding-model tokens of many texts, special tokens included,
            for the chunk statistics (None: no token statistics).
        max_seq_length: the embedding model's input limit in word pieces (None: no
            truncation reported).
        token_spans: word-piece offsets of a text under the embedding model's tokenizer,
            for the ``truncated`` reason (None: the packaged MiniLM tokenizer).
        special_tokens: window positions the model's own tokens take (2 for ``[CLS]`` and
            ``[SEP]``).
        embeds_chunks: the retriever embeds the chunks; truncation counts only then (BM25
            reads whole texts).

    Returns:
        ``(reasons, chunk_stats, chunk_tokens)``: ``{query_id: {k: reason or None}}``, the
        chunk-set statistics and the model tokens per chunk (None without
        ``chunk_token_counter``).
    """
    counter = chunk_token_counter
    window = max_seq_length if embeds_chunks else None
    chunk_tokens = [int(t) for t in counter([c.text for c in chunks])] if counter is not None and chunks else None
    known = {c.chunk_id: n for c, n in zip(chunks, chunk_tokens)} if chunk_tokens is not None else None
    reasons = dg.diagnose_queries(dataset.queries, dataset.by_id, chunks, scored, ks, window, token_spans, token_counts=known, special_tokens=special_tokens)
    for k in ks:  # no "@" in the column name: these are labels, not metrics to average
        per_query[f"miss_reason_at_{k}"] = [reasons[q.query_id][k] or "" for q in dataset.queries]
    means.update(dg.aggregate_reasons(reasons, ks))
    candidates = audit(dataset.queries, dataset.by_id, scored, AuditRule(k=max(ks))) if ks else {}
    means.update(misses_with_candidate(reasons, candidates, ks))
    stats = dg.chunk_set_statistics(dataset.documents, chunks, counter, max_seq_length, dataset.queries, token_counts=chunk_tokens)
    return reasons, stats, chunk_tokens
