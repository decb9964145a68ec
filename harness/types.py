"""Core record types: documents, chunks, queries and their evidence, all addressed by spans.

Every position in this project is a half-open ``[start, end)`` interval in Unicode code
points (Python ``str`` indices) into :attr:`Document.text`. Chunkers return the spans they
tracked while splitting; nothing re-finds a chunk by searching the text for it, because a
search is wrong whenever a passage repeats.

Retrieval results use the shape every IR library accepts: ``Run = {query_id: {chunk_id:
score}}``, and relevance judgements ``Qrels = {query_id: {chunk_id: grade}}``.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

Span = tuple[int, int]
"""A half-open ``(start, end)`` interval of code points, ``0 <= start < end``; both bounds
``int`` (a ``bool`` or a ``float`` is refused with ``TypeError``)."""

Run = dict[str, dict[str, float]]
"""Ranked retrieval results: query id -> {chunk id -> score}; higher scores rank first."""

Qrels = dict[str, dict[str, int]]
"""Relevance judgements: query id -> {chunk id -> relevance grade (>= 1 is relevant)}."""


class OneLineError(Exception):
    """Marker of an error whose message is the whole story, on one line (what was refused,
    where, how many, what to do). ``harness run`` prints such an error as one line on stderr
    (exit 1) instead of a traceback; the run is FAILED with the same message."""


class NonFiniteError(ValueError, OneLineError):
    """A number that would make a result wrong: NaN or infinity in a vector, a score or a
    metric, refused at the boundary it tried to cross (the message names the boundary, the
    count and the first offender)."""


def _check_span(start: int, end: int, where: str) -> None:
    # a bool is an int to Python, but never an offset
    if not isinstance(start, int) or not isinstance(end, int) or isinstance(start, bool) or isinstance(end, bool):
        raise TypeError(f"{where}: span bounds must be int, got {start!r}, {end!r}")
    if start < 0 or end <= start:
        raise ValueError(f"{where}: span must satisfy 0 <= start < end, got [{start}, {end})")


@dataclass(frozen=True, slots=True)
class Document:
    """One source document of a corpus.

    Attributes:
        doc_id: unique id within the corpus (for file corpora: the file name).
        text: the full text exactly as stored (no newline or whitespace normalisation);
            every span in the project indexes into this string in code points.
        metadata: free-form facts about the document (``type`` such as ``markdown``,
            ``python``, ``chat``, ``faq``, ``text``; ``source`` path).
    """

    doc_id: str
    text: str
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.doc_id:
            raise ValueError("Document.doc_id must be a non-empty string")


@dataclass(frozen=True, slots=True)
class Chunk:
    """A retrievable unit cut from one document.

    Attributes:
        doc_id: the :class:`Document` this chunk comes from.
        spans: one or more non-overlapping half-open ``(start, end)`` code-point intervals
            into ``Document.text``, sorted by start. A plain chunk has one span and
            ``text == doc.text[start:end]``; a non-contiguous chunk (topic grouping) has
            several.
        text: the text that is embedded and indexed. Equals the concatenation of the span
            texts unless a chunker adds context (a section path, a table header); such a
            chunker records it in ``metadata`` (e.g. ``{"prefix": ...}``) and keeps the
            spans true to the source.
        chunk_id: deterministic id ``"{doc_id}#{start}-{end}[+{start}-{end}...]"`` built
            from the spans (never random), so the same chunking gives the same ids.
        metadata: chunker-specific facts (sizes, section path, sentence count, ...).
        parent_id: id of an enclosing parent chunk for hierarchical strategies, else None.

    Raises:
        ValueError: if ``spans`` is empty, a span is empty or negative, or spans overlap or
            are unsorted.
    """

    doc_id: str
    spans: tuple[Span, ...]
    text: str
    chunk_id: str
    metadata: Mapping[str, Any] = field(default_factory=dict)
    parent_id: str | None = None

    def __post_init__(self) -> None:
        if not self.spans:
            raise ValueError(f"Chunk {self.chunk_id!r}: spans must not be empty")
        previous_end = -1
        for start, end in self.spans:
            _check_span(start, end, f"Chunk {self.chunk_id!r}")
            if start < previous_end:
                raise ValueError(f"Chunk {self.chunk_id!r}: spans must be sorted and non-overlapping, got {self.spans}")
            previous_end = end

    @classmethod
    def from_spans(
        cls,
        doc: Document,
        spans: list[Span] | tuple[Span, ...],
        *,
        text: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        parent_id: str | None = None,
    ) -> "Chunk":
        """Build a chunk of ``doc`` from spans; ``text`` defaults to the spans' source text.

        Args:
            doc: the source document.
            spans: half-open code-point intervals into ``doc.text`` (sorted, disjoint).
            text: embedded text when it differs from the source text (added context).
            metadata: chunker facts; ``n_chars`` (source characters) is always added.
            parent_id: id of the parent chunk, for hierarchical strategies.

        Raises:
            ValueError: if a span lies outside ``doc.text`` or the spans are invalid.
        """
        spans = tuple((int(s), int(e)) for s, e in spans)
        for start, end in spans:
            if end > len(doc.text):
                raise ValueError(f"span [{start}, {end}) is outside document {doc.doc_id!r} of length {len(doc.text)}")
        source_text = "".join(doc.text[s:e] for s, e in spans)
        meta = dict(metadata or {})
        meta.setdefault("n_chars", sum(e - s for s, e in spans))
        return cls(
            doc_id=doc.doc_id,
            spans=spans,
            text=source_text if text is None else text,
            chunk_id=make_chunk_id(doc.doc_id, spans),
            metadata=meta,
            parent_id=parent_id,
        )

    @property
    def start(self) -> int:
        """Start of the first span (code points)."""
        return self.spans[0][0]

    @property
    def end(self) -> int:
        """End of the last span (code points, exclusive)."""
        return self.spans[-1][1]

    @property
    def n_chars(self) -> int:
        """Number of source characters covered by the spans."""
        return sum(e - s for s, e in self.spans)


def make_chunk_id(doc_id: str, spans: tuple[Span, ...] | list[Span]) -> str:
    """Deterministic chunk id from a document id and its spans, e.g. ``"a.md#0-120"``.

    A document id may itself contain ``#``: the spans are everything after the last ``#``
    (:func:`chunk_order_key` parses them back that way).
    """
    return doc_id + "#" + "+".join(f"{s}-{e}" for s, e in spans)


# ------------------------------------------------------------------------------ the tie rule

_DIGIT_RUN = re.compile(r"([0-9]+)")
_SPANS_PART = re.compile(r"[0-9]+-[0-9]+(?:\+[0-9]+-[0-9]+)*")


def natural_key(text: str) -> tuple:
    """Sort key of ``text`` in natural order: runs of ASCII digits compare as numbers.

    ``"doc9" < "doc10" < "doc10a"``; the key alternates text and number (``"doc10"`` ->
    ``("doc", 10, "")``), so two keys compare position by position with the same types.
    Strings that differ only in leading zeros (``"d01"``, ``"d1"``) get equal keys; callers
    that need a total order append the string itself (:func:`chunk_order_key` does).
    """
    parts = _DIGIT_RUN.split(text)
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts))


@functools.lru_cache(maxsize=1 << 16)  # the same ids are ranked for every query
def chunk_order_key(chunk_id: str) -> tuple:
    """The document-order key of a chunk id: the tie rule of every ranking in the project.

    For an id built by :func:`make_chunk_id` (``"{doc_id}#{start}-{end}[+{start}-{end}...]"``)
    the key is ``(natural_key(doc_id), (start_1, end_1, start_2, ...), chunk_id)``: documents
    in natural order of their ids (:func:`natural_key`: ``doc9`` before ``doc10``), then the
    chunk's code-point offsets as numbers (``d#5-9`` before ``d#100-110``; a chunk before a
    longer one with the same start), then the id string, so the order is total. Any other
    id (a chunk built by hand with a free-form id) sorts as ``(natural_key(chunk_id), (),
    chunk_id)``. The key depends on the id alone: not on the position of a document in the
    corpus nor on the order chunks were indexed in, so permuting a corpus changes no ranking.
    """
    doc_id, sep, spans = chunk_id.rpartition("#")
    if sep and _SPANS_PART.fullmatch(spans):
        return (natural_key(doc_id), tuple(int(x) for x in _DIGIT_RUN.findall(spans)), chunk_id)
    return (natural_key(chunk_id), (), chunk_id)


def rank_order(scores: Mapping[str, float]) -> list[str]:
    """Chunk ids of one query's ``{chunk_id: score}`` in ranking order.

    Score descending; equal scores in document order (:func:`chunk_order_key`). Every
    retriever's top-k cut and every metric that reads a ranking use this one rule, so what
    is cut and what is scored agree. Scores must be comparable numbers (no NaN).
    """
    return sorted(scores, key=lambda cid: (-scores[cid], chunk_order_key(cid)))


@dataclass(frozen=True, slots=True)
class Evidence:
    """One labelled evidence span: ``text == documents[doc_id].text[start:end]``.

    Attributes:
        doc_id: document holding the evidence.
        start: first code point (inclusive).
        end: last code point (exclusive), ``end > start``.
        text: the stored excerpt, checked against the document at load time.
    """

    doc_id: str
    start: int
    end: int
    text: str = ""

    def __post_init__(self) -> None:
        _check_span(self.start, self.end, f"Evidence in {self.doc_id!r}")

    @property
    def span(self) -> Span:
        return (self.start, self.end)


@dataclass(frozen=True, slots=True)
class Query:
    """A labelled question.

    Attributes:
        query_id: unique id within the dataset.
        text: the question as a user would ask it.
        evidence: the spans that answer it (one or more, possibly in several documents).
    """

    query_id: str
    text: str
    evidence: tuple[Evidence, ...]


@dataclass(frozen=True)
class Dataset:
    """A corpus plus labelled queries.

    Attributes:
        name: dataset name (used as the default MLflow experiment name).
        documents: the corpus, ordered; doc ids unique.
        queries: labelled queries, each evidence span checked against ``documents``.
        source: where it was loaded from (a path or URL), for provenance.
        load_report: what the loader dropped or could not resolve (a
            :class:`harness.datasets.report.LoadReport`, e.g. its
            ``queries_without_evidence`` count), or None; not part of equality.
    """

    name: str
    documents: tuple[Document, ...]
    queries: tuple[Query, ...]
    source: str = ""
    load_report: Any = field(default=None, compare=False, repr=False)

    @property
    def by_id(self) -> dict[str, Document]:
        """Documents keyed by ``doc_id``."""
        return {d.doc_id: d for d in self.documents}

    def fingerprint(self) -> str:
        """sha256 (hex, first 16 chars) over every document's id and text and every query.

        Changes whenever any text, id, query or evidence span changes; independent of
        where the dataset was loaded from.
        """
        h = hashlib.sha256()
        for d in self.documents:
            h.update(d.doc_id.encode("utf-8") + b"\0" + d.text.encode("utf-8") + b"\0")
        for q in self.queries:
            h.update(q.query_id.encode("utf-8") + b"\0" + q.text.encode("utf-8") + b"\0")
            for ev in q.evidence:
                h.update(f"{ev.doc_id}\0{ev.start}\0{ev.end}\0".encode("utf-8"))
        return h.hexdigest()[:16]

    @property
    def n_chars(self) -> int:
        """Total corpus size in code points."""
        return sum(len(d.text) for d in self.documents)
