"""One chunking experiment: chunk -> index -> retrieve -> score, with phase timings.

This module has no Hydra and no MLflow: it takes built components and plain values, so it
can be called from notebooks and tests directly.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import pandas as pd

from harness.chunkers.base import Chunker
from harness.metrics import span as sp
from harness.metrics.ranking import query_metrics
from harness.retrievers.base import Retriever, ranked
from harness.types import Chunk, Dataset, Run


@dataclass
class Evaluation:
    """Results of one run.

    Attributes:
        metrics: mean of every per-query metric over all labelled queries
            (``{"recall@5": 0.61, ...}``) plus chunk statistics under ``chunks.*``.
        per_query: one row per query: ids, text, evidence size, each metric at each k, and
            the top-k chunk ids (``retrieved``, ``;``-separated).
        chunks: the chunks that were indexed.
        run: the raw retrieval run ``{query_id: {chunk_id: score}}`` over indexed chunks
            (for hierarchical strategies: children, before expansion to parents).
        timings: seconds per phase (``chunk``, ``index``, ``search``, ``score``).
        chunk_stats: sizes and counts of the chunk set (see :func:`chunk_statistics`).
    """

    metrics: dict[str, float]
    per_query: pd.DataFrame
    chunks: list[Chunk]
    run: Run
    timings: dict[str, float] = field(default_factory=dict)
    chunk_stats: dict[str, float] = field(default_factory=dict)

    def table(self, families: Sequence[str] = ("recall", "precision", "iou", "context_precision", "mrr", "context_tokens")) -> pd.DataFrame:
        """Mean metrics as a table: one row per metric family, one column per k."""
        ks = sorted({int(name.split("@")[1]) for name in self.metrics if "@" in name})
        rows = {}
        for fam in families:
            row = {f"@{k}": self.metrics.get(f"{fam}@{k}") for k in ks}
            if any(v is not None for v in row.values()):
                rows[fam] = row
        return pd.DataFrame.from_dict(rows, orient="index")


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
) -> Evaluation:
    """Run one experiment end to end on an already-loaded dataset.

    The retriever fetches ``max(ks) * chunker.fetch_multiplier`` indexed chunks per query
    (multiplier 1 unless the strategy sets one); ``chunker.expand`` maps them to what the
    generator receives (parents for small-to-big strategies), and the first ``max(ks)`` of
    those are scored.

    Args:
        dataset: corpus + labelled queries (spans already verified by the loader).
        chunker: built chunker.
        retriever: built retriever (empty).
        ks: cut-offs for every metric, each >= 1; retrieval fetches ``max(ks)``.
        relevance_fraction: ``f`` of the chunk relevance rule, in [0, 1].
        context_token_counter: counts tokens of one text for ``context_tokens@k``.
        chunk_token_counter: counts embedding-model tokens of many texts, for chunk stats.
        max_seq_length: the embedding model's input limit, to report truncated chunks.
        progress: show progress bars.

    Returns:
        An :class:`Evaluation`.

    Raises:
        ValueError: ``ks`` empty or holding a value < 1, ``relevance_fraction`` outside
            [0, 1], or the chunker produced no chunks.
    """
    if not ks or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in ks):
        raise ValueError(f"metrics.ks must be a non-empty list of integers >= 1, got {list(ks)!r}")
    if not 0.0 <= relevance_fraction <= 1.0:
        raise ValueError(f"metrics.relevance_fraction must be in [0, 1], got {relevance_fraction!r}")
    ks = sorted(set(ks))
    timings: dict[str, float] = {}

    t0 = time.perf_counter()
    chunks = chunker.chunk_all(dataset.documents, progress=progress)
    timings["chunk"] = time.perf_counter() - t0
    if not chunks:
        raise ValueError(f"chunker {chunker.name!r} produced no chunks for dataset {dataset.name!r}")

    t0 = time.perf_counter()
    retriever.index(chunks)
    timings["index"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    fetch_k = max(ks) * int(getattr(chunker, "fetch_multiplier", 1))
    run = retriever.search(dataset.queries, fetch_k)
    timings["search"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    by_id = {c.chunk_id: c for c in chunks}
    documents = dataset.by_id
    rows = []
    for q in dataset.queries:
        hits = [by_id[cid] for cid in ranked(run, q.query_id)]
        ranked_chunks = chunker.expand(hits, documents)[: max(ks)]  # what the generator receives
        order = [c.chunk_id for c in ranked_chunks]
        m = query_metrics(q, ranked_chunks, ks, relevance_fraction, context_token_counter)
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
    per_query = pd.DataFrame(rows)
    metric_cols = [c for c in per_query.columns if "@" in c]
    means = {c: float(per_query[c].mean()) for c in metric_cols}
    timings["score"] = time.perf_counter() - t0

    stats = chunk_statistics(dataset, chunks, chunk_token_counter, max_seq_length)
    return Evaluation(metrics=means, per_query=per_query, chunks=chunks, run=run, timings=timings, chunk_stats=stats)
