"""One chunking experiment: chunk -> index -> retrieve -> score, with phase timings.

This module has no Hydra and no MLflow: it takes built components and plain values, so it
can be called from notebooks and tests directly.
"""

from __future__ import annotations

import math
import statistics
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import pandas as pd

from harness.evaluation import diagnostics as dg
from harness.chunkers.base import Chunker
from harness.evaluation.metrics import is_metric_name, parse_name
from harness.evaluation.metrics import span as sp
from harness.evaluation.metrics.budget import budget_recall
from harness.evaluation.metrics.ir import ChunkIndex, chunk_ir_metrics, chunk_qrels, document_metrics, item_recall, precision_omega, returnable_units
from harness.evaluation.metrics.ranking import check_relevance, query_metrics
from harness.retrievers.base import Retriever, ranked
from harness.types import Chunk, Dataset, Run


@dataclass
class Evaluation:
    """Results of one run.

    Attributes:
        metrics: mean of every per-query metric over all labelled queries
            (``{"recall@5": 0.61, ...}``) plus chunk statistics under ``chunks.*``.
        per_query: one row per query: ids, text, evidence size, every metric of the suite
            (``recall@5``, ``ndcg@10``, ``recall@512tok``, ``precision_omega``, ...),
            ``n_relevant_chunks`` (returnable units relevant under ``relevance``: the
            ``R`` of nDCG's ideal ranking and of AP's divisor, see
            :mod:`harness.evaluation.metrics.ir`) and the top-k returned unit ids (``retrieved``,
            ``;``-separated, last column).
        chunks: the chunks that were indexed.
        run: the raw retrieval run ``{query_id: {chunk_id: score}}`` over indexed chunks
            (for hierarchical strategies: children, before expansion to parents).
        timings: seconds per phase (``chunk``, ``index``, ``search``, ``score``).
        chunk_stats: sizes and counts of the chunk set (see
            :func:`harness.evaluation.diagnostics.chunk_set_statistics`).
        miss_reasons: ``{query_id: {k: reason or None}}`` (see :mod:`harness.evaluation.diagnostics`).
        degenerate: True when every document fits in one chunk
            (:func:`harness.evaluation.diagnostics.is_degenerate`).
        chunk_tokens: embedding-model tokens of each chunk's embedded text (special tokens
            included), aligned with ``chunks``; None without a ``chunk_token_counter``.
        cache: chunk-cache facts: ``chunks_cached`` (1.0 when the chunk set was read from
            the cache) and, on a miss, ``chunks_stored``; empty without a cache.
    """

    metrics: dict[str, float]
    per_query: pd.DataFrame
    chunks: list[Chunk]
    run: Run
    timings: dict[str, float] = field(default_factory=dict)
    chunk_stats: dict[str, float] = field(default_factory=dict)
    miss_reasons: dict[str, dict[int, str | None]] = field(default_factory=dict)
    degenerate: bool = False
    cache: dict[str, float] = field(default_factory=dict)
    chunk_tokens: list[int] | None = None

    def table(
        self,
        families: Sequence[str] = (
            "recall", "precision", "iou", "context_precision", "mrr", "context_tokens",
            "chunk_precision", "item_recall", "hit_rate", "ndcg", "map", "doc_recall", "doc_ndcg",
        ),
    ) -> pd.DataFrame:
        """Mean rank cut-off metrics as a table: one row per metric family, one column per k.

        Budget metrics (``recall@512tok``) are in :meth:`budget_table`; parameterless ones
        (``precision_omega``) in :attr:`metrics`.
        """
        ks = sorted({p.k for p in map(_parse_or_none, self.metrics) if p is not None and p.k is not None})
        rows = {}
        for fam in families:
            row = {f"@{k}": self.metrics.get(f"{fam}@{k}") for k in ks}
            if any(v is not None for v in row.values()):
                rows[fam] = row
        return pd.DataFrame.from_dict(rows, orient="index")

    def budget_table(self) -> pd.DataFrame:
        """Mean budget metrics: rows ``recall`` and ``budget_filled``, one column per budget
        (``@512tok``); empty when no budget was scored."""
        parsed = [p for p in map(_parse_or_none, self.metrics) if p is not None and p.budget is not None]
        budgets = sorted({p.budget for p in parsed})
        rows = {}
        for fam in ("recall", "budget_filled"):
            row = {f"@{b}tok": self.metrics.get(f"{fam}@{b}tok") for b in budgets}
            if any(v is not None for v in row.values()):
                rows[fam] = row
        return pd.DataFrame.from_dict(rows, orient="index")


