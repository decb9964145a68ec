"""Qrels-based retrieval metrics: chunk qrels derived from evidence spans, trec_eval
evaluation, evidence-item recall, PrecisionΩ and document-level (max-pooled) metrics.

Returnable units. Rank metrics judge what a strategy hands back, never what it merely
indexes. The *returnable units* of a chunking are the image of ``chunker.expand`` over every
indexed chunk, ``U = ⋃_c expand([c])`` (:func:`returnable_units`), grouped per document:
the indexed chunks themselves for a plain chunker (``expand`` is the identity), the
distinct parents for small-to-big retrieval with ``return_unit=parent``, one window per
child with ``return_unit=window``. Indexed children that are never handed back are not in
``U``: they cannot be ranked, so they must not enter an ideal ranking or a divisor.

Chunk qrels. For a query ``q``, ``qrels[q] = {unit_id: 1}`` for each unit of ``q``'s pool
that is relevant to ``q`` under the relevance rule
(:data:`harness.evaluation.metrics.ranking.RELEVANCE_RULES`, ``metrics.relevance``). The pool of ``q``
is ``U`` plus the units returned for ``q`` itself (the same as ``U`` unless an expansion
depends on which hits come together); it never holds what was returned for *other*
queries, so one query's score does not depend on another's results. Grades are binary. A
query whose evidence no unit satisfies has empty qrels; every qrels metric is then 0 for
it (it stays in the mean).

Runs. The ranked list handed to the metrics (after ``chunker.expand``) becomes
``run[q] = {chunk_id: n - i}`` for rank ``i = 0..n-1``, so the library sees exactly the
ranking that was scored (no ties; a repeated id keeps its first, best rank).

The metrics are computed by trec_eval (NIST's reference implementation, through
``pytrec_eval`` and ir-measures' ``pytrec_eval`` provider; MacAvaney et al., "Streamlining
Evaluation with ir-measures", ECIR 2022): ``precision@k`` (``P@k``, divisor k),
``hit_rate@k`` (``Success@k``), ``mrr@k`` (``RR@k``), ``ndcg@k`` (``nDCG@k``, gain =
grade, log2 discount, ideal DCG from the ``min(R, k)`` relevant units of the qrels),
``map@k`` (``AP@k``, divisor ``R`` = number of relevant units in the qrels, i.e. relevant
returnable units), ``recall@k`` (``R@k``) and ``mrr@k`` (trec_eval's reciprocal rank, which
has no cut-off, on the run cut to its top k). All queries go through one call per cut-off.
trec_eval is compiled C, so nothing is compiled at run time (ranx, used before,
JIT-compiled its numba code in every new process: seconds per run); tests cross-check
every value against ranx on generated cases and against a brute-force implementation of
the definitions over every returnable unit.

Document level (``metrics.level=document``): documents are ranked by their best chunk
(max-pooled retriever score over the fetched chunks; ties broken by the best chunk's rank)
and judged relevant when they hold evidence. Intended for datasets labelled by document
id (BEIR), whose evidence spans cover whole documents.
"""

from __future__ import annotations

import bisect
from typing import Callable, Iterable, Mapping, Sequence

from harness.evaluation.metrics import span as sp
from harness.evaluation.metrics import split_cutoff
from harness.evaluation.metrics.ranking import relevant_to
from harness.types import Chunk, Document, Qrels, Query, Run, rank_order

#: Our family name -> name accepted by :func:`ir_per_query`, for the chunk-level families.
CHUNK_IR = {"chunk_precision": "precision", "hit_rate": "hit_rate", "ndcg": "ndcg", "map": "map"}
#: Document-level families -> name accepted by :func:`ir_per_query`.
DOC_IR = {"doc_recall": "recall", "doc_ndcg": "ndcg"}
#: Names accepted by :func:`ir_per_query` (``<name>@<k>``) -> ir-measures measure name.
IR_MEASURES = {"precision": "P", "recall": "R", "ndcg": "nDCG", "map": "AP", "mrr": "RR", "hit_rate": "Success"}


