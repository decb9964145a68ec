"""Retriever interface and the input checks and ranking rule every retriever shares."""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from typing import Mapping, Sequence

from harness.params import Param, is_number
from harness.types import Chunk, NonFiniteError, Query, Run, rank_order


class Retriever(ABC):
    """Indexes chunks and returns the top-k chunk ids per query.

    Attributes:
        name: retriever name used in run names.
        needs_encoder: True when the builder must pass the shared encoder as ``encoder=``.
        needs_builder: True when the retriever's config nests another retriever config (the
            first stage of rerank); the builder then passes
            :func:`harness.experiment.build.build_sub_retriever` as ``builder=``, and the
            retriever builds the nested one with it (config becomes objects in one place).
        depth: candidates per side a fusing retriever fetches (``retriever.depth`` of
            hybrid), an integer >= 1, or None (no such setting, or ``max(k, default)``).
        candidates: first-stage results a reranking retriever re-scores per query
            (``retriever.candidates`` of rerank), an integer >= 1, or None (as ``depth``).
            A run refuses either below ``max(metrics.ks)`` before it loads any data.
    """

    name: str = "base"
    needs_encoder: bool = False
    needs_builder: bool = False
    depth: int | None = None
    candidates: int | None = None

    def __init_subclass__(cls, **kwargs) -> None:
        """Every ``search`` a subclass defines returns through :func:`check_scores`, so no
        retriever (a new one included, and the sides of a hybrid) hands on a NaN score."""
        super().__init_subclass__(**kwargs)
        search = cls.__dict__.get("search")
        if search is not None and not getattr(search, "_scores_checked", False):

            @functools.wraps(search)
            def checked(self, queries, k, *args, **kw):
                return check_scores(search(self, queries, k, *args, **kw), self.name)

            checked._scores_checked = True
            cls.search = checked

    @abstractmethod
    def index(self, chunks: Sequence[Chunk]) -> None:
        """Build the index over ``chunks``, replacing any previous index.

        An empty list is a valid, empty index: every later search returns no hits. (A run
        never gets here with no chunks: the loaders refuse an empty corpus and
        :func:`harness.experiment.pipeline.evaluate` a chunker that produced no chunks.)

        Raises:
            TypeError: ``chunks`` is not a sequence of :class:`harness.types.Chunk` (e.g.
                plain strings); see :func:`check_chunks`.
            ValueError: two chunks share a ``chunk_id``.
        """

    @abstractmethod
    def search(self, queries: Sequence[Query], k: int) -> Run:
        """Top-k chunks per query.

        Args:
            queries: the queries to answer (:class:`harness.types.Query`).
            k: results per query, >= 1; when k exceeds the number of indexed chunks every
                candidate chunk is returned once (never padding ids).

        Returns:
            ``{query_id: {chunk_id: score}}`` with at most ``min(k, n_chunks)`` entries per
            query, in ranking order: score descending, equal scores in document order
            (:func:`harness.types.chunk_order_key`: doc id in natural order, ``doc9`` before
            ``doc10``, then start and end offsets as numbers); the top-k cut follows the same
            rule (:meth:`keep_top`), so which of several tied chunks make the cut never
            depends on the index order or an index's internal order. Every query id is
            present; its dict is empty when nothing qualifies (an empty index; for lexical
            retrievers a query sharing no token with any chunk, since only chunks with a
            positive score are returned).

        Raises:
            TypeError: ``queries`` is not a sequence of :class:`harness.types.Query`.
            ValueError: ``k`` < 1 or not an int, or search before :meth:`index`.
            NonFiniteError: a score is NaN, infinite or not a number (checked for every
                subclass by :func:`check_scores`, wrapped around its ``search``).
        """

    def stats(self) -> dict[str, float]:
        """The retriever's own counters, logged with the run's metrics at step 0
        (``{name: value}``, e.g. ``rerank.pairs_scored``, ``retriever.ann_recall_at_10``).
        Default: none (``{}``)."""
        return {}

    def keep_top(self, query_id: str, candidates: Mapping[str, float], k: int) -> dict[str, float]:
        """The first ``k`` of ``candidates`` (``{chunk_id: score}``) in ranking order, and
        remember the score of the best one left out (see :meth:`beyond_cut`).

        Every built-in retriever makes its final top-k cut here, so the cut and the order
        are those of :func:`harness.types.rank_order`. Pass at least ``k + 1`` candidates
        when there are more, so :meth:`beyond_cut` can tell whether rank ``k + 1`` ties rank ``k``.
        """
        ids = rank_order(candidates)
        self.beyond_cut()[query_id] = float(candidates[ids[k]]) if len(ids) > k else None
        return {cid: candidates[cid] for cid in ids[:k]}

    def beyond_cut(self) -> dict[str, float | None]:
        """``{query_id: score of the best candidate below the top-k cut}`` of the searches so
        far (the latest search of each query; None: nothing was left out). Empty for a
        retriever that does not cut through :meth:`keep_top`; the run's own scores show
        ties above the cut, this shows one across the deepest cut
        (:func:`harness.evaluation.diagnostics.crossing_ties`)."""
        return self.__dict__.setdefault("_beyond_cut", {})


