"""Why a query was missed, and what a chunk set looks like before any retrieval.

Pure functions over :mod:`harness.types` records; no Hydra, no MLflow, no model weights
(only the embedding model's tokenizer, for the truncation check).

Content characters
------------------
Every judgement below is made on the *content characters* of an evidence span: the
characters of ``doc.text[start:end]`` that are not whitespace (``str.isspace``). Chunkers
strip outer whitespace from their spans, while labelled excerpts often carry it (in the
chroma_general questions 208 of 452 evidence spans start or end with whitespace), so a
character-exact test would call nearly half of all evidence "split" or "not covered"
because of a newline. A span is *contained* in a chunk when every content character of
the span lies inside the chunk's spans. Span recall (:mod:`harness.evaluation.metrics.ranking`) still
counts every character; a query whose only missing evidence characters are whitespace has
``recall@k < 1`` but is not *missed* here and gets no reason.

Miss reasons
------------
For a query and a cut-off ``k``, with ``R_k`` the union of the spans of the first ``k``
ranked chunks (what is scored, after any parent expansion) and the *indexed* chunks (what
the retriever searched, e.g. the children of a hierarchical strategy), an evidence span
``e`` is *missed at k* when one of its content characters is outside ``R_k``. A missed span
gets the first reason of :data:`REASONS` that applies:

1. ``not_covered``: a content character of ``e`` lies in no indexed chunk at all (the
   strategy dropped text); no retriever can recall it at any ``k``.
2. ``boundary_split``: every content character is in some indexed chunk, but no single
   indexed chunk contains all of them: the evidence is cut across two or more chunks, so
   even a perfect ranker needs several slots for it.
3. ``truncated``: some indexed chunk contains ``e``, but in every such chunk part of ``e``
   lies beyond the embedding model's window: the chunk text after its first
   ``max_seq_length - 2`` word pieces (2 slots go to ``[CLS]`` and ``[SEP]``), which the
   model silently drops. Only checked when ``max_seq_length`` is given (dense retrievers;
   BM25 reads the whole text).
4. ``rank_miss``: a chunk containing ``e`` within its embedded window exists but is
   ranked below ``k`` (or not returned).

A query's reason is the first reason in :data:`REASONS` order held by any of its missed
spans, and None when no span is missed. The order goes from structural to retriever
faults: ``not_covered`` is a ceiling no retriever or ``k`` can lift; ``boundary_split`` is
a property of the chunking alone; ``truncated`` is a mismatch between chunk size and the
model's window; ``rank_miss`` is the only failure a better retriever can fix without
touching the chunking. With this order a query labelled ``rank_miss`` has *only*
retriever misses, so ``diagnostics.rank_miss@k`` is exactly the share of queries a better
ranking alone would repair at ``k`` (as far as the chunking permits), and the three other
labels flag queries the chunking (or the window) must change for. A query whose evidence
is missed for several reasons is counted once, under the most structural one.
"""

from __future__ import annotations

import bisect
import re
import statistics
from collections import Counter
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from harness.evaluation.metrics import span as sp
from harness.params import Param
from harness.types import Chunk, Document, Query, Run, Span, rank_order

#: Miss reasons in precedence order (earlier wins when a query has several).
REASONS = ("not_covered", "boundary_split", "truncated", "rank_miss")

#: Evidence span states relative to a chunk set (before retrieval).
CONTAINED, SPLIT, UNCOVERED = "contained", "split", "uncovered"

#: Word pieces reserved for the model's special tokens ([CLS] ... [SEP]).
SPECIAL_TOKENS = 2

TokenSpans = Callable[[str], Sequence[Span]]
"""Character offsets ``[(start, end), ...]`` of a text's word pieces, without special tokens."""


def model_token_spans(text: str) -> list[Span]:
    """Word-piece offsets of ``text`` under the embedding model's own tokenizer.

    Uses :func:`harness.text.units.get_counter` ``("tokens", "model")`` (all-MiniLM-L6-v2's
    WordPiece ``tokenizer.json``, padding/truncation off, no special tokens). For another
    embedding model pass that model's tokenizer instead, e.g.
    ``HFTokenCounter(str(encoder.model_path / "tokenizer.json")).atoms(t).spans``.
    """
    from harness.text.units import get_counter

    return get_counter("tokens", "model").atoms(text).spans


