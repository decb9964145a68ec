"""Dense retrieval: exact inner-product search in FAISS over normalised embeddings (cosine)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from harness.retrievers.base import Retriever, check_k
from harness.types import Chunk, Query, Run


class FaissRetriever(Retriever):
    """Exact cosine top-k with ``faiss.IndexFlatIP`` (Johnson, Douze & Jégou, "Billion-scale
    similarity search with GPUs", 2017; library faiss-cpu).

    Chunk texts and query texts are embedded with the shared encoder (L2-normalised, so the
    inner product is cosine similarity in [-1, 1]). FAISS pads results with id -1 when k
    exceeds the index size; those are dropped, so a query gets ``min(k, n_chunks)`` results.

    Args:
        encoder: :class:`harness.embeddings.model.Encoder` (passed by the builder).
        query_prefix: text prepended to each query before embedding ("" for MiniLM).

    Raises:
        ValueError: indexing no chunks, searching before indexing, or k < 1.
    """

    name = "faiss"
    needs_encoder = True

    def __init__(self, encoder=None, query_prefix: str = "") -> None:
        self.encoder = encoder
        self.query_prefix = query_prefix
        self._index = None
        self._ids: list[str] = []
        self.chunk_vectors: np.ndarray | None = None

    def index(self, chunks: Sequence[Chunk]) -> None:
        import faiss

        if not chunks:
            raise ValueError("retriever.faiss: cannot index an empty chunk list (the chunker produced no chunks)")
        if self.encoder is None:
            raise ValueError("retriever.faiss needs an encoder (built by harness.build)")
        vecs = np.ascontiguousarray(self.encoder.encode([c.text for c in chunks], desc="embed chunks"), dtype=np.float32)
        index = faiss.IndexFlatIP(vecs.shape[1])
        index.add(vecs)
        self._index = index
        self._ids = [c.chunk_id for c in chunks]
        self.chunk_vectors = vecs

    def search(self, queries: Sequence[Query], k: int) -> Run:
        check_k(k)
        if self._index is None:
            raise ValueError("retriever.faiss: search() called before index()")
        qv = np.ascontiguousarray(
            self.encoder.encode([self.query_prefix + q.text for q in queries], desc="embed queries"), dtype=np.float32
        )
        kk = min(k, self._index.ntotal)
        scores, idx = self._index.search(qv, kk)
        run: Run = {}
        for q, row_s, row_i in zip(queries, scores, idx):
            run[q.query_id] = {self._ids[i]: float(s) for s, i in zip(row_s, row_i) if i >= 0}
        return run
