"""Dense retrieval in FAISS over normalised embeddings (cosine): exact inner-product search by
default, or an approximate index (HNSW, IVF) for very large corpora, checked against exact
search on the same vectors."""

from __future__ import annotations

import difflib
import math
import time
import warnings
from typing import Sequence

import numpy as np

from harness.embeddings.base import check_vectors
from harness.params import Param, check_all
from harness.retrievers.base import Retriever, check_chunks, check_k, check_queries
from harness.types import Chunk, Query, Run

#: Accepted values of ``retriever.index``: exact search, or one of two approximate indexes.
INDEXES = ("flat", "hnsw", "ivf")
#: Accepted values of ``retriever.on_low_recall``.
ON_LOW_RECALL = ("warn", "error", "ignore")
#: The cut-off of ``retriever.ann_recall_at_10`` (the usual 10-recall@10 of ANN benchmarks).
ANN_RECALL_K = 10
#: Fewest training vectors per IVF list (FAISS's own minimum for k-means, ``min_points_per_centroid``).
IVF_MIN_POINTS_PER_LIST = 39
#: Exact scores this close to the k-th exact score count as ties in :func:`ann_recall`.
TIE_TOLERANCE = 1e-6
#: Other names for an index, mapped to the value meant (for the did-you-mean hint).
_INDEX_ALIASES = {"exact": "flat", "indexflatip": "flat", "brute": "flat", "indexhnswflat": "hnsw", "indexivfflat": "ivf", "ivfflat": "ivf", "hnswflat": "hnsw"}
#: The settings that only one index reads, by index, with their defaults.
_INDEX_SETTINGS = {
    "hnsw": {"hnsw_m": 32, "hnsw_ef_construction": 200, "hnsw_ef_search": 128, "hnsw_build_threads": 1},
    "ivf": {"ivf_nlist": None, "ivf_nprobe": 32, "ivf_seed": 1234},
}


#: The index settings of :class:`FaissRetriever` (``retriever.<name>``), checked in this order.
PARAMS = (
    Param("hnsw_m", "int", low=2, note="links per node"),
    Param("hnsw_ef_construction", "int", low=1, note="candidates while inserting"),
    Param("hnsw_ef_search", "int", low=1, note="candidates while searching"),
    Param("hnsw_build_threads", "int", low=1, note="threads inserting nodes", allow_none=True, none="{} or null for every FAISS thread"),
    Param("ivf_nlist", "int", low=1, note="k-means cells", allow_none=True, none="{} or null for round(4 * sqrt(chunks))"),
    Param("ivf_nprobe", "int", low=1, note="cells searched per query"),
    Param("ivf_seed", "int", low=0, note="seed of the k-means"),
    Param("ann_min_recall", "number", low=0, high=1, note="recall@10 against exact search"),
    Param("on_low_recall", "choice", choices=ON_LOW_RECALL),
)