def content_spans(text: str, start: int, end: int) -> list[Span]:
    """Maximal runs of non-whitespace characters of ``text[start:end]``, absolute offsets.

    Example: ``content_spans(" ab  c\\n", 0, 7) == [(1, 3), (5, 6)]``.
    """
    return [m.span() for m in _CONTENT.finditer(text, start, end)]


#: A maximal run of non-whitespace characters (``\s`` on ``str`` patterns is ``str.isspace``).
_CONTENT = re.compile(r"\S+")


def _nonspace(text: str) -> int:
    """Number of non-whitespace characters of ``text`` (``str.isspace``, the ``\\s`` of
    :func:`content_spans`): the total size of its content runs."""
    return len("".join(text.split()))


def _span_end(span: Span) -> int:
    return span[1]


def _covered(runs: list[Span], spans: list[Span]) -> bool:
    """Whether every character of ``runs`` lies in ``spans``.

    ``spans`` must be normalised (:func:`harness.evaluation.metrics.span.merge`: sorted, disjoint,
    touching spans joined), so a covered run lies inside a single span: the first span
    ending at or after the run's end, found by bisection, must start at or before it.
    """
    for s, e in runs:
        j = bisect.bisect_left(spans, e, key=_span_end)
        if j == len(spans) or spans[j][0] > s:
            return False
    return True


def embedded_char_limit(text: str, max_seq_length: int, token_spans: TokenSpans | None = None, special_tokens: int = SPECIAL_TOKENS) -> int:
    """Characters of ``text`` the embedding model reads: the end offset of its last kept word piece.

    The model keeps the first ``max_seq_length - 2`` word pieces (``[CLS]`` and ``[SEP]``
    take two of its ``max_seq_length`` positions) and drops the rest silently.

    Args:
        text: the embedded text (``Chunk.text``, including any added prefix).
        max_seq_length: the model's input limit in word pieces, >= 3 (256 for
            all-MiniLM-L6-v2).
        token_spans: word-piece offsets function (default :func:`model_token_spans`).
        special_tokens: window positions the model's own tokens take (2 for a BERT model's
            ``[CLS]``/``[SEP]``, 0 for an API that counts only the text's tokens).

    Returns:
        ``len(text)`` when the text fits; otherwise the end offset (code points) of word
        piece number ``max_seq_length - 2``; characters at or after it are never seen.

    Raises:
        ValueError: ``max_seq_length < 3``.
    """
    Param("max_seq_length", "int", low=special_tokens + 1).check(max_seq_length)
    pieces = (token_spans or model_token_spans)(text)
    keep = max_seq_length - special_tokens
    if len(pieces) <= keep:
        return len(text)
    return int(pieces[keep - 1][1])


def embedded_spans(chunk: Chunk, max_seq_length: int | None, token_spans: TokenSpans | None = None, special_tokens: int = SPECIAL_TOKENS) -> list[Span]:
    """Source spans (document offsets) of the part of ``chunk`` the embedding model reads.

    ``chunk.text`` is ``prefix + joiner.join(span texts) + suffix`` (metadata keys
    ``prefix``, ``joiner``, ``suffix``, each default ``""``; the chunker contract of
    :class:`harness.chunkers.base.Chunker`). The character limit of
    :func:`embedded_char_limit` in ``chunk.text`` is mapped back through that layout.

    Args:
        chunk: an indexed chunk.
        max_seq_length: model limit in word pieces; None means no truncation (all spans).
        token_spans: word-piece offsets function (default :func:`model_token_spans`).

    Returns:
        Sorted, disjoint document spans; all of ``chunk.spans`` when nothing is cut, fewer
        or shorter spans otherwise, possibly empty (a prefix alone fills the window).

    Raises:
        ValueError: ``chunk.text`` has a length other than the declared layout implies
            (the chunker broke its contract, so no mapping back to the source exists).
    """
    spans = list(chunk.spans)
    if max_seq_length is None:
        return spans
    meta = chunk.metadata or {}
    prefix, joiner, suffix = (str(meta.get(key, "")) for key in ("prefix", "joiner", "suffix"))
    expected = len(prefix) + sum(e - s for s, e in spans) + len(joiner) * (len(spans) - 1) + len(suffix)
    if expected != len(chunk.text):
        raise ValueError(
            f"chunk {chunk.chunk_id!r}: text has {len(chunk.text)} characters but prefix + joined spans + suffix "
            f"have {expected}; cannot map the model's token window back to document offsets"
        )
    limit = embedded_char_limit(chunk.text, max_seq_length, token_spans, special_tokens)
    if limit >= len(chunk.text):
        return spans
    out: list[Span] = []
    pos = len(prefix)
    for s, e in spans:
        seen = min(e - s, max(0, limit - pos))
        if seen <= 0:
            break
        out.append((s, s + seen))
        pos += (e - s) + len(joiner)
    return out


