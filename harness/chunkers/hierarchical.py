"""Hierarchical ("small-to-big", parent/child) chunking.

Each document is cut into *parents* -- large windows, sections under detected headings,
or regions between user-given markers -- and every parent into small *children*. The
index holds the children (precise matching); what is handed to the generator is the
parent of each hit, deduplicated, or a bounded window around the hit. Metrics score what
is handed over, so this strategy is measured on the same footing as the others.

Sources: LlamaIndex's HierarchicalNodeParser / AutoMergingRetriever and LangChain's
ParentDocumentRetriever describe the parent/child pattern; "small-to-big" retrieval is
the name used in the LlamaIndex documentation.
"""

from __future__ import annotations

import re

from harness.chunkers.base import Chunker, check_count_below, check_limit, check_read, check_size
from harness.chunkers.recursive import RecursiveChunker
from harness.text.units import check_unit, strip_span
from harness.types import Chunk, Document, Span

MODES = ("window", "headings", "markers")
RETURNS = ("parent", "window", "child")

_FENCE = re.compile(r"^\ufeff?\s{0,3}(```|~~~)")
_ATX = re.compile(r"^\ufeff?\s{0,3}#{1,6}\s+\S")
_WIKI = re.compile(r"^\ufeff?\s*(=+)\s+\S.*?\s+\1\s*$")
_NUMBERED = re.compile(r"^\ufeff?\s*\d+(\.\d+)*\.?\s+[A-Z][^\n]{0,78}$")


def heading_starts(text: str, atx: bool = True) -> list[int]:
    """Offsets of lines that look like headings (automatic detection).

    A line is a heading when it is, outside fenced code blocks (``` or ~~~), with a
    byte-order mark (U+FEFF) at the line start ignored:

    * a Markdown ATX heading (``#`` to ``######`` followed by text);
    * a Setext heading (a text line underlined by ``===`` or ``---``);
    * a wikitext heading (``= Title =``, ``== Section ==``);
    * a numbered title (``2.1 Install on Linux``) of at most 80 characters, capitalised,
      not ending in sentence punctuation, with a blank line (or the document start) before.

    Args:
        text: the document text.
        atx: detect ``#`` headings (off for source code, where ``#`` starts a comment).

    Returns:
        Sorted code-point offsets of the heading lines' first characters.
    """
    starts: list[int] = []
    in_fence = False
    lines = text.splitlines(keepends=True)
    pos = 0
    prev_blank = True
    for i, line in enumerate(lines):
        body = line.rstrip("\r\n")
        if _FENCE.match(body):
            in_fence = not in_fence
        elif not in_fence:
            nxt = lines[i + 1].rstrip("\r\n") if i + 1 < len(lines) else ""
            if (
                (atx and _ATX.match(body))
                or _WIKI.match(body)
                or (body.strip() and re.fullmatch(r"\s{0,3}(=+|-+)\s*", nxt) and len(nxt.strip()) >= 3 and not body.lstrip().startswith(("-", "*", "|")))
                or (prev_blank and _NUMBERED.match(body) and not body.rstrip().endswith((".", ",", ";", ":", "!", "?")))
            ):
                starts.append(pos)
        prev_blank = not body.strip()
        pos += len(line)
    return starts


