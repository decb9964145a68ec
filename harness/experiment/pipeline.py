"""One chunking experiment: chunk -> index -> retrieve -> score, with phase timings.

Scoring (per-query metrics, the per-query table, the diagnostics) is
:mod:`harness.evaluation.scoring`; this module chunks, indexes and searches and hands it the
run. It has no Hydra and no MLflow: it takes built components, a
:class:`~harness.evaluation.settings.MetricSettings` and an :class:`EvaluationTools`, so it
can be called from notebooks and tests directly::

    evaluate(dataset, chunker, retriever, default_metric_settings(ks=[1, 5]), progress=False)
"""

from __future__ import annotations

import math
import statistics
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import pandas as pd

from harness.chunkers.base import Chunker
from harness.evaluation import diagnostics as dg
from harness.evaluation import scoring
from harness.evaluation.metrics import families as metric_families
from harness.evaluation.metrics import parse_name
from harness.evaluation.settings import MetricSettings
from harness.experiment.phases import mark
from harness.experiment.settings import default_metric_settings
from harness.retrievers.base import Retriever
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
            :mod:`harness.evaluation.metrics.ir`), ``evidence_uncovered_chars`` (evidence
            characters in no returnable unit: the chunking's recall ceiling, see
            :func:`uncovered_evidence_chars`) and the top-k returned unit ids (``retrieved``,
            ``;``-separated, last column).
        chunks: the chunks that were indexed.
        run: the raw retrieval run ``{query_id: {chunk_id: score}}`` over indexed chunks
            (for hierarchical strategies: children, before expansion to parents).
        timings: seconds per phase (``chunk``, ``index``, ``search``, ``score``).
        chunk_stats: sizes and counts of the chunk set (see
            :func:`harness.evaluation.diagnostics.chunk_set_statistics`), plus
            ``degenerate_chunking`` (0 or 1) and ``evidence_uncovered_chars`` (the per-query
            ``evidence_uncovered_chars`` summed over queries, in characters).
        miss_reasons: ``{query_id: {k: reason or None}}`` (see :mod:`harness.evaluation.diagnostics`).
        degenerate: True when every document fits in one chunk
            (:func:`harness.evaluation.diagnostics.is_degenerate`).
        chunk_tokens: embedding-model tokens of each chunk's embedded text (special tokens
            included), aligned with ``chunks``; None without a ``chunk_token_counter``.
        cache: chunk-cache facts: ``chunks_cached`` (1.0 when the chunk set was read from
            the cache) and, on a miss, ``chunks_stored``; empty without a cache.
        ties: ``{"ties.crossing_at_<k>": queries}`` per k of ``metrics.ks``: queries whose
            chunks at ranks k and k + 1 of the retriever's ranking score exactly alike, so
            the tie rule decides their top-k set
            (:func:`harness.evaluation.diagnostics.crossing_ties`).
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
    ties: dict[str, float] = field(default_factory=dict)

    def table(self, families: Sequence[str] | None = None) -> pd.DataFrame:
        """Mean rank cut-off metrics as a table: one row per metric family, one column per k.

        ``families`` None: the registry's ``table`` families of this project's convention
        (:func:`harness.evaluation.metrics.families`), in their declared order; a family
        without values is left out. Budget metrics (``recall@512tok``) are in
        :meth:`budget_table`; parameterless ones (``precision_omega``) in :attr:`metrics`.
        """
        families = metric_families("table") if families is None else families
        ks = sorted({p.k for p in map(_parse_or_none, self.metrics) if p is not None and p.k is not None})
        rows = {}
        for fam in families:
            row = {f"@{k}": self.metrics.get(f"{fam}@{k}") for k in ks}
            if any(v is not None for v in row.values()):
                rows[fam] = row
        return pd.DataFrame.from_dict(rows, orient="index")

    def budget_table(self) -> pd.DataFrame:
        """Mean budget metrics: rows ``recall`` and ``budget_filled`` (the registry's budget
        families of the ``table`` role), one column per budget
        (``@512tok``); empty when no budget was scored."""
        parsed = [p for p in map(_parse_or_none, self.metrics) if p is not None and p.budget is not None]
        budgets = sorted({p.budget for p in parsed})
        rows = {}
        for fam in metric_families("table", param="budget"):
            row = {f"@{b}tok": self.metrics.get(f"{fam}@{b}tok") for b in budgets}
            if any(v is not None for v in row.values()):
                rows[fam] = row
        return pd.DataFrame.from_dict(rows, orient="index")


