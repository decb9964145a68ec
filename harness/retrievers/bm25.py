"""Lexical retrieval: BM25 with Lucene's IDF via the bm25s package."""

from __future__ import annotations

import logging
import re
import unicodedata
from typing import Sequence

import numpy as np

from harness.params import Param, check_all
from harness.retrievers.base import Retriever, check_chunks, check_k, check_queries
from harness.types import Chunk, Query, Run, chunk_order_key

_TOKEN = re.compile(r"\w+", re.UNICODE)

#: The settings of :class:`BM25Retriever` (``retriever.k1``, ``retriever.b``).
PARAMS = (
    Param("k1", "number", low=0, finite=False, desc="term-frequency saturation"),
    Param("b", "number", low=0, high=1, desc="document-length normalisation"),
)


def bm25_tokenize(text: str) -> list[str]:
    """The BM25 analyser: Unicode canonical caseless folding, then maximal runs of word
    characters (regex ``\\w+``).

    The folding is ``NFC(casefold(NFD(text)))``: Unicode's canonical caseless match
    (The Unicode Standard, section 3.13, D145) with the result composed, so a precomposed
    ``café`` and a decomposed ``cafe`` + U+0301 give the same token ``café`` (without it the
    combining accent, not a word character, would split the decomposed form into ``cafe``).
    NFC rather than NFKC: only strings that are the same text are merged
    (:mod:`harness.text.normalisation`). Used for chunk texts and query texts alike; only
    the token stream is folded, never a stored text or its offsets. No stemming and no
    stop-word removal; punctuation and whitespace are dropped, so ``"???"`` has no tokens;
    ``"Kestrel's 2.3.1"`` -> ``["kestrel", "s", "2", "3", "1"]``.
    """
    if text.isascii():  # nothing to fold but case (the common case, kept fast)
        return _TOKEN.findall(text.casefold())
    return _TOKEN.findall(unicodedata.normalize("NFC", unicodedata.normalize("NFD", text).casefold()))


def _inherit_log_level() -> None:
    """bm25s sets its logger to DEBUG on import, which bypasses the application's log level
    (a "Building index from tokens" line per run); let it inherit that level instead."""
    logger = logging.getLogger("bm25s")
    if logger.level == logging.DEBUG:
        logger.setLevel(logging.NOTSET)