def _parse_or_none(name: str):
    try:
        return parse_name(name)
    except ValueError:
        return None


def chunk_statistics(dataset: Dataset, chunks: Sequence[Chunk], count_tokens: Callable[[Sequence[str]], list[int]] | None = None, max_seq_length: int | None = None) -> dict[str, float]:
    """Size and coverage statistics of a chunk set.

    Returns keys: ``n_chunks``; ``chars_mean``/``chars_median``/``chars_min``/``chars_max``
    (source characters per chunk); ``tokens_mean``/``tokens_max`` and ``n_truncated``
    (chunks whose embedded text exceeds the model's ``max_seq_length`` word pieces and is
    silently truncated when embedded) when a token counter is given; ``coverage`` (share
    of corpus characters inside at least one chunk, in [0, 1]); ``redundancy`` (chunk
    characters / covered characters, >= 1 with overlap).
    """
    if not chunks:
        return {"n_chunks": 0}
    chars = [c.n_chars for c in chunks]
    covered = sp.size(sp.span_set((c.doc_id, s) for c in chunks for s in c.spans))
    stats: dict[str, float] = {
        "n_chunks": len(chunks),
        "chars_mean": statistics.fmean(chars),
        "chars_median": statistics.median(chars),
        "chars_min": min(chars),
        "chars_max": max(chars),
        "coverage": covered / dataset.n_chars if dataset.n_chars else 0.0,
        "redundancy": sum(chars) / covered if covered else 0.0,
    }
    if count_tokens is not None:
        toks = count_tokens([c.text for c in chunks])
        stats["tokens_mean"] = statistics.fmean(toks)
        stats["tokens_max"] = max(toks)
        if max_seq_length is not None:
            stats["n_truncated"] = sum(1 for t in toks if t > max_seq_length)
            stats["max_seq_length"] = max_seq_length
    return stats


