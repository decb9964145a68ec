"""Cluster-semantic chunking: small pieces grouped by dynamic programming over their similarities.

The idea is the ClusterSemanticChunker of Smith & Troynikov, "Evaluating Chunking
Strategies for Retrieval" (Chroma technical report, 2024): cut a document into small
pieces, embed them, and choose the contiguous grouping of pieces whose chunks are
internally most similar, subject to a size cap.

Objective. For pieces ``0..n-1`` with cosine-similarity matrix ``S`` let ``mu`` be the mean
off-diagonal similarity (mean of ``S[i, j]`` over ``i < j``). A chunk of pieces ``a..b``
scores ``R(a, b) = sum over a <= i < j <= b of (S[i, j] - mu)``: the similarity mass of its
block without the diagonal, measured against the document average. A single piece scores
0; adding a piece pays off only if it is more similar to the rest of its chunk than two
random pieces of the document, so larger chunks are not favoured by construction. The
segmentation maximises the sum of ``R`` over its chunks (:func:`optimal_segmentation`).

Dynamic programme. ``best[0] = 0`` and ``best[b + 1] = max over allowed a of best[a] +
R(a, b)``; ``(a, b)`` is allowed when it has at most ``max_pieces`` pieces and its text
fits ``max_chunk_size`` tokens. For a fixed end ``b``, ``R(a, b) = R(a + 1, b) +
sum_{j=a+1..b} (S[a, j] - mu)``, so each candidate costs O(1) with a banded matrix of
row prefix sums and the whole programme is O(n * L) for chunks of at most ``L`` pieces.
Ties go to the shorter last chunk. Only the band ``S[i, i..i+L-1]`` is ever built.

Compatible with Chroma's ``ClusterSemanticChunker`` (``compatible="chroma"``,
:func:`chroma_segmentation`). The reference's published dynamic programme differs from
the one above in three ways, reproduced there: ``S`` is the raw dot product of the
embeddings as returned (no extra normalisation); a chunk's reward is the sum of the whole
centred block ``M[a..b, a..b]`` with ``M = S - mu`` and a zero diagonal (both triangles,
so twice ``R`` above, which alone changes no boundary); and the table starts at ``dp[i] = 0`` with a strict ``>``, so an
end ``i`` for which no grouping scores above 0 keeps the default start 0: its chunk runs
from the document's first piece to ``i`` (more than ``max_chunk_size // piece_size``
pieces, and no size check). Pieces are the reference's 50-token ``RecursiveTokenChunker``
chunks (:func:`harness.chunkers.chroma.semantic_pieces`).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from harness.chunkers.base import MIN_TOKEN_LIMIT, Chunker, check_limit, check_read
from harness.chunkers.chroma import check_compatible, check_tiktoken, semantic_pieces, token_count
from harness.chunkers.recursive import RecursiveChunker
from harness.params import Param
from harness.text.packing import fit_units, fits
from harness.text.sentences import sentence_spans
from harness.text.units import check_unit, get_counter
from harness.types import Chunk, Document, Span

PIECES = ("recursive", "sentences")


def _segment(band: np.ndarray, mu: float, allowed: Callable[[int, int], bool] | None) -> list[tuple[int, int]]:
    """DP over a band: ``band[i, k] = S[i, i + k]`` (NaN/ignored past the end), width L."""
    n, width = band.shape
    if n == 0:
        return []
    # prefix[i, k] = sum_{t=1..k} (S[i, i+t] - mu): similarity of piece i to the k pieces after it
    centred = np.where(np.isfinite(band), band - mu, 0.0)
    centred[:, 0] = 0.0
    prefix = np.cumsum(centred, axis=1)
    best = np.full(n + 1, -np.inf)
    best[0] = 0.0
    back = np.zeros(n + 1, dtype=np.int64)
    for b in range(n):
        reward = 0.0  # R(b, b)
        best[b + 1] = best[b]
        back[b + 1] = b
        for a in range(b - 1, max(-1, b - width), -1):
            if allowed is not None and not allowed(a, b):
                break  # a longer chunk ending at b does not fit either
            reward += prefix[a, b - a]
            value = best[a] + reward
            if value > best[b + 1]:
                best[b + 1] = value
                back[b + 1] = a
    out: list[tuple[int, int]] = []
    b = n
    while b > 0:
        a = int(back[b])
        out.append((a, b))
        b = a
    return out[::-1]


def _matrix_band(similarity, name: str, max_width: int) -> tuple[np.ndarray, float]:
    """The band ``band[i, k] = S[i, i + k]`` (width ``max(1, min(max_width, n))``, NaN past the
    end) of a square ``(n, n)`` similarity matrix and ``mu``, the mean of ``S[i, j]`` over
    ``i < j`` (0 for ``n <= 1``).

    Raises:
        ValueError: ``similarity`` is not square, or ``max_width`` (the setting ``name``) is not an int >= 1.
    """
    sim = np.asarray(similarity, dtype=np.float64)
    if sim.ndim != 2 or sim.shape[0] != sim.shape[1]:
        raise ValueError(f"similarity must be a square matrix, got shape {sim.shape}")
    Param(name, "int", low=1).check(max_width)
    n = sim.shape[0]
    mu = float(sim[np.triu_indices(n, k=1)].mean()) if n > 1 else 0.0
    width = max(1, min(max_width, n))
    band = np.full((n, width), np.nan)
    for k in range(min(width, n)):
        band[: n - k, k] = np.diagonal(sim, offset=k)
    return band, mu


def optimal_segmentation(
    similarity: np.ndarray,
    max_pieces: int,
    allowed: Callable[[int, int], bool] | None = None,
) -> list[tuple[int, int]]:
    """Contiguous segmentation maximising within-chunk similarity (see the module docstring).

    Args:
        similarity: symmetric ``(n, n)`` similarity matrix of the pieces (e.g. cosine).
        max_pieces: maximum pieces per chunk, >= 1.
        allowed: optional predicate ``allowed(a, b)`` for a chunk of pieces ``a..b``
            (inclusive) with ``a < b``; it must be monotone (if ``a..b`` is not allowed,
            no longer chunk ending at ``b`` is). Single pieces are always allowed.

    Returns:
        Half-open ranges ``(a, b)`` of piece indices, in order, partitioning ``range(n)``.

    Raises:
        ValueError: ``similarity`` is not square or ``max_pieces < 1``.
    """
    band, mu = _matrix_band(similarity, "max_pieces", max_pieces)
    return _segment(band, mu, allowed)


def _chroma_dp(band: np.ndarray, mu: float, max_cluster: int) -> list[tuple[int, int]]:
    """The reference's DP over a band ``band[i, k] = S[i, i + k]`` of width >= ``min(max_cluster, n)``."""
    n = band.shape[0]
    if n == 0:
        return []
    # prefix[a, k] = sum_{t=1..k} M[a, a+t] with M = S - mu: piece a against the k pieces after it
    centred = np.where(np.isfinite(band), band - mu, 0.0)
    centred[:, 0] = 0.0
    prefix = np.cumsum(centred, axis=1)
    dp = np.zeros(n)
    seg = np.zeros(n, dtype=np.int64)
    for i in range(n):
        reward = 0.0  # sum of M over the block a..i, both triangles (the diagonal is 0)
        for size in range(1, min(max_cluster, i + 1) + 1):
            a = i - size + 1
            if size > 1:
                reward += 2.0 * prefix[a, size - 1]
            value = reward + (dp[a - 1] if a >= 1 else 0.0)
            if value > dp[i]:  # strict, against dp[i] = 0 at first: the reference's rule
                dp[i] = value
                seg[i] = a
    clusters: list[tuple[int, int]] = []
    i = n - 1
    while i >= 0:
        clusters.append((int(seg[i]), i))
        i = int(seg[i]) - 1
    return clusters[::-1]


