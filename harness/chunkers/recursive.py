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
unit. For words and tokens, merge decisions count
the atoms of the whole document's segmentation that a span overlaps (O(log n) per
decision) and every emitted chunk is then measured exactly
(:meth:`harness.text.units.Layout.count`); the rare chunk whose own text is longer (a
cut inside a word) is re-cut by exact windows.

Size guarantee for every accepted configuration: when the separators run out (a list that
does not end in ``""``, e.g. ``["\n\n", "\n", " "]``) and a piece is still larger than
``chunk_size`` (a 320-character URL at ``chunk_size=100``), LangChain emits it whole, over
the limit, with only a logged warning; here it is cut into windows of at most
``chunk_size`` units (word-aligned where the unit allows) and those chunks carry
``metadata["hard_cut"] = True``. Every chunk records ``metadata["size"]``, its size in
``metadata["unit"]`` (tokens without ``[CLS]``/``[SEP]``).

Speed: the pieces of one split are consecutive, so a run of pieces is kept as its list of
boundaries. Separator positions are found with numpy (one-character separators) or one
regex scan, piece sizes are computed for all pieces at once, and the greedy merge jumps
from chunk to chunk by binary search over the boundaries (the merge conditions are
monotone in the piece index), so the Python-level work grows with the number of chunks
and oversized pieces, not with the number of pieces.
"""

from __future__ import annotations

import bisect
import re

from harness.chunkers.base import Chunker, check_limit, check_overlap
from harness.chunkers.chroma import CHROMA_SEPARATORS, check_compatible, check_tiktoken, recursive_spans, token_count, warn_over_limit
from harness.text.units import Layout, check_unit, get_counter, layout_of, strip_span, window_atoms
from harness.types import Chunk, Document, Span, make_chunk_id

DEFAULT_SEPARATORS = ["\n\n", "\n", " ", ""]


class RecursiveChunker(Chunker):
    """Recursive separator splitting with exact spans, sized in chars, words or tokens.

    Args:
        chunk_size: maximum chunk size in ``unit``, >= 1 (>= 4 for tokens:
            :data:`harness.chunkers.base.MIN_TOKEN_LIMIT`).
        chunk_overlap: maximum units of trailing pieces repeated at the start of the next
            chunk, ``0 <= chunk_overlap < chunk_size``.
        unit: ``"chars"``, ``"words"`` or ``"tokens"``.
        tokenizer: ``"model"`` (embedding model's WordPiece) or ``"cl100k_base"``.
        separators: separators in priority order; ``""`` means "between any two
            characters" and should come last. Literal strings (not regexes). Without a
            final ``""``, a piece that no separator cuts small enough is hard-cut (see
            the module docstring).
        strip_whitespace: trim whitespace from both ends of each chunk (LangChain default).
        compatible: None (this project's algorithm, above) or ``"chroma"``: the
            ``RecursiveTokenChunker`` of Chroma's ``chunking_evaluation``, re-run on source
            offsets (:func:`harness.chunkers.chroma.recursive_spans`): a piece is merged only
            when its size is strictly below ``chunk_size``, the *sum* of the merged pieces'
            sizes bounds a chunk (so a chunk's own text can hold a few tokens more), a piece
            no separator cuts is emitted whole, chunks are stripped. Sizes in characters or
            in tokens of a tiktoken ``tokenizer`` (``cl100k_base`` in the reference, whose
            separators are ``["\n\n", "\n", ".", "?", "!", " ", ""]``: pass them as
            ``separators``); needs ``strip_whitespace=True``. No limit is enforced in that
            mode; ``metadata["size"]`` is each chunk's own size.

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
        compatible: str | None = None,
    ) -> None:
        check_compatible(compatible)
        check_unit(unit, tokenizer)
        if compatible is not None:
            if unit == "words":
                raise ValueError("chunker.compatible=chroma sizes chunks in characters or tiktoken tokens: needs chunker.unit=chars or tokens, got 'words'")
            if unit == "tokens":
                check_tiktoken(tokenizer, unit)
            if strip_whitespace is not True:
                raise ValueError(
                    f"chunker.compatible=chroma strips every chunk as the reference does: needs chunker.strip_whitespace=true, got {strip_whitespace!r}"
                )
            if separators is not None and list(separators) != list(CHROMA_SEPARATORS):
                import warnings

                warnings.warn(
                    f"chunker.compatible=chroma with chunker.separators={list(separators)!r}: the reference RecursiveTokenChunker splits at "
                    f"{list(CHROMA_SEPARATORS)!r}; the chunks follow the reference's merging but not its separators",
                    stacklevel=2,
                )
        check_limit("chunk_size", chunk_size, unit)
        check_overlap(chunk_size, chunk_overlap)
        seps = list(DEFAULT_SEPARATORS if separators is None else separators)
        if not seps or any(not isinstance(s, str) for s in seps):
            raise ValueError(f"chunker.separators must be a non-empty list of strings, got {separators!r}")
        self.chunk_size = chunk_size
        self.chunk_overlap = chunk_overlap
        self.unit = unit
        self.tokenizer = tokenizer
        self.separators = seps
        self.strip_whitespace = strip_whitespace
        self.compatible = compatible

    def split_spans(self, text: str, *, hard_cut: bool = True) -> list[Span]:
        """Chunk spans of ``text`` in order (the algorithm without building Chunk objects).

        Args:
            text: the text to split.
            hard_cut: True (default) keeps ``chunk_size`` for every span (see the module
                docstring). False reproduces LangChain's ``RecursiveCharacterTextSplitter``
                exactly for ``unit="chars"``: a piece no separator can cut small enough is
                returned whole, over ``chunk_size``.

        Returns:
            Half-open code-point spans, sorted by start.
        """
        return [(s, e) for s, e, _, _ in self.split_sized(text, hard_cut=hard_cut)]

    def split_sized(self, text: str, *, hard_cut: bool = True) -> list[tuple[int, int, int, bool]]:
        """Like :meth:`split_spans`, each span with its exact size in ``unit`` and whether it
        was hard-cut: ``(start, end, size, hard_cut)``."""
        if not text:
            return []
        if self.compatible:
            length = len if self.unit == "chars" else token_count(self.tokenizer)
            return [(s, e, length(t), False) for (s, e), t in recursive_spans(text, self.chunk_size, self.chunk_overlap, length, self.separators)]
        counter = get_counter(self.unit, self.tokenizer)
        layout = None if counter.unit == "chars" else layout_of(counter, text)
        out: list[tuple[int, int, int, bool]] = []
        _Split(self, text, layout, counter, out, hard_cut).split(0, len(text), self.separators)
        if layout is not None:
            # a chunk re-cut by exact windows can end after the start of the next merged chunk
            # (which carries overlap from before the cut): keep document order
            out.sort()
        return out

    def size_limit(self) -> tuple[str, str, int] | None:
        return None if self.compatible else (self.unit, self.tokenizer, self.chunk_size)

    def overlap_limit(self) -> int | None:
        """``chunk_overlap``: merged chunks carry trailing pieces of at most that many units,
        hard-cut windows share that many atoms; None with ``compatible``."""
        return None if self.compatible else self.chunk_overlap

    def overlap_exempt(self, text: str, pos: int) -> bool:
        """A cut at a separator (kept at the start of the next piece) carries whole pieces
        only, so it may carry none; so may a cut after a code point that alone measures more
        than ``chunk_overlap`` (a 3-token emoji at ``chunk_overlap=2``)."""
        if any(sep and text.startswith(sep, pos) for sep in self.separators):
            return True
        return self.unit != "chars" and get_counter(self.unit, self.tokenizer).count(text[pos - 1]) > self.chunk_overlap

    def chunk(self, doc: Document) -> list[Chunk]:
        # Chunk(...) directly with exactly the fields Chunk.from_spans would set (spans lie in
        # the document by construction): chunk construction is a visible share of the time.
        text, doc_id, unit = doc.text, doc.doc_id, self.unit
        chunks = [
            Chunk(
                doc_id=doc_id,
                spans=((s, e),),
                text=text[s:e],
                chunk_id=make_chunk_id(doc_id, ((s, e),)),
                metadata={"unit": unit, "n_chars": e - s, "size": n, "hard_cut": True} if hard else {"unit": unit, "n_chars": e - s, "size": n},
            )
            for s, e, n, hard in self.split_sized(text)
        ]
        if self.compatible:
            chunks = [Chunk(c.doc_id, c.spans, c.text, c.chunk_id, {**c.metadata, "compatible": self.compatible}) for c in chunks]
            warn_over_limit(chunks, self.chunk_size, unit, doc_id)
        elif any(c.metadata["size"] > self.chunk_size for c in chunks):  # one atom over the limit
            chunks = self.finalize(doc, chunks)
        return chunks


class _Split:
    """State of one :meth:`RecursiveChunker.split_spans` call.

    ``layout`` is None for characters (a span's size is its length); for words and tokens
    a span's size while merging is the number of atoms of the whole text it overlaps
    (monotone in both ends), and an emitted chunk is measured exactly.
    """

    def __init__(
        self, chunker: RecursiveChunker, text: str, layout: Layout | None, counter, out: list[tuple[int, int, int, bool]], hard_cut: bool = True
    ) -> None:
        import numpy as np

        self.text = text
        self.size = chunker.chunk_size
        self.overlap = chunker.chunk_overlap
        self.strip = chunker.strip_whitespace
        self.layout = layout
        self.counter = counter
        self.out = out
        self.hard_cut = hard_cut
        # a cut inside a separator-free piece is a hard cut unless "" (any position) is a separator
        self.any_position = "" in chunker.separators
        self._codes = None  # code points of text (numpy), built on the first one-character separator
        if layout is not None:
            self.atom_starts = np.asarray(layout.starts, dtype=np.int64)
            self.atom_ends = np.asarray(layout.ends, dtype=np.int64)

    # -- sizes ------------------------------------------------------------------------------
    def _size(self, s: int, e: int) -> int:
        """Merge-time size of ``[s, e)``: characters, or atoms overlapping it."""
        if self.layout is None:
            return e - s
        return max(0, int(self.atom_starts.searchsorted(e, "left")) - int(self.atom_ends.searchsorted(s, "right")))

    def _piece_sizes(self, bounds):
        """Sizes of all pieces ``[bounds[k], bounds[k + 1])`` at once (numpy)."""
        import numpy as np

        if self.layout is None:
            return np.diff(bounds)
        lo = self.atom_ends.searchsorted(bounds[:-1], "right")
        hi = self.atom_starts.searchsorted(bounds[1:], "left")
        return np.maximum(hi - lo, 0)

    # -- cutting ----------------------------------------------------------------------------
    def _bounds(self, start: int, end: int, sep: str):
        """``[start, c1, ..., end]``: piece boundaries of ``text[start:end]`` split at ``sep``
        (non-overlapping occurrences, left to right, each kept at the start of the next
        piece; an occurrence at ``start`` does not cut)."""
        import numpy as np

        if sep == "":
            return np.arange(start, end + 1, dtype=np.int64)
        if len(sep) == 1:
            if self._codes is None:
                self._codes = np.frombuffer(self.text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
            cuts = np.flatnonzero(self._codes[start + 1 : end] == ord(sep)) + (start + 1)
        else:
            pattern = re.compile(re.escape(sep))
            cuts = np.fromiter((m.start() for m in pattern.finditer(self.text, start, end)), dtype=np.int64)
            cuts = cuts[cuts > start]
        bounds = np.empty(len(cuts) + 2, dtype=np.int64)
        bounds[0], bounds[-1] = start, end
        bounds[1:-1] = cuts
        return bounds

    def split(self, start: int, end: int, separators: list[str]) -> None:
        """LangChain's ``_split_text`` on ``text[start:end]``, emitting spans."""
        text = self.text
        sep, rest = separators[-1], []
        for i, candidate in enumerate(separators):
            if candidate == "":
                sep = ""
                break
            if text.find(candidate, start, end) >= 0:
                sep, rest = candidate, separators[i + 1 :]
                break
        bounds = self._bounds(start, end, sep)
        big = (self._piece_sizes(bounds) >= self.size).nonzero()[0].tolist()
        bl = bounds.tolist()
        n_pieces = len(bl) - 1
        first = 0  # first piece of the current run of pieces below chunk_size
        for k in big:
            if k > first:
                self._merge(bl, first, k)
            if rest:
                self.split(bl[k], bl[k + 1], rest)
            else:  # no separator left: a piece still over chunk_size is cut by windows
                self._emit(bl[k], bl[k + 1], oversize=sep != "")
            first = k + 1
        if first < n_pieces:
            self._merge(bl, first, n_pieces)

    # -- merging ----------------------------------------------------------------------------
    def _merge(self, bl: list[int], lo: int, hi: int) -> None:
        """LangChain's ``_merge_splits`` over the consecutive pieces ``lo .. hi - 1`` (piece
        ``k`` is ``[bl[k], bl[k + 1])``, each below chunk_size).

        Greedy: pieces join the current chunk while it fits; when piece ``k`` does not fit,
        the chunk ``[bl[first], bl[k])`` is emitted and leading pieces are dropped while the
        rest exceeds the overlap or cannot take piece ``k``. Both tests are monotone in the
        piece index, so each step is a binary search.
        """
        size, overlap = self.size, self.overlap
        first, k = lo, lo + 1  # the current chunk holds pieces first .. k - 1
        while k < hi:
            # smallest k' >= k whose end no longer fits: size(bl[first], bl[k' + 1]) > size
            if self.layout is None:
                k = bisect.bisect_right(bl, bl[first] + size, k + 1, hi + 1) - 1
            else:
                k = self._first_true(k, hi, lambda m: self._size(bl[first], bl[m + 1]) > size)
            if k >= hi:
                break
            self._emit(bl[first], bl[k])
            # drop leading pieces while size(current) > overlap or current + piece k > size
            if self.layout is None:
                first = bisect.bisect_left(bl, max(bl[k] - overlap, bl[k + 1] - size), first, k)
            else:
                first = self._first_true(first, k, lambda f: not (self._size(bl[f], bl[k]) > overlap or self._size(bl[f], bl[k + 1]) > size))
            k += 1
        self._emit(bl[first], bl[hi])

    @staticmethod
    def _first_true(lo: int, hi: int, pred) -> int:
        """Smallest ``m`` in ``[lo, hi)`` with ``pred(m)`` for a monotone ``pred``
        (False ... False True ... True); ``hi`` when none. Galloping, then bisection."""
        if lo >= hi or pred(lo):
            return lo
        step, good = 1, lo  # pred(good) is False
        while True:
            probe = good + step
            if probe >= hi:
                bad = hi
                break
            if pred(probe):
                bad = probe
                break
            good, step = probe, step * 2
        while bad - good > 1:
            mid = (good + bad) // 2
            if pred(mid):
                bad = mid
            else:
                good = mid
        return bad

    def _emit(self, start: int, end: int, oversize: bool = False) -> None:
        """Append ``[start, end)`` (stripped) with its exact size; a span over chunk_size
        (a merge estimate off at a mid-word boundary, or ``oversize``: a piece no separator
        cut) is cut into exact windows instead."""
        if self.strip:
            start, end = strip_span(self.text, start, end)
        if end <= start:
            return
        layout = self.layout
        n = end - start if layout is None else layout.count(start, end)
        if n <= self.size or (layout is None and not self.hard_cut):
            self.out.append((start, end, n, False))
            return
        hard = oversize or not self.any_position
        # windows share chunk_overlap units, as merged pieces do: the overlap holds on a hard cut too
        for ws, we in window_atoms(self.text, start, end, self.counter, self.size, self.overlap):
            self.out.append((ws, we, we - ws if layout is None else layout.count(ws, we), hard))