class ChunkIndex:
    """Chunks grouped per document and sorted by start, to find those overlapping a span.

    Args:
        chunks: any chunks (duplicates by ``chunk_id`` are kept once).
    """

    def __init__(self, chunks: Iterable[Chunk]) -> None:
        by_doc: dict[str, dict[str, Chunk]] = {}
        for c in chunks:
            by_doc.setdefault(c.doc_id, {}).setdefault(c.chunk_id, c)
        self._chunks: dict[str, list[Chunk]] = {}
        self._starts: dict[str, list[int]] = {}
        self._max_len: dict[str, int] = {}
        for doc_id, cs in by_doc.items():
            ordered = sorted(cs.values(), key=lambda c: (c.start, c.end, c.chunk_id))
            self._chunks[doc_id] = ordered
            self._starts[doc_id] = [c.start for c in ordered]
            self._max_len[doc_id] = max(c.end - c.start for c in ordered)

    def overlapping(self, doc_id: str, start: int, end: int) -> list[Chunk]:
        """Chunks of ``doc_id`` whose spans share at least one character with ``[start, end)``."""
        if doc_id not in self._chunks:
            return []
        starts = self._starts[doc_id]
        lo = bisect.bisect_left(starts, start - self._max_len[doc_id])
        hi = bisect.bisect_left(starts, end)
        return [c for c in self._chunks[doc_id][lo:hi] if sp.overlap_chars(c.spans, (start, end)) > 0]


def returnable_units(
    chunks: Sequence[Chunk],
    expand: Callable[[list[Chunk], dict[str, Document]], list[Chunk]] | None,
    documents: Mapping[str, Document],
) -> list[Chunk]:
    """Every unit a strategy can hand back: the image of ``expand`` over the indexed chunks.

    ``U = ⋃_{c in chunks} expand([c], documents)``, distinct by ``chunk_id``, in the order
    first produced. For a plain chunker (``expand`` is the identity) ``U`` is ``chunks``;
    for ``hierarchical`` it is the distinct parents (``return_unit=parent``), one window
    per child (``window``) or the children (``child``). These units -- not the indexed
    ones -- form the ideal ranking of ``ndcg@k``, the divisor of ``map@k`` and the ``Ω`` of
    :func:`precision_omega`.

    Args:
        chunks: the indexed chunks.
        expand: ``chunker.expand`` (ranked chunks, documents by id -> returned units); None
            means the identity.
        documents: documents by id (``expand`` reads their text).

    Returns:
        The returnable units, each with true spans into its document.
    """
    if expand is None:
        return list({c.chunk_id: c for c in chunks}.values())
    out: dict[str, Chunk] = {}
    docs = dict(documents)
    for c in chunks:
        for unit in expand([c], docs):
            out.setdefault(unit.chunk_id, unit)
    return list(out.values())


def chunk_qrels(
    queries: Sequence[Query],
    index: ChunkIndex,
    fraction: float = 0.5,
    rule: str = "overlap_fraction",
    returned: Mapping[str, Sequence[Chunk]] | None = None,
) -> Qrels:
    """Binary qrels of returnable units for every query (an entry, possibly empty, per query).

    A unit of the query's pool is relevant when
    :func:`harness.evaluation.metrics.ranking.relevant_to` holds for one of the query's evidence
    spans. The pool of query ``q`` is ``index`` (build it from :func:`returnable_units`)
    plus ``returned[q]``, the units scored for ``q`` itself; units returned for other
    queries never enter it. Only units overlapping some evidence can be relevant under any
    rule, so only those are examined.

    Args:
        queries: the labelled queries.
        index: the returnable units of the chunking.
        fraction: ``f`` of the ``overlap_fraction`` rule, in [0, 1].
        rule: one of :data:`harness.evaluation.metrics.ranking.RELEVANCE_RULES`.
        returned: ``{query_id: units scored for it}``; units already in ``index`` add
            nothing. None: the pool is ``index`` alone.

    Returns:
        ``{query_id: {unit_id: 1}}``; ``len(qrels[q])`` is the ``R`` of nDCG's ideal
        ranking and of AP's divisor.
    """
    out: Qrels = {}
    for q in queries:
        rel: dict[str, int] = {}
        for ev in q.evidence:
            for c in index.overlapping(ev.doc_id, ev.start, ev.end):
                if c.chunk_id not in rel and relevant_to(c, ev, fraction, rule):
                    rel[c.chunk_id] = 1
        for c in (returned or {}).get(q.query_id, ()):
            if c.chunk_id not in rel and any(relevant_to(c, ev, fraction, rule) for ev in q.evidence):
                rel[c.chunk_id] = 1
        out[q.query_id] = rel
    return out