def _check_index(index) -> str:
    if index in INDEXES:
        return index
    guess = str(index).strip().lower().replace("_", "").replace("-", "")
    close = [guess] if guess in INDEXES else [_INDEX_ALIASES[guess]] if guess in _INDEX_ALIASES else difflib.get_close_matches(guess, INDEXES, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ValueError(f"retriever.index must be one of {', '.join(map(repr, INDEXES))}, got {index!r}{hint}")


def ann_recall(exact_ids: np.ndarray, found_ids: np.ndarray, vectors: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """Per-query recall@k of an approximate search against exact search on the same vectors.

    The share of the exact top-k the approximate top-k found, counting ties: an id the
    approximate search returned is a hit when its exact inner product with the query is at
    least the k-th best exact inner product (minus :data:`TIE_TOLERANCE`), so two chunks with
    the same vector (a repeated text) are interchangeable. Without ties this is
    ``|exact top-k ∩ found top-k| / k``, the k-recall@k of ANN benchmarks (Aumüller, Bernhardsson
    & Faithfull, "ANN-Benchmarks", Information Systems 2020, which count by distance the same way).

    Args:
        exact_ids: ``(n_queries, >= k)`` row indexes of the exact search, best first.
        found_ids: ``(n_queries, >= k)`` row indexes of the approximate search, best first;
            ``-1`` (FAISS's padding when it found fewer) counts as a miss.
        vectors: ``(n_vectors, dim)`` float32 chunk vectors the ids index.
        queries: ``(n_queries, dim)`` float32 query vectors.
        k: the cut-off, ``1 <= k <= n_vectors``.

    Returns:
        ``(n_queries,)`` float64 values in [0, 1].

    Raises:
        ValueError: ``k`` outside ``[1, n_vectors]`` or arrays whose shapes disagree.
    """
    n = vectors.shape[0]
    if not 1 <= k <= n:
        raise ValueError(f"ann_recall: k must be in [1, {n}] (the number of vectors), got {k}")
    if exact_ids.shape[0] != queries.shape[0] or found_ids.shape[0] != queries.shape[0] or min(exact_ids.shape[1], found_ids.shape[1]) < k:
        raise ValueError(f"ann_recall: expected id arrays of shape ({queries.shape[0]}, >= {k}), got {exact_ids.shape} and {found_ids.shape}")
    out = np.empty(queries.shape[0], dtype=np.float64)
    for row, (q, exact, found) in enumerate(zip(queries, exact_ids[:, :k], found_ids[:, :k])):
        kth = float(np.min(vectors[exact] @ q))  # the k-th best exact score, recomputed as the hits are
        valid = found[found >= 0]
        hits = int(np.count_nonzero(vectors[valid] @ q >= kth - TIE_TOLERANCE)) if valid.size else 0
        out[row] = min(hits, k) / k
    return out


class FaissRetriever(Retriever):
    """Cosine top-k with FAISS (Johnson, Douze & Jégou, "Billion-scale similarity search with
    GPUs", 2017; library faiss-cpu): exact by default, approximate on request.

    Chunk texts and query texts are embedded with the shared encoder (L2-normalised, so the
    inner product is cosine similarity in [-1, 1]). FAISS pads results with id -1 when k
    exceeds the index size (or, for IVF, the vectors in the lists it probed); those are
    dropped, so a query gets at most ``min(k, n_chunks)`` results (exactly that many with
    ``index=flat`` and ``hnsw``). An empty chunk list gives an empty index: every query then
    gets no results (nothing is embedded).

    Ties: equal scores are ranked in document order (:func:`harness.types.chunk_order_key`),
    and with ``index=flat`` the top-k cut is made by that rule over every chunk tied at the
    k-th score (the search deepens until the tie ends), never by FAISS's internal order. An
    approximate index cuts among the candidates it found (``max(k + 1, 10)``).

    Indexes (``index``), all over inner product, all storing the full float32 vectors, so
    every returned score is the exact cosine of that chunk:

    * ``flat``: ``IndexFlatIP``, exact search. Deterministic.
    * ``hnsw``: ``IndexHNSWFlat``, a hierarchical navigable small-world graph (Malkov &
      Yashunin, "Efficient and robust approximate nearest neighbor search using Hierarchical
      Navigable Small World graphs", IEEE TPAMI 2020). ``hnsw_m`` links per node,
      ``hnsw_ef_construction`` / ``hnsw_ef_search`` candidate-list sizes while building /
      searching (search uses ``max(hnsw_ef_search, k)``). Node levels come from FAISS's
      fixed-seed generator; with ``hnsw_build_threads=1`` (default) the graph, and so every
      result, is the same on every run over the same vectors. With more threads (or null:
      every FAISS thread) nodes are inserted concurrently and the graph, hence the results,
      may differ between runs.
    * ``ivf``: ``IndexIVFFlat``, an inverted file over k-means cells (Jégou, Douze & Schmid,
      "Product quantization for nearest neighbor search", IEEE TPAMI 2011, section on the
      inverted file; spherical k-means for inner product). ``ivf_nlist`` cells (null:
      ``round(4 * sqrt(n_chunks))``), ``ivf_nprobe`` cells searched per query. The k-means
      training sample and initial centroids are drawn with ``ivf_seed``: the same vectors
      give the same cells and the same results on every run. A corpus needs at least
      :data:`IVF_MIN_POINTS_PER_LIST` (39) chunks per cell to train: with fewer than
      ``39 * ivf_nlist`` chunks the cells are reduced to ``max(1, n_chunks // 39)`` with a
      warning naming both numbers; ``ivf_nprobe`` is capped at the cells there are
      (``nprobe >= nlist`` searches every cell: exact). Both values used are in :meth:`stats`.

    Determinism across machines: float sums may be ordered differently by another CPU,
    FAISS build or thread count, so scores can differ in the last bits and near-ties may
    swap, as with exact search.

    The check against exact search (approximate indexes only): :meth:`search` also runs
    exact search (``faiss.knn``, brute force over the same vectors) for the same queries and
    computes :func:`ann_recall` at ``min(10, n_chunks)`` and at the searched ``k``. Below
    ``ann_min_recall`` (recall@10) the retriever warns (``on_low_recall=warn``), refuses the
    run with a ValueError (``error``) or says nothing (``ignore``). The numbers, with the
    build and search seconds of both, are :meth:`stats` (logged as ``retriever.*`` metrics).
    The check costs one exact search, which the approximate index exists to avoid: fine for
    the few thousand queries of an evaluation, its seconds are logged.

    Args:
        encoder: :class:`harness.embeddings.model.Encoder` (passed by the builder).
        query_prefix: text prepended to each query before embedding ("" for MiniLM).
        index: ``flat`` (exact, default) | ``hnsw`` | ``ivf``.
        hnsw_m: HNSW links per node, >= 2 (memory: about ``2 * hnsw_m * 4`` bytes per chunk
            on top of its vector).
        hnsw_ef_construction: HNSW candidates kept while inserting, >= 1.
        hnsw_ef_search: HNSW candidates kept while searching, >= 1.
        hnsw_build_threads: threads inserting nodes, >= 1, or null for FAISS's default (all
            cores; not deterministic).
        ivf_nlist: IVF cells, >= 1, or null for ``round(4 * sqrt(n_chunks))`` (FAISS's rule of
            thumb, 4 to 16 times the square root).
        ivf_nprobe: IVF cells searched per query, >= 1.
        ivf_seed: seed of the IVF k-means, an integer >= 0.
        ann_min_recall: the lowest acceptable recall@10 against exact search, in [0, 1].
        on_low_recall: ``warn`` | ``error`` | ``ignore`` when recall@10 is below ``ann_min_recall``.

    Raises:
        ValueError: a setting outside its range (named, with a did-you-mean for ``index``), a
            setting of one index given a non-default value while another index is chosen,
            duplicate chunk ids, no encoder, searching before indexing, k < 1, query vectors
            whose dimension differs from the index's (both dimensions named), or (with
            ``on_low_recall=error``) a recall@10 below ``ann_min_recall``.
        TypeError: chunks or queries of the wrong type (e.g. plain strings).
    """

    name = "faiss"
    needs_encoder = True

    def __init__(
        self,
        encoder=None,
        query_prefix: str = "",
        index: str = "flat",
        hnsw_m: int = 32,
        hnsw_ef_construction: int = 200,
        hnsw_ef_search: int = 128,
        hnsw_build_threads: int | None = 1,
        ivf_nlist: int | None = None,
        ivf_nprobe: int = 32,
        ivf_seed: int = 1234,
        ann_min_recall: float = 0.9,
        on_low_recall: str = "warn",
    ) -> None:
        self.index_type = _check_index(index)
        #: ``faiss`` (exact), ``faiss-hnsw`` or ``faiss-ivf``: the run's ``retriever`` tag and run-name suffix.
        self.name = "faiss" if self.index_type == "flat" else f"faiss-{self.index_type}"
        given = {"hnsw_m": hnsw_m, "hnsw_ef_construction": hnsw_ef_construction, "hnsw_ef_search": hnsw_ef_search, "hnsw_build_threads": hnsw_build_threads}
        given |= {"ivf_nlist": ivf_nlist, "ivf_nprobe": ivf_nprobe, "ivf_seed": ivf_seed}
        check_all(PARAMS, given | {"ann_min_recall": ann_min_recall, "on_low_recall": on_low_recall}, "retriever")
        for other, defaults in _INDEX_SETTINGS.items():
            if other == self.index_type:
                continue
            for key, default in defaults.items():
                if given[key] != default:  # a sweep over it would repeat one result under several names
                    raise ValueError(
                        f"retriever.{key}={given[key]!r} applies to retriever.index={other} only, but retriever.index={self.index_type}: "
                        f"set retriever.index={other} or leave {key} at {default!r}"
                    )
        if self.index_type == "flat" and (ann_min_recall != 0.9 or on_low_recall != "warn"):
            key, value, default = ("ann_min_recall", ann_min_recall, 0.9) if ann_min_recall != 0.9 else ("on_low_recall", on_low_recall, "warn")
            raise ValueError(
                f"retriever.{key}={value!r} applies to an approximate index only (retriever.index=hnsw or ivf), but retriever.index=flat: "
                f"exact search needs no recall check; leave {key} at {default!r}"
            )
        self.encoder = encoder
        self.query_prefix = query_prefix
        self.hnsw_m, self.hnsw_ef_construction, self.hnsw_ef_search = hnsw_m, hnsw_ef_construction, hnsw_ef_search
        self.hnsw_build_threads = hnsw_build_threads
        self.ivf_nlist, self.ivf_nprobe, self.ivf_seed = ivf_nlist, ivf_nprobe, ivf_seed
        self.ann_min_recall = float(ann_min_recall)
        self.on_low_recall = on_low_recall
        self._index = None
        self._indexed = False
        self._ids: list[str] = []
        self.chunk_vectors: np.ndarray | None = None
        self._stats: dict[str, float] = {}

    def index(self, chunks: Sequence[Chunk]) -> None:
        chunks = check_chunks(chunks)
        if self.encoder is None:
            raise ValueError("retriever.faiss needs an encoder (built by harness.experiment.build)")
        self._stats = {}
        if not chunks:  # an empty index: every search returns no hits
            self._index, self._ids, self.chunk_vectors, self._indexed = None, [], None, True
            return
        from harness.embeddings.base import CachedEncoder

        # the window check of a harness encoder names the chunk to fix (id, document) when it refuses or warns
        named = {"labels": [f"chunk {c.chunk_id!r} of document {c.doc_id!r}" for c in chunks]} if isinstance(self.encoder, CachedEncoder) else {}
        vecs = np.ascontiguousarray(self.encoder.encode([c.text for c in chunks], desc="embed chunks", **named), dtype=np.float32)
        if vecs.ndim != 2 or vecs.shape[0] != len(chunks) or vecs.shape[1] < 1:  # FAISS would only assert
            raise ValueError(
                f"retriever.faiss: the encoder returned chunk vectors of shape {tuple(vecs.shape)}, expected ({len(chunks)}, dim): one row per chunk"
            )
        check_vectors(vecs, [c.chunk_id for c in chunks], self._source(), "embed chunks")  # FAISS would keep a NaN row and never return it
        t0 = time.perf_counter()
        self._index = self._build(vecs)
        if self.index_type != "flat":
            self._stats["retriever.ann_build_seconds"] = time.perf_counter() - t0
        self._ids = [c.chunk_id for c in chunks]
        self.chunk_vectors = vecs
        self._indexed = True

    def _source(self) -> str:
        model = getattr(self.encoder, "model_name", type(self.encoder).__name__)
        return f"retriever.faiss: the encoder ({model!r})"

    def _build(self, vecs: np.ndarray):
        """The FAISS index of ``self.index_type`` over ``vecs`` ``(n, dim)`` float32, filled."""
        import faiss

        n, dim = vecs.shape
        if self.index_type == "flat":
            index = faiss.IndexFlatIP(dim)
        elif self.index_type == "hnsw":
            index = faiss.IndexHNSWFlat(dim, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = self.hnsw_ef_construction
            index.hnsw.efSearch = self.hnsw_ef_search
            self._stats.update({"retriever.hnsw_m": float(self.hnsw_m), "retriever.hnsw_ef_search": float(self.hnsw_ef_search)})
            if self.hnsw_build_threads is not None:
                before = faiss.omp_get_max_threads()
                faiss.omp_set_num_threads(self.hnsw_build_threads)
                try:
                    index.add(vecs)
                finally:
                    faiss.omp_set_num_threads(before)
                return index
        else:
            nlist = self.ivf_nlist if self.ivf_nlist is not None else max(1, round(4 * math.sqrt(n)))
            most = max(1, n // IVF_MIN_POINTS_PER_LIST)
            if nlist > most:
                if self.ivf_nlist is not None:
                    warnings.warn(
                        f"retriever.ivf_nlist={self.ivf_nlist} needs at least {IVF_MIN_POINTS_PER_LIST} * {self.ivf_nlist} = "
                        f"{IVF_MIN_POINTS_PER_LIST * self.ivf_nlist} chunks to train its k-means ({IVF_MIN_POINTS_PER_LIST} per cell); "
                        f"this corpus has {n}: using {most} cells",
                        stacklevel=4,
                    )
                nlist = most
            nprobe = min(self.ivf_nprobe, nlist)
            index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
            index.cp.seed = self.ivf_seed
            index.cp.min_points_per_centroid = 1  # the check above: FAISS would only print a warning
            index.train(vecs)
            index.nprobe = nprobe
            self._stats.update({"retriever.ivf_nlist": float(nlist), "retriever.ivf_nprobe": float(nprobe)})
        index.add(vecs)
        return index

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
        check_vectors(qv, [q.query_id for q in queries], self._source(), "embed queries")  # FAISS would return no hit for a NaN query
        kk = min(k, self._index.ntotal)
        if self.index_type == "flat":
            scores, idx = self._search_past_ties(qv, kk)
        else:
            scores, idx = self._check_against_exact(qv, kk)
        run: Run = {}
        for q, row_s, row_i in zip(queries, scores, idx):
            candidates = {self._ids[i]: float(s) for s, i in zip(row_s, row_i) if i >= 0}
            run[q.query_id] = self.keep_top(q.query_id, candidates, kk)  # the tie rule decides the cut, not FAISS's heap
        return run

    def _search_past_ties(self, qv: np.ndarray, kk: int) -> tuple[np.ndarray, np.ndarray]:
        """Exact search deep enough that every chunk tied with a query's ``kk``-th score is
        among the results, plus one more when there is one (``(n_queries, depth)`` arrays).

        FAISS keeps an arbitrary subset of the chunks tied at the ``kk``-th score; searching
        ``kk + 1`` and doubling the depth while some query's last result still ties its
        ``kk``-th lets :meth:`keep_top` choose among all of them by the tie rule.
        """
        n = self._index.ntotal
        depth = min(kk + 1, n)
        scores, idx = self._index.search(qv, depth)
        while depth < n and bool(np.any(scores[:, depth - 1] >= scores[:, kk - 1])):
            depth = min(n, 2 * depth)
            scores, idx = self._index.search(qv, depth)
        return scores, idx

    def _check_against_exact(self, qv: np.ndarray, kk: int) -> tuple[np.ndarray, np.ndarray]:
        """Approximate search for ``max(kk + 1, 10)`` (capped at the index size), exact search
        for as many, :func:`ann_recall` at 10 and at ``kk`` into the stats, and the
        ``on_low_recall`` action. Returns the approximate ``(scores, ids)``."""
        import faiss

        n = self._index.ntotal
        depth = min(max(kk + 1, ANN_RECALL_K), n)  # one more than kk: a tie across the cut shows
        t0 = time.perf_counter()
        scores, idx = self._index.search(qv, depth)
        t1 = time.perf_counter()
        _, exact = faiss.knn(qv, self.chunk_vectors, depth, metric=faiss.METRIC_INNER_PRODUCT)
        t2 = time.perf_counter()
        at10 = ann_recall(exact, idx, self.chunk_vectors, qv, min(ANN_RECALL_K, n))
        at_k = ann_recall(exact, idx, self.chunk_vectors, qv, kk)
        self._stats.update(
            {
                "retriever.ann_recall_at_10": float(at10.mean()),
                "retriever.ann_recall_at_depth": float(at_k.mean()),
                "retriever.ann_search_depth": float(kk),
                "retriever.ann_search_seconds": t1 - t0,
                "retriever.exact_search_seconds": t2 - t1,
            }
        )
        mean = float(at10.mean())
        if mean < self.ann_min_recall and self.on_low_recall != "ignore":
            knob = "retriever.hnsw_ef_search" if self.index_type == "hnsw" else "retriever.ivf_nprobe"
            message = (
                f"retriever.index={self.index_type}: recall@10 against exact search is {mean:.3f}, below retriever.ann_min_recall="
                f"{self.ann_min_recall} ({int(np.count_nonzero(at10 < 1))} of {len(at10)} queries miss part of their exact top-10); "
                f"raise {knob}, or use retriever.index=flat"
            )
            if self.on_low_recall == "error":
                raise ValueError(message)
            warnings.warn(message, stacklevel=3)
        return scores, idx

    def stats(self) -> dict[str, float]:
        """The approximate index's numbers (``retriever.*`` metrics); empty for ``index=flat``.

        After :meth:`index`: ``retriever.ann_build_seconds`` (training + adding), the values used
        (``retriever.hnsw_m``, ``retriever.hnsw_ef_search``; ``retriever.ivf_nlist``,
        ``retriever.ivf_nprobe`` after any reduction). After :meth:`search` (the last one):
        ``retriever.ann_recall_at_10`` (mean over queries of :func:`ann_recall` at
        ``min(10, n_chunks)``), ``retriever.ann_recall_at_depth`` (at the searched k,
        ``retriever.ann_search_depth``), ``retriever.ann_search_seconds`` and
        ``retriever.exact_search_seconds`` (wall seconds for all queries, query embedding
        excluded). Exact search needs no build: it reads the vectors the run holds anyway.
        """
        return dict(self._stats) if self.index_type != "flat" else {}
