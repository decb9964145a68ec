"""Fixed-size chunking in characters, words or tokens; overlap > 0 makes it a sliding window."""

from __future__ import annotations

from harness.chunkers.base import Chunker, check_limit, check_overlap
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
    are dropped. Every chunk records ``metadata["size"]``, its exact size in
    ``metadata["unit"]``. This is the "fixed-size" / "sliding window" strategy of the RAG literature
    (e.g. the FixedTokenChunker baseline of Smith & Troynikov, Chroma 2024).

    Args:
        chunk_size: maximum chunk size in ``unit``, >= 1 (>= 4 for tokens:
            :data:`harness.chunkers.base.MIN_TOKEN_LIMIT`).
        chunk_overlap: units shared by consecutive chunks, ``0 <= chunk_overlap < chunk_size``.
        unit: ``"chars"``, ``"words"`` or ``"tokens"``.
        tokenizer: ``"model"`` or ``"cl100k_base"`` (used when ``unit="tokens"``).

    Raises:
        ValueError: a parameter outside its range (the message names it).
    """

    name = "fixed"

    def __init__(self, chunk_size: int = 254, chunk_overlap: int = 0, unit: str = "tokens", tokenizer: str = "model") -> None:
        check_unit(unit, tokenizer)
        check_limit("chunk_size", chunk_size, unit)
        check_overlap(chunk_size, chunk_overlap)
        self.chunk_size = chunk_size
        self.chunk_overlap = chunk_overlap
        self.unit = unit
        self.tokenizer = tokenizer

    def size_limit(self) -> tuple[str, str, int]:
        return (self.unit, self.tokenizer, self.chunk_size)

    def chunk(self, doc: Document) -> list[Chunk]:
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