def _parse_or_none(name: str):
    try:
        return parse_name(name)
    except ValueError:
        return None


@dataclass(frozen=True)
class EvaluationTools:
    """The counters, caches and compressor an evaluation uses; each None skips what needs it.

    None of them changes which chunks are retrieved; they add metrics, diagnostics or speed.

    Attributes:
        context_tokenizer: a :class:`harness.text.units.SizeCounter` (``atoms(text)`` with
            offsets) of the context tokenizer (``metrics.context_tokenizer``); needed by the
            budget metrics ``recall@Btok`` / ``budget_filled@Btok`` (None skips them).
        context_token_counter: tokens of one text, for ``context_tokens@k`` (None skips it).
        chunk_token_counter: embedding-model tokens of many texts, special tokens included
            (``Encoder.count_tokens``), for the chunk statistics; the same tokenizer as
            ``token_spans``, whose work it saves for chunks that fit ``max_seq_length``.
        max_seq_length: the embedding model's input limit in word pieces, to report
            truncated chunks (None: not reported).
        token_spans: word-piece offsets of a text under the embedding model's tokenizer,
            for the ``truncated`` miss reason (None: the packaged MiniLM tokenizer).
        special_tokens: window positions the embedding model's own tokens take (2: ``[CLS]``
            and ``[SEP]``; 0 for an API that counts the text only).
        chunk_cache: a :class:`harness.cache.ChunkCache`; with ``chunker_config`` the chunk
            set is read from it when present and stored after chunking otherwise (key:
            :func:`harness.cache.chunk_set_key`; strategies that embed add their encoder's
            ``embedding_key``). ``Evaluation.cache["chunks_cached"]`` is 1.0 on a hit.
        chunker_config: the resolved ``chunker`` config with ``_target_`` (plain dict).
        compressor: an enabled :class:`harness.evaluation.compression.Compressor` adds the
            ``compressed.*@k`` and ``compression.*@k`` metrics (see
            :mod:`harness.evaluation.compression`); None skips them.
    """

    context_tokenizer: Any = None
    context_token_counter: Callable[[str], int] | None = None
    chunk_token_counter: Callable[[Sequence[str]], list[int]] | None = None
    max_seq_length: int | None = None
    token_spans: Callable[[str], Sequence[tuple[int, int]]] | None = None
    special_tokens: int = 2
    chunk_cache: Any = None
    chunker_config: Mapping[str, Any] | None = None
    compressor: Any = None


