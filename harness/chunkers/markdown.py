"""Markdown header-aware chunking: sections by ATX headings, whole blocks packed up to a size.

The document is cut at every ATX heading whose level is in ``[min_header_level,
max_header_level]``; a ``#`` line inside a fenced code block is code, not a heading. Inside a
section the blocks (paragraphs, fenced code, pipe tables, lists; see
:mod:`harness.text.blocks`) are packed greedily, whole, up to ``max_chunk_size``. A block
that fits the limit is never split; a block that does not is cut by the recursive fallback
(:class:`~harness.chunkers.recursive.RecursiveChunker` with the same unit and tokenizer).
Each chunk records its ``section_path``, the titles of the enclosing headings joined with
``" > "`` (e.g. ``"Guide > Install > Linux"``).

The idea follows LangChain's ``MarkdownHeaderTextSplitter`` (split on headers, keep the header
hierarchy as metadata) followed by size-bounded splitting, but here chunks are exact spans
and code blocks/tables are kept whole.
"""

from __future__ import annotations

from harness.chunkers.base import Chunker, check_limit, fit_prefix, measure
from harness.chunkers.recursive import RecursiveChunker
from harness.params import Param
from harness.text.blocks import (
    Block,
    SizeLimit,
    is_source_code,
    markdown_blocks,
    split_lines,
    split_region,
    stripped,
)
from harness.text.units import check_unit, get_counter, strip_span
from harness.types import Chunk, Document, Span