class ChunkLookup:
    """Indexed chunks grouped by document, with cached embedded windows.

    Args:
        chunks: the indexed chunks (any documents).
        max_seq_length: embedding model limit in word pieces, or None (no truncation check).
        token_spans: word-piece offsets function (default :func:`model_token_spans`).
        token_counts: optional ``chunk_id -> word pieces of its text, the 2 special tokens
            included`` (``Encoder.count_tokens``, same tokenizer as ``token_spans``); a chunk
            counted at most ``max_seq_length`` fits the window, so it is not tokenised again.
    """

    def __init__(
        self,
        chunks: Iterable[Chunk],
        max_seq_length: int | None = None,
        token_spans: TokenSpans | None = None,
        token_counts: Mapping[str, int] | None = None,
        special_tokens: int = SPECIAL_TOKENS,
    ) -> None:
        self.special_tokens = special_tokens
        self.by_doc: dict[str, list[Chunk]] = {}
        for c in chunks:
            self.by_doc.setdefault(c.doc_id, []).append(c)
        self.union = {d: sp.merge(s for c in cs for s in c.spans) for d, cs in self.by_doc.items()}
        # per document: chunk positions sorted by start, their starts, and the longest chunk
        # (end - start), so the chunks that can hold [lo, hi) are found by bisection
        self._order: dict[str, tuple[list[int], list[int], int]] = {}
        for d, cs in self.by_doc.items():
            order = sorted(range(len(cs)), key=lambda i: cs[i].start)
            self._order[d] = (order, [cs[i].start for i in order], max(c.end - c.start for c in cs))
        self.max_seq_length = max_seq_length
        self.token_spans = token_spans
        self._embedded: dict[str, list[Span]] = {}
        self._token_counts = token_counts or {}
        self._containing: dict[tuple[str, int, int], list[Chunk]] = {}
        self._status: dict[tuple[str, int, int], str] = {}

    def embedded(self, chunk: Chunk) -> list[Span]:
        """:func:`embedded_spans` of ``chunk``, computed once per chunk id."""
        got = self._embedded.get(chunk.chunk_id)
        if got is None:
            n = self._token_counts.get(chunk.chunk_id)
            fits = n is not None and self.max_seq_length is not None and n <= self.max_seq_length
            got = sp.merge(chunk.spans if fits else embedded_spans(chunk, self.max_seq_length, self.token_spans, self.special_tokens))
            self._embedded[chunk.chunk_id] = got
        return got

    def containing(self, doc_id: str, runs: list[Span]) -> list[Chunk]:
        """Indexed chunks of ``doc_id`` whose spans hold every character of ``runs``."""
        if not runs:
            return []
        # runs are the content runs of the document between their outer ends, so the ends
        # identify them: the answer is computed once per (document, first start, last end)
        key = (doc_id, runs[0][0], runs[-1][1])
        got = self._containing.get(key)
        if got is None:
            got = self._containing[key] = self._find_containing(doc_id, runs, key[1], key[2])
        return got

    def _find_containing(self, doc_id: str, runs: list[Span], lo: int, hi: int) -> list[Chunk]:
        """The chunks of ``doc_id`` (in indexing order) with ``start <= lo``, ``end >= hi`` that
        cover ``runs``. A chunk ending at or after ``hi`` and no longer than the longest one
        starts at or after ``hi - longest``: only the chunks starting in ``[hi - longest, lo]``
        are tested (found by bisection in the start-sorted order), not every chunk of the document."""
        chunks = self.by_doc.get(doc_id)
        if not chunks:
            return []
        order, starts, longest = self._order[doc_id]
        first = bisect.bisect_left(starts, hi - longest)
        last = bisect.bisect_right(starts, lo)
        found = sorted(i for i in order[first:last] if chunks[i].end >= hi and _covered(runs, sp.merge(chunks[i].spans)))
        return [chunks[i] for i in found]

    def status(self, doc_id: str, runs: list[Span]) -> str:
        """:data:`CONTAINED`, :data:`SPLIT` or :data:`UNCOVERED` for content ``runs`` of one span."""
        key = (doc_id, runs[0][0], runs[-1][1]) if runs else (doc_id, 0, 0)
        got = self._status.get(key)
        if got is None:
            if not _covered(runs, self.union.get(doc_id, [])):
                got = UNCOVERED
            else:
                got = CONTAINED if self.containing(doc_id, runs) else SPLIT
            self._status[key] = got
        return got


