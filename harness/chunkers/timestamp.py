"""Chat-log chunking by time: messages grouped into fixed time windows or gap-separated sessions.

A *message* is a line that starts with a timestamp plus the continuation lines that follow
it (lines without a timestamp), up to the next timestamped line. Messages are grouped:

* ``mode="window"`` -- a group starts at a message ``m0`` and takes every following message
  whose time ``t`` satisfies ``t0 <= t < t0 + window_minutes``; the first message outside
  that window starts the next group (tumbling windows anchored at each group's first
  message, not at clock boundaries).
* ``mode="session"`` -- a new group starts when the time between two consecutive messages
  exceeds ``gap_minutes`` (in either direction, so a clock that jumps back also splits).

A group whose text exceeds ``max_chunk_size`` is split at message boundaries (greedily,
consecutive messages while they fit); a single message over the limit is cut into
word-aligned windows (:func:`harness.text.units.window_atoms`). A chunk's span runs
from its first message's timestamp to the end of its last message, so ``text ==
doc.text[start:end]``.

Documents with fewer than two timestamped lines (prose, code, anything that is not a chat
log) fall back to recursive separator splitting with the same size limit; text before the
first timestamped line of a chat log (a header) is split the same way.

Time-grouping of chat transcripts is the conversation "session"/"time window" segmentation
used for chat and log retrieval (e.g. LlamaIndex/LangChain chat-history loaders group by
time; the session-gap rule is the standard inactivity-timeout sessionisation of web-log
mining, Catledge & Pitkow 1995).
"""

from __future__ import annotations

import bisect
import re
from datetime import datetime, timedelta

from harness.chunkers.base import ChunkContractError, Chunker, check_limit, check_read
from harness.chunkers.recursive import RecursiveChunker
from harness.params import Param
from harness.text.units import check_unit, get_counter, strip_span, window_atoms
from harness.types import Chunk, Document, Span

MODES = ("window", "session")

#: Default timestamp pattern, matched at the start of a line (leading spaces allowed).
#: Accepts ``[2025-11-18 09:02:17]``, ``2025-11-18T09:02:17`` (optionally with fractional
#: seconds, ``Z`` or a ``+02:00`` offset), ``2025/11/18 09:02``, ``[09:02:17]``, ``09:02``
#: and ``[09:02]``. Groups: ``date`` (optional, ``YYYY-MM-DD`` or ``YYYY/MM/DD``) and ``time``
#: (``H:MM``, ``HH:MM`` or ``HH:MM:SS[.fff]``).
DEFAULT_TIMESTAMP_REGEX = (
    r"^[ \t]*\[?"
    r"(?:(?P<date>\d{4}[-/]\d{2}[-/]\d{2})[T ])?"
    r"(?P<time>\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?)"
    r"(?:Z|[+-]\d{2}:?\d{2})?\]?(?=[\s:,|>\-]|$)"
)


def _parse(date: str | None, time: str) -> tuple[datetime, bool] | None:
    """``(datetime, has_date)`` for matched groups, or None when the values are not a valid time."""
    parts = re.split(r"[:.,]", time)
    try:
        hour, minute = int(parts[0]), int(parts[1])
        second = int(parts[2]) if len(parts) > 2 else 0
        micro = int((parts[3] + "000000")[:6]) if len(parts) > 3 else 0
        if date:
            y, m, d = (int(x) for x in re.split(r"[-/]", date))
            return datetime(y, m, d, hour, minute, second, micro), True
        return datetime(1900, 1, 1, hour, minute, second, micro), False
    except ValueError:
        return None


