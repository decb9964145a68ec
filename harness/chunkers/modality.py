"""Modality-aware chunking: text, tables and images of a document as separate chunk streams.

The document's ``metadata["elements"]`` (written by :mod:`harness.ingest` for the
``folder`` dataset: ``[{"type", "start", "end", ...}]`` spans into ``Document.text``) says
where its tables and images are. Each becomes its own unit:

* **table** -- one atomic chunk holding the whole table (plus its caption, see below), with
  ``metadata``: ``modality="table"``, ``format`` (markdown or csv), ``page`` (PDFs),
  ``caption``, ``table`` (0-based index in the document), ``rows`` (``[first, last]``
  1-based data rows; ``[0, n]`` for a whole table of n rows). A table larger than the text
  stream's size limit is, with ``oversize_tables="split"`` (default), cut between rows:
  the first piece spans the caption (when adjacent above), header and first rows; every
  later piece spans only its rows and repeats the caption line and the header in its
  embedded text as a declared ``metadata["prefix"]`` (as the ``table`` strategy does). With
  ``oversize_tables="keep"`` every table stays one chunk whatever its size, and the strategy
  then declares no size limit.
* **image** -- one chunk with the image's text as extraction wrote it (``[image: NAME]``, the
  alt text, and with ``dataset.ocr=true`` the OCR text) plus its caption; ``metadata``:
  ``modality="image"``, ``name``, ``page``, ``caption``, ``alt``, ``ocr``.
* **text** -- everything between those units, each region split by the configurable inner
  strategy ``text_chunker`` (default: recursive, 254 model tokens), with
  ``modality="text"`` (and ``page`` for PDFs) added to the inner chunk's metadata.

**Captions.** An element's caption (``caption_start``/``caption_end``, attached at
extraction to a "Table 1: ..." / "Figure 2. ..." paragraph next to it) joins the unit's
span when only whitespace separates them, so the caption is retrieved with its table or
image and not as a stray text chunk; a caption that is not adjacent stays in the text
stream and, with ``caption_prefix=True``, is also put before the unit's embedded text as a
declared prefix. Spans always stay true: ``chunk.text == prefix + doc.text[start:end]``.
Prefixes (captions, repeated headers) count against the size limit: a unit is kept whole
only when prefix + span fits, split pieces are cut to the room the prefix leaves, and a
prefix longer than half the limit is cut to that half (``metadata["prefix_truncated"]``,
see :func:`harness.chunkers.base.fit_prefix`). Every chunk records ``metadata["size"]``,
the size of its embedded text in the limit's unit.

**Documents without ``elements``** (e.g. the plain-text datasets): with
``infer_elements=True`` (default), CSV documents (``.csv`` or ``metadata["type"] ==
"csv"``) are one table and GFM pipe tables in other non-code documents are found with
:func:`harness.text.blocks.markdown_blocks`; otherwise, or when none is found, the
whole document is the text stream.

Chunks come in document order, one span each (when the inner strategy is contiguous), and
cover every non-whitespace character (when the inner strategy partitions).

Source: element-based chunking as in the ``unstructured`` library (documents partitioned
into typed elements; its chunkers keep each ``Table`` element in a chunk of its own and cut
only an oversized one) and LlamaIndex's ``UnstructuredElementNodeParser`` (tables as
separate nodes); the row-group splitting with a repeated header follows chonkie's
``TableChunker``. The element spans and the caption rule are this project's.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from harness.chunkers.base import MIN_TOKEN_LIMIT, Chunker, check_read, fit_prefix, measure
from harness.chunkers.recursive import RecursiveChunker
from harness.text.blocks import CAPTION, SizeLimit, extension, is_source_code, markdown_blocks, split_lines, split_region, stripped
from harness.text.units import get_counter, strip_span
from harness.types import Chunk, Document, Span, make_chunk_id

#: Default inner strategy for the text stream.
DEFAULT_TEXT_CHUNKER: dict[str, Any] = {
    "_target_": "harness.chunkers.recursive.RecursiveChunker",
    "chunk_size": 254,
    "chunk_overlap": 0,
    "unit": "tokens",
    "tokenizer": "model",
}

OVERSIZE_TABLES = ("split", "keep")

_DELIMITER_ROW = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")


@dataclass
class _Unit:
    """One table or image unit: its span (caption merged when adjacent) and its element."""

    start: int
    end: int
    element: dict[str, Any]
    caption: str = ""
    caption_inside: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def infer_elements(doc: Document) -> list[dict[str, Any]]:
    """Table elements of a document that has no ``elements`` metadata.

    CSV documents (extension ``.csv`` or ``metadata["type"] == "csv"``) are one table;
    program source has none; any other text gets one element per GFM pipe table found by
    :func:`harness.text.blocks.markdown_blocks`, with the caption of an adjacent
    paragraph matching :data:`CAPTION` (the one above first, then the one below).

    Returns:
        ``[{"type": "table", "start", "end", "format", ...}]`` in document order.
    """
    text = doc.text
    meta = doc.metadata or {}
    if extension(doc.doc_id) == ".csv" or meta.get("type") == "csv":
        span = stripped(text, 0, len(text))
        return [{"type": "table", "start": span[0], "end": span[1], "format": "csv"}] if span else []
    if is_source_code(doc.doc_id, meta):
        return []
    blocks = markdown_blocks(text)
    out: list[dict[str, Any]] = []
    used: set[int] = set()
    for i, b in enumerate(blocks):
        if b.kind != "table":
            continue
        s, e = strip_span(text, b.start, b.end)
        el: dict[str, Any] = {"type": "table", "start": s, "end": e, "format": "markdown"}
        for j in (i - 1, i + 1):
            if 0 <= j < len(blocks) and j not in used and blocks[j].kind == "paragraph":
                cs, ce = strip_span(text, blocks[j].start, blocks[j].end)
                if ce > cs and CAPTION.match(text[cs:ce] + " "):
                    el.update(caption=text[cs:ce], caption_start=cs, caption_end=ce)
                    used.add(j)
                    break
        out.append(el)
    return out


class ModalityChunker(Chunker):
    """Separate chunk streams for text, tables and images (rules in the module docstring).

    Args:
        text_chunker: config of the inner strategy for the text stream (a mapping with
            ``_target_``, a :class:`Chunker` class path, and its arguments; built on first
            use by ``builder``, given this chunker's ``encoder`` when it needs one). Default :data:`DEFAULT_TEXT_CHUNKER`. Its size limit is also the
            limit for splitting tables and images. Strategies that replace hits at
            retrieval (``hierarchical``'s parents) are refused.
        tables: emit tables as their own chunks (False: tables are text).
        images: emit images as their own chunks (False: image text is text).
        caption_prefix: put a caption that is not inside a unit's span (not adjacent, or a
            later piece of a split table) before the unit's embedded text, declared as
            ``metadata["prefix"]``.
        oversize_tables: ``"split"`` (between rows, header repeated) or ``"keep"`` (one
            chunk per table whatever its size; no size limit is declared then).
        infer_elements: find tables in documents without ``elements`` metadata
            (:func:`infer_elements`).
        encoder: the run's shared encoder, for an inner strategy that embeds.
        builder: ``builder(where, config, encoder) -> Chunker`` builds the inner strategy
            (``where`` is ``chunker.text_chunker``);
            :func:`harness.experiment.build.build_chunker` passes
            :func:`~harness.experiment.build.build_sub_chunker` (``needs_builder``). Without
            one, chunking raises ValueError.

    Raises:
        ValueError: a parameter outside its range (named); on first use, an inner config
            that does not build a :class:`Chunker` or builds one that expands hits; while
            chunking, an element whose span lies outside its document.
    """

    name = "modality"
    needs_encoder = True
    #: The builder passes ``builder=`` (its nested-chunker factory) to this strategy.
    needs_builder = True

    def __init__(
        self,
        text_chunker: Mapping[str, Any] | None = None,
        tables: bool = True,
        images: bool = True,
        caption_prefix: bool = True,
        oversize_tables: str = "split",
        infer_elements: bool = True,
        encoder=None,
        builder: Callable[[str, Mapping[str, Any], Any], Chunker] | None = None,
    ) -> None:
        cfg = DEFAULT_TEXT_CHUNKER if text_chunker is None else text_chunker
        if not isinstance(cfg, Mapping) or not isinstance(cfg.get("_target_"), str):
            raise ValueError(f"chunker.text_chunker must be a chunker config with a _target_ class path, got {text_chunker!r}")
        for pname, value in (("tables", tables), ("images", images), ("caption_prefix", caption_prefix), ("infer_elements", infer_elements)):
            if not isinstance(value, bool):
                raise ValueError(f"chunker.{pname} must be true or false, got {value!r}")
        if oversize_tables not in OVERSIZE_TABLES:
            raise ValueError(f"chunker.oversize_tables must be one of {list(OVERSIZE_TABLES)}, got {oversize_tables!r}")
        check_read("oversize_tables", oversize_tables, "split", tables, "with chunker.tables=true")
        self.text_chunker = dict(cfg)
        self.tables = tables
        self.images = images
        self.caption_prefix = caption_prefix
        self.oversize_tables = oversize_tables
        self.infer_elements = infer_elements
        self.encoder = encoder
        self.builder = builder
        self._inner: Chunker | None = None

    # -- the inner strategy ----------------------------------------------------------------
    @property
    def inner(self) -> Chunker:
        """The text-stream chunker (built on first use).

        Raises:
            ValueError: the config does not import, does not build a Chunker, or builds one
                that overrides :meth:`Chunker.expand`; no ``builder`` was given.
        """
        if self._inner is None:
            from harness.chunkers.adaptive import require_builder

            target = self.text_chunker["_target_"]
            where = "chunker.text_chunker"
            built = require_builder(self.builder, where)(where, self.text_chunker, self.encoder)
            if not isinstance(built, Chunker):
                raise ValueError(f"chunker.text_chunker._target_ {target!r} does not build a harness Chunker")
            if type(built).expand is not Chunker.expand:
                raise ValueError(
                    f"chunker.text_chunker: {target!r} replaces hits at retrieval (expand), which modality does not route; "
                    "use a strategy that returns its own chunks"
                )
            self._inner = built
        return self._inner

    @property
    def contiguous(self) -> bool:  # type: ignore[override]
        return self.inner.contiguous

    @property
    def partitions(self) -> bool:  # type: ignore[override]
        return self.inner.partitions

    def size_limit(self) -> tuple[str, str, int] | None:
        if self.oversize_tables == "keep":
            return None
        return self.inner.size_limit()

    # -- chunking --------------------------------------------------------------------------
    def chunk(self, doc: Document) -> list[Chunk]:
        text = doc.text
        meta = doc.metadata or {}
        elements = meta.get("elements")
        if elements is None:
            elements = infer_elements(doc) if self.infer_elements else []
        pages = meta.get("pages") or []
        limit = self.inner.size_limit()
        counter = get_counter(limit[0], limit[1]) if limit else None
        source_fits = SizeLimit(text, counter, limit[2]).fits if limit else None

        def fits(start: int, end: int, prefix: str = "") -> bool:
            """True when prefix + the stripped source text ``[start, end)`` fits the limit."""
            if limit is None:
                return True
            if not prefix:
                return source_fits(start, end)
            s, e = strip_span(text, start, end)
            return measure(counter, prefix + text[s:e]) <= limit[2]

        self._counter = counter
        out: list[Chunk] = []
        cursor = 0
        n_tables = 0
        for unit in self._units(doc, elements):
            self._text_chunks(doc, cursor, unit.start, pages, out)
            if unit.element["type"] == "table":
                self._table_chunks(doc, unit, n_tables, fits, limit, pages, out)
                n_tables += 1
            else:
                self._image_chunks(doc, unit, fits, limit, pages, out)
            cursor = unit.end
        self._text_chunks(doc, cursor, len(text), pages, out)
        return self.finalize(doc, out)

    def _fit(self, prefix: str, limit) -> tuple[str, dict]:
        """``prefix`` cut to half the size limit (:func:`harness.chunkers.base.fit_prefix`)."""
        if not prefix or limit is None:
            return prefix, {}
        return fit_prefix(prefix, self._counter, limit[2])

    def _splitter(self, limit, prefix: str = "") -> RecursiveChunker:
        """Recursive fallback sized to the room ``prefix`` leaves under the limit."""
        room = limit[2] - (measure(self._counter, prefix) if prefix else 0)
        room = max(room, MIN_TOKEN_LIMIT if limit[0] == "tokens" else 1)  # the last resort is finalize's hard cut
        return RecursiveChunker(chunk_size=room, unit=limit[0], tokenizer=limit[1])

    def _units(self, doc: Document, elements) -> list[_Unit]:
        """Table and image units in document order (overlapping ones after the first dropped)."""
        text = doc.text
        wanted = {"table"} if self.tables else set()
        if self.images:
            wanted.add("image")
        units: list[_Unit] = []
        for i, el in enumerate(elements):
            if not isinstance(el, Mapping) or el.get("type") not in wanted:
                continue
            s, e = el.get("start"), el.get("end")
            if not (isinstance(s, int) and isinstance(e, int) and 0 <= s < e <= len(text)):
                raise ValueError(f"document {doc.doc_id!r}: elements[{i}] span [{s}, {e}) is not inside its text (length {len(text)})")
            unit = _Unit(s, e, dict(el), caption=str(el.get("caption") or ""))
            cs, ce = el.get("caption_start"), el.get("caption_end")
            if isinstance(cs, int) and isinstance(ce, int) and 0 <= cs < ce <= len(text):
                if ce <= s and not text[ce:s].strip():
                    unit.start, unit.caption_inside = cs, True
                elif cs >= e and not text[e:cs].strip():
                    unit.end, unit.caption_inside = ce, True
            units.append(unit)
        units.sort(key=lambda u: (u.start, u.end))
        kept: list[_Unit] = []
        for u in units:
            if kept and u.start < kept[-1].end:
                continue
            kept.append(u)
        return kept

    def _emit(self, doc: Document, span: Span, meta: dict[str, Any], pages, out: list[Chunk], prefix: str = "", flags: dict | None = None) -> None:
        meta = dict(meta)
        meta.update(flags or {})
        page = _page_of(pages, span[0])
        if page is not None:
            meta.setdefault("page", page)
        if prefix:
            meta["prefix"] = prefix
            out.append(Chunk.from_spans(doc, [span], text=prefix + doc.text[span[0] : span[1]], metadata=meta))
        else:
            out.append(Chunk.from_spans(doc, [span], metadata=meta))

    def _text_chunks(self, doc: Document, start: int, end: int, pages, out: list[Chunk]) -> None:
        region = stripped(doc.text, start, end)
        if region is None:
            return
        rs, re_ = region
        sub_meta = {k: v for k, v in (doc.metadata or {}).items() if k not in ("elements", "pages")}
        sub = Document(doc_id=doc.doc_id, text=doc.text[rs:re_], metadata=sub_meta)
        for c in self.inner.finalize(sub, self.inner.chunk(sub)):
            spans = tuple((s + rs, e + rs) for s, e in c.spans)
            meta = {**c.metadata, "modality": "text"}
            page = _page_of(pages, spans[0][0])
            if page is not None:
                meta["page"] = page
            out.append(Chunk(doc_id=doc.doc_id, spans=spans, text=c.text, chunk_id=make_chunk_id(doc.doc_id, spans), metadata=meta))

    def _image_chunks(self, doc: Document, unit: _Unit, fits, limit, pages, out: list[Chunk]) -> None:
        el = unit.element
        meta = {"modality": "image", "caption": unit.caption or None}
        meta.update({k: el[k] for k in ("name", "alt", "ocr", "width", "height") if k in el})
        prefix, flags = self._fit(unit.caption + "\n" if self.caption_prefix and unit.caption and not unit.caption_inside else "", limit)
        if limit is None or fits(unit.start, unit.end, prefix):
            self._emit(doc, (unit.start, unit.end), meta, pages, out, prefix, flags)
            return
        splitter = self._splitter(limit, prefix)
        for span in split_region(doc.text, unit.start, unit.end, splitter):
            self._emit(doc, span, {**meta, "fallback": True}, pages, out, prefix, flags)

    def _table_chunks(self, doc: Document, unit: _Unit, index: int, fits, limit, pages, out: list[Chunk]) -> None:
        text = doc.text
        el = unit.element
        fmt = str(el.get("format") or "markdown")
        header, rows = _table_rows(text, el["start"], el["end"], fmt)
        base = {"modality": "table", "format": fmt, "table": index, "caption": unit.caption or None}
        outside_caption = self.caption_prefix and unit.caption and not unit.caption_inside
        if self.oversize_tables == "keep" or limit is None:
            fits_whole, (prefix, flags) = True, (unit.caption + "\n" if outside_caption else "", {})
        else:
            prefix, flags = self._fit(unit.caption + "\n" if outside_caption else "", limit)
            fits_whole = fits(unit.start, unit.end, prefix)
        if fits_whole:
            self._emit(doc, (unit.start, unit.end), {**base, "rows": [0, len(rows)]}, pages, out, prefix, flags)
            return
        splitter = self._splitter(limit)
        caption_line = unit.caption + "\n" if self.caption_prefix and unit.caption else ""
        repeat, repeat_flags = self._fit(caption_line + text[header[0] : header[1]] + "\n", limit)
        first_prefix, first_flags = self._fit(caption_line, limit) if outside_caption else ("", {})
        caption_after = unit.end > el["end"]  # an adjacent caption below the table
        # first piece: caption above (when merged) + header + as many rows as fit
        i = 0
        first_start = unit.start
        if fits(first_start, header[1], first_prefix):
            end = header[1]
            while i < len(rows) and fits(first_start, rows[i][1], first_prefix):
                end, i = rows[i][1], i + 1
            self._emit(doc, (first_start, end), {**base, "rows": [1 if i else 0, i]}, pages, out, first_prefix, first_flags)
        else:  # a header too large on its own: cut it like text
            for span in split_region(text, first_start, header[1], splitter):
                self._emit(doc, span, {**base, "rows": [0, 0], "fallback": True}, pages, out)
        row_splitter = self._splitter(limit, repeat)
        while i < len(rows):
            if not fits(*rows[i], repeat):  # one row over the limit: cut, each piece keeps the header
                for span in split_region(text, rows[i][0], rows[i][1], row_splitter):
                    self._emit(doc, span, {**base, "rows": [i + 1, i + 1], "fallback": True}, pages, out, repeat, repeat_flags)
                i += 1
                continue
            j = i + 1
            while j < len(rows) and fits(rows[i][0], rows[j][1], repeat):
                j += 1
            self._emit(doc, (rows[i][0], rows[j - 1][1]), {**base, "rows": [i + 1, j]}, pages, out, repeat, repeat_flags)
            i = j
        if caption_after:
            cs = int(el["caption_start"])
            last = out[-1]
            if last.metadata.get("modality") == "table" and fits(last.start, unit.end, last.metadata.get("prefix", "")) and not last.metadata.get("fallback"):
                merged = (last.start, unit.end)
                prefix = last.metadata.get("prefix", "")
                meta = {k: v for k, v in last.metadata.items() if k not in ("prefix", "n_chars", "size")}
                out[-1] = Chunk.from_spans(
                    doc, [merged], text=prefix + text[merged[0] : merged[1]], metadata={**meta, **({"prefix": prefix} if prefix else {})}
                )
            else:
                self._emit(doc, (cs, unit.end), {**base, "rows": [0, 0], "caption_only": True}, pages, out)


def _page_of(pages, offset: int) -> int | None:
    """1-based page holding ``offset`` (from ``metadata["pages"]``), else None."""
    for p in pages:
        if p.get("start", 0) <= offset < p.get("end", 0):
            return int(p["page"])
    return None


def _table_rows(text: str, start: int, end: int, fmt: str) -> tuple[Span, list[Span]]:
    """``(header span, data row spans)`` of the table text ``[start, end)``.

    Markdown: the header is the first line plus the delimiter row when the second line is
    one; every further non-blank line is a row. CSV: records read with :mod:`csv` (a quoted
    field may span lines); the first record is the header. Spans are stripped.
    """
    lines = [ln for ln in split_lines(text[start:end]) if text[start + ln.start : start + ln.end].strip()]
    spans = [strip_span(text, start + ln.start, start + ln.end) for ln in lines]
    if not spans:
        return (start, end), []
    if fmt == "csv":
        records: list[Span] = []
        all_lines = split_lines(text[start:end])
        reader = csv.reader(text[start + ln.start : start + ln.next] for ln in all_lines)
        consumed = 0
        try:
            for _ in reader:
                span = stripped(text, start + all_lines[consumed].start, start + all_lines[reader.line_num - 1].end)
                if span:
                    records.append(span)
                consumed = reader.line_num
        except csv.Error:
            records = spans
        if not records:
            return (start, end), []
        return records[0], records[1:]
    if len(spans) >= 2 and _DELIMITER_ROW.match(text[spans[1][0] : spans[1][1]]):
        return (spans[0][0], spans[1][1]), spans[2:]
    return spans[0], spans[1:]