class MarkdownChunker(Chunker):
    """Header-aware markdown chunking with whole-block packing and exact spans.

    Rules:

    * A chunk never spans two sections, except that heading lines are "sticky": a heading
      is packed with the block that follows it, so a heading with no body of its own
      (``# Guide`` directly followed by ``## Install``) is carried into the next section's
      first chunk, whose ``section_path`` is that of its last block (``"Guide > Install"``).
      A heading that cannot share a chunk with the next block (the two together exceed the
      limit while the block alone fits) becomes its own chunk.
    * Blocks are packed whole, in order, while the chunk's source text (from its first
      block's start to its last block's end, outer whitespace stripped) fits
      ``max_chunk_size``. A fenced block or a table that fits is never split.
    * A block larger than ``max_chunk_size`` is split by the recursive fallback; those
      chunks have ``metadata["fallback"]`` True. The headings directly before it join its
      first piece when that fits, else they form a chunk of their own.
    * Headings outside ``[min_header_level, max_header_level]`` are ordinary (sticky) blocks:
      they neither start a section nor appear in ``section_path``.
    * Text without headings (plain prose, logs) is packed the same way with
      ``section_path == ""``. Program source (a code extension such as ``.py``/``.js`` or
      ``metadata["type"] == "python"``) is treated the same way: its ``#`` lines are
      comments, not headings.
    * ``prepend_section_path=True``: the embedded text is ``section_path + "\\n\\n" +
      source text`` (declared as ``metadata["prefix"]``; chunks with an empty path get no
      prefix). Spans stay true to the source, and ``max_chunk_size`` applies to the
      embedded text, prefix included: blocks are packed while prefix + source text fits,
      and an oversized block is cut to the room the prefix leaves. A path longer than
      half of ``max_chunk_size`` is cut to that half (``metadata["prefix_truncated"]``;
      dropped, ``metadata["prefix_dropped"]``, when not even a word fits), see
      :func:`harness.chunkers.base.fit_prefix`; ``section_path`` stays whole.

    Chunks are single contiguous spans in document order and cover every non-whitespace
    character (``contiguous`` and ``partitions``).

    Every chunk records ``metadata["size"]``: the size of its embedded text in ``unit``.

    Args:
        max_chunk_size: maximum size of a chunk's embedded text in ``unit``, >= 1 (>= 4
            for tokens).
        unit: ``"tokens"``, ``"chars"`` or ``"words"``.
        tokenizer: ``"model"`` (embedding model's WordPiece) or ``"cl100k_base"``.
        prepend_section_path: prefix each chunk's embedded text with its section path.
        min_header_level: shallowest heading level (1-6) that starts a section.
        max_header_level: deepest heading level (``min_header_level``-6) that starts a section.

    Raises:
        ValueError: a parameter outside its range (the message names it).
    """

    name = "markdown"
    contiguous = True
    partitions = True

    def __init__(
        self,
        max_chunk_size: int = 254,
        unit: str = "tokens",
        tokenizer: str = "model",
        prepend_section_path: bool = False,
        min_header_level: int = 1,
        max_header_level: int = 6,
    ) -> None:
        check_unit(unit, tokenizer)
        check_limit("max_chunk_size", max_chunk_size, unit)
        Param("prepend_section_path", "bool", need="a boolean").check(prepend_section_path, "chunker")
        Param("min_header_level", "int", low=1, high=6).check(min_header_level, "chunker")
        Param("max_header_level", "int", low=min_header_level, high=6, low_name="min_header_level").check(max_header_level, "chunker")
        self.max_chunk_size = max_chunk_size
        self.unit = unit
        self.tokenizer = tokenizer
        self.prepend_section_path = prepend_section_path
        self.min_header_level = min_header_level
        self.max_header_level = max_header_level

    def size_limit(self) -> tuple[str, str, int]:
        return (self.unit, self.tokenizer, self.max_chunk_size)

    # -- structure -------------------------------------------------------------------------
    def _is_section_heading(self, block: Block) -> bool:
        return block.kind == "heading" and self.min_header_level <= block.level <= self.max_header_level

    def segments(self, text: str, headings: bool = True) -> list[list[tuple[Block, str]]]:
        """Blocks of ``text`` grouped into sections, each block with the section path in force.

        A new segment starts at a section heading unless the previous block is itself a
        section heading (runs of headings stay together). A heading's own path includes it.
        With ``headings=False`` all blocks form one segment with path ``""``.
        """
        stack: list[tuple[int, str]] = []
        segments: list[list[tuple[Block, str]]] = [[]]
        previous_heading = False
        for block in markdown_blocks(text, split_lines(text)):
            is_heading = headings and self._is_section_heading(block)
            if is_heading:
                if segments[-1] and not previous_heading:
                    segments.append([])
                while stack and stack[-1][0] >= block.level:
                    stack.pop()
                stack.append((block.level, block.title))
            path = " > ".join(title for _, title in stack if title)
            segments[-1].append((block, path))
            previous_heading = is_heading
        return [s for s in segments if s]

    # -- chunking --------------------------------------------------------------------------
    def chunk(self, doc: Document) -> list[Chunk]:
        text = doc.text
        size = self.max_chunk_size
        counter = get_counter(self.unit, self.tokenizer)
        limit = SizeLimit(text, counter, size)
        prefixes: dict[str, tuple[str, dict]] = {}
        splitters: dict[int, RecursiveChunker] = {}
        out: list[tuple[Span, str, int, bool]] = []  # span, section path, blocks, fallback

        def prefix_of(path: str) -> tuple[str, dict]:
            """Embedded prefix of a chunk with this section path (cut to half the limit)."""
            if not (self.prepend_section_path and path):
                return "", {}
            if path not in prefixes:
                prefixes[path] = fit_prefix(path + "\n\n", counter, size)
            return prefixes[path]

        def fits(start: int, end: int, path: str) -> bool:
            """True when prefix + the stripped source text ``[start, end)`` fits the limit."""
            pre = prefix_of(path)[0]
            if not pre:
                return limit.fits(start, end)
            s, e = strip_span(text, start, end)
            return measure(counter, pre + text[s:e]) <= size

        def splitter_for(path: str) -> RecursiveChunker:
            """Recursive fallback sized to the room the path's prefix leaves."""
            room = size - measure(counter, prefix_of(path)[0])
            room = max(room, 4 if self.unit == "tokens" else 1)  # the last resort is finalize's hard cut
            if room not in splitters:
                splitters[room] = RecursiveChunker(chunk_size=room, unit=self.unit, tokenizer=self.tokenizer)
            return splitters[room]

        for seg in self.segments(text, headings=not is_source_code(doc.doc_id, doc.metadata)):
            current: list[int] = []

            def flush(group: list[int]) -> None:
                if group:
                    span = stripped(text, seg[group[0]][0].start, seg[group[-1]][0].end)
                    if span:
                        out.append((span, seg[group[-1]][1], len(group), False))

            def heading_tail(group: list[int]) -> list[int]:
                k = len(group)
                while k > 0 and seg[group[k - 1]][0].kind == "heading":
                    k -= 1
                return group[k:]

            for idx, (block, path) in enumerate(seg):
                if fits(block.start, block.end, path):
                    if current and fits(seg[current[0]][0].start, block.end, path):
                        current.append(idx)
                        continue
                    tail = heading_tail(current)
                    if tail and fits(seg[tail[0]][0].start, block.end, path):
                        flush(current[: len(current) - len(tail)])
                        current = tail + [idx]
                    else:
                        flush(current)
                        current = [idx]
                    continue
                tail = heading_tail(current)
                flush(current[: len(current) - len(tail)])
                pieces = split_region(text, block.start, block.end, splitter_for(path))
                if tail and pieces and fits(seg[tail[0]][0].start, pieces[0][1], path):
                    pieces[0] = (seg[tail[0]][0].start, pieces[0][1])
                else:
                    flush(tail)
                for span in pieces:
                    out.append((span, path, 1, True))
                current = []
            flush(current)

        chunks = []
        for span, path, n_blocks, fallback in out:
            meta = {"section_path": path, "unit": self.unit, "n_blocks": n_blocks, "fallback": fallback}
            body = text[span[0] : span[1]]
            prefix, flags = prefix_of(path)
            meta.update(flags)
            if prefix:
                meta["prefix"] = prefix
                chunks.append(Chunk.from_spans(doc, [span], text=prefix + body, metadata=meta))
            else:
                chunks.append(Chunk.from_spans(doc, [span], metadata=meta))
        return self.finalize(doc, chunks)