def _runs(documents: Mapping[str, Document], doc_id: str, start: int, end: int, query_id: str) -> list[Span]:
    doc = documents.get(doc_id)
    if doc is None:
        raise ValueError(f"query {query_id!r}: evidence document {doc_id!r} is not in documents")
    if end > len(doc.text):
        raise ValueError(f"query {query_id!r}: evidence [{start}, {end}) lies outside document {doc_id!r} of length {len(doc.text)}")
    return content_spans(doc.text, start, end)


def evidence_reasons(
    query: Query,
    documents: Mapping[str, Document],
    lookup: ChunkLookup,
    ranked_chunks: Sequence[Chunk],
    k: int,
) -> list[str | None]:
    """Reason per evidence span of ``query`` at cut-off ``k`` (None: the span is not missed).

    See the module docstring for the definitions; ``lookup`` holds the indexed chunks.

    Raises:
        ValueError: ``k < 1``, or an evidence span's document is missing from ``documents``.
    """
    Param("k", "int", low=1).check(k)
    retrieved = sp.span_set((c.doc_id, s) for c in ranked_chunks[:k] for s in c.spans)
    out: list[str | None] = []
    for ev in query.evidence:
        runs = _runs(documents, ev.doc_id, ev.start, ev.end, query.query_id)
        if _covered(runs, retrieved.get(ev.doc_id, [])):
            out.append(None)
            continue
        state = lookup.status(ev.doc_id, runs)
        if state == UNCOVERED:
            out.append("not_covered")
        elif state == SPLIT:
            out.append("boundary_split")
        elif lookup.max_seq_length is not None and not any(_covered(runs, lookup.embedded(c)) for c in lookup.containing(ev.doc_id, runs)):
            out.append("truncated")
        else:
            out.append("rank_miss")
    return out


def first_reason(reasons: Iterable[str | None]) -> str | None:
    """The reason of highest precedence (:data:`REASONS` order) among ``reasons``, or None."""
    present = {r for r in reasons if r is not None}
    return next((r for r in REASONS if r in present), None)


def miss_reason(
    query: Query,
    documents: Mapping[str, Document],
    indexed_chunks: Sequence[Chunk],
    ranked_chunks: Sequence[Chunk],
    k: int,
    max_seq_length: int | None = None,
    token_spans: TokenSpans | None = None,
) -> str | None:
    """Why ``query`` is not fully recalled at ``k``: one of :data:`REASONS`, or None.

    Args:
        query: the labelled query.
        documents: ``doc_id -> Document`` (``Dataset.by_id``), at least the query's documents.
        indexed_chunks: the chunks the retriever searched (at least those of the query's
            documents; others are ignored).
        ranked_chunks: the scored ranking, best first (after any parent expansion).
        k: cut-off, >= 1.
        max_seq_length: the embedding model's limit in word pieces for the ``truncated``
            check, or None to skip it (sparse retrievers read whole texts).
        token_spans: word-piece offsets function (default: the model's WordPiece tokenizer).

    Returns:
        None when every content (non-whitespace) evidence character is inside the top-k
        chunks; otherwise the highest-precedence reason over the missed evidence spans
        (module docstring).

    Raises:
        ValueError: ``k < 1``, or an evidence document is missing from ``documents``.
    """
    lookup = ChunkLookup(indexed_chunks, max_seq_length, token_spans)
    return first_reason(evidence_reasons(query, documents, lookup, ranked_chunks, k))


