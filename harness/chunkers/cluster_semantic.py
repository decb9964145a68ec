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
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from harness.chunkers.base import MIN_TOKEN_LIMIT, Chunker, check_limit
from harness.chunkers.recursive import RecursiveChunker
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
    sim = np.asarray(similarity, dtype=np.float64)
    if sim.ndim != 2 or sim.shape[0] != sim.shape[1]:
        raise ValueError(f"similarity must be a square matrix, got shape {sim.shape}")
    if isinstance(max_pieces, bool) or not isinstance(max_pieces, int) or max_pieces < 1:
        raise ValueError(f"max_pieces must be an integer >= 1, got {max_pieces!r}")
    n = sim.shape[0]
    mu = float(sim[np.triu_indices(n, k=1)].mean()) if n > 1 else 0.0
    width = min(max_pieces, max(n, 1))
    band = np.full((n, width), np.nan)
    for k in range(width):
        band[: n - k, k] = np.diagonal(sim, offset=k)
    return _segment(band, mu, allowed)


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

    Args:
        max_chunk_size: maximum chunk size in tokens of ``tokenizer``, >= 1.
        piece_size: size of the recursive pieces in tokens, ``4 <= piece_size <=
            max_chunk_size`` (``pieces="recursive"`` only).
        pieces: ``"recursive"`` or ``"sentences"``.
        tokenizer: ``"model"`` (the embedding model's WordPiece) or ``"cl100k_base"``.
        encoder: the :class:`harness.embeddings.model.Encoder` used for piece embeddings;
            the builder passes the run's shared encoder.

    Raises:
        ValueError: a parameter outside its range (the message names it), or
            :meth:`chunk` called without an encoder.
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
        encoder=None,
    ) -> None:
        check_unit("tokens", tokenizer)
        check_limit("max_chunk_size", max_chunk_size, "tokens")
        lo = MIN_TOKEN_LIMIT
        if isinstance(piece_size, bool) or not isinstance(piece_size, int) or not lo <= piece_size <= max_chunk_size:
            raise ValueError(
                f"chunker.piece_size must be an integer in [{lo}, max_chunk_size] = [{lo}, {max_chunk_size}] "
                f"(tokens; one character can take up to {lo}), got {piece_size!r}"
            )
        if pieces not in PIECES:
            raise ValueError(f"chunker.pieces must be one of {list(PIECES)}, got {pieces!r}")
        self.max_chunk_size = max_chunk_size
        self.piece_size = piece_size
        self.pieces = pieces
        self.tokenizer = tokenizer
        self.encoder = encoder

    def size_limit(self) -> tuple[str, str, int]:
        return ("tokens", self.tokenizer, self.max_chunk_size)

    def _pieces(self, text: str) -> list[Span]:
        counter = get_counter("tokens", self.tokenizer)
        if self.pieces == "recursive":
            splitter = RecursiveChunker(chunk_size=self.piece_size, chunk_overlap=0, unit="tokens", tokenizer=self.tokenizer)
            return splitter.split_spans(text)
        return fit_units(text, sentence_spans(text, split_paragraphs=True), counter, self.max_chunk_size)

    def chunk(self, doc: Document) -> list[Chunk]:
        if self.encoder is None:
            raise ValueError("ClusterSemanticChunker needs an encoder (built by harness.experiment.build with the run's embedding model)")
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
