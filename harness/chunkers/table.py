"""Table-aware chunking: markdown pipe tables and CSV split at row boundaries, the header row
repeated in every chunk's embedded text.

Tables are cut only between rows, into groups of at most ``rows_per_chunk`` data rows. The
first chunk of a table has the header in its span (so every character of the table is
covered); each later chunk's span covers only its own data rows and its embedded text is
the header (for markdown: the header row and the delimiter row) followed by ``"\\n"`` and the
rows, the header being declared as ``metadata["prefix"]``. So ``text == prefix + span text``
holds and every chunk's embedded text contains the header. Text outside tables is chunked
by the recursive fallback.

Source of the method: row-group chunking with the header kept in every chunk is what
chonkie's ``TableChunker`` does for markdown tables (``tokenizer="row"``, ``chunk_size`` rows
per chunk); this implementation adds exact spans, CSV records and a size cap.
"""

from __future__ import annotations

import csv

from harness.chunkers.base import MIN_TOKEN_LIMIT, ChunkContractError, Chunker, check_limit, check_size, fit_prefix, measure
from harness.chunkers.recursive import RecursiveChunker
from harness.text.blocks import SizeLimit, extension, markdown_blocks, split_lines, split_region, stripped
from harness.text.units import check_unit, get_counter
from harness.types import Chunk, Document, Span

FORMATS = ("auto", "markdown", "csv")