def diagnose_queries(
    queries: Sequence[Query],
    documents: Mapping[str, Document],
    indexed_chunks: Sequence[Chunk],
    ranked: Mapping[str, Sequence[Chunk]],
    ks: Sequence[int],
    max_seq_length: int | None = None,
    token_spans: TokenSpans | None = None,
    token_counts: Mapping[str, int] | None = None,
    special_tokens: int = SPECIAL_TOKENS,
) -> dict[str, dict[int, str | None]]:
    """:func:`miss_reason` for every query at every ``k``, sharing one :class:`ChunkLookup`.

    Args:
        ranked: ``query_id -> ranked chunks``; a query absent from it retrieved nothing.
        token_counts: model word pieces per chunk id, special tokens included (see
            :class:`ChunkLookup`); saves re-tokenising chunks known to fit the window.
        (others as in :func:`miss_reason`)

    Returns:
        ``{query_id: {k: reason or None}}`` for every query, in input order.
    """
    lookup = ChunkLookup(indexed_chunks, max_seq_length, token_spans, token_counts, special_tokens)
    return {q.query_id: {k: first_reason(evidence_reasons(q, documents, lookup, ranked.get(q.query_id, ()), k)) for k in ks} for q in queries}


#: Prefix of the per-cut-off counts of :func:`crossing_ties` (``ties.crossing_at_5``).
TIES_PREFIX = "ties.crossing_at_"


def crossing_ties(run: Run, ks: Sequence[int], beyond: Mapping[str, float | None] | None = None) -> dict[str, float]:
    """Per cut-off ``k``, the number of queries whose top-k *set* depends on the tie rule.

    A query counts at ``k`` when the chunk at rank ``k`` and the one at rank ``k + 1``
    (ranking of :func:`harness.types.rank_order`) have exactly equal scores: which of the
    tied chunks fall inside the cut is then decided by document order
    (:func:`harness.types.chunk_order_key`), not by the retriever, and so is every metric
    at ``k``. Rank ``k + 1`` is read from ``run`` when it holds more than ``k`` chunks,
    else from ``beyond`` (:meth:`harness.retrievers.base.Retriever.beyond_cut`: the score of
    the best candidate the retriever left out; a query missing there counts as no tie).
    Ties above rank ``k`` (both chunks inside the cut) change the order but not the set and
    are not counted.

    Args:
        run: ``{query_id: {chunk_id: score}}`` as the retriever returned it (indexed chunks,
            before any expansion to parents).
        ks: cut-offs, each >= 1.
        beyond: ``{query_id: score below the retriever's cut, or None}``.

    Returns:
        ``{"ties.crossing_at_<k>": count}`` per ``k``, counts as floats in ``[0, len(run)]``.
    """
    beyond = beyond or {}
    counts = {k: 0 for k in ks}
    for qid, scores in run.items():
        ids = rank_order(scores)
        for k in ks:
            if len(ids) > k:
                below = scores[ids[k]]
            elif len(ids) == k:
                below = beyond.get(qid)
            else:
                continue
            if below is not None and float(below) == float(scores[ids[k - 1]]):
                counts[k] += 1
    return {f"{TIES_PREFIX}{k}": float(n) for k, n in counts.items()}


def aggregate_reasons(reasons: Mapping[str, Mapping[int, str | None]], ks: Sequence[int]) -> dict[str, float]:
    """Share of queries per miss reason at each k, as metrics.

    Returns:
        ``{"diagnostics.<reason>@<k>": n_reason / n_queries, "diagnostics.missed@<k>":
        n_missed / n_queries}`` for every reason in :data:`REASONS` and every k; each value
        in [0, 1] and the four reasons sum to ``missed``. The denominator is all labelled
        queries (also those fully recalled). Empty input gives 0.0 everywhere.
    """
    n = len(reasons)
    out: dict[str, float] = {}
    for k in ks:
        counts = Counter(r[k] for r in reasons.values() if r.get(k) is not None)
        for reason in REASONS:
            out[f"diagnostics.{reason}@{k}"] = counts[reason] / n if n else 0.0
        out[f"diagnostics.missed@{k}"] = sum(counts.values()) / n if n else 0.0
    return out


def reason_counts(reasons: Mapping[str, Mapping[int, str | None]], ks: Sequence[int]) -> dict[int, dict[str, int]]:
    """Number of queries per reason at each k: ``{k: {"not_covered": n, ..., "missed": n, "queries": n}}``."""
    out: dict[int, dict[str, int]] = {}
    for k in ks:
        counts = Counter(r.get(k) for r in reasons.values())
        row = {reason: counts[reason] for reason in REASONS}
        row["missed"] = sum(row.values())
        row["queries"] = len(reasons)
        out[k] = row
    return out


