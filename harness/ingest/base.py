"""Shared pieces of document extraction: the result type, the error, and a text builder that
records element spans while it writes.

Every extractor returns an :class:`Extraction`: the document text plus ``elements`` (and,
for PDFs, ``pages``) whose ``start``/``end`` are half-open code-point offsets into exactly
that text. Spans are recorded while the text is written, never re-found by searching.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from harness.text.blocks import CAPTION

#: Element types an extractor may record (``Document.metadata["elements"][i]["type"]``).
ELEMENT_TYPES = ("heading", "paragraph", "table", "image", "code", "list")


class IngestError(ValueError):
    """A file cannot be turned into a document; ``kind`` says why, the message names the file.

    Kinds: ``empty`` (no bytes or no text), ``not_utf8``, ``binary``, ``corrupt`` (a PDF or
    JSON that does not parse), ``unsupported`` (an extension no extractor handles),
    ``invalid`` (well-formed but not the expected schema, e.g. a JSON that is not a chat
    export).
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class Extraction:
    """What an extractor made of one file.

    Attributes:
        text: the document text (``Document.text``).
        type: document type for ``Document.metadata["type"]`` (``markdown``, ``html``,
            ``pdf``, ``python``, ``csv``, ``chat``, ``text``).
        elements: ``[{"type", "start", "end", ...extras}]`` in document order; spans index
            into ``text`` and never overlap. Extras by type: heading ``level``; table
            ``format`` (markdown or csv), ``rows`` (data rows), ``columns``, ``caption``
            and ``caption_start``/``caption_end`` (the caption paragraph's span) when a
            caption line is adjacent; image ``name`` and, when known, ``width``/``height``
            (pixels), ``alt``, ``caption``/``caption_start``/``caption_end``, ``ocr``
            (True when OCR text follows the image's label line inside the element);
            PDF elements also ``page`` (1-based).
        pages: PDFs only: ``[{"page": n, "start", "end"}]``, the span of each page that
            produced text (pages without text are left out; ``n_pages`` counts all).
        metadata: further facts (``n_pages``, ``title``).
    """

    text: str
    type: str
    elements: list[dict[str, Any]] = field(default_factory=list)
    pages: list[dict[str, int]] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


class TextBuilder:
    """Append blocks separated by a blank line and record each block's element span.

    Blocks are stripped of surrounding whitespace (code blocks: of surrounding blank
    lines only, so indentation survives); an empty block is dropped. Page spans are
    opened with :meth:`begin_page` and closed with :meth:`end_page`.
    """

    SEPARATOR = "\n\n"

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._pos = 0
        self.elements: list[dict[str, Any]] = []
        self.pages: list[dict[str, int]] = []
        self._page: int | None = None
        self._page_start: int | None = None

    @property
    def text(self) -> str:
        """The text written so far."""
        return "".join(self._parts)

    def add(self, text: str, type: str, **extra: Any) -> dict[str, Any] | None:
        """Append one block and record it as an element of ``type`` with ``extra`` keys.

        Returns:
            The element dict (callers may add keys later), or None for an empty block.

        Raises:
            ValueError: ``type`` is not one of :data:`ELEMENT_TYPES`.
        """
        if type not in ELEMENT_TYPES:
            raise ValueError(f"element type must be one of {ELEMENT_TYPES}, got {type!r}")
        block = _strip_blank_lines(text) if type == "code" else text.strip()
        if not block.strip():
            return None
        if self._parts:
            self._parts.append(self.SEPARATOR)
            self._pos += len(self.SEPARATOR)
        start = self._pos
        self._parts.append(block)
        self._pos += len(block)
        element = {"type": type, "start": start, "end": self._pos, **extra}
        if self._page is not None:
            element["page"] = self._page
            if self._page_start is None:
                self._page_start = start
        self.elements.append(element)
        return element

    def begin_page(self, page: int) -> None:
        """Start page ``page`` (1-based): blocks added until :meth:`end_page` belong to it."""
        self._page, self._page_start = page, None

    def end_page(self) -> None:
        """Close the current page; record its span when it produced any block."""
        if self._page is not None and self._page_start is not None:
            self.pages.append({"page": self._page, "start": self._page_start, "end": self._pos})
        self._page, self._page_start = None, None