def evaluate(
    dataset: Dataset,
    chunker: Chunker,
    retriever: Retriever,
    settings: MetricSettings | None = None,
    tools: EvaluationTools | None = None,
    *,
    progress: bool = True,
) -> Evaluation:
    """Run one experiment end to end on an already-loaded dataset.

    Stages: :func:`chunk_corpus` (or read the chunk set from the cache),
    ``retriever.index``, :func:`search_depth` and :func:`retrieve` (this module), then
    :mod:`harness.evaluation.scoring`: :func:`~harness.evaluation.scoring.score_queries`
    (every provider of the metric registry), contextual compression,
    :func:`~harness.evaluation.scoring.per_query_table`,
    :func:`~harness.evaluation.scoring.diagnose`.

    The retriever fetches ``depth * chunker.fetch_multiplier`` indexed chunks per query
    (multiplier 1 unless the strategy sets one; never more than there are chunks);
    ``chunker.expand`` maps them to what the generator receives (parents for small-to-big
    strategies). The first ``max(ks)`` of those are scored by the rank metrics; budget
    metrics read as far as they need (see :func:`search_depth`).

    Metrics per query (all in [0, 1] except ``context_tokens``; see
    :mod:`harness.evaluation.metrics` for the registry): span ``recall/precision/iou@k``,
    ``context_precision@k``, ``mrr@k``, ``context_tokens@k`` (with a token counter);
    chunk-qrels ``chunk_precision@k``, ``item_recall@k``, ``hit_rate@k``, ``ndcg@k``,
    ``map@k`` (trec_eval, one call for all queries, judged over the returnable units: the
    image of ``chunker.expand`` over the indexed chunks, so small-to-big strategies are
    judged on parents or windows, never on children they cannot return);
    ``precision_omega`` (over the same units); ``recall@Btok`` and
    ``budget_filled@Btok`` (with ``tools.context_tokenizer``); ``doc_recall@k``,
    ``doc_ndcg@k`` (``level="document"``); ``chroma_recall@k``, ``chroma_precision@k``,
    ``chroma_iou@k``, ``chroma_precision_omega`` (``convention="chroma"`` only, beside
    ours: :mod:`harness.evaluation.metrics.chroma`). Means are over every labelled query.

    Args:
        dataset: corpus + labelled queries (spans already verified by the loader).
        chunker: built chunker.
        retriever: built retriever (empty).
        settings: what is scored (``ks``, relevance rule, budgets, level); None:
            :func:`harness.experiment.settings.default_metric_settings`. Its ``objective`` is not used here.
        tools: counters, caches and compressor (see :class:`EvaluationTools`); None: none.
        progress: show progress bars.

    Returns:
        An :class:`Evaluation`.

    Raises:
        ValueError: the chunker produced no chunks (settings are validated when built).
    """
    settings = default_metric_settings() if settings is None else settings
    tools = EvaluationTools() if tools is None else tools
    ks = sorted(set(settings.ks))
    budgets = sorted(set(settings.budgets)) if tools.context_tokenizer is not None else []
    timings: dict[str, float] = {}

    mark("chunk")
    t0 = time.perf_counter()
    chunks, cache_stats = chunk_corpus(dataset, chunker, progress, tools.chunk_cache, tools.chunker_config)
    timings["chunk"] = time.perf_counter() - t0
    degenerate = _check_chunks(dataset, chunker, chunks)

    mark("index")
    t0 = time.perf_counter()
    retriever.index(chunks)
    timings["index"] = time.perf_counter() - t0

    count_context = _counted_once(tools.context_token_counter)  # the same chunks come back for many queries
    token_ends = _token_ends(tools.context_tokenizer)
    depth = search_depth(ks, budgets, settings.budget_depth, chunks, token_ends)
    mark("search")
    t0 = time.perf_counter()
    run = retrieve(dataset, chunker, retriever, len(chunks), depth)
    timings["search"] = time.perf_counter() - t0
    ties = dg.crossing_ties(run, ks, retriever.beyond_cut() if isinstance(retriever, Retriever) else None)

    mark("score")
    t0 = time.perf_counter()
    expand = None if type(chunker).expand is Chunker.expand else chunker.expand
    rows, scored = scoring.score_queries(
        dataset, run, chunks, settings, ks, budgets, depth, count_context, token_ends, progress, expand=expand, source=chunker.name
    )
    scoring.add_compression(rows, tools.compressor, dataset.queries, scored, ks, dataset.by_id, count_context)
    per_query, means = scoring.per_query_table(rows)
    timings["score"] = time.perf_counter() - t0

    mark("diagnostics")
    t0 = time.perf_counter()
    reasons, stats, chunk_tokens = scoring.diagnose(
        dataset,
        chunks,
        scored,
        ks,
        per_query,
        means,
        chunk_token_counter=tools.chunk_token_counter,
        max_seq_length=tools.max_seq_length,
        token_spans=tools.token_spans,
        special_tokens=tools.special_tokens,
        embeds_chunks=retriever.needs_encoder,
    )
    stats["degenerate_chunking"] = float(degenerate)
    stats["evidence_uncovered_chars"] = float(per_query["evidence_uncovered_chars"].sum())
    timings["diagnostics"] = time.perf_counter() - t0
    return Evaluation(
        metrics=means,
        per_query=per_query,
        chunks=chunks,
        run=run,
        timings=timings,
        chunk_stats=stats,
        miss_reasons=reasons,
        degenerate=degenerate,
        cache=cache_stats,
        chunk_tokens=chunk_tokens,
        ties=ties,
    )


