"""Left-to-right alignment of a third-party splitter's chunk strings to source spans.

Used ONLY by the LangChain and chonkie adapters, whose libraries return strings without
(reliable) offsets. Every other strategy tracks spans while splitting.

Algorithm (:func:`align_chunks`): chunks are aligned in output order. For chunk ``i`` the
search starts at a cursor that only moves forward: ``max(prev_start + 1, prev_end -
max_overlap)`` where ``prev_*`` is the previous aligned chunk's raw match and
``max_overlap`` (when the splitter declares it, in characters) bounds how far a chunk may
reach back into its predecessor. Without ``max_overlap`` the bound is ``prev_start + 1``
(consecutive chunks may overlap but never start at the same place). The earliest
occurrence at or after the cursor is taken, matched

1. exactly (``str.find``; preferred when both kinds start at the same place), or
2. whitespace-insensitively: the chunk and the document are compared with all whitespace
   removed (splitters that re-join pieces with other separators, e.g. sentences joined by
   single spaces), and the match is mapped back to raw offsets (from its first to its
   last non-whitespace character). An exact copy further on never beats an earlier
   re-joined match.

Why a lower bound tighter than LangChain's: ``add_start_index`` searches from
``prev_start + prev_len - chunk_overlap``, which is <= ``prev_start`` whenever a chunk is no
longer than the overlap, so a repeated chunk is re-found at its predecessor's offset; the
``prev_start + 1`` term rules that out, and the ``prev_end - max_overlap`` term keeps
non-overlapping repeated chunks from matching a copy inside the previous chunk.

For splitters known to cover the text without gaps (``covers=True``) a match must also
start no later than the first non-whitespace character after the previous chunk; a match
ending after the previous chunk is preferred, then one ending with it (a suffix), then
one starting exactly at the previous start (LangChain's merge re-emits a chunk from the
same start, identical or grown, when the pieces it dropped from the front were
whitespace, and sometimes emits a suffix of the previous chunk).

Returned spans are the raw matches trimmed of outer whitespace. The result is correct
whenever the first acceptable occurrence is the true one; a splitter that drops text and
repeats passages can still defeat any search, which is why no other strategy uses one.
"""

from __future__ import annotations

import bisect
import re

from harness.chunkers.units import strip_span
from harness.types import Chunk, Document, Span

_NON_SPACE = re.compile(r"\S")


class _Squeezed:
    """A text with all whitespace removed plus the raw offset of every kept character."""

    def __init__(self, text: str) -> None:
        self.pos = [i for i, ch in enumerate(text) if not ch.isspace()]
        self.text = "".join(text[i] for i in self.pos)

    def find(self, needle: str, raw_cursor: int) -> Span | None:
        squeezed = "".join(needle.split())
        if not squeezed:
            return None
        k = self.text.find(squeezed, bisect.bisect_left(self.pos, raw_cursor))
        if k < 0:
            return None
        return self.pos[k], self.pos[k + len(squeezed) - 1] + 1


