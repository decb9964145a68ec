"""A chunker setting silently not applied (issue 24, class 2).

Every setting a chunker accepts holds on every path it can take (separator merges, hard
cuts of a piece no separator splits, the last chunk), or the configuration is refused at
construction. Expected chunkings here are worked out by hand from the settings (window
starts ``0, step, 2 * step, ...`` with ``step = chunk_size - chunk_overlap``), never taken
from the code under test. The settings-honoured property over every ``conf/chunker/*.yaml``
is in ``tests/chunkers/test_settings_honoured.py``.
"""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.chunkers.fixed import FixedChunker
from harness.chunkers.hierarchical import HierarchicalChunker
from harness.chunkers.recursive import RecursiveChunker
from harness.text.packing import pack_units
from harness.text.units import get_counter
from harness.types import Document

LETTERS = string.ascii_lowercase  # 26 characters, no separator


def windows(n: int, size: int, overlap: int) -> list[tuple[int, int]]:
    """Character windows of ``size`` stepping ``size - overlap`` over ``n`` characters, the
    last one ending at ``n`` (worked out independently of the chunkers)."""
    out, start = [], 0
    while True:
        out.append((start, min(start + size, n)))
        if start + size >= n:
            return out
        start += size - overlap


def test_hand_worked_windows():
    assert windows(26, 10, 4) == [(0, 10), (6, 16), (12, 22), (18, 26)]
    assert windows(26, 10, 0) == [(0, 10), (10, 20), (20, 26)]


def test_recursive_hard_cut_keeps_the_overlap():
    """The issue's example: no separator occurs, so the piece is hard-cut; the overlap holds."""
    chunker = RecursiveChunker(chunk_size=10, chunk_overlap=4, unit="chars", separators=["\n\n"])
    chunks = chunker.chunk(Document("d", LETTERS))
    assert [c.spans[0] for c in chunks] == [(0, 10), (6, 16), (12, 22), (18, 26)]
    assert all(c.metadata.get("hard_cut") for c in chunks)


def test_recursive_hard_cut_and_the_any_position_separator_agree():
    """A hard cut and the ``""`` separator cut the same letters the same way."""
    doc = Document("d", LETTERS * 3)
    hard = RecursiveChunker(chunk_size=12, chunk_overlap=5, unit="chars", separators=["\n\n", " "]).chunk(doc)
    anywhere = RecursiveChunker(chunk_size=12, chunk_overlap=5, unit="chars", separators=["\n\n", " ", ""]).chunk(doc)
    assert [c.spans[0] for c in hard] == [c.spans[0] for c in anywhere] == windows(78, 12, 5)


def test_recursive_hard_cut_keeps_the_overlap_in_words():
    """Words: seven words, no separator of the list: windows of 3 words sharing 1."""
    text = "a b c d e f g"
    chunks = RecursiveChunker(chunk_size=3, chunk_overlap=1, unit="words", separators=["\n\n"]).chunk(Document("d", text))
    assert [c.text for c in chunks] == ["a b c", "c d e", "e f g"]


def test_recursive_hard_cut_keeps_the_overlap_after_merged_pieces():
    """A long word after short paragraphs: the paragraphs merge, the word is hard-cut with the overlap."""
    text = "ab\n\ncd\n\n" + LETTERS
    chunks = RecursiveChunker(chunk_size=10, chunk_overlap=4, unit="chars", separators=["\n\n"]).chunk(Document("d", text))
    word = [c.spans[0] for c in chunks if c.start >= 8]
    assert word == [(8 + s, 8 + e) for s, e in windows(26, 10, 4)]


def test_hierarchical_children_keep_their_overlap_on_a_hard_cut():
    text = LETTERS * 2  # 52 characters, one parent (parent_size 60), children hard-cut
    chunker = HierarchicalChunker(mode="window", parent_size=60, child_size=10, child_overlap=4, unit="chars")
    chunks = chunker.chunk(Document("d", text))
    assert [c.spans[0] for c in chunks] == windows(52, 10, 4)


@pytest.mark.parametrize("cls", [FixedChunker, RecursiveChunker])
def test_overlap_not_below_the_size_is_refused(cls):
    with pytest.raises(ValueError, match=r"chunker\.chunk_overlap.*\[0, 10\).*got 10"):
        cls(chunk_size=10, chunk_overlap=10, unit="chars")


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(1, 9), min_size=1, max_size=30), size=st.integers(1, 30), overlap=st.integers(0, 5))
def test_pack_units_repeats_as_many_units_as_fit(lengths, size, overlap):
    """``overlap_sentences`` / ``overlap_paragraphs``: consecutive groups share
    ``min(overlap, what fits)`` units, worked out by brute force: the most trailing units
    ``s <= overlap`` of the previous group (leaving it at least one of its own) that fit
    together with the first unit the previous group did not hold."""
    units, pos = [], 0
    for n in lengths:  # units of n letters separated by one space
        units.append((pos, pos + n))
        pos += n + 1
    text = " ".join("x" * n for n in lengths)
    counter = get_counter("chars")
    groups = pack_units(text, units, counter, size, overlap)
    assert [g for g in groups] == sorted(groups) and groups[0][0] == 0 and groups[-1][1] == len(units)
    for (i, j), (i2, _j2) in zip(groups, groups[1:]):
        feasible = [s for s in range(0, min(overlap, j - i - 1) + 1) if s == 0 or units[j][1] - units[j - s][0] <= size]
        assert j - i2 == max(feasible)
