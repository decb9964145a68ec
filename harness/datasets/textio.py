"""Reading dataset files as UTF-8, with errors that name the file and the byte offset.

Every loader reads its files through these helpers, so a file that is not UTF-8 stops the
load with one :class:`~harness.datasets.validate.DatasetError` line such as::

    /data/kb/corpus/faq.md: not UTF-8 (byte 0xe9 at offset 3) on line 1, column 4; re-save the file as UTF-8

instead of a bare ``UnicodeDecodeError`` that names neither.

Byte-order mark (U+FEFF, bytes ``EF BB BF``):

* **corpus text** (:func:`read_text`, ``strip_bom=False``) keeps it: evidence offsets of
  the native and chroma formats are code-point indices into the file text exactly as
  stored, and stripping one character would shift every one of them. Structure parsers
  ignore it instead (:func:`harness.text.blocks.markdown_blocks` treats a mark at the
  start of a line as no text, so ``"\\ufeff# Title"`` is a heading).
* **record files** (JSONL, JSON, CSV, TSV: :func:`iter_lines`, ``strip_bom=True``) drop a
  leading mark: it is not part of any record, and ``json`` refuses it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from harness.datasets.validate import DatasetError
from harness.text.encoding import describe_not_utf8

#: The byte-order mark as a character.
BOM = "\ufeff"


def decode(data: bytes, path: str | Path, strip_bom: bool = False) -> str:
    """Decode a file's bytes as UTF-8 (no newline translation).

    Args:
        data: the file's bytes.
        path: the file, named in the error.
        strip_bom: drop one leading U+FEFF (record files); corpus text keeps it.

    Raises:
        DatasetError: not valid UTF-8 (file, byte offset, line and column named).
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: {describe_not_utf8(data, exc.start)}") from None
    return text[1:] if strip_bom and text.startswith(BOM) else text


def read_text(path: str | Path, strip_bom: bool = False) -> str:
    """A whole UTF-8 file as stored (no newline translation; a BOM is kept unless ``strip_bom``).

    Raises:
        DatasetError: the file cannot be read or is not UTF-8 (file and byte offset named).
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise DatasetError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    return decode(data, path, strip_bom=strip_bom)


def iter_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, line)`` of a UTF-8 record file, streamed (never held whole).

    Lines end at ``\\n`` only (JSON Lines, TSV); each ``line`` keeps its terminator. A
    byte-order mark at the start of the file is dropped.

    Raises:
        DatasetError: the file cannot be read, or a line is not UTF-8 (file, line and byte
            offset within the file named).
    """
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise DatasetError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    with fh:
        offset = 0
        for lineno, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DatasetError(f"{path}: {describe_not_utf8(raw, exc.start, base=offset, first_line=lineno)}") from None
            if lineno == 1 and line.startswith(BOM):
                line = line[1:]
            offset += len(raw)
            yield lineno, line