def _check_chunks(dataset: Dataset, chunker: Chunker, chunks: Sequence[Chunk]) -> bool:
    """Whether the chunking is degenerate (every document in one chunk; warns when it is).

    Raises:
        ValueError: no chunks at all.
    """
    if not chunks:
        raise ValueError(f"chunker {chunker.name!r} produced no chunks for dataset {dataset.name!r}")
    size_limit = chunker.size_limit()
    degenerate = dg.is_degenerate(dataset.documents, size_limit, chunks)
    if degenerate:
        warnings.warn(dg.degenerate_warning(dataset.documents, size_limit), stacklevel=3)  # the caller of evaluate
    return degenerate


def _counted_once(counter: Callable[[str], int] | None) -> Callable[[str], int] | None:
    """``counter`` memoised per text (None stays None)."""
    if counter is None:
        return None
    counts: dict[str, int] = {}

    def count(text: str) -> int:
        if text not in counts:
            counts[text] = counter(text)
        return counts[text]

    return count


def _token_ends(context_tokenizer) -> Callable[[Chunk], list[int]]:
    """``token_ends(chunk)``: end offset (code points) of every context token of the chunk's
    text, memoised by chunk id; only called when there are budgets (so a tokenizer)."""
    cache: dict[str, list[int]] = {}

    def token_ends(c: Chunk) -> list[int]:
        if c.chunk_id not in cache:
            cache[c.chunk_id] = [e for _, e in context_tokenizer.atoms(c.text).spans]
        return cache[c.chunk_id]

    def prefill(chunks: Sequence[Chunk], block: int = 4096) -> None:
        """Tokenise the chunks not seen yet together (``atoms_many`` when the tokenizer has it)."""
        many = getattr(context_tokenizer, "atoms_many", None)
        todo = list({c.chunk_id: c for c in chunks if c.chunk_id not in cache}.values())
        for i in range(0, len(todo), block):
            part = todo[i : i + block]
            atoms = many([c.text for c in part]) if many is not None else [context_tokenizer.atoms(c.text) for c in part]
            for c, a in zip(part, atoms):
                cache[c.chunk_id] = [e for _, e in a.spans]

    token_ends.prefill = prefill  # type: ignore[attr-defined]
    return token_ends


def search_depth(ks: Sequence[int], budgets: Sequence[int], budget_depth: int | None, chunks: Sequence[Chunk], token_ends) -> int:
    """Ranked units to read per query: ``max(ks)`` without budgets, else
    ``max(max(ks), budget_depth)`` where ``budget_depth`` None means
    ``min(1000, 2 * ceil(max(budgets) / median context tokens per chunk))``: enough chunks
    to fill the largest budget twice over for a typical chunk (``budget_filled@Btok``
    reports when it was not)."""
    depth = max(ks)
    if budgets:
        if budget_depth is None:
            prefill = getattr(token_ends, "prefill", None)
            if prefill is not None:  # every chunk is counted here: tokenise them in batches
                prefill(chunks)
            typical = statistics.median(len(token_ends(c)) for c in chunks) or 1
            budget_depth = min(1000, 2 * math.ceil(max(budgets) / typical))
        depth = max(depth, budget_depth)
    return depth


def retrieve(dataset: Dataset, chunker: Chunker, retriever: Retriever, n_chunks: int, depth: int) -> Run:
    """Search every query for ``depth * chunker.fetch_multiplier`` indexed chunks (at most ``n_chunks``)."""
    fetch_k = min(n_chunks, depth * int(chunker.fetch_multiplier))
    return retriever.search(dataset.queries, fetch_k)


def chunk_corpus(dataset: Dataset, chunker: Chunker, progress: bool, chunk_cache=None, chunker_config=None) -> tuple[list[Chunk], dict[str, float]]:
    """Chunk the corpus, or read the chunk set from ``chunk_cache`` (and store it on a miss).

    A strategy that embeds while splitting is cached only when its encoder exposes an
    ``embedding_key`` (which then joins the key); otherwise it is chunked every time.
    """
    key = None
    if chunk_cache is not None and chunker_config is not None:
        from harness.cache import chunk_set_key

        embedding = None
        if chunker.needs_encoder:
            embedding = getattr(getattr(chunker, "encoder", None), "embedding_key", None)
        if embedding is not None or not chunker.needs_encoder:
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