def _describe(values: Sequence[float], prefix: str) -> dict[str, float]:
    arr = np.asarray(values, dtype=float)
    p50, p90, p99 = np.percentile(arr, [50, 90, 99])
    return {
        f"{prefix}_mean": float(arr.mean()),
        f"{prefix}_std": float(statistics.pstdev(values)),
        f"{prefix}_min": float(arr.min()),
        f"{prefix}_p50": float(p50),
        f"{prefix}_p90": float(p90),
        f"{prefix}_p99": float(p99),
        f"{prefix}_max": float(arr.max()),
    }


def chunk_set_statistics(
    documents: Sequence[Document],
    chunks: Sequence[Chunk],
    count_tokens: Callable[[Sequence[str]], list[int]] | None = None,
    max_seq_length: int | None = None,
    queries: Sequence[Query] = (),
    token_counts: Sequence[int] | None = None,
) -> dict[str, float]:
    """Size, coverage, duplication and evidence-split statistics of a chunk set, before retrieval.

    ``token_counts``, when given, are ``count_tokens`` of the chunk texts computed already
    (one per chunk, in order); they are used instead of calling ``count_tokens`` again.

    Sizes: ``chars`` are source characters of a chunk (``Chunk.n_chars``, its spans);
    ``tokens`` are ``count_tokens(chunk.text)`` of the *embedded* text, which for the
    model counter (``Encoder.count_tokens``) includes the 2 special tokens, so a chunk
    is truncated by the model exactly when ``tokens > max_seq_length``. ``std`` is the
    population standard deviation; percentiles ``p50/p90/p99`` use linear interpolation
    between order statistics (numpy's default, Hyndman & Fan type 7).

    Returns (all floats; keys for tokens only with ``count_tokens``, for truncation only
    with ``max_seq_length`` too, for evidence only with ``queries``):

    * ``n_chunks``, ``n_documents``;
    * ``chars_{mean,std,min,p50,p90,p99,max}`` and ``chars_median`` (= ``chars_p50``);
    * ``tokens_{mean,std,min,p50,p90,p99,max}``;
    * ``n_truncated``: chunks with ``tokens > max_seq_length``; ``truncated_fraction``
      (of chunks); ``max_seq_length``;
    * ``coverage``: corpus characters inside at least one chunk / corpus characters, in
      [0, 1]; ``coverage_nonspace``: the same over non-whitespace characters only (1.0 for
      a strategy that drops no text but strips whitespace);
    * ``redundancy``: chunk characters / covered characters (>= 1; > 1 with overlap);
    * ``n_duplicate_texts``: chunks whose ``text`` equals another chunk's text (a text
      occurring 3 times counts 3; 0 when all texts differ);
    * ``single_chunk_documents``: share of documents that yielded exactly one chunk;
    * ``n_evidence_spans`` (one per evidence span per query), and the shares of those
      spans, summing to 1: ``evidence_contained_rate`` (all content characters inside one
      chunk), ``boundary_split_rate`` (every content character is in some chunk but no
      single chunk holds them all: cut by a chunk boundary), ``evidence_uncovered_rate``
      (some content character in no chunk). Containment as in the module docstring
      (whitespace ignored).

    Raises:
        ValueError: ``chunks`` is empty, ``count_tokens`` returns a wrong number of counts,
            ``max_seq_length < 1``, or an evidence document is not in ``documents``.
    """
    if not chunks:
        raise ValueError("chunks must not be empty: no statistics for an empty chunk set")
    Param("max_seq_length", "int", low=1, allow_none=True, none="{} or None").check(max_seq_length)
    by_id = {d.doc_id: d for d in documents}
    chars = [c.n_chars for c in chunks]
    stats: dict[str, float] = {"n_chunks": float(len(chunks)), "n_documents": float(len(documents))}
    stats.update(_describe(chars, "chars"))
    stats["chars_median"] = stats["chars_p50"]

    if count_tokens is not None or token_counts is not None:
        toks = list(token_counts) if token_counts is not None else list(count_tokens([c.text for c in chunks]))
        if len(toks) != len(chunks):
            raise ValueError(f"count_tokens returned {len(toks)} counts for {len(chunks)} texts")
        stats.update(_describe(toks, "tokens"))
        if max_seq_length is not None:
            n_over = sum(1 for t in toks if t > max_seq_length)
            stats["n_truncated"] = float(n_over)
            stats["truncated_fraction"] = n_over / len(chunks)
            stats["max_seq_length"] = float(max_seq_length)

    covered = sp.span_set((c.doc_id, s) for c in chunks for s in c.spans)
    n_covered = sp.size(covered)
    n_corpus = sum(len(d.text) for d in documents)
    # non-whitespace characters of the corpus, and of them those inside a chunk (the size of
    # the content runs, content_spans, and of their intersection with the chunks' union),
    # counted with str.split (whitespace as str.isspace, as \s) instead of building the runs
    n_nonspace = sum(_nonspace(d.text) for d in documents)
    covered_nonspace = sum(_nonspace(by_id[doc_id].text[s:e]) for doc_id, spans in covered.items() if doc_id in by_id for s, e in spans)
    stats["coverage"] = n_covered / n_corpus if n_corpus else 0.0
    stats["coverage_nonspace"] = covered_nonspace / n_nonspace if n_nonspace else 0.0
    stats["redundancy"] = sum(chars) / n_covered if n_covered else 0.0

    text_counts = Counter(c.text for c in chunks)
    stats["n_duplicate_texts"] = float(sum(n for n in text_counts.values() if n > 1))
    per_doc = Counter(c.doc_id for c in chunks)
    stats["single_chunk_documents"] = sum(1 for d in documents if per_doc[d.doc_id] == 1) / len(documents) if documents else 0.0

    if queries:
        lookup = ChunkLookup(chunks)
        states = Counter(lookup.status(ev.doc_id, _runs(by_id, ev.doc_id, ev.start, ev.end, q.query_id)) for q in queries for ev in q.evidence)
        n_ev = sum(states.values())
        stats["n_evidence_spans"] = float(n_ev)
        stats["evidence_contained_rate"] = states[CONTAINED] / n_ev if n_ev else 0.0
        stats["boundary_split_rate"] = states[SPLIT] / n_ev if n_ev else 0.0
        stats["evidence_uncovered_rate"] = states[UNCOVERED] / n_ev if n_ev else 0.0
    return stats


