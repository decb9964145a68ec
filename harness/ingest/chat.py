"""JSON chat exports -> timestamped lines that the ``timestamp`` chunker reads.

Schema (UTF-8 JSON), either a list of messages or an object ``{"messages": [...]}`` (other
top-level keys, such as a channel name, are ignored)::

    [{"timestamp": "2025-11-18T09:02:17", "author": "mira", "text": "Queue is stuck"},
     {"timestamp": "2025-11-18 09:04", "author": "jon", "text": "Looking"}, ...]

* ``timestamp`` (required): an ISO 8601 date and time (``T`` or space between them,
  seconds and fractions optional, ``Z`` or a ``+HH:MM`` offset optional; an aware time is
  converted to UTC) or a number of seconds since the Unix epoch (UTC).
* ``text`` (required): the message, a non-empty string; line breaks are kept, each
  continuation line indented by two spaces.
* ``author`` (optional): a string; omitted from the line when absent.

Each message becomes one line ``[YYYY-MM-DD HH:MM:SS] author: text`` (the bracketed form of
:data:`harness.chunkers.timestamp.DEFAULT_TIMESTAMP_REGEX`), in file order, lines joined by
``\\n``. Each message is a ``paragraph`` element with ``author`` and ``timestamp`` (ISO
8601) extras. The document type is ``chat``.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from harness.ingest.base import Extraction, IngestError, decode_utf8


def _timestamp(value: Any, where: str) -> datetime:
    if isinstance(value, bool):
        raise IngestError("invalid", f"{where}: field 'timestamp' must be an ISO 8601 string or epoch seconds, got {value!r}")
    if isinstance(value, (int, float)):
        try:
            return datetime.fromtimestamp(value, tz=timezone.utc).replace(tzinfo=None)
        except (OverflowError, OSError, ValueError) as exc:
            raise IngestError("invalid", f"{where}: field 'timestamp' {value!r} is not a valid epoch time") from exc
    if isinstance(value, str):
        try:
            dt = datetime.fromisoformat(value.strip())
        except ValueError as exc:
            raise IngestError("invalid", f"{where}: field 'timestamp' {value!r} is not ISO 8601 (e.g. 2025-11-18T09:02:17)") from exc
        if dt.tzinfo is not None:
            dt = dt.astimezone(timezone.utc).replace(tzinfo=None)
        return dt
    raise IngestError("invalid", f"{where}: field 'timestamp' must be an ISO 8601 string or epoch seconds, got {value!r}")


def extract_chat(data: bytes, name: str) -> Extraction:
    """A JSON chat export (schema in the module docstring) as timestamped lines.

    Raises:
        IngestError: empty, binary or not UTF-8; ``corrupt`` (not valid JSON); ``invalid``
            (not a message list, a message that is not an object, a missing or mistyped
            field; the message names the file and the message index).
    """
    raw = decode_utf8(data, name, strip_bom=True)  # offsets index the rendered lines, not the JSON
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise IngestError("corrupt", f"{name}: invalid JSON ({exc.msg} at line {exc.lineno})") from exc
    messages = doc.get("messages") if isinstance(doc, dict) else doc
    if not isinstance(messages, list):
        raise IngestError("invalid", f"{name}: not a chat export; expected a list of {{timestamp, author, text}} objects or {{\"messages\": [...]}}")
    if not messages:
        raise IngestError("empty", f"{name}: the chat export has no messages")
    lines: list[str] = []
    elements: list[dict[str, Any]] = []
    pos = 0
    for i, msg in enumerate(messages):
        where = f"{name}: messages[{i}]"
        if not isinstance(msg, dict):
            raise IngestError("invalid", f"{where}: expected an object with timestamp, author, text; got {type(msg).__name__}")
        if "timestamp" not in msg:
            raise IngestError("invalid", f"{where}: missing field 'timestamp'")
        text = msg.get("text")
        if not isinstance(text, str) or not text.strip():
            raise IngestError("invalid", f"{where}: field 'text' must be a non-empty string, got {text!r}")
        author = msg.get("author")
        if author is not None and not isinstance(author, str):
            raise IngestError("invalid", f"{where}: field 'author' must be a string, got {author!r}")
        dt = _timestamp(msg["timestamp"], where)
        body = "\n  ".join(part.rstrip() for part in text.strip().splitlines())
        line = f"[{dt:%Y-%m-%d %H:%M:%S}] " + (f"{author.strip()}: " if author and author.strip() else "") + body
        if lines:
            pos += 1  # the "\n" joining lines
        el: dict[str, Any] = {"type": "paragraph", "start": pos, "end": pos + len(line), "timestamp": dt.isoformat()}
        if author:
            el["author"] = author
        elements.append(el)
        lines.append(line)
        pos += len(line)
    return Extraction(text="\n".join(lines), type="chat", elements=elements)
