"""Hybrid retrieval: BM25 and dense (FAISS) candidates fused into one ranking.

The fusion rules are pure functions over per-query score maps (``{chunk_id: score}``), so
they can be checked by hand: :func:`rrf_fuse` (reciprocal rank fusion) and
:func:`weighted_fuse` (a convex combination of min-max normalised scores, :func:`minmax`).
Every function returns its result in ranking order (score descending, ties in document
order: the rule of :func:`harness.types.rank_order`).
"""

from __future__ import annotations

from typing import Mapping, Sequence

from harness.params import Param, check_all
from harness.retrievers.base import Retriever, check_chunks, check_k, check_queries, finite_scores
from harness.retrievers.bm25 import BM25Retriever
from harness.retrievers.faiss import FaissRetriever
from harness.types import Chunk, Query, Run, rank_order

#: Accepted values of ``retriever.fusion``.
FUSIONS = ("rrf", "weighted")
#: Candidates fetched per side when ``depth`` is null: ``max(k, DEFAULT_DEPTH)``.
DEFAULT_DEPTH = 100
#: The fusion settings of :class:`HybridRetriever` (``retriever.<name>``), checked in this order.
PARAMS = (
    Param("fusion", "choice", choices=FUSIONS),
    Param("rrf_k", "number", low=0, finite=False, note="60 in Cormack et al. 2009"),
    Param("alpha", "number", low=0, high=1, note="the weight of the dense side"),
    Param("depth", "int", low=1, note="candidates per side", allow_none=True, none=f"{{}} or null for max(k, {DEFAULT_DEPTH})"),
)
#: What :func:`minmax` gives every candidate of a constant list (one candidate, or ties only).
CONSTANT_SCORE = 0.5


def order(scores: Mapping[str, float]) -> list[str]:
    """Chunk ids of ``scores`` by descending score, ties in document order (:func:`harness.types.rank_order`)."""
    return rank_order(scores)


def top(scores: Mapping[str, float], k: int | None = None) -> dict[str, float]:
    """The first ``k`` entries of ``scores`` in ranking order (all of them when ``k`` is None)."""
    ids = order(scores)
    return {cid: scores[cid] for cid in (ids if k is None else ids[:k])}


def rrf_fuse(rankings: Sequence[Mapping[str, float]], rrf_k: float = 60, k: int | None = None) -> dict[str, float]:
    """Reciprocal rank fusion (Cormack, Clarke & Büttcher, "Reciprocal Rank Fusion
    outperforms Condorcet and individual Rank Learning Methods", SIGIR 2009).

    ``score(d) = sum over rankings r containing d of 1 / (rrf_k + rank_r(d))``, where
    ``rank_r(d)`` is d's 1-based position in r ordered by score descending, ties in
    document order (:func:`harness.types.rank_order`; tied scores get consecutive
    positions, so the rule is deterministic). Only the positions matter, never the scores themselves. A ranking that
    lacks d adds nothing for d.

    Args:
        rankings: one ``{chunk_id: score}`` per side (e.g. dense, BM25); any order.
        rrf_k: the smoothing constant, >= 0 (60 in the paper).
        k: keep the first ``k`` fused entries (None: every candidate).

    Returns:
        ``{chunk_id: fused score}`` over the union of the rankings' ids, in ranking order;
        scores lie in ``(0, len(rankings) / (rrf_k + 1)]``.

    Raises:
        NonFiniteError: a ranking holds a NaN or infinite score (its order would be undefined).
    """
    fused: dict[str, float] = {}
    for side, ranking in enumerate(rankings):
        finite_scores(ranking, f"rrf_fuse: ranking {side}")
    for ranking in rankings:
        for position, cid in enumerate(order(ranking), start=1):
            fused[cid] = fused.get(cid, 0.0) + 1.0 / (rrf_k + position)
    return top(fused, k)