def chroma_segmentation(similarity: np.ndarray, max_cluster: int) -> list[tuple[int, int]]:
    """``ClusterSemanticChunker._optimal_segmentation`` of Chroma's ``chunking_evaluation``.

    With ``mu`` the mean of the strict upper triangle of ``similarity`` and ``M =
    similarity - mu`` with a zero diagonal, a cluster of pieces ``a..b`` scores the sum of
    the block ``M[a..b, a..b]``. ``dp[i]`` (0 at first) is raised to ``reward(i - size + 1,
    i) + dp[i - size]`` (no second term when ``i - size < 0``) for every ``size`` in ``1 ..
    max_cluster`` that fits, only when strictly greater; ``seg[i]`` records the start (0 by
    default). Clusters are read back from ``i = n - 1`` through ``seg[i] - 1``. An end
    whose every candidate scores <= 0 keeps start 0, so a cluster can hold more than
    ``max_cluster`` pieces, as in the reference. Sums use a different order than the
    reference's ``numpy.sum`` of each block (equal up to rounding, ~1e-15 relative).

    Args:
        similarity: ``(n, n)`` symmetric matrix of piece similarities (the reference uses
            the raw dot products of the embeddings).
        max_cluster: the reference's ``max_chunk_size // min_chunk_size``, >= 1.

    Returns:
        Inclusive ``(start, end)`` piece ranges in order, partitioning ``range(n)`` (the
        reference's ``clusters``); empty for ``n = 0``.

    Raises:
        ValueError: ``similarity`` is not square or ``max_cluster < 1``.
    """
    band, mu = _matrix_band(similarity, "max_cluster", max_cluster)
    return _chroma_dp(band, mu, max_cluster)


