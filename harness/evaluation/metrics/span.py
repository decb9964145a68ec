"""Character-span arithmetic for chunk-agnostic metrics.

A *span set* is ``{doc_id: [(start, end), ...]}`` with each list sorted, disjoint and
non-adjacent-merged (half-open code-point intervals). Sizes are in characters (code points).
"""

from __future__ import annotations

from typing import Iterable, Mapping

from harness.types import Span

SpanSet = dict[str, list[Span]]


def merge(spans: Iterable[Span]) -> list[Span]:
    """Union of intervals as a sorted list of disjoint intervals (touching ones are joined)."""
    out: list[list[int]] = []
    for s, e in sorted(spans):
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def span_set(pairs: Iterable[tuple[str, Span]]) -> SpanSet:
    """Build a normalised span set from ``(doc_id, (start, end))`` pairs."""
    by_doc: dict[str, list[Span]] = {}
    for doc_id, sp in pairs:
        by_doc.setdefault(doc_id, []).append(sp)
    return {d: merge(v) for d, v in by_doc.items()}


def size(a: Mapping[str, list[Span]]) -> int:
    """Total characters in a span set."""
    return sum(e - s for spans in a.values() for s, e in spans)


def _intersect_lists(x: list[Span], y: list[Span]) -> int:
    i = j = total = 0
    while i < len(x) and j < len(y):
        s = max(x[i][0], y[j][0])
        e = min(x[i][1], y[j][1])
        if e > s:
            total += e - s
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return total


def intersection_size(a: Mapping[str, list[Span]], b: Mapping[str, list[Span]]) -> int:
    """Characters in both span sets (each set must be normalised, see :func:`merge`)."""
    return sum(_intersect_lists(spans, b[d]) for d, spans in a.items() if d in b)


def overlap_chars(chunk_spans: Iterable[Span], evidence: Span) -> int:
    """Characters of one evidence span covered by a chunk's (disjoint) spans."""
    s0, e0 = evidence
    return sum(max(0, min(e, e0) - max(s, s0)) for s, e in chunk_spans)
