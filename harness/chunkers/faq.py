"""FAQ chunking: one chunk per question-answer pair, exact spans.

A pair starts at a question line and runs to the line before the next question or heading:

* question lines: ``Q: ...``, ``Question: ...``, optionally bold (``**Q: ...?**``,
  ``**Q:** ...``, ``__Q: ...__``), at most 3 spaces of indentation;
* question headings: an ATX heading whose title ends with ``?`` (``## How do I retry?``).

Lines inside fenced code blocks are never questions or headings, and in program source
(``.py`` etc., see :func:`harness.text.blocks.is_source_code`) ``#`` lines are comments.
The answer (``A: ...`` or any text) is everything up to the next question line or ATX
heading of any level.

Text outside pairs (a title, an introduction, section headings such as ``## Operations``)
is not attached to a pair: each such region is chunked on its own by the recursive fallback
(:class:`~harness.chunkers.recursive.RecursiveChunker`, same size and unit), so a pair's chunk
holds exactly one question and its answer. A pair larger than ``max_chunk_size`` is cut by
the same fallback; every piece after the first (which starts with the question) gets the
question line as ``metadata["prefix"]`` (question line + ``"\\n\\n"``), so each piece's
embedded text names the question it answers. The prefix counts against
``max_chunk_size``: those later pieces are cut to the room it leaves, and a question line
longer than half the limit is cut to that half (``metadata["prefix_truncated"]``, see
:func:`harness.chunkers.base.fit_prefix`).

Source of the method: per-question-answer-pair chunking is a practitioners' technique for
FAQ and knowledge-base content, not taken from a library; the detection rules above are
this project's.
"""

from __future__ import annotations

import re

from harness.chunkers.base import MIN_TOKEN_LIMIT, SizedChunker, fit_prefix, measure
from harness.chunkers.recursive import RecursiveChunker
from harness.text.blocks import (
    SizeLimit,
    fence_map,
    is_source_code,
    parse_heading,
    split_lines,
    split_region,
    stripped,
)
from harness.text.units import get_counter
from harness.types import Chunk, Document

_QUESTION = re.compile(r"^[ \t]{0,3}(?:\*\*|__)?[ \t]*(?:Q|Question)[ \t]*:(?:\*\*|__)?[ \t]*(?P<q>\S.*?)[ \t]*(?:\*\*|__)?[ \t]*$")


def question_of(line: str) -> str | None:
    """The question text of a question line (``"**Q: Why?**"`` -> ``"Why?"``), else None."""
    m = _QUESTION.match(line)
    return m.group("q") if m else None


def faq_regions(text: str, headings: bool = True) -> list[tuple[int, int, str | None, int]]:
    """Regions ``(start, end, question, question_line_end)`` covering ``text`` in order.

    With ``headings=False`` (program source, whose ``#`` lines are comments) ATX headings
    are neither question headings nor pair ends.

    ``question`` is None for text outside pairs (``question_line_end`` is then ``start``).
    Region bounds are line starts (the last region ends at ``len(text)``); regions may
    contain only whitespace.
    """
    lines = split_lines(text)
    fence = fence_map(text, lines)
    marks: list[tuple[int, str | None, int]] = []  # line index, question or None (heading), line end
    for i, ln in enumerate(lines):
        if fence[i] >= 0:
            continue
        src = text[ln.start : ln.end]
        heading = parse_heading(src) if headings else None
        if heading is not None:
            title = heading[1]
            marks.append((i, title if title.endswith("?") else None, ln.end))
            continue
        q = question_of(src)
        if q is not None:
            marks.append((i, q, ln.end))
    regions: list[tuple[int, int, str | None, int]] = []
    previous = 0
    bounds = [lines[i].start for i, _, _ in marks] + [len(text)]
    for (i, q, line_end), end in zip(marks, bounds[1:]):
        start = lines[i].start
        if q is None:
            continue  # a plain heading: part of the outside text that follows
        if start > previous:
            regions.append((previous, start, None, previous))
        regions.append((start, end, q, line_end))
        previous = end
    if previous < len(text):
        regions.append((previous, len(text), None, previous))
    return regions


class FAQChunker(SizedChunker):
    """One chunk per question-answer pair; outside text and oversized pairs by recursive fallback.

    Metadata: ``question`` (the question text without ``Q:`` and emphasis, None for outside
    text), ``kind`` (``qa`` or ``text``), and for pieces of a split pair ``part`` (1-based)
    and ``fallback: True``, and ``size``, the size of the embedded text in ``unit``.
    ``max_chunk_size`` applies to the embedded text, the question prefix on later pieces
    of a split pair included. Chunks are single spans in
    document order and cover every non-whitespace character. Documents without questions
    are chunked entirely by the recursive fallback.

    Args:
        max_chunk_size: maximum size of a chunk's embedded text in ``unit``, >= 1 (>= 4 for
            tokens).
        unit: ``"tokens"``, ``"chars"`` or ``"words"``.
        tokenizer: ``"model"`` (embedding model's WordPiece) or ``"cl100k_base"``.

    Raises:
        ValueError: a parameter outside its range (the message names it).
    """

    name = "faq"
    contiguous = True
    partitions = True

    def __init__(self, max_chunk_size: int = 254, unit: str = "tokens", tokenizer: str = "model") -> None:
        self._init_size(max_chunk_size, unit, tokenizer)

    def chunk(self, doc: Document) -> list[Chunk]:
        text = doc.text
        counter = get_counter(self.unit, self.tokenizer)
        limit = SizeLimit(text, counter, self.max_chunk_size)
        splitter = RecursiveChunker(chunk_size=self.max_chunk_size, unit=self.unit, tokenizer=self.tokenizer)
        out: list[Chunk] = []
        for start, end, question, line_end in faq_regions(text, headings=not is_source_code(doc.doc_id, doc.metadata)):
            if question is None:
                for span in split_region(text, start, end, splitter):
                    out.append(Chunk.from_spans(doc, [span], metadata={"kind": "text", "question": None, "unit": self.unit}))
                continue
            span = stripped(text, start, end)
            if span is None:  # pragma: no cover - a question line is never blank
                continue
            meta = {"kind": "qa", "question": question, "unit": self.unit}
            if limit.fits(*span):
                out.append(Chunk.from_spans(doc, [span], metadata=meta))
                continue
            q_span = stripped(text, start, line_end)
            prefix, flags = fit_prefix(text[q_span[0] : q_span[1]] + "\n\n", counter, self.max_chunk_size)
            pieces = split_region(text, start, end, splitter)
            if len(pieces) > 1 and prefix:  # the pieces after the first get the prefix: cut them to the room it leaves
                room = max(self.max_chunk_size - measure(counter, prefix), MIN_TOKEN_LIMIT if self.unit == "tokens" else 1)
                rest = RecursiveChunker(chunk_size=room, unit=self.unit, tokenizer=self.tokenizer)
                pieces = pieces[:1] + split_region(text, pieces[1][0], end, rest)
            for part, piece in enumerate(pieces, 1):
                pmeta = {**meta, "part": part, "fallback": True}
                if piece[0] == span[0]:
                    out.append(Chunk.from_spans(doc, [piece], metadata=pmeta))
                else:
                    pmeta.update(flags)
                    if prefix:
                        pmeta["prefix"] = prefix
                    out.append(Chunk.from_spans(doc, [piece], text=prefix + text[piece[0] : piece[1]], metadata=pmeta))
        return self.finalize(doc, out)
