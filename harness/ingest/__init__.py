"""Document extraction: one module per file format, each turning a file's bytes into text
plus element spans (:class:`harness.ingest.base.Extraction`).

=================  ==========  ===========================================================
extension          type        module
=================  ==========  ===========================================================
``.txt``           text        :mod:`harness.ingest.plain` (paragraph elements)
``.md .markdown``  markdown    :mod:`harness.ingest.plain` (heading/paragraph/list/code/table)
``.py``            python      :mod:`harness.ingest.plain` (one code element)
``.log``           chat        :mod:`harness.ingest.plain` (no elements)
``.csv``           csv         :mod:`harness.ingest.tabular` (one table element)
``.json``          chat        :mod:`harness.ingest.chat` (chat exports -> timestamped lines)
``.html .htm``     html        :mod:`harness.ingest.html` (BeautifulSoup)
``.pdf``           pdf         :mod:`harness.ingest.pdf` (pdfplumber text/tables, pypdf images)
=================  ==========  ===========================================================

:func:`extract_file` picks the module by extension and raises
:class:`~harness.ingest.base.IngestError` (with a ``kind``) for a file it cannot use.
"""

from __future__ import annotations

from pathlib import Path

from harness.ingest.base import Extraction, IngestError

#: Supported extensions (lower case, with the dot) -> format name.
FORMATS = {
    ".txt": "text",
    ".md": "markdown",
    ".markdown": "markdown",
    ".py": "python",
    ".log": "log",
    ".csv": "csv",
    ".json": "chat",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
}

TABLE_FORMATS = ("markdown", "csv")

__all__ = ["FORMATS", "TABLE_FORMATS", "Extraction", "IngestError", "extract_bytes", "extract_file"]


def extract_bytes(data: bytes, name: str, table_format: str = "markdown", ocr: bool = False, ocr_lang: str = "eng") -> Extraction:
    """Extract one file's bytes; the format comes from the extension of ``name``.

    Args:
        data: the file's bytes.
        name: file name (its extension selects the format; used in messages).
        table_format: ``"markdown"`` or ``"csv"`` serialisation of HTML and PDF tables.
        ocr: run tesseract on PDF images (see :mod:`harness.ingest.pdf`).
        ocr_lang: tesseract language(s).

    Raises:
        IngestError: ``unsupported`` extension, or the format module's errors (empty,
            not UTF-8, binary, corrupt, invalid).
        ValueError: ``table_format`` is not one of :data:`TABLE_FORMATS`.
    """
    if table_format not in TABLE_FORMATS:
        raise ValueError(f"table_format must be one of {list(TABLE_FORMATS)}, got {table_format!r}")
    ext = Path(name).suffix.lower()
    fmt = FORMATS.get(ext)
    if fmt is None:
        raise IngestError("unsupported", f"{name}: unsupported file type {ext or '(no extension)'!r}; supported: {sorted(FORMATS)}")
    if fmt == "pdf":
        from harness.ingest.pdf import extract_pdf

        return extract_pdf(data, name, table_format=table_format, ocr=ocr, ocr_lang=ocr_lang)
    if fmt == "html":
        from harness.ingest.html import extract_html

        return extract_html(data, name, table_format=table_format)
    if fmt == "csv":
        from harness.ingest.tabular import extract_csv

        return extract_csv(data, name)
    if fmt == "chat":
        from harness.ingest.chat import extract_chat

        return extract_chat(data, name)
    from harness.ingest import plain

    return {"text": plain.extract_text, "markdown": plain.extract_markdown, "python": plain.extract_python, "log": plain.extract_log}[fmt](data, name)


def extract_file(path: str | Path, name: str | None = None, **options) -> Extraction:
    """Read ``path`` and :func:`extract_bytes` it (``name`` defaults to the file name).

    Raises:
        IngestError: as :func:`extract_bytes`; ``unreadable`` when the file cannot be read.
    """
    path = Path(path)
    name = name or path.name
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise IngestError("unreadable", f"{name}: cannot be read ({exc.strerror or exc})") from exc
    return extract_bytes(data, name, **options)
