"""Label audit: retrieved statements that likely state a query's answer but are not labelled.

When an answer is written in several places and only one of them is labelled, a ranking
that returns another statement of it scores as a miss: recall understates retrieval and
a gate lists false flips. :func:`audit` finds such places among the chunks a retriever
returned, so a person can read them side by side with the labelled evidence and decide.
Pure functions over :mod:`harness.types` records; no model, no MLflow; deterministic.

Method
------
For a query, every labelled evidence span ``e`` (its document text ``doc.text[start:end]``)
is compared with every *statement* of every retrieved chunk (the first ``k`` of the
ranking) whose chunk overlaps none of the query's evidence spans. A statement is one
*unit* or two adjacent units of the chunk; the units are the sentences of
:func:`harness.text.sentences.sentence_spans` (paragraphs split apart), each further cut
where a new block line starts, so that a table row, list item or chat line is a unit of
its own while wrapped prose stays one sentence (:func:`statement_units`), trimmed of
outer whitespace. Two things are compared:

* **key values** (:func:`key_values`): the named values a statement of the answer must
  repeat, found by :data:`KEY_VALUE`: numbers and versions (``8450``, ``2.3.1``,
  ``0.0.0.0``), identifiers joined by ``_ - . / :`` (``kestrel-broker``,
  ``broker.bind``, ``KESTREL_BROKER_URL``), backticked and double-quoted values
  (`` `kestrelctl` ``, ``"5m"``), words with an inner capital or digit (``SQLite``,
  ``P1``) and capitalised words inside a sentence (``... on Postgres``), all lowercased.
  The *key share* is the fraction of the evidence's key values found in the statement
  (a value is found when it occurs there as a whole token: ``8450`` is not found in
  ``18450``).
* **content words** (:func:`content_words`): lowercase alphanumeric words of three or
  more characters that are not in :data:`STOPWORDS`, with a final ``s`` dropped from words
  longer than three characters (``leases`` -> ``lease``). The *word share* is the fraction
  of the evidence's content words found in the statement.

A statement is **flagged** (:meth:`AuditRule.flags`) when the evidence has key values,
at least ``min_key_share`` of them are found and the word share is at least
``min_word_share``; or, for evidence without key values, when the word share is at least
``min_word_share_plain``. Per chunk and evidence span the best statement is kept (highest
key share, then word share, then the earlier and shorter statement); per query the
flagged candidates are reported in rank order. Evidence with neither key values nor
content words cannot be audited and flags nothing.

Nothing here depends on the order of the documents: a candidate is identified by its
document id and character span, and the output is sorted by rank (the retriever's
ranking, itself ordered by :func:`harness.types.rank_order`), then document id and start.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Mapping, Sequence

from harness.params import Param
from harness.text.sentences import sentence_spans
from harness.text.units import strip_span
from harness.types import Chunk, Document, Evidence, Query, Span

#: Key values (see the module docstring), tried in this order at each position:
#: a backticked value, a double-quoted value (at most 60 characters), an identifier of
#: alphanumeric parts joined by ``_ - . / :`` (numbers with dots are versions), a number,
#: a word with a capital or digit after its first character, a capitalised word that
#: follows a lowercase word, digit or comma and a space (not the first word of a sentence,
#: line or table cell).
KEY_VALUE = re.compile(
    r"`(?P<tick>[^`\n]{1,60})`"
    r"|\"(?P<quote>[^\"\n]{1,60})\""
    r"|(?P<ident>\b[A-Za-z0-9]+(?:[_\-./:][A-Za-z0-9]+)+\b)"
    r"|(?P<number>\b\d+\b)"
    r"|(?P<inner>\b[A-Za-z][a-z]*[A-Z0-9][A-Za-z0-9]*\b)"
    r"|(?<=[a-z0-9,] )(?P<name>[A-Z][a-z]{2,}\b)"
)

#: Function words and question words ignored by :func:`content_words`.
STOPWORDS = frozenset(
    """
    the and for are but not you your yours with this that these those from into onto over under than then them they their there here
    what which who whom whose when where why how does did done doing has have had having was were been being will would shall should
    can could may might must its it's our ours out off all any each every both few more most other some such only own same too very
    just also about above below after before again further once per via yes one two use used using get gets got lets let
    """.split()
)

_WORD = re.compile(r"[a-z0-9]+")


def _norm(value: str) -> str:
    return value.strip().strip("\"'`").strip().lower()


@lru_cache(maxsize=4096)
def key_values(text: str) -> frozenset[str]:
    """The key values of ``text`` (:data:`KEY_VALUE`), lowercased, quotes stripped.

    A backticked or quoted value also contributes the values found inside it
    (`` `"0.0.0.0:8450"` `` gives ``0.0.0.0:8450``, ``0.0.0.0`` is not split further; an
    identifier is one value). Empty values are dropped.
    """
    out: set[str] = set()
    for m in KEY_VALUE.finditer(text):
        value = _norm(m.group(0))
        if value:
            out.add(value)
        inner = m.group("tick") or m.group("quote")
        if inner:
            out |= {v for v in key_values(inner) if v != value}
    return frozenset(out)


def _stem(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


@lru_cache(maxsize=4096)
def content_words(text: str) -> frozenset[str]:
    """Content words of ``text``: lowercase ``[a-z0-9]+`` runs of >= 3 characters, minus
    :data:`STOPWORDS`, a final ``s`` dropped from words longer than three characters (not
    from ``ss``)."""
    return frozenset(_stem(w) for w in _WORD.findall(text.lower()) if len(w) >= 3 and w not in STOPWORDS)


def _found(value: str, text_lower: str) -> bool:
    """``value`` occurs in ``text_lower`` as a whole token (no letter, digit or ``_``
    directly before or after it, and no ``.``/``-`` followed by a letter or digit)."""
    return value in text_lower and _token_pattern(value).search(text_lower) is not None


@lru_cache(maxsize=4096)
def _token_pattern(value: str) -> re.Pattern:
    return re.compile(r"(?<![A-Za-z0-9_])(?<![A-Za-z0-9][.\-])" + re.escape(value) + r"(?![A-Za-z0-9_])(?![.\-:][A-Za-z0-9])")


@dataclass(frozen=True)
class Overlap:
    """What one evidence text and one statement share.

    Attributes:
        shared_values: the evidence's key values found in the statement, sorted.
        missing_values: the evidence's key values not found, sorted.
        shared_words: the evidence's content words found in the statement, sorted.
        key_share: ``len(shared_values) / n`` over the evidence's ``n`` key values, in
            [0, 1]; 0.0 when the evidence has none.
        word_share: the same over its content words, in [0, 1]; 0.0 when it has none.
    """

    shared_values: tuple[str, ...]
    missing_values: tuple[str, ...]
    shared_words: tuple[str, ...]
    key_share: float
    word_share: float


def answer_values(evidence_text: str, question: str = "") -> frozenset[str]:
    """The key values of ``evidence_text`` that ``question`` does not already name: what the
    evidence adds to the question (``8450`` for "Which port does `kestrel-broker` use?")."""
    return _answer_values(evidence_text, question.lower())


@lru_cache(maxsize=4096)
def _answer_values(evidence_text: str, asked: str) -> frozenset[str]:
    return frozenset(v for v in key_values(evidence_text) if not _found(v, asked))


def overlap(evidence_text: str, statement: str, question: str = "") -> Overlap:
    """Overlap of ``statement`` with ``evidence_text``: its answer values
    (:func:`answer_values`, given the ``question``) and content words (module docstring)."""
    low = statement.lower()
    values = answer_values(evidence_text, question)
    shared = sorted(v for v in values if _found(v, low))
    words = content_words(evidence_text)
    shared_words = sorted(words & content_words(statement))
    return Overlap(
        shared_values=tuple(shared),
        missing_values=tuple(sorted(values - set(shared))),
        shared_words=tuple(shared_words),
        key_share=len(shared) / len(values) if values else 0.0,
        word_share=len(shared_words) / len(words) if words else 0.0,
    )


@dataclass(frozen=True)
class AuditRule:
    """When a statement is flagged as likely unlabelled evidence, and how deep to look.

    Attributes:
        k: how many ranked chunks of each query are searched, >= 1 (default 10).
        min_key_share: share of the evidence's key values the statement must hold, in (0, 1].
        min_word_share: share of its content words, in [0, 1], when it has key values.
        min_word_share_plain: share of its content words, in (0, 1], when it has none.

    Raises:
        ValueError: a field out of range (one line naming the field, the range and the value).
    """

    k: int = 10
    min_key_share: float = 1.0
    min_word_share: float = 0.3
    min_word_share_plain: float = 0.6

    def __post_init__(self) -> None:
        Param("audit k", "int", low=1).check(self.k)
        for name, lo_open in (("min_key_share", True), ("min_word_share", False), ("min_word_share_plain", True)):
            Param(f"audit {name}", "number", low=0, high=1, low_open=lo_open).check(getattr(self, name))

    def flags(self, o: Overlap) -> bool:
        """True when ``o`` passes this rule (module docstring, "flagged")."""
        if o.key_share > 0 or o.missing_values:
            return o.key_share >= self.min_key_share and o.word_share >= self.min_word_share
        return o.word_share >= self.min_word_share_plain


@dataclass(frozen=True)
class Candidate:
    """A retrieved statement that likely states the answer of a query but is not labelled.

    Attributes:
        query_id, question: the query.
        evidence: the labelled evidence span it was compared with (``doc_id``, ``start``,
            ``end`` in code points; ``text`` is the document text of the span).
        rank: 1-based rank of the chunk holding it in the audited ranking.
        chunk_id: that chunk's id.
        doc_id, start, end: the statement's span (code points, half-open) in ``doc_id``.
        text: ``doc.text[start:end]``.
        overlap: what the two share (:class:`Overlap`).
    """

    query_id: str
    question: str
    evidence: Evidence
    rank: int
    chunk_id: str
    doc_id: str
    start: int
    end: int
    text: str
    overlap: Overlap

    def record(self) -> dict:
        """A flat JSON/CSV record: ids, both spans and texts, shared values and words, shares."""
        return {
            "query_id": self.query_id,
            "question": self.question,
            "evidence_doc": self.evidence.doc_id,
            "evidence_start": self.evidence.start,
            "evidence_end": self.evidence.end,
            "evidence_text": self.evidence.text,
            "rank": self.rank,
            "chunk_id": self.chunk_id,
            "candidate_doc": self.doc_id,
            "candidate_start": self.start,
            "candidate_end": self.end,
            "candidate_text": self.text,
            "shared_values": list(self.overlap.shared_values),
            "missing_values": list(self.overlap.missing_values),
            "shared_words": list(self.overlap.shared_words),
            "key_share": round(self.overlap.key_share, 4),
            "word_share": round(self.overlap.word_share, 4),
        }


#: A line break that starts a new block line: one before a table row, list item, heading,
#: quote or timestamped chat line, or after a table row. Wrapped prose lines stay together.
_LINE_BREAK = re.compile(r"\n(?=[ \t]*(?:\||[-*+>#]\s|\d+[.)]\s|\[\d{4}-))|(?<=\|)[ \t]*\n")


def statement_units(text: str, start: int, end: int) -> list[Span]:
    """Units of ``text[start:end]``: sentences (paragraphs split apart), each cut where a
    new block line starts (:data:`_LINE_BREAK`: a table row, list item, heading, quote or
    chat line), trimmed of outer whitespace; sorted absolute spans, empty ones dropped."""
    out: list[Span] = []
    for s, e in sentence_spans(text, start, end, split_paragraphs=True):
        cut = s
        for m in _LINE_BREAK.finditer(text, s, e):
            out.append(strip_span(text, cut, m.start()))
            cut = m.end()
        out.append(strip_span(text, cut, e))
    return [(a, b) for a, b in out if b > a]


def _statements(units: Sequence[Span]) -> list[Span]:
    """Each unit, and each pair of adjacent units, as one span."""
    out = list(units)
    out += [(units[i][0], units[i + 1][1]) for i in range(len(units) - 1)]
    return out


def _overlaps(chunk: Chunk, evidence: Sequence[Evidence]) -> bool:
    return any(e.doc_id == chunk.doc_id and s < e.end and e.start < t for e in evidence for s, t in chunk.spans)


def _statement_terms(text: str, statements: Sequence[Span]) -> list[tuple[int, int, str, frozenset[str]]]:
    """``(start, end, lowercased text, content words)`` of each statement span of ``text``:
    what :func:`overlap` computes of a statement, once per chunk instead of once per
    (query, evidence span, statement)."""
    out = []
    for s, t in statements:
        piece = text[s:t]
        out.append((s, t, piece.lower(), content_words(piece)))
    return out


def _best_statement(statements: Sequence[tuple[int, int, str, frozenset[str]]], values: frozenset[str], words: frozenset[str], rule: AuditRule) -> Span | None:
    """The span of the best flagged statement for one evidence span, or None.

    The same choice as comparing every statement with :func:`overlap` and keeping, among
    those :meth:`AuditRule.flags` accepts, the smallest ``(-key_share, -word_share, length,
    start)``: the shares are computed with the same expressions, and the word share (a set
    intersection) is tested before the key values are searched for (a regular expression
    per value), since a statement below the word threshold is never flagged.
    """
    n_values, n_words = len(values), len(words)
    word_floor = rule.min_word_share if n_values else rule.min_word_share_plain
    best_key: tuple | None = None
    best: Span | None = None
    for s, t, low, statement_words in statements:
        word_share = len(words & statement_words) / n_words if n_words else 0.0
        if word_share < word_floor:
            continue
        if n_values:
            key_share = sum(1 for v in values if _found(v, low)) / n_values
            if key_share < rule.min_key_share:
                continue
        else:
            key_share = 0.0
        key = (-key_share, -word_share, t - s, s)
        if best_key is None or key < best_key:
            best_key, best = key, (s, t)
    return best


def audit_query(
    query: Query, documents: Mapping[str, Document], ranked: Sequence[Chunk], rule: AuditRule | None = None, _units: dict | None = None
) -> list[Candidate]:
    """Flagged candidates of one query among its first ``rule.k`` ranked chunks.

    Args:
        query: the labelled query.
        documents: ``doc_id -> Document`` holding every evidence and chunk document.
        ranked: the query's ranked chunks, best first (only the first ``rule.k`` are read).
        rule: the flag rule (default :class:`AuditRule`).

    Returns:
        At most one candidate per (chunk, evidence span): the best statement of the chunk
        for that span, when flagged; sorted by rank, document id, start, evidence index.

    Raises:
        KeyError: a document is missing from ``documents`` (the message names it).
    """
    rule = AuditRule() if rule is None else rule
    ev_texts = [(e, documents[e.doc_id].text[e.start : e.end]) for e in query.evidence]
    # per evidence span: its answer values and content words (what every statement is compared with)
    ev_terms = [(answer_values(t, query.text), content_words(t)) for _, t in ev_texts]
    found: list[tuple[tuple, Candidate]] = []
    for rank, chunk in enumerate(ranked[: rule.k], start=1):
        if _overlaps(chunk, query.evidence):
            continue
        doc = documents[chunk.doc_id]
        statements = None if _units is None else _units.get(chunk.chunk_id)
        if statements is None:
            statements = _statement_terms(doc.text, _statements([u for s, t in chunk.spans for u in statement_units(doc.text, s, t)]))
            if _units is not None:
                _units[chunk.chunk_id] = statements
        for i, (ev, ev_text) in enumerate(ev_texts):
            best = _best_statement(statements, *ev_terms[i], rule)
            if best is not None:
                s, t = best
                o = overlap(ev_text, doc.text[s:t], query.text)
                ev_record = Evidence(ev.doc_id, ev.start, ev.end, ev_text)
                cand = Candidate(query.query_id, query.text, ev_record, rank, chunk.chunk_id, chunk.doc_id, s, t, doc.text[s:t], o)
                found.append(((rank, chunk.doc_id, s, i), cand))
    found.sort(key=lambda x: x[0])
    return [c for _, c in found]


def audit(
    queries: Sequence[Query], documents: Mapping[str, Document], ranked: Mapping[str, Sequence[Chunk]], rule: AuditRule | None = None
) -> dict[str, list[Candidate]]:
    """:func:`audit_query` for every query: ``{query_id: [Candidate, ...]}`` in input order.

    The one entry point of the audit: every document an evidence span or a ranked chunk
    names is checked to be in ``documents`` first.

    Args:
        queries: labelled queries.
        documents: ``doc_id -> Document``.
        ranked: ``query_id -> ranked chunks`` (best first); a query absent retrieved nothing.
        rule: flag rule and depth (default :class:`AuditRule`: ``k=10``).

    Raises:
        ValueError: an evidence span or a ranked chunk names a document not in ``documents``
            (one line: the query id and the document id).
    """
    rule = AuditRule() if rule is None else rule
    for q in queries:
        for doc_id in [e.doc_id for e in q.evidence] + [c.doc_id for c in ranked.get(q.query_id, ())[: rule.k]]:
            if doc_id not in documents:
                raise ValueError(f"audit: query {q.query_id!r} names document {doc_id!r}, which is not in the corpus")
    units: dict = {}  # statements per chunk id, shared by the queries that retrieved it
    return {q.query_id: audit_query(q, documents, ranked.get(q.query_id, ()), rule, units) for q in queries}


#: Prefix of the per-cut-off shares of :func:`misses_with_candidate` (``diagnostics.miss_with_candidate@5``).
MISS_WITH_CANDIDATE = "diagnostics.miss_with_candidate"


def misses_with_candidate(
    reasons: Mapping[str, Mapping[int, str | None]], candidates: Mapping[str, Sequence[Candidate]], ks: Sequence[int]
) -> dict[str, float]:
    """Share of queries missed at ``k`` that have a flagged candidate within their top ``k``.

    Args:
        reasons: ``{query_id: {k: miss reason or None}}``
            (:func:`harness.evaluation.diagnostics.diagnose_queries`).
        candidates: :func:`audit` of the same ranking (searched at least ``max(ks)`` deep).
        ks: cut-offs.

    Returns:
        ``{"diagnostics.miss_with_candidate@<k>": n / n_queries}`` per ``k``, each in
        ``[0, diagnostics.missed@k]`` (same denominator: all labelled queries); 0.0 for
        no queries.
    """
    n = len(reasons)
    out = {}
    for k in ks:
        hits = sum(1 for qid, r in reasons.items() if r.get(k) is not None and any(c.rank <= k for c in candidates.get(qid, ())))
        out[f"{MISS_WITH_CANDIDATE}@{k}"] = hits / n if n else 0.0
    return out