def is_degenerate(documents: Sequence[Document], size_limit: tuple[str, str, int] | None, chunks: Sequence[Chunk] | None = None) -> bool:
    """Whether every document fits in one chunk, so the strategy cannot split anything.

    A document fits when its full text measures at most ``limit`` in the chunker's unit
    (``get_counter(unit, tokenizer).count(doc.text) <= limit``); a chunker bounded by that
    limit then usually returns it whole, and the run compares whole documents, not
    chunkings. When ``chunks`` is given, a run is degenerate only if, in addition, no
    document was cut into two or more chunks: strategies that split by structure (the
    ``modality`` chunker cuts a short document at its tables and images) are not flagged.

    Args:
        documents: the corpus.
        size_limit: ``chunker.size_limit()``: ``(unit, tokenizer, limit)`` with unit
            ``chars``/``words``/``tokens``, or None for strategies without a size bound
            (then False: nothing can be said).
        chunks: the chunks the strategy produced, or None to judge by sizes alone.

    Returns:
        True when ``documents`` is non-empty and every document fits; False otherwise.

    Raises:
        ValueError: ``limit < 1``, or an unknown unit/tokenizer (from ``get_counter``).
    """
    if size_limit is None or not documents:
        return False
    from harness.text.units import get_counter

    unit, tokenizer, limit = size_limit
    Param("size_limit limit", "int", low=1).check(limit)
    if chunks is not None:
        per_doc = Counter(c.doc_id for c in chunks)
        if any(n > 1 for n in per_doc.values()):
            return False
    counter = get_counter(unit, tokenizer)
    return all(counter.count(d.text) <= limit for d in documents)


def degenerate_warning(documents: Sequence[Document], size_limit: tuple[str, str, int]) -> str:
    """Warning text for a degenerate run (see :func:`is_degenerate`)."""
    unit, tokenizer, limit = size_limit
    unit_name = f"{tokenizer} tokens" if unit == "tokens" else unit
    return (
        f"degenerate_chunking: all {len(documents)} documents are at most {limit} {unit_name} long, "
        "the chunk size; every document is a single chunk, so this run measures whole-document "
        "retrieval, not the chunking strategy"
    )