def run_from_rankings(rankings: Mapping[str, Sequence[str]]) -> Run:
    """``{query_id: [id, ...] best first}`` -> ``{query_id: {id: n - rank}}``; a repeated id
    keeps its first (best) rank."""
    out: Run = {}
    for qid, ids in rankings.items():
        unique = list(dict.fromkeys(ids))
        n = len(unique)
        out[qid] = {cid: float(n - i) for i, cid in enumerate(unique)}
    return out


def ir_per_query(qrels: Qrels, run: Run, metrics: Sequence[str]) -> dict[str, dict[str, float]]:
    """Per-query values of rank metrics, one trec_eval call for all queries.

    Queries with empty qrels (nothing relevant exists) and queries absent from ``run`` or
    with an empty ranking score 0 for every metric (trec_eval skips them; they are filled
    in here).

    Args:
        qrels: ``{query_id: {id: grade}}``, grades >= 1 relevant; one entry per query to score.
        run: ``{query_id: {id: score}}``, higher first; scores should be distinct per query
            (trec_eval breaks ties by id string; :func:`run_from_rankings` makes them
            distinct, so the scored order is the tie rule's). A cut to the top k uses
            :func:`harness.types.rank_order`.
        metrics: names ``<name>@<k>`` with ``name`` in :data:`IR_MEASURES` (``"ndcg@10"``,
            ``"hit_rate@5"``) and ``k >= 1``.

    Returns:
        ``{query_id: {metric name: value}}`` for every query id in ``qrels``, values in [0, 1].

    Raises:
        ValueError: a metric name not of that form (the message lists the names).
    """
    parsed: dict[str, tuple[str, int]] = {}
    for name in metrics:
        cut = split_cutoff(name)
        if cut is None or cut[0] not in IR_MEASURES:
            raise ValueError(f"unknown rank metric {name!r}; expected <name>@<k> with name in {sorted(IR_MEASURES)} and k >= 1")
        parsed[name] = cut
    out = {qid: {m: 0.0 for m in metrics} for qid in qrels}
    judged = {qid: dict(rel) for qid, rel in qrels.items() if rel}
    ranked = {qid: dict(run[qid]) for qid in judged if run.get(qid)}
    if not metrics or not ranked:
        return out
    import ir_measures

    provider = ir_measures.pytrec_eval
    # trec_eval's reciprocal rank has no cut-off: RR@k is RR on the run cut to its top k.
    calls: dict[int | None, dict[str, str]] = {}  # run cut-off (None: whole run) -> {measure: our name}
    for name, (family, k) in parsed.items():
        if family == "mrr":
            calls.setdefault(k, {})["RR"] = name
        else:
            calls.setdefault(None, {})[f"{IR_MEASURES[family]}@{k}"] = name
    for cut, names in calls.items():
        measures = [ir_measures.parse_measure(spec) for spec in names]
        unsupported = [str(ms) for ms in measures if not provider.supports(ms)]
        if unsupported:  # pragma: no cover - guards an ir-measures change; never return wrong values silently
            raise RuntimeError(f"ir-measures' pytrec_eval provider does not support {unsupported}")
        cut_run = ranked if cut is None else {qid: {cid: r[cid] for cid in rank_order(r)[:cut]} for qid, r in ranked.items()}
        ours = {str(ms): names[spec] for ms, spec in zip(measures, names)}
        for value in provider.iter_calc(measures, judged, cut_run):
            out[value.query_id][ours[str(value.measure)]] = float(value.value)
    return out


def chunk_ir_metrics(qrels: Qrels, rankings: Mapping[str, Sequence[str]], ks: Sequence[int]) -> dict[str, dict[str, float]]:
    """Chunk-level ``chunk_precision@k``, ``hit_rate@k``, ``ndcg@k``, ``map@k`` per query.

    Args:
        qrels: from :func:`chunk_qrels`.
        rankings: the scored ranked chunk ids per query (best first, truncated to max(ks)).
        ks: cut-offs.

    Returns:
        ``{query_id: {"ndcg@10": ..., ...}}`` for every query in ``qrels``.
    """
    return _renamed(ir_per_query(qrels, run_from_rankings(rankings), [f"{r}@{k}" for r in CHUNK_IR.values() for k in ks]), CHUNK_IR, ks)