class TimestampChunker(Chunker):
    """Group chat-log messages by time window or by inactivity gap, with exact spans.

    Args:
        mode: ``"window"`` (fixed windows of ``window_minutes`` from each group's first
            message) or ``"session"`` (split where consecutive messages are more than
            ``gap_minutes`` apart).
        window_minutes: window length in minutes for ``mode="window"``, > 0.
        gap_minutes: inactivity gap in minutes for ``mode="session"``, > 0.
        timestamp_regex: pattern (Python ``re``, compiled with ``re.MULTILINE``) that must
            match at the start of a timestamped line and define a named group ``time``
            (``H:MM``, ``HH:MM`` or ``HH:MM:SS[.fff]``) and optionally ``date``
            (``YYYY-MM-DD`` or ``YYYY/MM/DD``). Default: :data:`DEFAULT_TIMESTAMP_REGEX`.
            Undated times are taken to be on one day, rolling over to the next day when the
            clock goes back by more than 12 hours (``23:58`` then ``00:03``). A match whose
            values are not a valid time (``25:61``) is not a timestamp. A UTC offset or
            ``Z`` after the time is matched but ignored (times are compared as written).
        max_chunk_size: maximum chunk size in ``unit``, >= 1.
        unit: ``"chars"``, ``"words"`` or ``"tokens"``.
        tokenizer: ``"model"`` (embedding model's WordPiece) or ``"cl100k_base"``.

    Chunk metadata: ``first_timestamp`` / ``last_timestamp`` (ISO 8601, e.g.
    ``"2025-11-18T09:02:17"``; ``"09:02:00"``-style times, prefixed ``"+1d "`` per day
    rolled over, when the log has no dates; None for fallback chunks), ``n_messages``
    (messages in the chunk; 1 for each window of an oversized message, 0 for fallback
    chunks), ``group`` (index of the time group, 0-based, shared by the chunks a large
    group was split into; None for fallback chunks), ``mode``, and ``fallback`` (True for
    chunks of text without timestamps).

    Raises:
        ValueError: a parameter outside its range or a regex that does not compile or has
            no ``time`` group (the message names the parameter).
    """

    name = "timestamp"
    contiguous = True
    partitions = True

    def __init__(
        self,
        mode: str = "window",
        window_minutes: float = 30.0,
        gap_minutes: float = 30.0,
        timestamp_regex: str = DEFAULT_TIMESTAMP_REGEX,
        max_chunk_size: int = 254,
        unit: str = "tokens",
        tokenizer: str = "model",
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"chunker.mode must be one of {list(MODES)}, got {mode!r}")
        for pname, value in (("window_minutes", window_minutes), ("gap_minutes", gap_minutes)):
            Param(pname, "number", low=0, low_open=True, finite=False, noun="a number of minutes").check(value, "chunker")
        if not isinstance(timestamp_regex, str):
            raise ValueError(f"chunker.timestamp_regex must be a regular expression string, got {timestamp_regex!r}")
        try:
            pattern = re.compile(timestamp_regex, re.MULTILINE)
        except re.error as exc:
            raise ValueError(f"chunker.timestamp_regex must be a valid regular expression: {exc}") from exc
        if "time" not in pattern.groupindex:
            raise ValueError("chunker.timestamp_regex must define a named group (?P<time>...) (and optionally (?P<date>...))")
        check_read("window_minutes", window_minutes, 30.0, mode == "window", "with chunker.mode=window")
        check_read("gap_minutes", gap_minutes, 30.0, mode == "session", "with chunker.mode=session")
        check_unit(unit, tokenizer)
        check_limit("max_chunk_size", max_chunk_size, unit)
        self.mode = mode
        self.window_minutes = float(window_minutes)
        self.gap_minutes = float(gap_minutes)
        self.timestamp_regex = timestamp_regex
        self.max_chunk_size = max_chunk_size
        self.unit = unit
        self.tokenizer = tokenizer
        self._pattern = pattern

    def size_limit(self) -> tuple[str, str, int]:
        return (self.unit, self.tokenizer, self.max_chunk_size)

    def check_settings(self, doc: Document, chunks: list[Chunk]) -> None:
        """The time rule on the messages of each chunk (parsed again from ``doc``): ``mode=window``:
        a group's messages lie in ``[t0, t0 + window_minutes)`` of its first message ``t0`` and the
        next group's first message does not; ``mode=session``: consecutive messages of a group are
        at most ``gap_minutes`` apart and consecutive groups more. Fallback chunks are not checked."""
        msgs = self.messages(doc.text)
        starts = [m[0] for m in msgs]
        groups: dict[int, list[int]] = {}
        for c in chunks:
            g = c.metadata.get("group")
            if g is None:
                continue
            lo, hi = bisect.bisect_left(starts, c.start), bisect.bisect_left(starts, c.end)
            groups.setdefault(g, []).extend(i for i in range(lo, hi) if i not in groups.get(g, []))
        window, gap = timedelta(minutes=self.window_minutes), timedelta(minutes=self.gap_minutes)
        previous: list[int] | None = None
        for g in sorted(groups):
            times = [msgs[i][2] for i in sorted(groups[g])]
            if not times:
                continue
            if self.mode == "window":
                bad = [t for t in times if not times[0] <= t < times[0] + window]
                new = previous is None or not (msgs[previous[0]][2] <= times[0] < msgs[previous[0]][2] + window)
                what = f"chunker.window_minutes={self.window_minutes}"
            else:
                bad = [b for a, b in zip(times, times[1:]) if abs(b - a) > gap]
                new = previous is None or abs(times[0] - msgs[previous[-1]][2]) > gap
                what = f"chunker.gap_minutes={self.gap_minutes}"
            if bad or not new:
                why = f"holds a message at {bad[0]}" if bad else "starts a new group although its first message belongs to the previous one"
                raise ChunkContractError(f"chunker={self.name} chunker.mode={self.mode} {what}: group {g} of {doc.doc_id} {why}")
            previous = sorted(groups[g])

    # -- parsing -------------------------------------------------------------------------
    def messages(self, text: str) -> list[tuple[int, int, datetime, bool]]:
        """Messages of ``text`` as ``(start, end, time, has_date)``, in order.

        ``start`` is the start of the timestamp match, ``end`` the end of the message's
        last non-whitespace character (continuation lines included). Only matches at a
        line start count.
        """
        starts: list[tuple[int, datetime, bool]] = []
        day_offset = 0
        previous: datetime | None = None
        for m in self._pattern.finditer(text):
            s = m.start()
            if s > 0 and text[s - 1] != "\n":
                continue
            gd = m.groupdict()
            if not gd.get("time"):  # a custom pattern whose time group did not take part
                continue
            parsed = _parse(gd.get("date"), gd["time"])
            if parsed is None:
                continue
            when, has_date = parsed
            if not has_date:
                when += timedelta(days=day_offset)
                if previous is not None and when < previous - timedelta(hours=12):
                    day_offset += 1
                    when += timedelta(days=1)
            previous = when
            s, _ = strip_span(text, s, m.end())  # skip leading spaces of the line
            starts.append((s, when, has_date))
        out = []
        for i, (s, when, has_date) in enumerate(starts):
            nxt = starts[i + 1][0] if i + 1 < len(starts) else len(text)
            s2, e2 = strip_span(text, s, nxt)
            out.append((s2, e2, when, has_date))
        return out

    def _groups(self, msgs: list[tuple[int, int, datetime, bool]]) -> list[list[int]]:
        groups: list[list[int]] = []
        anchor = previous = None
        window = timedelta(minutes=self.window_minutes)
        gap = timedelta(minutes=self.gap_minutes)
        for i, (_, _, when, _) in enumerate(msgs):
            if self.mode == "window":
                new = anchor is None or not (anchor <= when < anchor + window)
            else:
                new = previous is None or abs(when - previous) > gap
            if new:
                groups.append([])
                anchor = when
            groups[-1].append(i)
            previous = when
        return groups

    @staticmethod
    def _stamp(when: datetime, has_date: bool) -> str:
        if has_date:
            return when.isoformat()
        days = (when - datetime(1900, 1, 1)).days
        return (f"+{days}d " if days else "") + when.time().isoformat()

    # -- chunking ------------------------------------------------------------------------
    def _fallback(self, doc: Document, start: int, end: int) -> list[Chunk]:
        splitter = RecursiveChunker(chunk_size=self.max_chunk_size, chunk_overlap=0, unit=self.unit, tokenizer=self.tokenizer)
        meta = {"mode": self.mode, "first_timestamp": None, "last_timestamp": None, "n_messages": 0, "group": None, "fallback": True}
        return [Chunk.from_spans(doc, [(start + s, start + e)], metadata=meta) for s, e in splitter.split_spans(doc.text[start:end])]

    def chunk(self, doc: Document) -> list[Chunk]:
        text = doc.text
        msgs = self.messages(text)
        if len(msgs) < 2:
            return self.finalize(doc, self._fallback(doc, 0, len(text)))
        counter = get_counter(self.unit, self.tokenizer)

        def fits(s: int, e: int) -> bool:
            return counter.count(text[s:e]) <= self.max_chunk_size

        out = self._fallback(doc, 0, msgs[0][0]) if text[: msgs[0][0]].strip() else []
        for g, group in enumerate(self._groups(msgs)):
            # (span, message indices, can take more messages); an oversized message becomes
            # word-aligned windows that are never merged with neighbours
            pieces: list[tuple[Span, list[int], bool]] = []
            for i in group:
                s, e = msgs[i][0], msgs[i][1]
                if pieces and pieces[-1][2] and fits(pieces[-1][0][0], e):
                    pieces[-1] = ((pieces[-1][0][0], e), pieces[-1][1] + [i], True)
                elif fits(s, e):
                    pieces.append(((s, e), [i], True))
                else:
                    pieces.extend((w, [i], False) for w in window_atoms(text, s, e, counter, self.max_chunk_size, 0))
            for span, ids, _ in pieces:
                first, last = msgs[ids[0]], msgs[ids[-1]]
                meta = {
                    "mode": self.mode,
                    "first_timestamp": self._stamp(first[2], first[3]),
                    "last_timestamp": self._stamp(last[2], last[3]),
                    "n_messages": len(ids),
                    "group": g,
                    "fallback": False,
                }
                out.append(Chunk.from_spans(doc, [span], metadata=meta))
        return self.finalize(doc, out)
