"""Shared helpers: make units fit a size limit, and pack consecutive units into chunks.

Used by the ``sentence``, ``paragraph`` and ``cluster_semantic`` strategies. Units are
sorted, disjoint, whitespace-trimmed ``(start, end)`` code-point spans into one text; a
packed group of units ``[i, j)`` is the single span ``(units[i][0], units[j - 1][1])``,
which keeps the source whitespace between units, so a chunk's text is always
``text[start:end]`` and its size is measured on that exact text.
"""

from __future__ import annotations

import re

from harness.text.units import SizeCounter, strip_span, window_atoms
from harness.types import Span

_LINE = re.compile(r"[^\n]+")


def fits(text: str, start: int, end: int, counter: SizeCounter, size: int) -> bool:
    """True when ``text[start:end]`` measures at most ``size`` in the counter's unit."""
    if counter.unit == "chars":
        return end - start <= size
    return counter.count(text[start:end]) <= size


def fit_units(text: str, spans: list[Span], counter: SizeCounter, size: int) -> list[Span]:
    """Return ``spans`` with every span larger than ``size`` cut into pieces that fit.

    A span over the limit is cut at its line breaks first (each line trimmed, blank lines
    dropped); a line still over the limit is cut into windows of at most ``size`` units
    with :func:`harness.text.units.window_atoms` (on word boundaries where possible).
    Every non-whitespace character of the input spans stays in exactly one output span.

    Args:
        text: the text the spans index into.
        spans: sorted, disjoint spans (e.g. sentences or paragraphs).
        counter: size unit (chars, words or tokens).
        size: maximum size in the counter's unit, >= 1.

    Returns:
        Sorted, disjoint spans, each of at most ``size`` units (a single code point that
        alone exceeds ``size`` tokens is the only possible exception).
    """
    out: list[Span] = []
    for s, e in spans:
        if fits(text, s, e, counter, size):
            out.append((s, e))
            continue
        for m in _LINE.finditer(text, s, e):
            ls, le = strip_span(text, m.start(), m.end())
            if le <= ls:
                continue
            if fits(text, ls, le, counter, size):
                out.append((ls, le))
            else:
                out.extend(window_atoms(text, ls, le, counter, size, 0))
    return out


def pack_units(text: str, units: list[Span], counter: SizeCounter, size: int, overlap: int = 0) -> list[tuple[int, int]]:
    """Greedily pack consecutive units into groups of at most ``size`` units of measure.

    A group grows while the text from its first unit's start to the next unit's end still
    fits ``size`` (re-measured on that exact text). The next group starts ``overlap``
    units before the end of the previous one, but always (a) after the previous group's
    first unit and (b) late enough that it can also take the first unit the previous
    group did not hold; so overlap shrinks when the shared units leave no room, every
    group adds new text, and the loop always advances (no infinite loop, no group is a
    copy or subset of its predecessor).

    Args:
        text: the text the units index into.
        units: sorted, disjoint, trimmed spans, each fitting ``size`` on its own (see
            :func:`fit_units`); a unit that does not fit is emitted as a group alone.
        counter: size unit.
        size: maximum group size in the counter's unit, >= 1.
        overlap: units shared by consecutive groups (an upper bound), >= 0.

    Returns:
        Half-open index ranges ``(i, j)``: group = ``units[i:j]``, in order, ``i < j``;
        starts strictly increase. Without overlap the ranges partition ``range(len(units))``.
    """
    groups: list[tuple[int, int]] = []
    n = len(units)
    i = 0
    while i < n:
        j = i + 1
        while j < n and fits(text, units[i][0], units[j][1], counter, size):
            j += 1
        groups.append((i, j))
        if j >= n:
            break
        k = max(i + 1, j - overlap)
        while k < j and not fits(text, units[k][0], units[j][1], counter, size):
            k += 1
        i = k
    return groups


def group_spans(units: list[Span], groups: list[tuple[int, int]]) -> list[Span]:
    """Span of each group: first unit's start to last unit's end."""
    return [(units[i][0], units[j - 1][1]) for i, j in groups]
