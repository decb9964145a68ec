"""Text-like files: plain text, markdown, Python source and chat logs, kept exactly as stored.

The document text is the file's UTF-8 text (no newline translation), so excerpts and
offsets refer to the file itself. Elements:

* ``.md`` / ``.markdown`` (type ``markdown``): one element per markdown block found by
  :func:`harness.text.blocks.markdown_blocks`: ``heading`` (with ``level``), ``code``
  (fenced blocks), ``table`` (GFM pipe tables; ``format="markdown"``, ``rows``,
  ``columns``), ``list`` and ``paragraph``; caption paragraphs next to tables are attached
  (:func:`harness.ingest.base.attach_captions`).
* ``.txt`` (type ``text``): one ``paragraph`` per block between blank lines.
* ``.py`` (type ``python``): one ``code`` element (``language="python"``) over the file.
* ``.log`` (type ``chat``): no elements (a timestamped log is chunked by time).
"""

from __future__ import annotations

from typing import Any

from harness.ingest.base import Extraction, attach_captions, decode_utf8

_BLOCK_TYPES = {"heading": "heading", "fence": "code", "table": "table", "list": "list", "paragraph": "paragraph"}


def markdown_elements(text: str) -> list[dict[str, Any]]:
    """Elements of markdown ``text`` (see the module docstring); spans stripped of outer whitespace."""
    from harness.text.blocks import markdown_blocks, split_lines
    from harness.text.units import strip_span

    lines = split_lines(text)
    out: list[dict[str, Any]] = []
    for b in markdown_blocks(text, lines):
        s, e = strip_span(text, b.start, b.end)
        if e <= s:
            continue
        el: dict[str, Any] = {"type": _BLOCK_TYPES[b.kind], "start": s, "end": e}
        if b.kind == "heading":
            el["level"] = b.level
        elif b.kind == "table":
            n_lines = b.last_line - b.first_line + 1
            header = text[lines[b.first_line].start : lines[b.first_line].end]
            el.update(format="markdown", rows=max(0, n_lines - 2), columns=_pipe_cells(header))
        out.append(el)
    attach_captions(text, out)
    return out


def _pipe_cells(line: str) -> int:
    s = line.strip()
    if s.startswith("|"):
        s = s[1:]
    if s.endswith("|") and not s.endswith("\\|"):
        s = s[:-1]
    return len(s.replace("\\|", "").split("|"))


def extract_markdown(data: bytes, name: str) -> Extraction:
    """A markdown file: its text as stored, with block elements.

    Raises:
        IngestError: empty, binary or not UTF-8 (see :func:`harness.ingest.base.decode_utf8`).
    """
    text = decode_utf8(data, name)
    return Extraction(text=text, type="markdown", elements=markdown_elements(text))


def extract_text(data: bytes, name: str) -> Extraction:
    """A plain-text file: its text as stored, one ``paragraph`` element per blank-line block.

    Raises:
        IngestError: empty, binary or not UTF-8.
    """
    from harness.text.sentences import paragraph_spans

    text = decode_utf8(data, name)
    return Extraction(text=text, type="text", elements=[{"type": "paragraph", "start": s, "end": e} for s, e in paragraph_spans(text)])


def extract_python(data: bytes, name: str) -> Extraction:
    """A Python source file: its text as stored, one ``code`` element over it.

    Raises:
        IngestError: empty, binary or not UTF-8.
    """
    from harness.text.units import strip_span

    text = decode_utf8(data, name)
    s, e = strip_span(text, 0, len(text))
    return Extraction(text=text, type="python", elements=[{"type": "code", "start": s, "end": e, "language": "python"}])


def extract_log(data: bytes, name: str) -> Extraction:
    """A chat or incident log (``.log``): its text as stored, type ``chat``, no elements.

    Raises:
        IngestError: empty, binary or not UTF-8.
    """
    return Extraction(text=decode_utf8(data, name), type="chat", elements=[])