def align_chunks(
    text: str,
    chunks: list[str],
    max_overlap: int | None = None,
    covers: bool = False,
) -> list[Span | None]:
    """Raw spans of ``chunks`` in ``text`` (see module docstring), None for unaligned ones.

    Args:
        text: the source document.
        chunks: the splitter's output strings, in output order.
        max_overlap: maximum characters a chunk may share with its predecessor, or None
            when unknown.
        covers: the splitter's chunks cover the text without gaps (every non-whitespace
            character is in some chunk, in order). Then a match is accepted only if it
            starts no later than the first non-whitespace character after the previous
            chunk (a repeated passage cannot be matched at a later copy); among such
            matches one ending after the previous chunk is preferred (a short chunk is not
            matched inside its predecessor), then one ending with it, then one starting
            exactly where the previous chunk starts.

    The two fallbacks exist because LangChain's merge re-emits text: a chunk may repeat its
    predecessor from the same start (identical or longer, when the pieces dropped from its
    front were whitespace) or be a suffix of it (same end).

    Returns:
        One entry per chunk: ``(start, end)`` trimmed of outer whitespace (code points), or
        None when the chunk was not found at or after the cursor, or is whitespace-only.
    """
    out: list[Span | None] = []
    squeezed: _Squeezed | None = None
    prev: Span | None = None

    def find(piece: str, cursor: int, limit: int, accept=lambda raw: True) -> Span | None:
        """Earliest match starting in [cursor, limit] that ``accept`` takes: exact, or
        whitespace-insensitive when that starts earlier (an exact match wins a tie)."""
        nonlocal squeezed
        exact = None
        k = text.find(piece, cursor)
        while 0 <= k <= limit:
            if accept((k, k + len(piece))):
                exact = (k, k + len(piece))
                break
            k = text.find(piece, k + 1)
        if exact is not None and exact[0] == cursor:
            return exact
        if squeezed is None:
            squeezed = _Squeezed(text)
        bound = limit if exact is None else exact[0] - 1
        raw = squeezed.find(piece, cursor)
        while raw is not None and raw[0] <= bound:
            if accept(raw):
                return raw
            raw = squeezed.find(piece, raw[0] + 1)
        return exact

    for piece in chunks:
        if not piece.strip():
            out.append(None)
            continue
        if prev is None:
            raw = find(piece, 0, len(text))
        elif not covers:
            cursor = prev[0] + 1 if max_overlap is None else max(prev[0] + 1, prev[1] - max_overlap)
            raw = find(piece, cursor, len(text))
        else:
            cursor = prev[0] + 1 if max_overlap is None else max(prev[0] + 1, prev[1] - max_overlap)
            m = _NON_SPACE.search(text, prev[1])
            limit = m.start() if m else len(text)
            end = prev[1]
            raw = (
                find(piece, cursor, limit, lambda r: r[1] > end)  # moves on: new text
                or find(piece, cursor, limit, lambda r: r[1] == end)  # a suffix of the previous chunk
                or find(piece, prev[0], prev[0])  # same start again: the chunk only grew
            )
        if raw is None:
            out.append(None)
            continue
        prev = raw
        out.append(strip_span(text, *raw))
    return out


def adapter_chunks(
    doc: Document,
    pieces: list[str],
    spans: list[Span | None],
    *,
    library: str,
    on_unaligned: str,
    on_oversize: str,
    limit: tuple[str, str, int] | None,
    unaligned: list[tuple[str, int]],
) -> list[Chunk]:
    """Turn aligned spans of a wrapped splitter's output into chunks (shared by the adapters).

    Args:
        doc: the source document.
        pieces: the library's chunk strings (for error messages).
        spans: one trimmed span or None per piece (from :func:`align_chunks` or verified
            library offsets).
        library: the wrapped class path, named in errors and recorded as metadata
            ``splitter``.
        on_unaligned: ``"error"`` (raise) or ``"skip"`` (record ``(doc_id, index)`` in
            ``unaligned`` and drop the piece). Whitespace-only pieces are always dropped.
        on_oversize: with a ``limit``: ``"error"`` raises, ``"split"`` cuts an oversized
            span into word-aligned windows of the limit, ``"ignore"`` keeps it.
        limit: ``(unit, tokenizer, size)`` the wrapped library promises, or None.
        unaligned: list that collects skipped pieces.

    Returns:
        Chunks sorted by span (start, end), duplicate spans dropped; metadata ``splitter`` and ``index`` (the
        piece's position in the library output).

    Raises:
        ValueError: an unaligned piece with ``on_unaligned="error"`` or an oversized piece
            with ``on_oversize="error"`` (message names the library, document and index).
    """
    from harness.chunkers.units import get_counter, window_atoms

    counter = get_counter(limit[0], limit[1]) if limit and on_oversize != "ignore" else None
    out: list[Chunk] = []
    seen: set[Span] = set()
    for i, (piece, span) in enumerate(zip(pieces, spans)):
        if span is None or span[1] <= span[0]:
            if not piece.strip():
                continue
            if on_unaligned == "error":
                raise ValueError(
                    f"{library}: chunk {i} of document {doc.doc_id!r} cannot be aligned to the source text "
                    f"(starts {piece[:40]!r}); set chunker.on_unaligned=skip to drop such chunks"
                )
            unaligned.append((doc.doc_id, i))
            continue
        windows = [span]
        if counter is not None:
            n = counter.count(doc.text[span[0] : span[1]])
            if n > limit[2]:
                if on_oversize == "error":
                    raise ValueError(
                        f"{library}: chunk {i} of document {doc.doc_id!r} has {n} {limit[0]} > chunk_size "
                        f"{limit[2]}; set chunker.on_oversize=split to cut it"
                    )
                windows = window_atoms(doc.text, span[0], span[1], counter, limit[2], 0)
        for w in windows:
            if w not in seen:
                seen.add(w)
                out.append(Chunk.from_spans(doc, [w], metadata={"splitter": library, "index": i}))
    out.sort(key=lambda c: c.spans[0])  # windows of a cut chunk may pass the next chunk's start
    return out