def _renamed(values: dict[str, dict[str, float]], mapping: Mapping[str, str], ks: Sequence[int]) -> dict[str, dict[str, float]]:
    return {qid: {f"{ours}@{k}": v[f"{theirs}@{k}"] for ours, theirs in mapping.items() for k in ks} for qid, v in values.items()}


def item_recall(query: Query, ranked_chunks: Sequence[Chunk], ks: Sequence[int], fraction: float = 0.5, rule: str = "overlap_fraction") -> dict[str, float]:
    """``item_recall@k``: share of the query's distinct evidence spans (items) that have a
    relevant chunk among the top k. In [0, 1]; 0 when nothing was retrieved. A chunk
    relevant to several items finds all of them; duplicate chunks find nothing new."""
    items = list({(e.doc_id, e.start, e.end): e for e in query.evidence}.values())
    first_rank: list[int] = []  # rank of the first chunk relevant to each found item
    for ev in items:
        rank = next((i for i, c in enumerate(ranked_chunks, start=1) if relevant_to(c, ev, fraction, rule)), 0)
        if rank:
            first_rank.append(rank)
    n = len(items)
    return {f"item_recall@{k}": (sum(1 for r in first_rank if r <= k) / n if n else 0.0) for k in ks}


def precision_omega(query: Query, index: ChunkIndex) -> float:
    """Chroma's PrecisionΩ on characters: ``|E ∩ Ω| / |Ω|``, ``Ω`` the union of the spans of
    every unit in ``index`` that overlaps the evidence ``E`` (any overlap). 0 when no unit
    overlaps. ``index`` holds the returnable units (:func:`returnable_units`): for
    small-to-big retrieval the parents or windows a generator would receive, never the
    children it cannot. Depends on the chunking only; no retriever can reach a higher span
    precision while covering all the evidence that the returnable units cover."""
    evidence = sp.span_set((e.doc_id, e.span) for e in query.evidence)
    touching = {c.chunk_id: c for e in query.evidence for c in index.overlapping(e.doc_id, e.start, e.end)}
    omega = sp.span_set((c.doc_id, s) for c in touching.values() for s in c.spans)
    n = sp.size(omega)
    return sp.intersection_size(evidence, omega) / n if n else 0.0


def document_qrels(queries: Sequence[Query]) -> Qrels:
    """``{query_id: {doc_id: 1}}`` for every document holding evidence of the query."""
    return {q.query_id: {e.doc_id: 1 for e in q.evidence} for q in queries}


def document_run(run: Run, chunk_doc: Mapping[str, str]) -> Run:
    """Max-pool a chunk run into a document run.

    A document's score is the highest score of its retrieved chunks; documents are then
    re-scored ``n - position`` in the order (max score desc, rank of the best chunk asc, the
    chunks ranked by :func:`harness.types.rank_order`), so ties cannot reorder them inside
    the metric library.

    Args:
        run: ``{query_id: {chunk_id: score}}``.
        chunk_doc: chunk id -> document id.
    """
    out: Run = {}
    for qid, scores in run.items():
        ordered = rank_order(scores)  # the tie rule of every ranking
        best: dict[str, tuple[float, int]] = {}
        for rank, cid in enumerate(ordered):
            d = chunk_doc[cid]
            if d not in best:
                best[d] = (scores[cid], rank)
        docs = sorted(best, key=lambda d: (-best[d][0], best[d][1]))
        out[qid] = {d: float(len(docs) - i) for i, d in enumerate(docs)}
    return out


def document_metrics(queries: Sequence[Query], run: Run, chunk_doc: Mapping[str, str], ks: Sequence[int]) -> dict[str, dict[str, float]]:
    """``doc_recall@k`` and ``doc_ndcg@k`` per query (see the module docstring)."""
    qrels = document_qrels(queries)
    values = ir_per_query(qrels, document_run(run, chunk_doc), [f"{r}@{k}" for r in DOC_IR.values() for k in ks])
    return _renamed(values, DOC_IR, ks)
