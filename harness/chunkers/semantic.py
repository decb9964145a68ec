"""Semantic chunking: sentences -> embeddings -> boundaries where the topic shifts.

Two breakpoint modes:

* ``threshold`` -- walk the sentences in order keeping the running centroid (mean of the
  normalised sentence embeddings) of the current chunk; start a new chunk when the next
  sentence's cosine similarity to that centroid falls below ``threshold``.
* ``percentile`` -- compute the cosine distance ``1 - cos(s_i, s_{i+1})`` between each pair
  of adjacent sentences and cut where it exceeds the ``percentile``-th percentile of all
  distances in the document (the "percentile" breakpoint of Greg Kamradt's semantic
  chunking, as in langchain-experimental's ``SemanticChunker``). LangChain's class re-joins
  sentences with spaces, so its chunks are not substrings of the source; here the
  breakpoints are applied to exact sentence spans.

In both modes a chunk never exceeds ``max_chunk_size`` tokens (re-measured on the chunk's
own text); a single sentence longer than that is cut into token windows first. A chunk's
span runs from its first sentence's start to its last sentence's end, so the whitespace
between sentences is kept and ``text == doc.text[start:end]``.
"""

from __future__ import annotations

import numpy as np

from harness.chunkers.base import Chunker, check_size
from harness.chunkers.sentences import sentence_spans
from harness.chunkers.units import check_unit, get_counter, window_atoms
from harness.types import Chunk, Document, Span

BREAKPOINTS = ("threshold", "percentile")


class SemanticChunker(Chunker):
    """Embedding-breakpoint chunking over exact sentence spans.

    Args:
        breakpoint: ``"threshold"`` or ``"percentile"``.
        threshold: cosine-similarity cut-off in [-1, 1] for ``threshold`` mode (higher
            gives smaller chunks).
        percentile: percentile in (0, 100) of adjacent-sentence distances above which a
            ``percentile`` breakpoint is placed.
        max_chunk_size: maximum chunk size in tokens of ``tokenizer``, >= 1.
        tokenizer: ``"model"`` (the embedding model's WordPiece) or ``"cl100k_base"``.
        encoder: the :class:`harness.embeddings.model.Encoder` used for sentence
            embeddings; the builder passes the run's shared encoder.

    Raises:
        ValueError: a parameter outside its range (the message names it), or
            :meth:`chunk` called without an encoder.
    """

    name = "semantic"
    needs_encoder = True

    def __init__(
        self,
        breakpoint: str = "threshold",
        threshold: float = 0.5,
        percentile: float = 95.0,
        max_chunk_size: int = 254,
        tokenizer: str = "model",
        encoder=None,
    ) -> None:
        if breakpoint not in BREAKPOINTS:
            raise ValueError(f"chunker.breakpoint must be one of {list(BREAKPOINTS)}, got {breakpoint!r}")
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not -1.0 <= threshold <= 1.0:
            raise ValueError(f"chunker.threshold must be a cosine similarity in [-1, 1], got {threshold!r}")
        if isinstance(percentile, bool) or not isinstance(percentile, (int, float)) or not 0.0 < percentile < 100.0:
            raise ValueError(f"chunker.percentile must be in (0, 100), got {percentile!r}")
        check_size("max_chunk_size", max_chunk_size)
        check_unit("tokens", tokenizer)
        self.breakpoint = breakpoint
        self.threshold = float(threshold)
        self.percentile = float(percentile)
        self.max_chunk_size = max_chunk_size
        self.tokenizer = tokenizer
        self.encoder = encoder

    def _units(self, text: str) -> list[Span]:
        """Sentence spans, with sentences over ``max_chunk_size`` tokens cut into windows."""
        counter = get_counter("tokens", self.tokenizer)
        out: list[Span] = []
        for s, e in sentence_spans(text):
            if counter.count(text[s:e]) <= self.max_chunk_size:
                out.append((s, e))
            else:
                out.extend(window_atoms(text, s, e, counter, self.max_chunk_size, 0))
        return out

    def _boundaries(self, vecs: np.ndarray) -> set[int]:
        """Indices ``i`` such that a new chunk starts at sentence ``i`` (semantic part only)."""
        n = len(vecs)
        if n < 2:
            return set()
        if self.breakpoint == "percentile":
            dist = 1.0 - np.einsum("ij,ij->i", vecs[:-1], vecs[1:])
            cut = np.percentile(dist, self.percentile)
            return {i + 1 for i in range(n - 1) if dist[i] > cut}
        starts: set[int] = set()
        centroid = vecs[0].astype(np.float64).copy()
        for i in range(1, n):
            c = centroid / (np.linalg.norm(centroid) or 1.0)
            if float(vecs[i] @ c) < self.threshold:
                starts.add(i)
                centroid = vecs[i].astype(np.float64).copy()
            else:
                centroid += vecs[i]
        return starts

    def size_limit(self) -> tuple[str, str, int]:
        return ("tokens", self.tokenizer, self.max_chunk_size)

    def chunk(self, doc: Document) -> list[Chunk]:
        if self.encoder is None:
            raise ValueError("SemanticChunker needs an encoder (built by harness.build with the run's embedding model)")
        text = doc.text
        units = self._units(text)
        if not units:
            return []
        vecs = self.encoder.encode([text[s:e] for s, e in units], desc="embed sentences")
        if self.breakpoint == "threshold":
            starts = self._boundaries_threshold_sized(text, units, vecs)
        else:
            starts = self._size_cap(text, units, self._boundaries(vecs))
        groups: list[list[Span]] = []
        for i, sp in enumerate(units):
            if i == 0 or i in starts:
                groups.append([])
            groups[-1].append(sp)
        meta_base = {"breakpoint": self.breakpoint}
        return [
            Chunk.from_spans(doc, [(g[0][0], g[-1][1])], metadata={**meta_base, "n_sentences": len(g)})
            for g in groups
        ]

    def _fits(self, text: str, start: int, end: int) -> bool:
        return get_counter("tokens", self.tokenizer).count(text[start:end]) <= self.max_chunk_size

    def _boundaries_threshold_sized(self, text: str, units: list[Span], vecs: np.ndarray) -> set[int]:
        """Threshold mode with the size cap applied while walking (centroid resets at every cut)."""
        starts: set[int] = set()
        first = 0
        centroid = vecs[0].astype(np.float64).copy()
        for i in range(1, len(units)):
            c = centroid / (np.linalg.norm(centroid) or 1.0)
            similar = float(vecs[i] @ c) >= self.threshold
            if similar and self._fits(text, units[first][0], units[i][1]):
                centroid += vecs[i]
                continue
            starts.add(i)
            first = i
            centroid = vecs[i].astype(np.float64).copy()
        return starts

    def _size_cap(self, text: str, units: list[Span], starts: set[int]) -> set[int]:
        """Add boundaries so no group of consecutive units exceeds ``max_chunk_size`` tokens."""
        out = set(starts)
        first = 0
        for i in range(1, len(units)):
            if i in out or not self._fits(text, units[first][0], units[i][1]):
                out.add(i)
                first = i
        return out