def minmax(scores: Mapping[str, float]) -> dict[str, float]:
    """Per-query min-max normalisation: ``(s - min) / (max - min)`` over the given scores,
    so the best candidate gets 1.0 and the worst 0.0; every value is in [0, 1] and the order
    of the scores is kept. Empty -> ``{}``.

    A constant list (one candidate, or ties only, all zeros included) carries no preference
    among its candidates: each gets :data:`CONSTANT_SCORE` (0.5), the middle of the range.
    1.0 would let a side that cannot tell its candidates apart weigh as much as the other
    side's best match (one weak dense hit would tie a clear BM25 winner); 0.0 would rank its
    candidates with those the side did not return at all. Every value of a non-constant
    list is still reachable (0 and 1 are taken by its worst and best).

    Raises:
        NonFiniteError: a score is NaN or infinite (``min``/``max`` of such a list are undefined).
    """
    if not scores:
        return {}
    finite_scores(scores, "minmax")
    lo, hi = min(scores.values()), max(scores.values())
    if hi == lo:
        return {cid: CONSTANT_SCORE for cid in scores}
    span = hi - lo
    return {cid: (s - lo) / span for cid, s in scores.items()}


def weighted_fuse(dense: Mapping[str, float], lexical: Mapping[str, float], alpha: float = 0.5, k: int | None = None) -> dict[str, float]:
    """Convex combination of normalised scores (the "linear combination" / CombSUM family,
    Fox & Shaw, TREC-2 1994; min-max normalisation as in Lee, SIGIR 1997).

    ``score(d) = alpha * minmax(dense)[d] + (1 - alpha) * minmax(lexical)[d]``, each side
    normalised over its own candidates for this query (:func:`minmax`); a candidate missing
    from a side scores 0 on that side. ``alpha = 1`` ranks the dense candidates exactly as
    dense retrieval does (lexical-only candidates follow with score 0), ``alpha = 0`` the
    BM25 candidates as BM25 does.

    Args:
        dense: ``{chunk_id: cosine}`` of the dense side for one query.
        lexical: ``{chunk_id: BM25 score}`` of the lexical side for the same query.
        alpha: weight of the dense side in [0, 1].
        k: keep the first ``k`` fused entries (None: every candidate).

    Returns:
        ``{chunk_id: fused score in [0, 1]}`` over the union of both sides' ids, in ranking order.

    Raises:
        NonFiniteError: a score of either side is NaN or infinite (names the side).
    """
    finite_scores(dense, "weighted_fuse: dense side")
    finite_scores(lexical, "weighted_fuse: lexical side")
    nd, nl = minmax(dense), minmax(lexical)
    fused = {cid: alpha * nd.get(cid, 0.0) + (1.0 - alpha) * nl.get(cid, 0.0) for cid in {*nd, *nl}}
    return top(fused, k)


