"""Constrained alignment of a third-party splitter's chunk strings to source spans.

Used ONLY by the LangChain and chonkie adapters, and only when neither the library's own
offsets nor a tracked re-run of its algorithm (:mod:`harness.chunkers.tracked`)
reproduces its output. Every other strategy tracks spans while splitting.

Method (:func:`align`): every chunk string has *candidate* positions, the places in the
source where its text occurs, in three tiers:

1. exactly (``str.find``);
2. whitespace-insensitively: chunk and source compared with all whitespace removed
   (splitters that re-join pieces with other separators), mapped back to raw offsets from
   the first to the last non-whitespace character of the match;
3. only with ``normalise=True``: additionally lower-cased, with combining accents, ``#``,
   symbols such as emoji and control characters removed on both sides (text decoded from
   an uncased WordPiece vocabulary, which drops what it maps to ``[UNK]``).

Candidates are restricted by what is known about the splitter, in output order:

* chunks move forward: a chunk starts no earlier than its predecessor starts;
* with ``max_overlap`` (characters, when the settings bound it): a chunk starts no earlier
  than ``max_overlap`` characters before its predecessor ends;
* with ``covers`` (the splitter drops no text): no non-whitespace character lies between
  consecutive chunks, before the first or after the last.

A forward pass keeps the candidates reachable from the previous chunk, a backward pass
those from which the rest of the document can still be placed; what remains for a chunk
is every position consistent with all chunks and all constraints. If positions of several
tiers remain, only the best tier is kept (an exact match is never passed over for a
whitespace-insensitive one) and both passes are run again. A chunk is placed only when
exactly ONE position remains. More than one is *ambiguous* and none is *unaligned*: the
adapter then follows its ``on_unaligned`` setting and counts the case; it never picks one
of several positions.
"""

from __future__ import annotations

import bisect
import logging
import re
import unicodedata
from dataclasses import dataclass, field

from harness.text.units import strip_span
from harness.types import Span

log = logging.getLogger(__name__)

_NON_SPACE = re.compile(r"\S")


#: Most candidate positions considered for one chunk; a chunk with more is ambiguous.
MAX_CANDIDATES = 256

PLACED, AMBIGUOUS, UNALIGNED, EMPTY = "placed", "ambiguous", "unaligned", "empty"


#: Unicode categories dropped by the normalised tier: symbols and controls an uncased
#: WordPiece vocabulary typically maps to ``[UNK]`` (skipped when decoding) or removes.
_FOLD_DROP = frozenset({"So", "Cc", "Cf", "Co", "Cn", "Cs"})


def _fold(ch: str) -> str:
    """``ch`` as the normalised tier compares it: lower-cased, without combining marks,
    ``#`` (WordPiece's continuation prefix ``##`` survives decoding at a window start) and
    the categories of :data:`_FOLD_DROP` removed."""
    if ch.isascii():
        return "" if ch == "#" or not ch.isprintable() else ch.lower()
    if unicodedata.category(ch) in _FOLD_DROP:
        return ""
    return "".join(c for c in unicodedata.normalize("NFD", ch.lower()) if not unicodedata.combining(c))


class _Squeezed:
    """A text with all whitespace removed (and optionally folded) plus the raw offset of
    every kept character."""

    def __init__(self, text: str, fold: bool) -> None:
        self.fold = fold
        pos: list[int] = []
        parts: list[str] = []
        for i, ch in enumerate(text):
            if ch.isspace():
                continue
            f = _fold(ch) if fold else ch
            for c in f:
                if not c.isspace():
                    parts.append(c)
                    pos.append(i)
        self.pos = pos
        self.text = "".join(parts)

    def needle(self, piece: str) -> str:
        s = "".join(piece.split())
        return "".join(_fold(c) for c in s) if self.fold else s

    def find_all(self, needle: str, lo: int, hi: int, cap: int) -> list[Span] | None:
        """Raw spans of matches of ``needle`` (already squeezed) whose raw start lies in
        ``[lo, hi]``; None when more than ``cap``."""
        out: list[Span] = []
        if not needle:
            return out
        k = self.text.find(needle, bisect.bisect_left(self.pos, lo))
        while k >= 0 and self.pos[k] <= hi:
            out.append((self.pos[k], self.pos[k + len(needle) - 1] + 1))
            if len(out) > cap:
                return None
            k = self.text.find(needle, k + 1)
        return out


