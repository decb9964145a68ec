"""Recursive separator splitting (the RecursiveCharacterTextSplitter algorithm) with exact spans.

The algorithm is LangChain's ``RecursiveCharacterTextSplitter`` (langchain-text-splitters):
split on the first separator of a priority list that occurs in the text, keep the
separator at the start of the following piece, recurse into pieces that are still too
large with the remaining separators, and greedily merge neighbouring pieces up to
``chunk_size`` while carrying up to ``chunk_overlap`` units of trailing pieces into the
next chunk. With ``unit="chars"`` it produces the same chunk texts as LangChain.

Why not call LangChain directly: its ``add_start_index`` recovers offsets by searching
for each chunk's text, which gives wrong starts on repeated passages when overlap > 0, and
its length function is summed over pieces, which over- or under-counts tokens and words
at piece joins. Here every piece is a span from the moment it is cut, and a merged chunk
is measured on its own text, so its size never exceeds ``chunk_size`` in the configured
unit (unless a single code point exceeds it). For words and tokens, merge decisions count
the atoms of the whole document's segmentation that a span overlaps (O(log n) per
decision) and every emitted chunk is then re-tokenised; the rare chunk whose own text is
longer (a cut inside a word) is re-cut by exact windows.
"""

from __future__ import annotations

import bisect
import re

from harness.chunkers.base import Chunker, check_overlap, check_size
from harness.chunkers.units import SizeCounter, check_unit, get_counter, strip_span, window_atoms
from harness.types import Chunk, Document, Span

DEFAULT_SEPARATORS = ["\n\n", "\n", " ", ""]


class RecursiveChunker(Chunker):
    """Recursive separator splitting with exact spans, sized in chars, words or tokens.

    Args:
        chunk_size: maximum chunk size in ``unit``, >= 1.
        chunk_overlap: maximum units of trailing pieces repeated at the start of the next
            chunk, ``0 <= chunk_overlap < chunk_size``.
        unit: ``"chars"``, ``"words"`` or ``"tokens"``.
        tokenizer: ``"model"`` (embedding model's WordPiece) or ``"cl100k_base"``.
        separators: separators in priority order; ``""`` means "between any two
            characters" and should come last. Literal strings (not regexes).
        strip_whitespace: trim whitespace from both ends of each chunk (LangChain default).

    Raises:
        ValueError: a parameter outside its range (the message names it).
    """

    name = "recursive"

    def __init__(
        self,
        chunk_size: int = 254,
        chunk_overlap: int = 0,
        unit: str = "tokens",
        tokenizer: str = "model",
        separators: list[str] | None = None,
        strip_whitespace: bool = True,
    ) -> None:
        check_size("chunk_size", chunk_size)
        check_overlap(chunk_size, chunk_overlap)
        check_unit(unit, tokenizer)
        seps = list(DEFAULT_SEPARATORS if separators is None else separators)
        if not seps or any(not isinstance(s, str) for s in seps):
            raise ValueError(f"chunker.separators must be a non-empty list of strings, got {separators!r}")
        self.chunk_size = chunk_size
        self.chunk_overlap = chunk_overlap
        self.unit = unit
        self.tokenizer = tokenizer
        self.separators = seps
        self.strip_whitespace = strip_whitespace
        self._counter: SizeCounter | None = None
        self._atom_starts: list[int] = []
        self._atom_ends: list[int] = []

    # -- algorithm -----------------------------------------------------------------------
    def _len(self, text: str, span: Span, counter: SizeCounter) -> int:
        """Size of a span: exact for chars; for words/tokens the number of atoms of the whole
        text's segmentation that overlap the span (exact for words, exact for tokens at
        whitespace boundaries; every emitted chunk is re-measured in :meth:`_emit`)."""
        if counter.unit == "chars":
            return span[1] - span[0]
        lo = bisect.bisect_right(self._atom_ends, span[0])
        hi = bisect.bisect_left(self._atom_starts, span[1])
        return max(0, hi - lo)

    def _emit(self, text: str, start: int, end: int, out: list[Span]) -> None:
        if self.strip_whitespace:
            start, end = strip_span(text, start, end)
        if end <= start:
            return
        if self._counter is not None and self._counter.unit != "chars" and self._counter.count(text[start:end]) > self.chunk_size:
            # the estimate was off at a mid-word boundary: cut this chunk by re-measured windows
            out.extend(window_atoms(text, start, end, self._counter, self.chunk_size, 0))
            return
        out.append((start, end))

    @staticmethod
    def _cut(text: str, start: int, end: int, sep: str) -> list[Span]:
        """Pieces of ``text[start:end]`` split at ``sep``, each separator kept at the start of the next piece."""
        if sep == "":
            return [(i, i + 1) for i in range(start, end)]
        cuts = [m.start() for m in re.finditer(re.escape(sep), text[start:end])]
        bounds = [start] + [start + c for c in cuts if c > 0] + [end]
        return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]

    def _merge(self, text: str, pieces: list[Span], counter: SizeCounter, out: list[Span]) -> None:
        current: list[Span] = []
        for piece in pieces:
            if current and self._len(text, (current[0][0], piece[1]), counter) > self.chunk_size:
                self._emit(text, current[0][0], current[-1][1], out)
                while current and (
                    self._len(text, (current[0][0], current[-1][1]), counter) > self.chunk_overlap
                    or self._len(text, (current[0][0], piece[1]), counter) > self.chunk_size
                ):
                    current.pop(0)
            current.append(piece)
        if current:
            self._emit(text, current[0][0], current[-1][1], out)

    def _split(self, text: str, start: int, end: int, separators: list[str], counter: SizeCounter, out: list[Span]) -> None:
        sep, rest = separators[-1], []
        for i, candidate in enumerate(separators):
            if candidate == "":
                sep = ""
                break
            if candidate in text[start:end]:
                sep, rest = candidate, separators[i + 1 :]
                break
        good: list[Span] = []
        for piece in self._cut(text, start, end, sep):
            if self._len(text, piece, counter) < self.chunk_size:
                good.append(piece)
                continue
            if good:
                self._merge(text, good, counter, out)
                good = []
            if rest:
                self._split(text, piece[0], piece[1], rest, counter, out)
            else:
                self._emit(text, piece[0], piece[1], out)
        if good:
            self._merge(text, good, counter, out)

    def split_spans(self, text: str) -> list[Span]:
        """Chunk spans of ``text`` in order (the algorithm without building Chunk objects)."""
        counter = get_counter(self.unit, self.tokenizer)
        out: list[Span] = []
        if not text:
            return out
        self._counter = counter
        if counter.unit != "chars":
            atoms = counter.atoms(text).spans
            self._atom_starts = [a for a, _ in atoms]
            self._atom_ends = [b for _, b in atoms]
        try:
            self._split(text, 0, len(text), self.separators, counter, out)
        finally:
            self._counter = None
            self._atom_starts = self._atom_ends = []
        return out

    def size_limit(self) -> tuple[str, str, int]:
        return (self.unit, self.tokenizer, self.chunk_size)

    def chunk(self, doc: Document) -> list[Chunk]:
        meta = {"unit": self.unit}
        return [Chunk.from_spans(doc, [sp], metadata=meta) for sp in self.split_spans(doc.text)]