def check_k(k: int) -> None:
    """Raise ``ValueError`` unless ``k`` is an int >= 1."""
    Param("top-k", "int", low=1).check(k)


def _check_items(items, kind: type, parameter: str, method: str, hint: str) -> list:
    if isinstance(items, (str, bytes)) or not hasattr(items, "__iter__"):
        raise TypeError(f"retriever.{method}({parameter}): expected a sequence of {kind.__module__}.{kind.__name__}, got {type(items).__name__} ({hint})")
    items = list(items)
    for i, item in enumerate(items):
        if not isinstance(item, kind):
            raise TypeError(
                f"retriever.{method}({parameter}): {parameter}[{i}] is a {type(item).__name__} ({item!r:.60}), "
                f"expected {kind.__module__}.{kind.__name__} ({hint})"
            )
    return items


def check_chunks(chunks: Sequence[Chunk]) -> list[Chunk]:
    """Validate the argument of :meth:`Retriever.index` and return it as a list.

    Raises:
        TypeError: ``chunks`` is a string or not iterable, or an item is not a
            :class:`harness.types.Chunk` (the message names ``chunks[i]`` and its type).
        ValueError: two chunks share a ``chunk_id`` (their results would merge silently).
    """
    items = _check_items(chunks, Chunk, "chunks", "index", "build chunks with a chunker or Chunk.from_spans")
    seen: dict[str, int] = {}
    for i, c in enumerate(items):
        j = seen.setdefault(c.chunk_id, i)
        if j != i:
            raise ValueError(f"retriever.index(chunks): chunks[{j}] and chunks[{i}] share chunk_id {c.chunk_id!r}; chunk ids must be unique")
    return items


def check_queries(queries: Sequence[Query]) -> list[Query]:
    """Validate the argument of :meth:`Retriever.search` and return it as a list.

    Raises:
        TypeError: ``queries`` is a string or not iterable, or an item is not a
            :class:`harness.types.Query` (the message names ``queries[i]`` and its type).
    """
    return _check_items(queries, Query, "queries", "search", "wrap a text as Query(query_id, text, evidence)")


def ranked(run: Run, query_id: str) -> list[str]:
    """Chunk ids of one query in ranking order: descending score, equal scores in document
    order (:func:`harness.types.rank_order`); ``[]`` for a query absent from ``run``."""
    return rank_order(run.get(query_id, {}))


def finite_scores(scores: Mapping[str, float], where: str, of: str = "") -> Mapping[str, float]:
    """``scores`` (``{chunk_id: score}`` of one query) when every score is a finite real number.

    Raises:
        NonFiniteError: one line naming ``where`` (and ``of``: `` of query 'q1'``), how many
            scores of how many are NaN, infinite or not numbers, and the first one's chunk id
            and value.
    """
    bad = [(cid, s) for cid, s in scores.items() if not is_number(s, finite=True)]
    if bad:
        cid, s = bad[0]
        raise NonFiniteError(f"{where}: {len(bad)} of {len(scores)} scores{of} are not finite numbers (first: chunk {cid!r}, score {s!r})")
    return scores


def check_scores(run: Run, retriever: str) -> Run:
    """The boundary every retriever's output crosses: ``run`` unchanged when every score of
    every query is a finite real number (``bool`` is not a number here).

    :class:`Retriever` wraps each subclass's ``search`` with this check, so BM25, FAISS,
    the hybrid (its two sides and its fused result), the reranker and any retriever added
    later are checked alike; a NaN would otherwise rank anywhere (it compares false with
    every number) or, in FAISS, drop its chunk from the results.

    Args:
        run: ``{query_id: {chunk_id: score}}``.
        retriever: the retriever's name, for the message.

    Raises:
        NonFiniteError: ``retriever.<name>: <n> of <m> scores of query '<id>' are not
            finite numbers (first: chunk ..., score nan)``.
    """
    for qid, scores in run.items():
        finite_scores(scores, f"retriever.{retriever}", f" of query {qid!r}")
    return run
