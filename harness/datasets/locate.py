"""Find where an excerpt (a quoted piece of text without offsets) sits in a document.

Labelled data often quotes the evidence without giving its position. Re-finding a passage
by search is only sound when the passage occurs exactly once, so :func:`locate` reports
every match and callers treat zero matches (*missing*) and two or more (*ambiguous*) as
problems instead of guessing.

Matching, in order:

1. **exact** -- every occurrence of ``excerpt`` in ``text`` (overlapping occurrences count,
   so ``"aa"`` occurs twice in ``"aaa"``).
2. **whitespace-normalised**, only when the exact search found nothing -- both strings have
   every run of whitespace (``str.isspace``: spaces, tabs, newlines, NBSP, ...) replaced by
   one space and the excerpt is stripped; matches are mapped back to *raw* offsets in
   ``text``, from the first to the last non-space character of the match, so
   ``text[start:end]`` is the source passage with its original line breaks.

Offsets are half-open ``[start, end)`` Python ``str`` indices (code points).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.types import Span

_WS = re.compile(r"\s+")


@dataclass(frozen=True)
class Match:
    """Where an excerpt matched: ``method`` is ``"exact"`` or ``"whitespace"``."""

    start: int
    end: int
    method: str

    @property
    def span(self) -> Span:
        return (self.start, self.end)


def find_all(text: str, needle: str) -> list[int]:
    """Start offsets of every (possibly overlapping) occurrence of ``needle`` in ``text``.

    Raises:
        ValueError: ``needle`` is empty (it would match at every position).
    """
    if not needle:
        raise ValueError("find_all: needle must be a non-empty string")
    out = []
    i = text.find(needle)
    while i != -1:
        out.append(i)
        i = text.find(needle, i + 1)
    return out


class NormalisedText:
    """``text`` with whitespace runs collapsed to one space, plus the map back to raw offsets.

    ``norm[i]`` comes from ``text[raw[i]]`` (for a collapsed run: the run's first
    character), so a match ``norm[a:b]`` whose ends are not spaces covers
    ``text[raw[a]:raw[b - 1] + 1]``.
    """

    def __init__(self, text: str) -> None:
        chars: list[str] = []
        raw: list[int] = []
        in_space = False
        for i, ch in enumerate(text):
            if ch.isspace():
                if not in_space:
                    chars.append(" ")
                    raw.append(i)
                in_space = True
            else:
                chars.append(ch)
                raw.append(i)
                in_space = False
        self.text = text
        self.norm = "".join(chars)
        self.raw = raw

    def find(self, excerpt: str) -> list[Span]:
        """Raw ``(start, end)`` spans of every whitespace-normalised match of ``excerpt``."""
        needle = normalise_whitespace(excerpt)
        if not needle:
            return []
        return [(self.raw[a], self.raw[a + len(needle) - 1] + 1) for a in find_all(self.norm, needle)]


def normalise_whitespace(s: str) -> str:
    """Collapse every whitespace run to one space and strip both ends."""
    return _WS.sub(" ", s).strip()


def locate(text: str, excerpt: str, normalised: NormalisedText | None = None) -> list[Match]:
    """Every position of ``excerpt`` in ``text``: exact matches, else whitespace-normalised ones.

    Args:
        text: the document text (raw, as stored).
        excerpt: the passage to find; must contain a non-whitespace character.
        normalised: a precomputed ``NormalisedText(text)`` to reuse across excerpts.

    Returns:
        The matches sorted by start; empty when the excerpt is not in the text. Exact
        matches are returned whenever there is at least one (normalised matching is not
        tried then); each exact match satisfies ``text[m.start:m.end] == excerpt``.

    Raises:
        ValueError: ``excerpt`` is empty or whitespace only.
    """
    if not excerpt.strip():
        raise ValueError("locate: excerpt must contain a non-whitespace character")
    exact = [Match(s, s + len(excerpt), "exact") for s in find_all(text, excerpt)]
    if exact:
        return exact
    norm = normalised if normalised is not None else NormalisedText(text)
    return [Match(s, e, "whitespace") for s, e in norm.find(excerpt)]
