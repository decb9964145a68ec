"""CSV files: kept as stored (type ``csv``), the whole file one ``table`` element.

The text stays the file's own CSV text rather than a re-serialisation, so excerpts quoted
from the file are found as they are and the ``table`` chunker's CSV mode (quoted fields
spanning lines, header repeated per row group) reads it unchanged. The element carries
``format="csv"``, ``rows`` (data records after the header) and ``columns`` (fields of the
header record), both counted with Python's :mod:`csv` module.
"""

from __future__ import annotations

import csv

from harness.ingest.base import Extraction, IngestError, decode_utf8


def extract_csv(data: bytes, name: str) -> Extraction:
    """One CSV file as a document holding one table element.

    Raises:
        IngestError: empty, binary or not UTF-8; ``corrupt`` when :mod:`csv` cannot parse it;
            ``empty`` when it has no record.
    """
    from harness.text.units import strip_span

    text = decode_utf8(data, name)
    try:
        records = [r for r in csv.reader(text.splitlines(keepends=True)) if any(f.strip() for f in r)]
    except csv.Error as exc:
        raise IngestError("corrupt", f"{name}: CSV does not parse ({exc})") from exc
    if not records:
        raise IngestError("empty", f"{name}: no CSV record")
    s, e = strip_span(text, 0, len(text))
    element = {"type": "table", "start": s, "end": e, "format": "csv", "rows": len(records) - 1, "columns": len(records[0])}
    return Extraction(text=text, type="csv", elements=[element])
