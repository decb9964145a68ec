"""Shared helpers for structure-aware chunkers: lines with offsets, a fence-aware markdown
block scanner, greedy packing of whole blocks under a size limit, and the recursive fallback.

Everything works on exact code-point offsets into the document text; nothing is located by
searching for a chunk's text.

Markdown recognised by :func:`markdown_blocks` (a pragmatic subset of CommonMark/GFM):

* ATX headings: 1-6 ``#`` after at most 3 spaces of indentation, followed by whitespace or
  the end of the line; an optional closing ``#`` sequence is dropped from the title.
  Setext headings (underlined with ``===``/``---``) are not recognised.
* fenced code blocks: an opening run of at least 3 backticks or tildes (any indentation);
  the block ends at a line holding only a run of the same character at least as long, or at
  the end of the document when unclosed. Nothing inside a fence is a heading or a table.
* GFM pipe tables: a header line containing ``|`` followed by a delimiter row
  (``| --- | :-: |``) with the same number of cells; the table continues over the following
  non-blank lines that contain ``|``.
* lists: a block starting with a list marker (``-``, ``*``, ``+``, ``1.``, ``1)``) continues
  over blank lines while the next non-blank line is another list item or is indented by at
  least 2 spaces (item continuation, nested lists, indented fences).
* paragraphs: runs of other non-blank lines; a heading, a fence or a table start ends them.

A byte-order mark (U+FEFF) at the start of a line -- a file saved "with BOM", or files
concatenated with theirs -- is ignored when recognising structure (``"\ufeff# Title"`` is
a heading, a line holding only the mark is blank), but stays in the text: offsets are
never shifted, and a block starting on such a line starts at the line start (the mark
included).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass
from typing import Callable, Sequence

from harness.text.units import SizeCounter, strip_span
from harness.types import Span

#: Source-code file extensions -> LangChain ``Language`` value (used by the code chunker's
#: ``language="auto"`` and by chunkers that must not read ``#`` comments as headings).
EXTENSION_LANGUAGES = {
    ".py": "python", ".pyi": "python", ".pyw": "python",
    ".js": "js", ".mjs": "js", ".cjs": "js", ".jsx": "js",
    ".ts": "ts", ".tsx": "ts",
    ".go": "go", ".java": "java", ".kt": "kotlin", ".kts": "kotlin",
    ".php": "php", ".proto": "proto", ".r": "r", ".rb": "ruby", ".rs": "rust",
    ".scala": "scala", ".swift": "swift", ".html": "html", ".htm": "html", ".sol": "sol",
    ".cs": "csharp", ".cbl": "cobol", ".cob": "cobol", ".c": "c", ".h": "c",
    ".cpp": "cpp", ".cc": "cpp", ".cxx": "cpp", ".hpp": "cpp", ".hh": "cpp",
    ".lua": "lua", ".ex": "elixir", ".exs": "elixir", ".ps1": "powershell",
}  # fmt: skip

#: ``Document.metadata["type"]`` values that mark source code.
CODE_TYPES = frozenset({"python", "code"})


def extension(doc_id: str) -> str:
    """Lower-case file extension of a doc id including the dot (``"a/B.PY"`` -> ``".py"``), or ""."""
    base = doc_id.rsplit("/", 1)[-1]
    return "." + base.rsplit(".", 1)[-1].lower() if "." in base.strip(".") else ""


def is_source_code(doc_id: str, metadata) -> bool:
    """True for documents that are program source (by extension or ``metadata["type"]``)."""
    return extension(doc_id) in EXTENSION_LANGUAGES or (metadata or {}).get("type") in CODE_TYPES


_NEWLINE = re.compile(r"\r\n|\r|\n")

#: A caption line: "Table 2: ...", "Fig. 3 - ...", "Figure 1. ..." (case-insensitive): a
#: paragraph whose start matches this, next to a table or an image, is its caption. One
#: definition for the extractors (:mod:`harness.ingest`) and the modality chunker, which
#: finds captions in plain documents too.
CAPTION = re.compile(r"^\s*(?:table|tab\.|figure|fig\.)\s*\d+[a-z]?\s*[:.\-\u2013\u2014]?\s", re.IGNORECASE)
_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
_CLOSING_HASHES = re.compile(r"(?:^|[ \t]+)#+$")
_FENCE_OPEN = re.compile(r"^([ \t]*)(`{3,}|~{3,})(.*)$")
_LIST_ITEM = re.compile(r"^ {0,3}(?:[-*+]|\d{1,9}[.)])(?:[ \t]+|$)")
_DELIM_CELL = re.compile(r"^\s*:?-+:?\s*$")

#: The byte-order mark; ignored at the start of a line when recognising structure.
BOM = "\ufeff"


def structural(line: str) -> str:
    """``line`` as structure is recognised in it: one leading byte-order mark dropped."""
    return line[1:] if line.startswith(BOM) else line


@dataclass(frozen=True, slots=True)
class Line:
    """One line of a text.

    Attributes:
        start: offset of the first character.
        end: offset just before the line terminator (``\\n``, ``\\r\\n`` or ``\\r``).
        next: offset of the next line's first character (``end`` + terminator length).
    """

    start: int
    end: int
    next: int


def split_lines(text: str) -> list[Line]:
    """All lines of ``text`` with exact offsets (terminators ``\\r\\n``, ``\\r``, ``\\n``).

    A text ending with a terminator has no extra empty last line; ``""`` has no lines.
    These are the line breaks Python's tokenizer (and so ``ast`` line numbers) uses.
    """
    lines: list[Line] = []
    pos = 0
    for m in _NEWLINE.finditer(text):
        lines.append(Line(pos, m.start(), m.end()))
        pos = m.end()
    if pos < len(text):
        lines.append(Line(pos, len(text), len(text)))
    return lines


class LineIndex:
    """Maps offsets to 1-based line numbers with a precomputed start table."""

    def __init__(self, lines: Sequence[Line]) -> None:
        self._starts = [ln.start for ln in lines]

    def line_of(self, offset: int) -> int:
        """1-based line number holding ``offset``."""
        return max(1, bisect_right(self._starts, offset))


@dataclass(frozen=True, slots=True)
class Block:
    """One markdown block.

    Attributes:
        start, end: code-point span (first line start to last line end, without the final
            line terminator).
        kind: ``heading``, ``fence``, ``table``, ``list`` or ``paragraph``.
        level: heading level 1-6 (0 for other kinds).
        title: heading text without ``#`` marks ("" for other kinds).
        first_line, last_line: 0-based indices of the block's first and last line.
    """

    start: int
    end: int
    kind: str
    level: int = 0
    title: str = ""
    first_line: int = 0
    last_line: int = 0


def parse_heading(line: str) -> tuple[int, str] | None:
    """``(level, title)`` of an ATX heading line, else None (``"# x"`` -> ``(1, "x")``).

    A leading byte-order mark is ignored (``"\ufeff# x"`` -> ``(1, "x")``).
    """
    m = _HEADING.match(structural(line))
    if not m:
        return None
    title = (m.group(2) or "").strip()
    title = _CLOSING_HASHES.sub("", title).strip()  # "# Title ##" -> "Title"; "# C#" keeps "C#"
    return len(m.group(1)), title


def _split_cells(line: str) -> list[str]:
    body = line.strip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|") and not body.endswith("\\|"):
        body = body[:-1]
    return re.split(r"(?<!\\)\|", body)


def is_table_start(header: str, delimiter: str) -> bool:
    """True when ``header`` + ``delimiter`` open a GFM pipe table (cell counts must match)."""
    if "|" not in header or "|" not in delimiter:
        return False
    cells = _split_cells(delimiter)
    if not cells or not all(_DELIM_CELL.match(c) for c in cells):
        return False
    return len(cells) == len(_split_cells(header))


def fence_map(text: str, lines: Sequence[Line]) -> list[int]:
    """For each line, the index of the fence's opening line if the line is part of a fenced
    code block (delimiters included), else -1."""
    out = [-1] * len(lines)
    i = 0
    while i < len(lines):
        m = _FENCE_OPEN.match(structural(text[lines[i].start : lines[i].end]))
        if m and not (m.group(2)[0] == "`" and "`" in m.group(3)):
            char, length = m.group(2)[0], len(m.group(2))
            closer = re.compile(r"^[ \t]*" + re.escape(char) + "{" + str(length) + r",}[ \t]*$")
            j = i + 1
            while j < len(lines) and not closer.match(structural(text[lines[j].start : lines[j].end])):
                j += 1
            last = min(j, len(lines) - 1)
            for k in range(i, last + 1):
                out[k] = i
            i = last + 1
            continue
        i += 1
    return out


def markdown_blocks(text: str, lines: Sequence[Line] | None = None) -> list[Block]:
    """Split markdown ``text`` into blocks (see the module docstring for the rules).

    Blank lines are in no block; every non-blank line is in exactly one block, so the
    blocks plus whitespace cover the text. Blocks are in document order. A byte-order
    mark at a line start is not text here (see the module docstring).
    """
    lines = split_lines(text) if lines is None else lines
    n = len(lines)
    src = [structural(text[ln.start : ln.end]) for ln in lines]
    blank = [not s.strip() for s in src]
    fence = fence_map(text, lines)

    def heading(i: int) -> tuple[int, str] | None:
        return None if fence[i] >= 0 else parse_heading(src[i])

    def table_start(i: int) -> bool:
        return i + 1 < n and fence[i] < 0 and fence[i + 1] < 0 and is_table_start(src[i], src[i + 1])

    def indent(i: int) -> int:
        s = src[i]
        return len(s) - len(s.lstrip(" \t"))

    def fence_end(i: int) -> int:
        j = i
        while j + 1 < n and fence[j + 1] == fence[i]:
            j += 1
        return j

    blocks: list[Block] = []

    def add(kind: str, i: int, j: int, level: int = 0, title: str = "") -> None:
        blocks.append(Block(lines[i].start, lines[j].end, kind, level, title, i, j))

    i = 0
    while i < n:
        if blank[i]:
            i += 1
            continue
        if fence[i] == i:
            j = fence_end(i)
            add("fence", i, j)
            i = j + 1
            continue
        h = heading(i)
        if h is not None:
            add("heading", i, i, h[0], h[1])
            i += 1
            continue
        if table_start(i):
            j = i + 1
            while j + 1 < n and not blank[j + 1] and fence[j + 1] < 0 and "|" in src[j + 1] and heading(j + 1) is None:
                j += 1
            add("table", i, j)
            i = j + 1
            continue
        if _LIST_ITEM.match(src[i]):
            j, k = i, i + 1
            while k < n:
                if fence[k] == k:
                    if indent(k) < 2:
                        break
                    j = k = fence_end(k)
                    k += 1
                    continue
                if blank[k]:
                    m = k
                    while m < n and blank[m]:
                        m += 1
                    if m < n and heading(m) is None and (_LIST_ITEM.match(src[m]) or indent(m) >= 2):
                        k = m
                        continue
                    break
                if heading(k) is not None or table_start(k):
                    break
                j = k
                k += 1
            add("list", i, j)
            i = j + 1
            continue
        j = i
        while j + 1 < n and not blank[j + 1] and fence[j + 1] < 0 and heading(j + 1) is None and not table_start(j + 1):
            j += 1
        add("paragraph", i, j)
        i = j + 1
    return blocks


def pack(units: Sequence[Span], fits: Callable[[int, int], bool]) -> list[list[int]]:
    """Greedily group consecutive units while the group's whole extent still fits.

    Args:
        units: spans in document order (each unit is assumed to fit on its own).
        fits: ``fits(start, end)`` -> True when the source text ``[start, end)`` respects
            the size limit.

    Returns:
        Groups of unit indices, in order; every unit is in exactly one group.
    """
    groups: list[list[int]] = []
    current: list[int] = []
    for i, (_, end) in enumerate(units):
        if current and fits(units[current[0]][0], end):
            current.append(i)
            continue
        if current:
            groups.append(current)
        current = [i]
    if current:
        groups.append(current)
    return groups


class SizeLimit:
    """``fits(start, end)`` for one text, counter and limit (chars measured without tokenizing)."""

    def __init__(self, text: str, counter: SizeCounter, limit: int) -> None:
        self.text = text
        self.counter = counter
        self.limit = limit

    def size(self, start: int, end: int) -> int:
        """Size of the stripped source text ``[start, end)`` in the counter's unit."""
        s, e = strip_span(self.text, start, end)
        if self.counter.unit == "chars":
            return e - s
        return self.counter.count(self.text[s:e])

    def fits(self, start: int, end: int) -> bool:
        """True when the stripped source text ``[start, end)`` is within the limit."""
        s, e = strip_span(self.text, start, end)
        if self.counter.unit == "chars":
            return e - s <= self.limit
        return self.counter.count(self.text[s:e]) <= self.limit


def split_region(text: str, start: int, end: int, splitter) -> list[Span]:
    """Chunk spans of ``text[start:end]`` from a :class:`RecursiveChunker` ``splitter``,
    shifted to document offsets (the brief's recursive fallback)."""
    return [(start + s, start + e) for s, e in splitter.split_spans(text[start:end])]


def stripped(text: str, start: int, end: int) -> Span | None:
    """``[start, end)`` without outer whitespace, or None when it is all whitespace."""
    s, e = strip_span(text, start, end)
    return (s, e) if e > s else None