def similarity_band(vecs: np.ndarray, width: int) -> tuple[np.ndarray, float]:
    """Band ``S[i, i..i+width-1]`` of the cosine-similarity matrix of L2-normalised rows, and ``mu``.

    ``mu`` (mean of ``S[i, j]``, ``i < j``) comes from the sum of the vectors:
    ``sum_{i<j} v_i.v_j = (|sum v|^2 - sum |v_i|^2) / 2``, so the full matrix is never built.

    Returns:
        ``(band, mu)``; ``band`` has shape ``(n, width)`` with NaN past the end.
    """
    v = np.asarray(vecs, dtype=np.float64)
    n = v.shape[0]
    band = np.full((n, width), np.nan)
    for k in range(min(width, n)):
        band[: n - k, k] = np.einsum("ij,ij->i", v[: n - k], v[k:])
    if n < 2:
        return band, 0.0
    total = v.sum(axis=0)
    pair_sum = (float(total @ total) - float(np.einsum("ij,ij->", v, v))) / 2.0
    return band, pair_sum / (n * (n - 1) / 2)


class ClusterSemanticChunker(Chunker):
    """Groups consecutive small pieces so chunks are internally similar, by exact dynamic programming.

    Pieces (``pieces=``):

    * ``"recursive"`` (default): the recursive separator splitter
      (:class:`harness.chunkers.recursive.RecursiveChunker`, no overlap) at ``piece_size``
      tokens; a chunk holds at most ``max_chunk_size // piece_size`` pieces, as in the
      original method (50-token pieces, 5 per 250-token chunk).
    * ``"sentences"``: BlingFire sentences (never across a blank line); a sentence over
      ``max_chunk_size`` tokens is cut at line breaks, then into token windows. Only the
      token limit bounds the number of sentences per chunk; ``piece_size`` is not used.

    Pieces are embedded with the run's encoder, and boundaries are chosen by
    :func:`optimal_segmentation` (objective and DP in the module docstring); every chunk's
    own text is re-measured and fits ``max_chunk_size`` tokens. Chunks are single spans
    (first piece's start to last piece's end) and partition the document.

    ``compatible="chroma"`` reproduces the ``ClusterSemanticChunker`` of Chroma's
    ``chunking_evaluation`` (``max_chunk_size`` and ``piece_size`` are its
    ``max_chunk_size`` and ``min_chunk_size``, 400 and 50 there): pieces are its
    ``RecursiveTokenChunker`` chunks of ``piece_size`` cl100k_base tokens
    (:func:`harness.chunkers.chroma.semantic_pieces`), embedded with the run's encoder as
    they are; the similarity is their raw dot product; boundaries come from
    :func:`chroma_segmentation` with ``max_chunk_size // piece_size`` pieces per cluster.
    Needs ``tokenizer="cl100k_base"`` and ``pieces="recursive"`` (else ``ValueError``).
    The reference joins a cluster's pieces with single spaces; here a chunk is one span from
    its first piece's start to its last piece's end, so it holds the source's own
    whitespace between the pieces (a newline where the reference has a space, nothing where
    two pieces touch). The reference applies no size limit (a cluster of ``max_chunk_size
    // piece_size`` pieces can exceed ``max_chunk_size`` tokens, and its DP's default
    start can make a cluster of more pieces), so neither does this mode:
    :meth:`size_limit` is None, chunks are never cut, and ``metadata["size"]`` records each
    chunk's own size in cl100k_base tokens (``metadata["unit"] = "tokens"``).

    Args:
        max_chunk_size: maximum chunk size in tokens of ``tokenizer``, >= 4 (with
            ``compatible="chroma"``: only sets the pieces per cluster, ``max_chunk_size //
            piece_size``).
        piece_size: size of the recursive pieces in tokens, ``4 <= piece_size <=
            max_chunk_size`` (``pieces="recursive"`` only).
        pieces: ``"recursive"`` or ``"sentences"``.
        tokenizer: ``"model"`` (the embedding model's WordPiece) or ``"cl100k_base"``.
        compatible: None (this project's algorithm) or ``"chroma"`` (the reference's, above).
        encoder: the :class:`harness.embeddings.model.Encoder` used for piece embeddings;
            the builder passes the run's shared encoder.

    Raises:
        ValueError: a parameter outside its range (the message names it), a
            ``compatible="chroma"`` setting the reference cannot have (tokenizer other than
            ``cl100k_base``, ``pieces="sentences"``), or :meth:`chunk` called without an
            encoder.
    """

    name = "cluster_semantic"
    needs_encoder = True
    contiguous = True
    partitions = True

    def __init__(
        self,
        max_chunk_size: int = 254,
        piece_size: int = 50,
        pieces: str = "recursive",
        tokenizer: str = "model",
        compatible: str | None = None,
        encoder=None,
    ) -> None:
        check_compatible(compatible)
        check_unit("tokens", tokenizer)
        check_limit("max_chunk_size", max_chunk_size, "tokens")
        lo = MIN_TOKEN_LIMIT
        Param(
            "piece_size", "int", low=lo, high=max_chunk_size, low_name=str(lo), high_name="max_chunk_size", note=f"tokens; one character can take up to {lo}"
        ).check(piece_size, "chunker")
        if pieces not in PIECES:
            raise ValueError(f"chunker.pieces must be one of {list(PIECES)}, got {pieces!r}")
        check_read("piece_size", piece_size, 50, pieces == "recursive", "with chunker.pieces=recursive")
        if compatible is not None:
            check_tiktoken(tokenizer)
            if pieces != "recursive":
                raise ValueError(f"chunker.compatible=chroma groups the reference's recursive pieces: needs chunker.pieces=recursive, got {pieces!r}")
        self.max_chunk_size = max_chunk_size
        self.piece_size = piece_size
        self.pieces = pieces
        self.tokenizer = tokenizer
        self.compatible = compatible
        self.encoder = encoder

    def size_limit(self) -> tuple[str, str, int] | None:
        return None if self.compatible else ("tokens", self.tokenizer, self.max_chunk_size)

    def _pieces(self, text: str) -> list[Span]:
        counter = get_counter("tokens", self.tokenizer)
        if self.pieces == "recursive":
            splitter = RecursiveChunker(chunk_size=self.piece_size, chunk_overlap=0, unit="tokens", tokenizer=self.tokenizer)
            return splitter.split_spans(text)
        return fit_units(text, sentence_spans(text, split_paragraphs=True), counter, self.max_chunk_size)

    def chunk(self, doc: Document) -> list[Chunk]:
        if self.encoder is None:
            raise ValueError("ClusterSemanticChunker needs an encoder (built by harness.experiment.build with the run's embedding model)")
        if self.compatible:
            return self._chunk_chroma(doc)
        text = doc.text
        pieces = self._pieces(text)
        if not pieces:
            return []
        counter = get_counter("tokens", self.tokenizer)
        if self.pieces == "recursive":
            max_pieces = max(1, self.max_chunk_size // self.piece_size)
        else:
            max_pieces = self.max_chunk_size  # every piece holds >= 1 token
        max_pieces = min(max_pieces, len(pieces))
        vecs = np.asarray(self.encoder.encode([text[s:e] for s, e in pieces], desc="embed pieces"), dtype=np.float64)
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        vecs = vecs / np.where(norms > 0, norms, 1.0)
        band, mu = similarity_band(vecs, max_pieces)

        def allowed(a: int, b: int) -> bool:
            return fits(text, pieces[a][0], pieces[b][1], counter, self.max_chunk_size)

        segments = _segment(band, mu, allowed)
        return self.finalize(
            doc, [Chunk.from_spans(doc, [(pieces[a][0], pieces[b - 1][1])], metadata={"n_pieces": b - a, "pieces": self.pieces}) for a, b in segments]
        )

    def _chunk_chroma(self, doc: Document) -> list[Chunk]:
        """``ClusterSemanticChunker`` clusters of ``doc`` as single-span chunks (class docstring)."""
        text = doc.text
        pieces = semantic_pieces(text, self.piece_size)
        if not pieces:
            return []
        max_cluster = self.max_chunk_size // self.piece_size
        vecs = np.asarray(self.encoder.encode([p for _, p in pieces], desc="embed pieces"), dtype=np.float64)
        band, mu = similarity_band(vecs, max(1, min(max_cluster, len(pieces))))
        count = token_count("cl100k_base")
        chunks = []
        for a, b in _chroma_dp(band, mu, max_cluster):
            s, e = pieces[a][0][0], pieces[b][0][1]
            meta = {"n_pieces": b - a + 1, "pieces": "recursive", "compatible": self.compatible, "size": count(text[s:e]), "unit": "tokens"}
            chunks.append(Chunk.from_spans(doc, [(s, e)], metadata=meta))
        return chunks
