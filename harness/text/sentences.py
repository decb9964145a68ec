"""Sentence and paragraph segmentation with exact code-point offsets (offline, rule-based).

Sentences come from BlingFire's ``text_to_sentences_and_offsets`` (Microsoft BlingFire; a
compiled rule-based segmenter that ships its data, needs no download, and handles
abbreviations such as "Dr.", "e.g.", "D.C.", decimals such as "3.5" and CJK full stops).
Its offsets are checked to lie in the text, and one small post-processing rule
(:func:`merge_abbreviation_splits`) re-joins a boundary placed after a known
abbreviation when the next sentence continues in lowercase.

Paragraphs are the blocks between blank lines (:data:`PARAGRAPH_BREAK`: a newline, any
whitespace, a newline; so ``\\r\\n\\r\\n`` counts as a blank line too).
"""

from __future__ import annotations

import re

from harness.text.units import strip_span
from harness.types import Span

#: A blank line: newline, optional whitespace (spaces, tabs, ``\r``, more newlines), newline.
PARAGRAPH_BREAK = re.compile(r"\n\s*\n")

#: Abbreviations after which a lowercase continuation never starts a new sentence.
ABBREVIATIONS = ("p.m.", "a.m.", "e.g.", "i.e.", "et al.", "cf.", "vs.", "etc.")


def paragraph_spans(text: str, start: int = 0, end: int | None = None) -> list[Span]:
    """Paragraphs of ``text[start:end]``: blocks separated by blank lines, as absolute spans.

    A blank line is :data:`PARAGRAPH_BREAK` (``\\n\\s*\\n``), which also matches Windows
    ``\\r\\n\\r\\n`` breaks. Each paragraph is trimmed of surrounding whitespace (so a
    trailing ``\\r`` is not part of it); whitespace-only blocks are dropped.

    Returns:
        Sorted, disjoint ``(start, end)`` code-point spans covering every non-whitespace
        character of the region; ``[]`` for a whitespace-only region.
    """
    end = len(text) if end is None else end
    out: list[Span] = []
    cursor = start
    for m in PARAGRAPH_BREAK.finditer(text, start, end):
        s, e = strip_span(text, cursor, m.start())
        if e > s:
            out.append((s, e))
        cursor = m.end()
    s, e = strip_span(text, cursor, end)
    if e > s:
        out.append((s, e))
    return out


def _ends_with_abbreviation(text: str, start: int, end: int) -> bool:
    tail = text[max(start, end - 8) : end].lower()
    for abbr in ABBREVIATIONS:
        if tail.endswith(abbr):
            at = end - len(abbr)
            if at == start or not text[at - 1].isalnum():  # "vs." but not "canvs."
                return True
    return False


def merge_abbreviation_splits(text: str, spans: list[Span]) -> list[Span]:
    """Re-join sentence boundaries that follow a known abbreviation and precede lowercase.

    Rule: when a sentence ends with one of :data:`ABBREVIATIONS` (case-insensitive, at a
    word boundary) and the next sentence starts with a lowercase letter, and no blank
    line separates them, the two are one sentence ("at 3.5 p.m. | with Dr. Smith" is
    re-joined). The merged span runs from the first sentence's start to the second's end,
    so offsets stay exact.

    Args:
        text: the text the spans index into.
        spans: sorted, disjoint, whitespace-trimmed sentence spans.

    Returns:
        The spans with such boundaries removed (a new list; input is not modified).
    """
    out: list[Span] = []
    for s, e in spans:
        if out:
            ps, pe = out[-1]
            if text[s].islower() and _ends_with_abbreviation(text, ps, pe) and not PARAGRAPH_BREAK.search(text, pe, s):
                out[-1] = (ps, e)
                continue
        out.append((s, e))
    return out


def _blingfire_spans(text: str, start: int, end: int) -> list[Span]:
    import blingfire

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
    return merge_abbreviation_splits(text, out)


def sentence_spans(text: str, start: int = 0, end: int | None = None, split_paragraphs: bool = False) -> list[Span]:
    """Sentences of ``text[start:end]`` as absolute, whitespace-trimmed, sorted spans.

    Every non-whitespace character of the region lies in exactly one returned span: text
    the segmenter skipped (it drops nothing in practice, but the contract is enforced) is
    attached to the preceding sentence. BlingFire does not treat a blank line as a
    sentence end (a markdown heading and the paragraph below it come back as one
    "sentence"); pass ``split_paragraphs=True`` to segment each paragraph of
    :func:`paragraph_spans` separately, so no sentence spans a blank line.

    Args:
        text: the whole text; spans index into it.
        start, end: the region to segment (code points; ``end`` defaults to ``len(text)``).
        split_paragraphs: also break at every blank line (default False: BlingFire only).

    Returns:
        ``[(s0, e0), (s1, e1), ...]`` with ``start <= s0 < e0 <= s1 < ... <= end``.
    """
    end = len(text) if end is None else end
    if not split_paragraphs:
        return _blingfire_spans(text, start, end)
    out: list[Span] = []
    for ps, pe in paragraph_spans(text, start, end):
        out.extend(_blingfire_spans(text, ps, pe))
    return out
