"""Why bytes are not UTF-8, said so that a person can find the bad byte.

One message for every reader of files: the dataset loaders (:mod:`harness.datasets.textio`)
and the extractors of :mod:`harness.ingest` name the file and add this description.
"""

from __future__ import annotations

_UTF16_BOMS = {b"\xff\xfe": "UTF-16 little-endian", b"\xfe\xff": "UTF-16 big-endian"}


def describe_not_utf8(data: bytes, offset: int, base: int = 0, first_line: int = 1) -> str:
    """Why ``data`` is not UTF-8, for an error message (no file name).

    Args:
        data: the bytes that failed to decode (a whole file, or one line of it).
        offset: index into ``data`` of the first byte that is not valid UTF-8
            (``UnicodeDecodeError.start``).
        base: byte offset of ``data[0]`` in the file (for a line read on its own).
        first_line: 1-based line number of ``data[0]`` in the file.

    Returns:
        e.g. ``"not UTF-8 (byte 0xe9 at offset 3) on line 1, column 4; re-save the file as
        UTF-8"``: the offset is in bytes from the start of the file, the line and column
        (1-based, the column counted in bytes) are those of the bad byte. A file that starts
        with a UTF-16 byte-order mark is named as UTF-16.
    """
    if base == 0 and data[:2] in _UTF16_BOMS:
        return f"not UTF-8 but {_UTF16_BOMS[data[:2]]} (byte-order mark 0x{data[0]:02x} 0x{data[1]:02x} at offset 0); re-save the file as UTF-8"
    line = first_line + data.count(b"\n", 0, offset)
    column = offset - (data.rfind(b"\n", 0, offset) + 1) + 1
    byte = f"byte 0x{data[offset]:02x}" if offset < len(data) else "end of data"
    return f"not UTF-8 ({byte} at offset {base + offset}) on line {line}, column {column}; re-save the file as UTF-8"
