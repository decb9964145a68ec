"""Sentence segmentation with exact code-point offsets (offline, rule-based).

Uses BlingFire's ``text_to_sentences_and_offsets`` (Microsoft BlingFire; a compiled
rule-based segmenter that ships its data, needs no download, and handles abbreviations
such as "Dr.", "e.g.", "D.C." and CJK full stops). Offsets are checked to lie in the text.
"""

from __future__ import annotations

from harness.chunkers.units import strip_span
from harness.types import Span


def sentence_spans(text: str, start: int = 0, end: int | None = None) -> list[Span]:
    """Sentences of ``text[start:end]`` as absolute, whitespace-trimmed, sorted spans.

    Every non-whitespace character of the region lies in exactly one returned span: text
    the segmenter skipped (it drops nothing in practice, but the contract is enforced) is
    attached to the preceding sentence.

    Returns:
        ``[(s0, e0), (s1, e1), ...]`` with ``start <= s0 < e0 <= s1 < ... <= end``.
    """
    import blingfire

    end = len(text) if end is None else end
    region = text[start:end]
    if not region.strip():
        return []
    _, offsets = blingfire.text_to_sentences_and_offsets(region)
    spans: list[Span] = []
    cursor = 0
    for s, e in offsets:
        s, e = max(s, cursor), min(e, len(region))
        if e <= s:
            continue
        gap = region[cursor:s]
        if gap.strip() and spans:  # unassigned text: extend the previous sentence over it
            spans[-1] = (spans[-1][0], s)
        elif gap.strip():
            s = cursor
        spans.append((s, e))
        cursor = e
    if region[cursor:].strip():
        if spans:
            spans[-1] = (spans[-1][0], len(region))
        else:
            spans.append((cursor, len(region)))
    out = []
    for s, e in spans:
        s, e = strip_span(region, s, e)
        if e > s:
            out.append((start + s, start + e))
    return out