class HybridRetriever(Retriever):
    """BM25 (:class:`~harness.retrievers.bm25.BM25Retriever`) and dense retrieval
    (:class:`~harness.retrievers.faiss.FaissRetriever` with the run's encoder) over the
    same chunks, fused per query by ``fusion``:

    * ``rrf``: :func:`rrf_fuse` over both sides' candidate lists, constant ``rrf_k``.
    * ``weighted``: :func:`weighted_fuse`, ``alpha * dense + (1 - alpha) * BM25`` after
      per-query min-max normalisation of each side over its own candidates (a side's
      missing candidate scores 0 there; a side whose candidates all score alike gives each
      :data:`CONSTANT_SCORE`, 0.5).

    Each side fetches ``depth`` candidates per query (null: ``max(k, 100)``); the fused
    ranking holds only chunks that one side returned (BM25 returns only chunks sharing a
    token with the query, FAISS every chunk up to ``depth``), cut to ``k``.

    Args:
        encoder: the run's shared encoder (passed by the builder; needed at :meth:`index`).
        fusion: ``"rrf"`` or ``"weighted"``.
        rrf_k: RRF constant, a number >= 0 (default 60, as in the paper); used by ``rrf``.
        alpha: dense weight in [0, 1] (default 0.5); used by ``weighted``.
        depth: candidates per side, an integer >= 1, or None for ``max(k, 100)``; a
            search for more than ``depth`` results is refused.
        k1, b: BM25 parameters, passed to :class:`~harness.retrievers.bm25.BM25Retriever`
            (``k1 >= 0``, ``b`` in [0, 1]).

    Raises:
        ValueError: a parameter out of range (one line naming ``retriever.<param>``; for
            ``fusion`` with a did-you-mean), indexing without an encoder, searching before
            indexing, ``k < 1`` or ``k > depth``.
        TypeError: chunks or queries of the wrong type (e.g. plain strings).
    """

    name = "hybrid"
    needs_encoder = True

    def __init__(
        self,
        encoder=None,
        fusion: str = "rrf",
        rrf_k: float = 60,
        alpha: float = 0.5,
        depth: int | None = None,
        k1: float = 1.5,
        b: float = 0.75,
    ) -> None:
        check_all(PARAMS, {"fusion": fusion, "rrf_k": rrf_k, "alpha": alpha, "depth": depth}, "retriever")
        self.fusion = fusion
        self.rrf_k = rrf_k
        self.alpha = float(alpha)
        self.depth = depth
        self.encoder = encoder
        self.lexical = BM25Retriever(k1=k1, b=b)  # validates k1 and b (retriever.k1, retriever.b)
        self.dense = FaissRetriever(encoder=encoder)
        self._indexed = False

    def candidate_depth(self, k: int) -> int:
        """Candidates fetched per side for a search of ``k`` results.

        Raises:
            ValueError: ``k`` exceeds a configured ``depth``.
        """
        if self.depth is None:
            return max(k, DEFAULT_DEPTH)
        if k > self.depth:
            raise ValueError(
                f"retriever.depth={self.depth} is below the {k} results asked for (k); each side must fetch at least k "
                f"candidates: raise retriever.depth or set it to null (max(k, {DEFAULT_DEPTH}))"
            )
        return self.depth

    def index(self, chunks: Sequence[Chunk]) -> None:
        """Index ``chunks`` for both sides (the dense side embeds them with the encoder).

        Raises:
            TypeError: ``chunks`` is not a sequence of :class:`harness.types.Chunk`.
            ValueError: two chunks share a ``chunk_id``, or there is no encoder.
        """
        items = check_chunks(chunks)
        if self.encoder is None:
            raise ValueError("retriever.hybrid needs an encoder for its dense side (built by harness.experiment.build)")
        self.lexical.index(items)
        self.dense.index(items)
        self._indexed = True

    def search(self, queries: Sequence[Query], k: int) -> Run:
        """Fused top-k per query (see the class docstring).

        Returns:
            ``{query_id: {chunk_id: fused score}}``, at most ``k`` entries per query, in
            ranking order (score descending, ties in document order); every query id is
            present (empty when neither side returned anything, e.g. an empty index).

        Raises:
            TypeError: ``queries`` is not a sequence of :class:`harness.types.Query`.
            ValueError: ``k < 1``, ``k > depth``, or search before :meth:`index`.
        """
        check_k(k)
        items = check_queries(queries)
        if not self._indexed:
            raise ValueError("retriever.hybrid: search() called before index()")
        n = self.candidate_depth(k)
        dense = self.dense.search(items, n)
        lexical = self.lexical.search(items, n)
        run: Run = {}
        for q in items:
            d, s = dense.get(q.query_id, {}), lexical.get(q.query_id, {})
            fused = rrf_fuse([d, s], self.rrf_k) if self.fusion == "rrf" else weighted_fuse(d, s, self.alpha)
            run[q.query_id] = self.keep_top(q.query_id, fused, k)
        return run
