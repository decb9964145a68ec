"""Lexical retrieval: Okapi BM25 via the rank-bm25 package."""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from harness.retrievers.base import Retriever, check_k
from harness.types import Chunk, Query, Run

_TOKEN = re.compile(r"\w+", re.UNICODE)


def bm25_tokenize(text: str) -> list[str]:
    """The BM25 tokenizer: Unicode casefolding, then maximal runs of word characters (regex ``\\w+``).

    No stemming and no stop-word removal; ``"Kestrel's 2.3.1"`` -> ``["kestrel", "s", "2", "3", "1"]``.
    """
    return _TOKEN.findall(text.casefold())


class BM25Retriever(Retriever):
    """BM25Okapi (Robertson & Zaragoza, "The Probabilistic Relevance Framework: BM25 and
    Beyond", 2009; library rank-bm25) over :func:`bm25_tokenize` tokens of the chunk text.

    Args:
        k1: term-frequency saturation, >= 0 (rank-bm25 default 1.5).
        b: length normalisation in [0, 1] (default 0.75).
        epsilon: floor for negative IDF values, as in rank-bm25 (default 0.25).

    Raises:
        ValueError: parameters out of range, indexing no chunks, searching before
            indexing, or k < 1.
    """

    name = "bm25"

    def __init__(self, k1: float = 1.5, b: float = 0.75, epsilon: float = 0.25) -> None:
        if not isinstance(k1, (int, float)) or k1 < 0:
            raise ValueError(f"retriever.k1 must be >= 0, got {k1!r}")
        if not isinstance(b, (int, float)) or not 0.0 <= b <= 1.0:
            raise ValueError(f"retriever.b must be in [0, 1], got {b!r}")
        self.k1, self.b, self.epsilon = float(k1), float(b), float(epsilon)
        self._bm25 = None
        self._ids: list[str] = []

    def index(self, chunks: Sequence[Chunk]) -> None:
        from rank_bm25 import BM25Okapi

        if not chunks:
            raise ValueError("retriever.bm25: cannot index an empty chunk list (the chunker produced no chunks)")
        corpus = [bm25_tokenize(c.text) or [""] for c in chunks]
        self._bm25 = BM25Okapi(corpus, k1=self.k1, b=self.b, epsilon=self.epsilon)
        self._ids = [c.chunk_id for c in chunks]

    def search(self, queries: Sequence[Query], k: int) -> Run:
        check_k(k)
        if self._bm25 is None:
            raise ValueError("retriever.bm25: search() called before index()")
        kk = min(k, len(self._ids))
        run: Run = {}
        for q in queries:
            scores = np.asarray(self._bm25.get_scores(bm25_tokenize(q.text)), dtype=np.float64)
            # stable order: score descending, then index ascending
            order = np.lexsort((np.arange(len(scores)), -scores))[:kk]
            run[q.query_id] = {self._ids[i]: float(scores[i]) for i in order}
        return run
