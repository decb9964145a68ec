"""Metric providers: the functions that compute the registered families, and when each applies.

Every :class:`~harness.evaluation.metrics.MetricFamily` names its provider
(:attr:`~harness.evaluation.metrics.MetricFamily.provider`); :data:`PROVIDERS` maps that
name to a :class:`Provider`: the function that computes the family (with the others the
same function serves) for every query of a run, and the declared condition under which it
applies (``metrics.convention=chroma`` for the ``chroma_*`` families, budgets for
``recall@Btok``, ``metrics.level=document`` for ``doc_*``). The model is ir_measures'
measure -> provider dispatch: a measure says what it is, a provider says how it is computed.

:func:`harness.evaluation.scoring.score_queries` iterates :data:`PROVIDERS` in order, so the
order of this table is the column order of the per-query table. A provider reads everything
it needs from one :class:`ScoringContext`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Mapping, Sequence

from harness.evaluation.metrics import budget as bg
from harness.evaluation.metrics import chroma, ir, ranking
from harness.types import Chunk, Document, Query, Run

#: Per-query values of one provider: ``{query_id: {metric name: value}}``.
Values = dict[str, dict[str, float]]


@dataclass(frozen=True)
class ScoringContext:
    """Everything a provider reads, for every labelled query of one run.

    Attributes:
        queries: the labelled queries, in dataset order.
        documents: documents by id.
        ranked: ``{query_id: units}``: the first ``max(ks)`` returned units of each query
            (the retrieved chunks after ``chunker.expand``), best first.
        fetched: ``{query_id: units}``: the returned units as deep as was fetched (``depth``),
            for the budget metrics.
        run: the raw retrieval run ``{query_id: {chunk_id: score}}`` over the indexed chunks.
        chunks: the indexed chunks.
        units: the returnable units (the image of ``expand`` over ``chunks``,
            :func:`harness.evaluation.metrics.ir.returnable_units`).
        ks: rank cut-offs, sorted, each >= 1.
        budgets: context-token budgets, sorted (empty: no budget metrics).
        relevance: chunk relevance rule (``metrics.relevance``).
        relevance_fraction: ``f`` of the ``overlap_fraction`` rule, in [0, 1].
        level: ``"chunk"`` or ``"document"`` (``metrics.level``).
        convention: ``"harness"`` or ``"chroma"`` (``metrics.convention``).
        count_context: tokens of one text, for ``context_tokens@k`` (None omits it).
        token_ends: for a unit, the end offset of each of its context tokens (``len`` = its
            token count), for the budget metrics; None without budgets.
    """

    queries: Sequence[Query]
    documents: Mapping[str, Document]
    ranked: Mapping[str, Sequence[Chunk]]
    fetched: Mapping[str, Sequence[Chunk]]
    run: Run
    chunks: Sequence[Chunk]
    units: Sequence[Chunk]
    ks: Sequence[int]
    budgets: Sequence[int] = ()
    relevance: str = "overlap_fraction"
    relevance_fraction: float = 0.5
    level: str = "chunk"
    convention: str = "harness"
    count_context: Callable[[str], int] | None = None
    token_ends: Callable[[Chunk], list[int]] | None = field(default=None, repr=False)

    @cached_property
    def unit_index(self) -> ir.ChunkIndex:
        """The returnable units indexed by document (for PrecisionΩ and the qrels)."""
        return ir.ChunkIndex(self.units)

    @cached_property
    def qrels(self) -> dict[str, dict[str, int]]:
        """Chunk qrels over the returnable units (:func:`harness.evaluation.metrics.ir.chunk_qrels`);
        a returned unit outside them joins the pool of its own query only."""
        return ir.chunk_qrels(self.queries, self.unit_index, self.relevance_fraction, self.relevance, returned=self.ranked)


@dataclass(frozen=True)
class Provider:
    """How a group of metric families is computed.

    Attributes:
        name: the key of :data:`PROVIDERS` that :attr:`MetricFamily.provider` names.
        compute: ``compute(ctx) -> {query_id: {metric name: value}}`` over every query of
            ``ctx`` (a query missing from the result adds nothing to its row).
        applies: ``applies(ctx)``: whether the provider runs at all (its families are then
            absent from the run, not 0).
        source: the function that holds the arithmetic.
    """

    name: str
    compute: Callable[[ScoringContext], Values]
    applies: Callable[[ScoringContext], bool]
    source: str


def _always(ctx: ScoringContext) -> bool:
    return True


def _chroma(ctx: ScoringContext) -> bool:
    return ctx.convention == "chroma"


def _with_budgets(ctx: ScoringContext) -> bool:
    return bool(ctx.budgets)


def _document_level(ctx: ScoringContext) -> bool:
    return ctx.level == "document"


def _span_rank(ctx: ScoringContext) -> Values:
    return {
        q.query_id: ranking.query_metrics(q, ctx.ranked[q.query_id], ctx.ks, ctx.relevance_fraction, ctx.count_context, relevance=ctx.relevance)
        for q in ctx.queries
    }


def _item_recall(ctx: ScoringContext) -> Values:
    return {q.query_id: ir.item_recall(q, ctx.ranked[q.query_id], ctx.ks, ctx.relevance_fraction, ctx.relevance) for q in ctx.queries}


def _chroma_span(ctx: ScoringContext) -> Values:
    return {q.query_id: chroma.retrieval_metrics(q, ctx.ranked[q.query_id], ctx.ks) for q in ctx.queries}


def _budget(ctx: ScoringContext) -> Values:
    return {q.query_id: bg.budget_recall(q, ctx.fetched[q.query_id], ctx.budgets, ctx.token_ends, ctx.documents) for q in ctx.queries}


def _chunk_ir(ctx: ScoringContext) -> Values:
    return ir.chunk_ir_metrics(ctx.qrels, {qid: [c.chunk_id for c in cs] for qid, cs in ctx.ranked.items()}, ctx.ks)


def _document(ctx: ScoringContext) -> Values:
    return ir.document_metrics(ctx.queries, ctx.run, {c.chunk_id: c.doc_id for c in ctx.chunks}, ctx.ks)


def _precision_omega(ctx: ScoringContext) -> Values:
    return {q.query_id: {"precision_omega": ir.precision_omega(q, ctx.unit_index)} for q in ctx.queries}


def _chroma_precision_omega(ctx: ScoringContext) -> Values:
    units = chroma.units_by_document(ctx.units)
    return {q.query_id: {"chroma_precision_omega": chroma.precision_omega(q, units)} for q in ctx.queries}


#: Every provider, in the column order of the per-query table: first the per-query metrics
#: over the ranked units, then those over the returnable units (one trec_eval call for all
#: queries).
PROVIDERS: dict[str, Provider] = {
    p.name: p
    for p in (
        Provider("span_rank", _span_rank, _always, "harness.evaluation.metrics.ranking.query_metrics"),
        Provider("item_recall", _item_recall, _always, "harness.evaluation.metrics.ir.item_recall"),
        Provider("chroma_span", _chroma_span, _chroma, "harness.evaluation.metrics.chroma.retrieval_metrics"),
        Provider("budget", _budget, _with_budgets, "harness.evaluation.metrics.budget.budget_recall"),
        Provider("chunk_ir", _chunk_ir, _always, "harness.evaluation.metrics.ir.chunk_ir_metrics"),
        Provider("document", _document, _document_level, "harness.evaluation.metrics.ir.document_metrics"),
        Provider("precision_omega", _precision_omega, _always, "harness.evaluation.metrics.ir.precision_omega"),
        Provider("chroma_precision_omega", _chroma_precision_omega, _chroma, "harness.evaluation.metrics.chroma.precision_omega"),
    )
}


def provided(ctx: ScoringContext) -> Values:
    """Every applicable provider's values for every query of ``ctx``, merged per query in
    :data:`PROVIDERS` order (the per-query table's column order)."""
    out: Values = {q.query_id: {} for q in ctx.queries}
    for provider in PROVIDERS.values():
        if not provider.applies(ctx):
            continue
        values = provider.compute(ctx)
        for qid, row in out.items():
            row.update(values.get(qid, {}))
    return out