def _strip_blank_lines(text: str) -> str:
    lines = text.split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(line.rstrip() for line in lines)


def attach_captions(text: str, elements: list[dict[str, Any]]) -> None:
    """Mark a caption paragraph next to each table or image element (in place).

    A paragraph directly before or after a table/image element (no other element in
    between) whose first line matches :data:`CAPTION` becomes that element's caption:
    ``caption`` (its text), ``caption_start``/``caption_end`` (its span). Tables look
    before first, images after first; a paragraph captions at most one element. Elements
    that already have a ``caption_start`` are left alone.
    """
    used: set[int] = set()
    for i, el in enumerate(elements):
        if el["type"] not in ("table", "image") or "caption_start" in el:
            continue
        order = (i - 1, i + 1) if el["type"] == "table" else (i + 1, i - 1)
        for j in order:
            if 0 <= j < len(elements) and j not in used:
                cand = elements[j]
                if cand["type"] == "paragraph" and CAPTION.match(text[cand["start"] : cand["end"]] + " "):
                    el["caption"] = text[cand["start"] : cand["end"]]
                    el["caption_start"], el["caption_end"] = cand["start"], cand["end"]
                    used.add(j)
                    break


def markdown_table(rows: list[list[str]]) -> str:
    """GFM pipe table text: the first row is the header; cells are single-line.

    Newlines and runs of whitespace inside a cell become one space; ``|`` is escaped as
    ``\\|``; short rows are padded with empty cells. Deterministic for the same rows.

    Raises:
        ValueError: ``rows`` is empty.
    """
    if not rows:
        raise ValueError("markdown_table: no rows")
    width = max(len(r) for r in rows) or 1
    clean = [[_cell(c) for c in r] + [""] * (width - len(r)) for r in rows]
    lines = ["| " + " | ".join(clean[0]) + " |", "|" + "|".join(" --- " for _ in range(width)) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in clean[1:]]
    return "\n".join(lines)


def csv_table(rows: list[list[str]]) -> str:
    """The rows as CSV text (``csv`` module, minimal quoting, ``\\n`` line ends, one line per row).

    Newlines inside a cell become one space, so each record is exactly one line.
    """
    import csv
    import io

    width = max((len(r) for r in rows), default=0)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for r in rows:
        writer.writerow([_cell(c, escape_pipe=False) for c in r] + [""] * (width - len(r)))
    return buf.getvalue().rstrip("\n")


def serialise_table(rows: list[list[str]], table_format: str) -> str:
    """``markdown`` (:func:`markdown_table`) or ``csv`` (:func:`csv_table`) text of ``rows``."""
    return csv_table(rows) if table_format == "csv" else markdown_table(rows)


def _cell(value: Any, escape_pipe: bool = True) -> str:
    s = re.sub(r"\s+", " ", "" if value is None else str(value)).strip()
    return s.replace("|", "\\|") if escape_pipe else s


def decode_utf8(data: bytes, name: str, strip_bom: bool = False) -> str:
    """Decode file bytes as UTF-8 text exactly as stored (no newline translation).

    A leading byte-order mark (U+FEFF) is kept unless ``strip_bom``: formats whose text is
    the file itself (text, markdown, code, CSV) keep it so offsets stay those of the file
    (structure parsers ignore it); formats whose text is rendered from a parse (HTML, chat
    JSON) drop it.

    Raises:
        IngestError: ``empty`` (no bytes or whitespace only), ``binary`` (a NUL byte),
            ``not_utf8`` (the message gives the first bad byte, its byte offset, line and
            column; a UTF-16 file is named as such).
    """
    from harness.text.encoding import describe_not_utf8

    if not data.strip():
        raise IngestError("empty", f"{name}: empty file")
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):  # UTF-16 has NUL bytes: say what it is, not "binary"
        raise IngestError("not_utf8", f"{name}: {describe_not_utf8(data, 0)}")
    nul = data.find(b"\x00", 0, 8192)
    if nul != -1:
        raise IngestError("binary", f"{name}: binary file (NUL byte at offset {nul})")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise IngestError("not_utf8", f"{name}: {describe_not_utf8(data, exc.start)}") from exc
    return text[1:] if strip_bom and text.startswith("\ufeff") else text