class HierarchicalChunker(Chunker):
    """Parent/child chunking with small-to-big expansion at retrieval time.

    Args:
        mode: how parents are formed: ``"window"`` (recursive windows of ``parent_size``),
            ``"headings"`` (sections between automatically detected headings, see
            :func:`heading_starts`), or ``"markers"`` (a new parent at every match of any
            regex in ``markers``). Parents larger than ``parent_size`` are split with the
            recursive algorithm.
        parent_size: maximum parent size in ``unit``, > ``child_size``.
        child_size: maximum child (indexed chunk) size in ``unit``, >= 1 (>= 4 for tokens);
            every child records it as ``metadata["size"]``.
        child_overlap: overlap between consecutive children, ``0 <= child_overlap < child_size``.
        unit: ``"tokens"``, ``"chars"`` or ``"words"``.
        tokenizer: ``"model"`` or ``"cl100k_base"``.
        markers: regexes (Python ``re``, multiline) that start a new parent in ``markers`` mode.
        return_unit: what a hit expands to: ``"parent"`` (its parent), ``"window"`` (the
            child extended by ``window_chars`` characters on each side, clipped to its
            parent), or ``"child"`` (no expansion). Duplicates are removed keeping the best rank.
        window_chars: characters added on each side in ``window`` mode, >= 0.
        fetch_multiplier: the retriever fetches ``fetch_multiplier * k`` children so that k
            distinct parents remain after deduplication, >= 1.

    Raises:
        ValueError: a parameter outside its range (the message names it), or an invalid
            marker regex.
    """

    name = "hierarchical"

    def __init__(
        self,
        mode: str = "headings",
        parent_size: int = 1024,
        child_size: int = 128,
        child_overlap: int = 0,
        unit: str = "tokens",
        tokenizer: str = "model",
        markers: list[str] | None = None,
        return_unit: str = "parent",
        window_chars: int = 500,
        fetch_multiplier: int = 10,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"chunker.mode must be one of {list(MODES)}, got {mode!r}")
        if return_unit not in RETURNS:
            raise ValueError(f"chunker.return_unit must be one of {list(RETURNS)}, got {return_unit!r}")
        check_unit(unit, tokenizer)
        check_limit("child_size", child_size, unit)
        check_limit("parent_size", parent_size, unit)
        if parent_size <= child_size:
            raise ValueError(f"chunker.parent_size must be > child_size ({child_size}), got {parent_size}")
        check_count_below("child_overlap", child_overlap, child_size, "child_size")
        check_size("window_chars", window_chars, minimum=0)
        check_read("window_chars", window_chars, 500, return_unit == "window", "with chunker.return_unit=window")
        check_read("markers", list(markers or []), [], mode == "markers", "with chunker.mode=markers")
        check_size("fetch_multiplier", fetch_multiplier)
        self.markers = list(markers or [])
        if mode == "markers" and not self.markers:
            raise ValueError("chunker.markers must list at least one regex when mode='markers'")
        try:
            self._marker_res = [re.compile(m, re.MULTILINE) for m in self.markers]
        except re.error as exc:
            raise ValueError(f"chunker.markers holds an invalid regex: {exc}") from exc
        self.mode = mode
        self.parent_size = parent_size
        self.child_size = child_size
        self.child_overlap = child_overlap
        self.unit = unit
        self.tokenizer = tokenizer
        self.return_unit = return_unit
        self.window_chars = window_chars
        self.fetch_multiplier = fetch_multiplier
        self._parent_splitter = RecursiveChunker(chunk_size=parent_size, chunk_overlap=0, unit=unit, tokenizer=tokenizer)
        self._child_splitter = RecursiveChunker(chunk_size=child_size, chunk_overlap=child_overlap, unit=unit, tokenizer=tokenizer)

    def size_limit(self) -> tuple[str, str, int]:
        return (self.unit, self.tokenizer, self.child_size)

    def overlap_limit(self) -> int:
        """``child_overlap`` between consecutive children of one parent (children never cross
        a parent, so none is carried from one parent to the next)."""
        return self.child_overlap

    def overlap_exempt(self, text: str, pos: int) -> bool:
        return self._child_splitter.overlap_exempt(text, pos)

    # -- parents ---------------------------------------------------------------------------
    def _regions(self, text: str, atx: bool) -> list[Span]:
        if self.mode == "window":
            return [(0, len(text))]
        if self.mode == "headings":
            cuts = heading_starts(text, atx=atx)
        else:
            cuts = sorted({m.start() for rx in self._marker_res for m in rx.finditer(text)})
        bounds = sorted({0, *cuts, len(text)})
        return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]

    def parent_spans(self, text: str, atx: bool = True) -> list[Span]:
        """Parent spans of ``text``: regions by mode, each split to ``parent_size``, whitespace-trimmed.

        ``atx=False`` ignores ``#`` headings (used for source code documents).
        """
        out: list[Span] = []
        for a, b in self._regions(text, atx):
            s, e = strip_span(text, a, b)
            if e <= s:
                continue
            for ps, pe in self._parent_splitter.split_spans(text[s:e]):
                out.append((s + ps, s + pe))
        return out

    def chunk(self, doc: Document) -> list[Chunk]:
        """Children of every parent, in document order; each child's ``parent_id`` is its parent's chunk id."""
        out: list[Chunk] = []
        atx = doc.metadata.get("type") != "python" and not doc.doc_id.endswith((".py", ".sh", ".rb", ".pl", ".r"))
        for ps, pe in self.parent_spans(doc.text, atx=atx):
            parent_id = Chunk.from_spans(doc, [(ps, pe)]).chunk_id
            for cs, ce, n, hard in self._child_splitter.split_sized(doc.text[ps:pe]):
                meta = {"parent_span": [ps, pe], "unit": self.unit, "size": n}
                if hard:
                    meta["hard_cut"] = True
                out.append(Chunk.from_spans(doc, [(ps + cs, ps + ce)], metadata=meta, parent_id=parent_id))
        return self.finalize(doc, out)

    # -- small-to-big ----------------------------------------------------------------------
    def expand(self, ranked: list[Chunk], documents: dict[str, Document]) -> list[Chunk]:
        """Replace each ranked child by its parent (or a window around it), keeping the first occurrence."""
        if self.return_unit == "child":
            return ranked
        out: list[Chunk] = []
        seen: set[str] = set()
        for child in ranked:
            doc = documents[child.doc_id]
            ps, pe = child.metadata.get("parent_span", (child.start, child.end))
            if self.return_unit == "parent":
                span = (ps, pe)
            else:
                span = strip_span(doc.text, max(ps, child.start - self.window_chars), min(pe, child.end + self.window_chars))
            returned = Chunk.from_spans(doc, [span], metadata={"expanded_from": child.chunk_id, "return_unit": self.return_unit}, parent_id=child.parent_id)
            if returned.chunk_id in seen:
                continue
            seen.add(returned.chunk_id)
            out.append(returned)
        return out
