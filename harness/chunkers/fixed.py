"""Fixed-size chunking in characters, words or tokens; overlap > 0 makes it a sliding window."""

from __future__ import annotations

from harness.chunkers.base import Chunker, check_limit, check_overlap
from harness.chunkers.chroma import check_compatible, check_tiktoken, fixed_token_windows, token_count, warn_over_limit
from harness.text.units import check_unit, get_counter, window_atoms
from harness.types import Chunk, Document


class FixedChunker(Chunker):
    """Consecutive windows of ``chunk_size`` units, each sharing ``chunk_overlap`` units with the previous.

    * ``unit="chars"``: windows of code points ``[i, i + chunk_size)`` with step
      ``chunk_size - chunk_overlap`` (may cut words, like LangChain's CharacterTextSplitter
      with an empty separator).
    * ``unit="words"``: windows of whitespace-separated words.
    * ``unit="tokens"``: windows of tokens of ``tokenizer`` (the embedding model's by default,
      or ``cl100k_base``); windows prefer word boundaries and are mapped back to exact
      character spans from token offsets, never decoded. Every chunk's own text re-tokenises
      to at most ``chunk_size`` tokens.

    Leading/trailing whitespace is trimmed from each chunk's span; whitespace-only windows
    are dropped.

    ``compatible="chroma"`` reproduces the ``FixedTokenChunker`` of Chroma's
    ``chunking_evaluation`` instead (needs ``unit="tokens"`` and a tiktoken ``tokenizer``,
    ``cl100k_base`` in the reference): windows of exactly ``chunk_size`` tokens of the whole
    document's encoding, advancing by ``chunk_size - chunk_overlap``, not moved to word
    boundaries and not trimmed; a window cut inside a multi-byte character widens to the
    character boundary (``metadata["widened"]``). See :mod:`harness.chunkers.chroma`. A
    window's own text can re-tokenise to a few tokens more than the window held (a word cut
    in two encodes differently), so no limit is enforced in that mode;
    ``metadata["window_tokens"]`` is the window's token count and ``metadata["size"]`` that
    of its text. Every chunk records ``metadata["size"]``, its exact size in
    ``metadata["unit"]``. This is the "fixed-size" / "sliding window" strategy of the RAG literature
    (e.g. the FixedTokenChunker baseline of Smith & Troynikov, Chroma 2024).

    Args:
        chunk_size: maximum chunk size in ``unit``, >= 1 (>= 4 for tokens:
            :data:`harness.chunkers.base.MIN_TOKEN_LIMIT`).
        chunk_overlap: units shared by consecutive chunks, ``0 <= chunk_overlap < chunk_size``.
        unit: ``"chars"``, ``"words"`` or ``"tokens"``.
        tokenizer: ``"model"`` or ``"cl100k_base"`` (used when ``unit="tokens"``).
        compatible: None (this project's windows) or ``"chroma"`` (the reference's, above).

    Raises:
        ValueError: a parameter outside its range (the message names it).
    """

    name = "fixed"

    def __init__(self, chunk_size: int = 254, chunk_overlap: int = 0, unit: str = "tokens", tokenizer: str = "model", compatible: str | None = None) -> None:
        check_compatible(compatible)
        check_unit(unit, tokenizer)
        if compatible is not None:
            check_tiktoken(tokenizer, unit)
        check_limit("chunk_size", chunk_size, unit)
        check_overlap(chunk_size, chunk_overlap)
        self.chunk_size = chunk_size
        self.chunk_overlap = chunk_overlap
        self.unit = unit
        self.tokenizer = tokenizer
        self.compatible = compatible

    def size_limit(self) -> tuple[str, str, int] | None:
        return None if self.compatible else (self.unit, self.tokenizer, self.chunk_size)

    def overlap_limit(self) -> int | None:
        """``chunk_overlap`` (windows share exactly that many atoms, fewer only where a window
        is shrunk to fit or snapped to a word start); None with ``compatible``."""
        return None if self.compatible else self.chunk_overlap

    def chunk(self, doc: Document) -> list[Chunk]:
        if self.compatible:
            return self._chunk_chroma(doc)
        if self.unit == "chars":
            spans = []
            step = self.chunk_size - self.chunk_overlap
            n = len(doc.text)
            for i in range(0, n, step):
                s, e = i, min(i + self.chunk_size, n)
                while s < e and doc.text[s].isspace():
                    s += 1
                while e > s and doc.text[e - 1].isspace():
                    e -= 1
                if e > s:
                    spans.append((s, e))
                if i + self.chunk_size >= n:
                    break
            sizes = [e - s for s, e in spans]
        else:
            sizes = []
            spans = window_atoms(doc.text, 0, len(doc.text), get_counter(self.unit, self.tokenizer), self.chunk_size, self.chunk_overlap, sizes)
        # Chunk(...) directly with exactly the fields Chunk.from_spans would set (spans are in
        # range by construction), the id make_chunk_id gives one span written inline, and the
        # fields passed by position (doc_id, spans, text, chunk_id, metadata; keywords cost
        # ~20% more): chunk construction is a visible share of the chunking time.
        text, doc_id, unit = doc.text, doc.doc_id, self.unit
        chunks = [Chunk(doc_id, ((s, e),), text[s:e], f"{doc_id}#{s}-{e}", {"unit": unit, "n_chars": e - s, "size": n}) for (s, e), n in zip(spans, sizes)]
        if sizes and max(sizes) > self.chunk_size:  # one atom over the limit: cut at code points
            chunks = self.finalize(doc, chunks)
        return chunks

    def _chunk_chroma(self, doc: Document) -> list[Chunk]:
        """``FixedTokenChunker`` windows of ``doc`` as chunks (see :func:`harness.chunkers.chroma.fixed_token_windows`)."""
        text, doc_id = doc.text, doc.doc_id
        count = token_count(self.tokenizer)
        chunks = []
        for (s, e), n, widened in fixed_token_windows(text, self.chunk_size, self.chunk_overlap, self.tokenizer):
            meta = {"unit": "tokens", "n_chars": e - s, "size": count(text[s:e]), "window_tokens": n, "compatible": self.compatible}
            if widened:
                meta["widened"] = True
            chunks.append(Chunk(doc_id, ((s, e),), text[s:e], f"{doc_id}#{s}-{e}", meta))
        warn_over_limit(chunks, self.chunk_size, "tokens", doc_id)
        return chunks