class BM25Retriever(Retriever):
    """Okapi BM25 (Robertson & Zaragoza, "The Probabilistic Relevance Framework: BM25 and
    Beyond", 2009) in Lucene's variant (Kamphuis et al., "Which BM25 Do You Mean? A
    Large-Scale Reproducibility Study of Scoring Variants", ECIR 2020), computed by the
    bm25s library (``method="lucene"``) over :func:`bm25_tokenize` tokens of the chunk text.

    For a chunk ``d`` of ``|d|`` tokens among ``N`` chunks of mean length ``avgdl``::

        score(q, d) = sum over query tokens t (repeats count) of
                      idf(t) * tf(t, d) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))
        idf(t)      = ln(1 + (N - n_t + 0.5) / (n_t + 0.5))     n_t = chunks containing t

    The IDF is positive for every term of the corpus, even one in every chunk (unlike the
    classic Robertson IDF, which is 0 for a term in half the chunks and negative above),
    so a chunk scores > 0 exactly when it contains a query token.

    Guarantees of :meth:`search`: only chunks with a positive score are returned, so a
    chunk sharing no token with the query is never a hit (a query of punctuation only, or
    of words absent from the corpus, gets no results and scores 0 on every metric); ties
    among positive scores are broken in document order (:func:`harness.types.chunk_order_key`:
    doc id in natural order, then start and end offsets as numbers), independent of the
    order the chunks were indexed in, for the ranking and for the top-k cut alike.

    Args:
        k1: term-frequency saturation, >= 0 (default 1.5).
        b: length normalisation in [0, 1] (default 0.75).

    Raises:
        ValueError: parameters out of range, duplicate chunk ids, searching before
            indexing, or k < 1.
        TypeError: chunks or queries of the wrong type (e.g. plain strings).
    """

    name = "bm25"

    def __init__(self, k1: float = 1.5, b: float = 0.75) -> None:
        check_all(PARAMS, {"k1": k1, "b": b}, "retriever")
        self.k1, self.b = float(k1), float(b)
        self._bm25 = None
        self._indexed = False
        self._ids: list[str] = []
        self._id_rank = np.zeros(0, dtype=np.int64)

    def index(self, chunks: Sequence[Chunk]) -> None:
        """Build the index over ``chunks`` (an empty list gives an empty index).

        Raises:
            TypeError: ``chunks`` is not a sequence of :class:`harness.types.Chunk`.
            ValueError: two chunks share a ``chunk_id``.
        """
        items = check_chunks(chunks)
        corpus = [bm25_tokenize(c.text) for c in items]
        self._bm25 = None
        if any(corpus):  # no token at all: no query can match (and bm25s cannot index it)
            import bm25s

            _inherit_log_level()
            bm25 = bm25s.BM25(k1=self.k1, b=self.b, method="lucene", dtype="float64")
            bm25.index(corpus, show_progress=False)
            self._bm25 = bm25
        self._ids = [c.chunk_id for c in items]
        # position of each chunk in document order (chunk_order_key): the tie rule of ranked()
        by_order = sorted(range(len(self._ids)), key=lambda i: chunk_order_key(self._ids[i]))
        self._id_rank = np.empty(len(self._ids), dtype=np.int64)
        self._id_rank[by_order] = np.arange(len(self._ids), dtype=np.int64)
        self._indexed = True

    def search(self, queries: Sequence[Query], k: int) -> Run:
        """Top-k chunks with a positive BM25 score per query (see the class docstring).

        Returns:
            ``{query_id: {chunk_id: score}}``, at most ``k`` entries per query, in ranking
            order (score descending, ties in document order); an empty dict for a query
            that shares no token with any chunk.

        Raises:
            TypeError: ``queries`` is not a sequence of :class:`harness.types.Query`.
            ValueError: k < 1, or search before :meth:`index`.
        """
        check_k(k)
        items = check_queries(queries)
        if not self._indexed:
            raise ValueError("retriever.bm25: search() called before index()")
        run: Run = {}
        for q in items:
            run[q.query_id] = self.keep_top(q.query_id, self._search_one(q.text, k + 1), k)  # one more: a tie across the cut shows
        return run

    def _search_one(self, text: str, k: int) -> dict[str, float]:
        """The ``k`` best positive-scored chunks of one query text in ranking order."""
        if self._bm25 is None:
            return {}
        vocab = self._bm25.vocab_dict
        token_ids = [vocab[t] for t in bm25_tokenize(text) if t in vocab]
        if not token_ids:
            return {}
        scores = np.asarray(self._bm25.get_scores_from_ids(token_ids), dtype=np.float64)
        return {self._ids[i]: float(scores[i]) for i in top_k(scores, self._id_rank, k)}


def top_k(scores: np.ndarray, tie_rank: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` highest positive ``scores`` (shape ``(n,)``), score descending,
    ties by ascending ``tie_rank`` (shape ``(n,)``); fewer when fewer scores are positive.

    Equal to sorting every positive score (``numpy.lexsort``) and keeping the first ``k``, but
    sorts only the scores at or above the ``k``-th largest (found by ``numpy.partition``,
    linear time): with many matching chunks a query sorts ``k`` of them, not all.
    """
    hits = np.flatnonzero(scores > 0.0)
    if len(hits) > k:
        hit_scores = scores[hits]
        kth = np.partition(hit_scores, len(hits) - k)[len(hits) - k]  # the k-th largest score
        hits = hits[hit_scores >= kth]  # every score tied with it stays: ties are ranked below
    return hits[np.lexsort((tie_rank[hits], -scores[hits]))][:k]