def evaluate(
    dataset: Dataset,
    chunker: Chunker,
    retriever: Retriever,
    ks: Sequence[int] = (1, 3, 5, 10),
    relevance_fraction: float = 0.5,
    context_token_counter: Callable[[str], int] | None = None,
    chunk_token_counter: Callable[[Sequence[str]], list[int]] | None = None,
    max_seq_length: int | None = None,
    progress: bool = True,
    *,
    relevance: str = "overlap_fraction",
    budgets: Sequence[int] = (256, 512, 1024, 2048),
    context_tokenizer=None,
    budget_depth: int | None = None,
    level: str = "chunk",
    token_spans: Callable[[str], Sequence[tuple[int, int]]] | None = None,
    chunk_cache=None,
    chunker_config: Mapping[str, Any] | None = None,
    compressor=None,
) -> Evaluation:
    """Run one experiment end to end on an already-loaded dataset.

    The retriever fetches ``depth * chunker.fetch_multiplier`` indexed chunks per query
    (multiplier 1 unless the strategy sets one; never more than there are chunks);
    ``chunker.expand`` maps them to what the generator receives (parents for small-to-big
    strategies). The first ``max(ks)`` of those are scored by the rank metrics; budget
    metrics read as far as they need. ``depth = max(ks)`` without budgets, else
    ``max(max(ks), budget_depth)`` where ``budget_depth`` defaults to
    ``min(1000, 2 * ceil(max(budgets) / median context tokens per chunk))``: enough chunks
    to fill the largest budget twice over for a typical chunk (``budget_filled@Btok``
    reports when it was not).

    Metrics per query (all in [0, 1] except ``context_tokens``; see
    :mod:`harness.evaluation.metrics` for the registry): span ``recall/precision/iou@k``,
    ``context_precision@k``, ``mrr@k``, ``context_tokens@k`` (with a token counter);
    chunk-qrels ``chunk_precision@k``, ``item_recall@k``, ``hit_rate@k``, ``ndcg@k``,
    ``map@k`` (trec_eval, one call for all queries, judged over the returnable units: the
    image of ``chunker.expand`` over the indexed chunks, so small-to-big strategies are
    judged on parents or windows, never on children they cannot return);
    ``precision_omega`` (over the same units); ``recall@Btok`` and
    ``budget_filled@Btok`` (with ``context_tokenizer``); ``doc_recall@k``, ``doc_ndcg@k``
    (``level="document"``). Means are over every labelled query.

    Args:
        dataset: corpus + labelled queries (spans already verified by the loader).
        chunker: built chunker.
        retriever: built retriever (empty).
        ks: cut-offs for every metric, each >= 1; retrieval fetches ``max(ks)``.
        relevance_fraction: ``f`` of the chunk relevance rule, in [0, 1].
        context_token_counter: counts tokens of one text for ``context_tokens@k``.
        chunk_token_counter: counts embedding-model tokens of many texts, special tokens
            included (``Encoder.count_tokens``), for chunk stats; the same tokenizer as
            ``token_spans``, whose work it saves for chunks that fit ``max_seq_length``.
        max_seq_length: the embedding model's input limit, to report truncated chunks.
        progress: show progress bars.
        relevance: chunk relevance rule, one of
            :data:`harness.evaluation.metrics.ranking.RELEVANCE_RULES` (``metrics.relevance``).
        budgets: token budgets ``B`` for ``recall@Btok`` (``metrics.budgets``); empty or
            ``context_tokenizer=None`` skips them.
        context_tokenizer: a :class:`harness.text.units.SizeCounter` (``atoms(text)``
            with offsets) of the context tokenizer, for budget metrics.
        budget_depth: ranked chunks fetched for budget metrics (None: automatic, above).
        level: ``"chunk"`` or ``"document"`` (adds ``doc_recall@k``/``doc_ndcg@k``).
        token_spans: word-piece offsets of a text under the embedding model's tokenizer,
            for the ``truncated`` miss reason (default: the packaged MiniLM tokenizer).
        chunk_cache: a :class:`harness.cache.ChunkCache`; with ``chunker_config`` the chunk
            set is read from it when present and stored after chunking otherwise (key:
            :func:`harness.cache.chunk_set_key`; strategies that embed add their encoder's
            ``embedding_key``). ``Evaluation.cache["chunks_cached"]`` is 1.0 on a hit.
        chunker_config: the resolved ``chunker`` config with ``_target_`` (plain dict).
        compressor: an enabled :class:`harness.evaluation.compression.Compressor` adds the
            ``compressed.*@k`` and ``compression.*@k`` metrics (contextual compression of
            the scored chunks; see :mod:`harness.evaluation.compression`); None skips them.

    Returns:
        An :class:`Evaluation`.

    Raises:
        ValueError: ``ks`` empty or holding a value < 1, ``relevance_fraction`` outside
            [0, 1], unknown ``relevance`` or ``level``, a budget or ``budget_depth`` < 1,
            or the chunker produced no chunks.
    """
    if not ks or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in ks):
        raise ValueError(f"metrics.ks must be a non-empty list of integers >= 1, got {list(ks)!r}")
    if not 0.0 <= relevance_fraction <= 1.0:
        raise ValueError(f"metrics.relevance_fraction must be in [0, 1], got {relevance_fraction!r}")
    check_relevance(relevance, relevance_fraction)
    if level not in ("chunk", "document"):
        raise ValueError(f"metrics.level must be 'chunk' or 'document', got {level!r}")
    if any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in budgets):
        raise ValueError(f"metrics.budgets must be a list of integers >= 1, got {list(budgets)!r}")
    if budget_depth is not None and (isinstance(budget_depth, bool) or not isinstance(budget_depth, int) or budget_depth < 1):
        raise ValueError(f"metrics.budget_depth must be an integer >= 1 or null, got {budget_depth!r}")
    ks = sorted(set(ks))
    budgets = sorted(set(budgets)) if context_tokenizer is not None else []
    timings: dict[str, float] = {}

    t0 = time.perf_counter()
    chunks, cache_stats = _chunk_with_cache(dataset, chunker, progress, chunk_cache, chunker_config)
    timings["chunk"] = time.perf_counter() - t0
    if not chunks:
        raise ValueError(f"chunker {chunker.name!r} produced no chunks for dataset {dataset.name!r}")
    size_limit = chunker.size_limit()
    degenerate = dg.is_degenerate(dataset.documents, size_limit, chunks)
    if degenerate:
        warnings.warn(dg.degenerate_warning(dataset.documents, size_limit), stacklevel=2)

    t0 = time.perf_counter()
    retriever.index(chunks)
    timings["index"] = time.perf_counter() - t0

    if context_token_counter is not None:  # the same chunks come back for many queries: count each text once
        counts: dict[str, int] = {}
        raw_counter = context_token_counter

        def context_token_counter(text: str) -> int:
            if text not in counts:
                counts[text] = raw_counter(text)
            return counts[text]

    token_ends_cache: dict[str, list[int]] = {}

    def token_ends(c: Chunk) -> list[int]:
        if c.chunk_id not in token_ends_cache:
            token_ends_cache[c.chunk_id] = [e for _, e in context_tokenizer.atoms(c.text).spans]
        return token_ends_cache[c.chunk_id]

    depth = max(ks)
    if budgets:
        if budget_depth is None:
            typical = statistics.median(len(token_ends(c)) for c in chunks) or 1
            budget_depth = min(1000, 2 * math.ceil(max(budgets) / typical))
        depth = max(depth, budget_depth)

    t0 = time.perf_counter()
    fetch_k = min(len(chunks), depth * int(getattr(chunker, "fetch_multiplier", 1)))
    run = retriever.search(dataset.queries, fetch_k)
    timings["search"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    by_id = {c.chunk_id: c for c in chunks}
    documents = dataset.by_id
    rows = []
    scored: dict[str, list[Chunk]] = {}
    queries = dataset.queries
    if progress:
        from tqdm.auto import tqdm

        queries = tqdm(queries, desc="score queries", unit="query")
    for q in queries:
        hits = [by_id[cid] for cid in ranked(run, q.query_id)]
        expanded = chunker.expand(hits, documents)  # what the generator receives
        ranked_chunks = expanded[: max(ks)]
        scored[q.query_id] = ranked_chunks
        order = [c.chunk_id for c in ranked_chunks]
        m = query_metrics(q, ranked_chunks, ks, relevance_fraction, context_token_counter, relevance=relevance)
        m.update(item_recall(q, ranked_chunks, ks, relevance_fraction, relevance))
        if budgets:
            m.update(budget_recall(q, expanded[:depth], budgets, token_ends, documents))
        rows.append(
            {
                "query_id": q.query_id,
                "query": q.text,
                "n_evidence": len(q.evidence),
                "evidence_chars": sp.size(sp.span_set((e.doc_id, e.span) for e in q.evidence)),
                **m,
                "retrieved": ";".join(order),
            }
        )
    # Qrels-based metrics judge the units the strategy can hand back (the image of expand over
    # the indexed chunks, see harness.evaluation.metrics.ir): never indexed children that cannot be
    # returned, never units returned for other queries. A unit outside that image (an expand
    # that merges hits) joins only the pool of the query it was returned for, with a warning.
    # One trec_eval call for all queries.
    units = returnable_units(chunks, None if type(chunker).expand is Chunker.expand else chunker.expand, documents)
    unit_index = ChunkIndex(units)
    unit_ids = {u.chunk_id for u in units}
    outside = {c.chunk_id for cs in scored.values() for c in cs if c.chunk_id not in unit_ids}
    if outside:
        warnings.warn(
            f"chunker {chunker.name!r}: {len(outside)} returned units are not the expansion of any single indexed chunk; "
            "each is judged only for the query it was returned for, so ndcg@k and map@k of other queries cannot count it",
            stacklevel=2,
        )
    qrels = chunk_qrels(dataset.queries, unit_index, relevance_fraction, relevance, returned=scored)
    ir = chunk_ir_metrics(qrels, {qid: [c.chunk_id for c in cs] for qid, cs in scored.items()}, ks)
    doc = document_metrics(dataset.queries, run, {c.chunk_id: c.doc_id for c in chunks}, ks) if level == "document" else {}
    for row, q in zip(rows, dataset.queries):
        row.update(ir[q.query_id])
        row.update(doc.get(q.query_id, {}))
        row["precision_omega"] = precision_omega(q, unit_index)
        row["n_relevant_chunks"] = len(qrels[q.query_id])
    _add_compression(rows, compressor, dataset, scored, ks, documents, context_token_counter)
    per_query = pd.DataFrame(rows)
    # keep the id/text columns first and "retrieved" last
    if "retrieved" in per_query.columns:
        per_query = per_query[[c for c in per_query.columns if c != "retrieved"] + ["retrieved"]]
    metric_cols = [c for c in per_query.columns if "@" in c or is_metric_name(c)]
    means = {c: float(per_query[c].mean()) for c in metric_cols}
    timings["score"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    # truncation only matters when the retriever embeds the chunks (BM25 reads whole texts)
    window = max_seq_length if retriever.needs_encoder else None
    chunk_tokens = [int(t) for t in chunk_token_counter([c.text for c in chunks])] if chunk_token_counter is not None and chunks else None
    known = {c.chunk_id: n for c, n in zip(chunks, chunk_tokens)} if chunk_tokens is not None else None
    reasons = dg.diagnose_queries(dataset.queries, documents, chunks, scored, ks, window, token_spans, token_counts=known)
    for k in ks:  # no "@" in the column name: these are labels, not metrics to average
        per_query[f"miss_reason_at_{k}"] = [reasons[q.query_id][k] or "" for q in dataset.queries]
    means.update(dg.aggregate_reasons(reasons, ks))
    stats = dg.chunk_set_statistics(dataset.documents, chunks, chunk_token_counter, max_seq_length, dataset.queries, token_counts=chunk_tokens)
    stats["degenerate_chunking"] = float(degenerate)
    timings["diagnostics"] = time.perf_counter() - t0
    return Evaluation(
        metrics=means, per_query=per_query, chunks=chunks, run=run, timings=timings, chunk_stats=stats,
        miss_reasons=reasons, degenerate=degenerate, cache=cache_stats, chunk_tokens=chunk_tokens,
    )


def _add_compression(rows, compressor, dataset, scored, ks, documents, context_token_counter) -> None:
    """Add the contextual-compression metrics of each query to its row (no-op without an enabled compressor)."""
    if compressor is None or not getattr(compressor, "enabled", False):
        return
    extra = compressor.evaluate(dataset.queries, scored, ks, documents, context_token_counter)
    for row in rows:
        row.update(extra[row["query_id"]])


def _chunk_with_cache(dataset: Dataset, chunker: Chunker, progress: bool, chunk_cache, chunker_config) -> tuple[list[Chunk], dict[str, float]]:
    """Chunk the corpus, or read the chunk set from ``chunk_cache`` (and store it on a miss).

    A strategy that embeds while splitting is cached only when its encoder exposes an
    ``embedding_key`` (which then joins the key); otherwise it is chunked every time.
    """
    key = None
    if chunk_cache is not None and chunker_config is not None:
        from harness.cache import chunk_set_key

        embedding = None
        if getattr(chunker, "needs_encoder", False):
            embedding = getattr(getattr(chunker, "encoder", None), "embedding_key", None)
        if embedding is not None or not getattr(chunker, "needs_encoder", False):
            key = chunk_set_key(dataset.documents, chunker_config, embedding)
    if key is not None:
        cached = chunk_cache.get(key)
        if cached is not None:
            return cached, {"chunks_cached": 1.0}
    chunks = chunker.chunk_all(dataset.documents, progress=progress)
    stored = False
    if key is not None and chunks:
        stored = chunk_cache.put(key, chunks, {"dataset": dataset.name, "chunker": dict(chunker_config), "n_chunks": len(chunks)})
    return chunks, {"chunks_cached": 0.0, "chunks_stored": float(stored)}
