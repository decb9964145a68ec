"""Dense retrieval: exact inner-product search in FAISS over normalised embeddings (cosine)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from harness.retrievers.base import Retriever, check_chunks, check_k, check_queries
from harness.types import Chunk, Query, Run


class FaissRetriever(Retriever):
    """Exact cosine top-k with ``faiss.IndexFlatIP`` (Johnson, Douze & Jégou, "Billion-scale
    similarity search with GPUs", 2017; library faiss-cpu).

    Chunk texts and query texts are embedded with the shared encoder (L2-normalised, so the
    inner product is cosine similarity in [-1, 1]). FAISS pads results with id -1 when k
    exceeds the index size; those are dropped, so a query gets ``min(k, n_chunks)`` results.
    An empty chunk list gives an empty index: every query then gets no results (nothing is
    embedded).

    Args:
        encoder: :class:`harness.embeddings.model.Encoder` (passed by the builder).
        query_prefix: text prepended to each query before embedding ("" for MiniLM).

    Raises:
        ValueError: duplicate chunk ids, no encoder, searching before indexing, k < 1, or query
            vectors whose dimension differs from the index's (both dimensions named).
        TypeError: chunks or queries of the wrong type (e.g. plain strings).
    """

    name = "faiss"
    needs_encoder = True

    def __init__(self, encoder=None, query_prefix: str = "") -> None:
        self.encoder = encoder
        self.query_prefix = query_prefix
        self._index = None
        self._indexed = False
        self._ids: list[str] = []
        self.chunk_vectors: np.ndarray | None = None

    def index(self, chunks: Sequence[Chunk]) -> None:
        import faiss

        chunks = check_chunks(chunks)
        if self.encoder is None:
            raise ValueError("retriever.faiss needs an encoder (built by harness.experiment.build)")
        if not chunks:  # an empty index: every search returns no hits
            self._index, self._ids, self.chunk_vectors, self._indexed = None, [], None, True
            return
        vecs = np.ascontiguousarray(self.encoder.encode([c.text for c in chunks], desc="embed chunks"), dtype=np.float32)
        if vecs.ndim != 2 or vecs.shape[0] != len(chunks) or vecs.shape[1] < 1:  # FAISS would only assert
            raise ValueError(
                f"retriever.faiss: the encoder returned chunk vectors of shape {tuple(vecs.shape)}, expected ({len(chunks)}, dim): one row per chunk"
            )
        index = faiss.IndexFlatIP(vecs.shape[1])
        index.add(vecs)
        self._index = index
        self._ids = [c.chunk_id for c in chunks]
        self.chunk_vectors = vecs
        self._indexed = True

    def search(self, queries: Sequence[Query], k: int) -> Run:
        check_k(k)
        queries = check_queries(queries)
        if not self._indexed:
            raise ValueError("retriever.faiss: search() called before index()")
        if self._index is None or self._index.ntotal == 0 or not queries:
            return {q.query_id: {} for q in queries}
        qv = np.ascontiguousarray(self.encoder.encode([self.query_prefix + q.text for q in queries], desc="embed queries", role="query"), dtype=np.float32)
        if qv.ndim != 2 or qv.shape[0] != len(queries) or qv.shape[1] != self._index.d:  # FAISS would only assert
            model = getattr(self.encoder, "model_name", type(self.encoder).__name__)
            raise ValueError(
                f"retriever.faiss: the index holds {self._index.d}-dimensional chunk vectors, so the query vectors must "
                f"have shape ({len(queries)}, {self._index.d}), but the query encoder ({model!r}) returned shape "
                f"{tuple(qv.shape)}; queries and chunks must be embedded by the same embedding.model"
            )
        kk = min(k, self._index.ntotal)
        scores, idx = self._index.search(qv, kk)
        run: Run = {}
        for q, row_s, row_i in zip(queries, scores, idx):
            hits = sorted(((float(s), self._ids[i]) for s, i in zip(row_s, row_i) if i >= 0), key=lambda h: (-h[0], h[1]))
            run[q.query_id] = {cid: s for s, cid in hits}  # ranking order of ranked(): ties by chunk id
        return run