@dataclass(frozen=True, slots=True)
class _Cand:
    raw: Span  # where the chunk's text (as matched) lies
    trim: Span  # raw trimmed of outer whitespace
    tier: int  # 0 exact, 1 whitespace-insensitive, 2 normalised


@dataclass
class Alignment:
    """Result of :func:`align`.

    Attributes:
        spans: one span per chunk, trimmed of outer whitespace, or None (not placed).
        status: one of ``"placed"``, ``"ambiguous"`` (several positions remain),
            ``"unaligned"`` (none remains) or ``"empty"`` (whitespace-only chunk) per chunk.
        positions: for an ambiguous chunk, the starts of the positions that remain.
    """

    spans: list[Span | None]
    status: list[str]
    positions: dict[int, list[int]] = field(default_factory=dict)


def align(
    text: str,
    chunks: list[str],
    *,
    max_overlap: int | None = None,
    covers: bool = False,
    normalise: bool = False,
) -> Alignment:
    """Place ``chunks`` (a splitter's output strings, in output order) in ``text``.

    Args:
        text: the source document.
        chunks: the splitter's strings in output order.
        max_overlap: most characters a chunk may share with its predecessor in the source,
            or None when the settings do not bound it.
        covers: the splitter drops no non-whitespace text (chunks leave no gaps).
        normalise: also match case- and accent-insensitively (tier 3, module docstring).

    Returns:
        An :class:`Alignment`; a chunk is placed only when exactly one position is
        consistent with the texts and the constraints (module docstring).
    """
    n = len(chunks)
    status = [EMPTY if not c.strip() else UNALIGNED for c in chunks]
    squeezed = _Squeezed(text, False)
    folded = _Squeezed(text, True) if normalise else None
    nonspace = [m.start() for m in _NON_SPACE.finditer(text)]  # sorted
    first_ns = nonspace[0] if nonspace else len(text)
    last_ns_end = nonspace[-1] + 1 if nonspace else 0

    def next_ns(pos: int) -> int:
        k = bisect.bisect_left(nonspace, pos)
        return nonspace[k] if k < len(nonspace) else len(text)

    def compatible(p: _Cand, c: _Cand, full: bool) -> bool:
        if c.raw[0] < p.raw[0]:
            return False
        if full and max_overlap is not None and c.raw[0] < p.raw[1] - max_overlap:
            return False
        if full and covers and next_ns(p.trim[1]) < c.trim[0]:
            return False
        return True

    def candidates(piece: str, lo: int, hi: int) -> list[_Cand] | None:
        out: dict[Span, _Cand] = {}
        k = text.find(piece, lo)
        while 0 <= k <= hi:
            raw = (k, k + len(piece))
            out[raw] = _Cand(raw, strip_span(text, *raw), 0)
            if len(out) > MAX_CANDIDATES:
                return None
            k = text.find(piece, k + 1)
        for tier, sq in ((1, squeezed), (2, folded)):
            if sq is None:
                continue
            found = sq.find_all(sq.needle(piece), lo, hi, MAX_CANDIDATES)
            if found is None:
                return None
            for raw in found:
                trim = strip_span(text, *raw)
                if not any(c.trim == trim for c in out.values()):
                    out.setdefault(raw, _Cand(raw, trim, tier))
            if len(out) > MAX_CANDIDATES:
                return None
        return sorted(out.values(), key=lambda c: c.raw)

    # ---- candidates with the forward pass -------------------------------------------------
    sets: list[list[_Cand]] = [[] for _ in range(n)]
    full_link: list[bool] = [True] * n  # link from the previous chain member is unbroken
    prev: int | None = None  # index of the previous chunk that has candidates
    broken = False
    for i, piece in enumerate(chunks):
        if status[i] == EMPTY:
            continue
        if prev is None:
            lo, hi = 0, (first_ns if covers and not broken else len(text))
        else:
            ps = sets[prev]
            lo = min(p.raw[0] for p in ps)
            if not broken and max_overlap is not None:
                lo = max(lo, min(p.raw[1] for p in ps) - max_overlap)
            hi = max(next_ns(p.trim[1]) for p in ps) if (covers and not broken) else len(text)
        found = candidates(piece, lo, hi)
        if found is None:
            status[i] = AMBIGUOUS  # too many copies to consider: refused
            broken = True
            continue
        if prev is None and covers and not broken:
            found = [c for c in found if c.trim[0] <= first_ns]
        elif prev is not None:
            found = [c for c in found if any(compatible(p, c, not broken) for p in sets[prev])]
        if not found:
            broken = True
            continue
        sets[i] = found
        full_link[i] = not broken
        prev, broken = i, False
    chain = [i for i in range(n) if sets[i]]
    ends_fixed = covers and len(chain) == sum(1 for s in status if s != EMPTY)  # nothing dropped

    def backward() -> None:
        if chain and ends_fixed:
            sets[chain[-1]] = [c for c in sets[chain[-1]] if c.trim[1] >= last_ns_end]
        for a, b in zip(reversed(chain[:-1]), reversed(chain[1:])):
            sets[a] = [p for p in sets[a] if any(compatible(p, c, full_link[b]) for c in sets[b])]

    def forward() -> None:
        for a, b in zip(chain, chain[1:]):
            sets[b] = [c for c in sets[b] if any(compatible(p, c, full_link[b]) for p in sets[a])]

    backward()
    if any(len({c.tier for c in sets[i]}) > 1 for i in chain):
        for i in chain:
            if sets[i]:
                best = min(c.tier for c in sets[i])
                sets[i] = [c for c in sets[i] if c.tier == best]
        forward()
        backward()

    spans: list[Span | None] = [None] * n
    positions: dict[int, list[int]] = {}
    for i in chain:
        distinct = sorted({c.trim for c in sets[i]})
        if len(distinct) == 1 and distinct[0][1] > distinct[0][0]:
            spans[i], status[i] = distinct[0], PLACED
        elif len(distinct) > 1:
            status[i] = AMBIGUOUS
            positions[i] = [s for s, _ in distinct]
        else:
            status[i] = UNALIGNED
    return Alignment(spans, status, positions)


def align_chunks(text: str, chunks: list[str], max_overlap: int | None = None, covers: bool = False) -> list[Span | None]:
    """Spans of :func:`align` (None for every chunk not placed unambiguously)."""
    return align(text, chunks, max_overlap=max_overlap, covers=covers).spans


def placed(text: str, pieces: list[str], raw_spans: list[Span]) -> Alignment:
    """An :class:`Alignment` of verified raw spans (trimmed of outer whitespace).

    A span whose source text is whitespace only is ``"empty"`` when its piece is too (else
    ``"unaligned"``); any other span is placed, even when the piece's text is empty (a
    token window whose tokens all decode to nothing, e.g. ``[UNK]``, still covers that
    source text)."""
    spans: list[Span | None] = []
    status: list[str] = []
    for piece, raw in zip(pieces, raw_spans):
        trim = strip_span(text, *raw)
        if trim[1] > trim[0]:
            spans.append(trim)
            status.append(PLACED)
        else:
            spans.append(None)
            status.append(EMPTY if not piece.strip() else UNALIGNED)
    return Alignment(spans, status)