class TableChunker(Chunker):
    """Row-group chunking of markdown pipe tables and CSV with the header repeated as a prefix.

    * ``format="markdown"``: GFM pipe tables (header row, delimiter row, data rows; see
      :mod:`harness.text.blocks`; tables inside fenced code are ignored) are split into
      row groups; the text around them goes to the recursive fallback.
    * ``format="csv"``: the whole document is one comma-separated table read with Python's
      :mod:`csv` module (quoted fields may span lines; a record is never split). The first
      non-blank record is the header; blank lines are skipped. Unparsable CSV
      (``csv.Error``) falls back to recursive splitting.
    * ``format="auto"``: csv for doc ids ending in ``.csv`` or ``metadata["type"] == "csv"``,
      markdown otherwise.

    Span rule: a table's first chunk spans the header (and delimiter) row plus its data rows
    and has no prefix; every later chunk spans only its data rows and has
    ``metadata["prefix"] = header + "\\n"``. ``metadata["header"]`` is the header row text
    on every table chunk; ``metadata["rows"]`` is ``[first, last]``, the 1-based numbers of
    the chunk's data rows in its table (``[0, 0]`` for a header-only chunk);
    ``metadata["table"]`` the 0-based table index in the document.

    Size: ``max_chunk_size`` applies to each chunk's embedded text, the header prefix
    included. A row group also closes early when adding the next row would make its
    embedded text (prefix + rows) exceed ``max_chunk_size``; a single row over the limit is
    cut by the recursive fallback to the room the prefix leaves, each piece keeping the
    header prefix. A header longer than half of ``max_chunk_size`` is cut to that half in
    the prefix (``metadata["prefix_truncated"]``; ``metadata["header"]`` stays whole), see
    :func:`harness.chunkers.base.fit_prefix`. Every chunk records ``metadata["size"]``,
    the size of its embedded text in ``unit``. Chunks are single spans in document order
    and cover every non-whitespace character.

    Args:
        rows_per_chunk: maximum data rows per chunk, >= 1.
        max_chunk_size: maximum size of a chunk's embedded text in ``unit``, >= 1 (>= 4 for
            tokens; also the recursive fallback's chunk size for text outside tables).
        unit: ``"tokens"``, ``"chars"`` or ``"words"``.
        tokenizer: ``"model"`` (embedding model's WordPiece) or ``"cl100k_base"``.
        format: ``"auto"``, ``"markdown"`` or ``"csv"``.

    Raises:
        ValueError: a parameter outside its range (the message names it).
    """

    name = "table"
    contiguous = True
    partitions = True

    def __init__(
        self,
        rows_per_chunk: int = 10,
        max_chunk_size: int = 254,
        unit: str = "tokens",
        tokenizer: str = "model",
        format: str = "auto",
    ) -> None:
        check_size("rows_per_chunk", rows_per_chunk)
        check_unit(unit, tokenizer)
        check_limit("max_chunk_size", max_chunk_size, unit)
        if format not in FORMATS:
            raise ValueError(f"chunker.format must be one of {list(FORMATS)}, got {format!r}")
        self.rows_per_chunk = rows_per_chunk
        self.max_chunk_size = max_chunk_size
        self.unit = unit
        self.tokenizer = tokenizer
        self.format = format

    def size_limit(self) -> tuple[str, str, int]:
        return (self.unit, self.tokenizer, self.max_chunk_size)

    def check_settings(self, doc: Document, chunks: list[Chunk]) -> None:
        """``rows_per_chunk``: every table chunk holds at most that many data rows, as its
        ``metadata["rows"]`` (1-based ``[first, last]``) records them; chunks cut by
        :func:`harness.chunkers.base.enforce_limit` hold part of one such group."""
        for c in chunks:
            rows = c.metadata.get("rows")
            if c.metadata.get("kind") != "table" or not rows or rows[0] == 0 or c.metadata.get("hard_cut") or len(c.spans) != 1:
                continue
            n = rows[1] - rows[0] + 1
            if n > self.rows_per_chunk:
                raise ChunkContractError(
                    f"chunker={self.name} chunker.rows_per_chunk={self.rows_per_chunk}: chunk {c.chunk_id} holds rows {rows} = {n} data rows"
                )

    def format_of(self, doc: Document) -> str:
        """``"csv"`` or ``"markdown"`` for ``doc`` (resolves ``"auto"``)."""
        if self.format != "auto":
            return self.format
        is_csv = extension(doc.doc_id) == ".csv" or (doc.metadata or {}).get("type") == "csv"
        return "csv" if is_csv else "markdown"

    # -- chunking --------------------------------------------------------------------------
    def chunk(self, doc: Document) -> list[Chunk]:
        text = doc.text
        self._doc = doc
        self._counter = get_counter(self.unit, self.tokenizer)
        self._limit = SizeLimit(text, self._counter, self.max_chunk_size)
        self._splitter = RecursiveChunker(chunk_size=self.max_chunk_size, unit=self.unit, tokenizer=self.tokenizer)
        out: list[Chunk] = []
        fmt = self.format_of(doc)
        tables = self._csv_table(text) if fmt == "csv" else self._markdown_tables(text)
        previous_end = 0
        for t, (header, rows) in enumerate(tables):
            self._text_chunks(previous_end, header[0], out)
            self._table_chunks(t, header, rows, fmt, out)
            previous_end = rows[-1][1] if rows else header[1]
        self._text_chunks(previous_end, len(text), out)
        return self.finalize(doc, out)

    def _text_chunks(self, start: int, end: int, out: list[Chunk]) -> None:
        for span in split_region(self._doc.text, start, end, self._splitter):
            out.append(Chunk.from_spans(self._doc, [span], metadata={"kind": "text", "unit": self.unit}))

    def _table_chunks(self, t: int, header: Span, rows: list[Span], fmt: str, out: list[Chunk]) -> None:
        doc, fits, text, size = self._doc, self._limit.fits, self._doc.text, self.max_chunk_size
        header_text = doc.text[header[0] : header[1]]
        header_row = header_text.splitlines()[0].strip() if fmt == "markdown" else header_text
        prefix, flags = fit_prefix(header_text + "\n", self._counter, size)
        base = {"kind": "table", "format": fmt, "table": t, "header": header_row, "unit": self.unit}

        def fits_after_header(start: int, end: int) -> bool:
            """True when prefix + the source text ``[start, end)`` fits the limit."""
            return measure(self._counter, prefix + text[start:end]) <= size

        room = max(size - measure(self._counter, prefix), MIN_TOKEN_LIMIT if self.unit == "tokens" else 1)
        row_splitter = RecursiveChunker(chunk_size=room, unit=self.unit, tokenizer=self.tokenizer)

        def emit(span: Span, first: int, last: int, with_prefix: bool) -> None:
            meta = {**base, "rows": [first, last]}
            if with_prefix:
                meta.update(flags)
            if with_prefix and prefix:
                meta["prefix"] = prefix
                out.append(Chunk.from_spans(doc, [span], text=prefix + doc.text[span[0] : span[1]], metadata=meta))
            else:
                out.append(Chunk.from_spans(doc, [span], metadata=meta))

        i = 0
        if fits(*header):  # first group: header plus as many rows as fit
            end, n = header[1], 0
            while i < len(rows) and n < self.rows_per_chunk and fits(header[0], rows[i][1]):
                end, n, i = rows[i][1], n + 1, i + 1
            emit((header[0], end), 1 if n else 0, n, False)
        else:  # oversized header: plain fallback pieces, every row group gets the prefix
            for span in split_region(doc.text, header[0], header[1], self._splitter):
                emit(span, 0, 0, False)
        while i < len(rows):
            if not fits_after_header(*rows[i]):  # one oversized row: cut, keep the header on each piece
                for span in split_region(doc.text, rows[i][0], rows[i][1], row_splitter):
                    emit(span, i + 1, i + 1, True)
                i += 1
                continue
            j = i + 1
            while j < len(rows) and j - i < self.rows_per_chunk and fits_after_header(rows[i][0], rows[j][1]):
                j += 1
            emit((rows[i][0], rows[j - 1][1]), i + 1, j, True)
            i = j

    # -- table detection -------------------------------------------------------------------
    def _markdown_tables(self, text: str) -> list[tuple[Span, list[Span]]]:
        """``(header span, data row spans)`` for each pipe table; the header span covers the
        header and delimiter rows. All spans are stripped of outer whitespace."""
        lines = split_lines(text)
        tables = []
        for block in markdown_blocks(text, lines):
            if block.kind != "table":
                continue
            header = stripped(text, lines[block.first_line].start, lines[block.first_line + 1].end)
            rows = [stripped(text, lines[k].start, lines[k].end) for k in range(block.first_line + 2, block.last_line + 1)]
            tables.append((header, [r for r in rows if r]))
        return tables

    def _csv_table(self, text: str) -> list[tuple[Span, list[Span]]]:
        """The document as one CSV table (``[]`` when it has no record or does not parse)."""
        lines = split_lines(text)
        reader = csv.reader(text[ln.start : ln.next] for ln in lines)
        records: list[Span] = []
        consumed = 0
        try:
            for _ in reader:
                span = stripped(text, lines[consumed].start, lines[reader.line_num - 1].end)
                if span:
                    records.append(span)
                consumed = reader.line_num
        except csv.Error:
            return []
        if not records:
            return []
        return [(records[0], records[1:])]
