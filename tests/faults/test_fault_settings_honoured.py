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
from conftest import windows
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.chunkers.base import ChunkContractError, check_chunks
from harness.chunkers.cluster_semantic import ClusterSemanticChunker
from harness.chunkers.fixed import FixedChunker
from harness.chunkers.hierarchical import HierarchicalChunker
from harness.chunkers.modality import ModalityChunker
from harness.chunkers.recursive import RecursiveChunker
from harness.chunkers.table import TableChunker
from harness.chunkers.timestamp import TimestampChunker
from harness.text.packing import pack_units
from harness.text.units import get_counter
from harness.types import Chunk, Document

LETTERS = string.ascii_lowercase  # 26 characters, no separator


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


# --- strategy-specific settings (second round): overlap in sentences/paragraphs, minimum size,
# --- settings a mode never reads, the adapters' cuts and the library's dropped overlap


def test_langchain_cut_keeps_the_library_overlap():
    """LangChain emits the 26 letters whole (no separator cuts them); the adapter's cut to
    chunk_size=10 must keep chunk_overlap=4: windows stepping 6 (worked out by hand)."""
    from harness.chunkers.langchain import LangChainChunker

    chunker = LangChainChunker(kwargs={"chunk_size": 10, "chunk_overlap": 4, "separators": ["\n\n"]})
    chunks = chunker.chunk_all([Document("d", LETTERS)])
    assert [c.spans[0] for c in chunks] == [(0, 10), (6, 16), (12, 22), (18, 26)]


def test_langchain_dropping_its_overlap_is_counted_and_warned(caplog):
    """Separators ``"."`` then ``""``: LangChain emits ``"abc"`` and then pieces of
    ``".defgh..."`` with no overlap across the ``"."`` cut (non-whitespace on both sides), so
    one pair shares nothing although chunk_overlap=4; the run counts and warns about it."""
    from harness.chunkers.langchain import LangChainChunker

    text = "abc.defghijklmnopqrstu"
    chunker = LangChainChunker(kwargs={"chunk_size": 10, "chunk_overlap": 4, "separators": [".", ""]})
    with caplog.at_level("WARNING"):
        chunks = chunker.chunk_all([Document("d", text)])
    assert chunks[0].spans[0] == (0, 3) and chunks[1].spans[0][0] == 3  # the pair, worked out by hand
    assert chunker.stats()["adapter.overlap_dropped"] == 1.0
    assert "adapter.overlap_dropped" in caplog.text and "overlap setting is 4" in caplog.text


SENTENCES = "I ran. You sat. We ate. They hid."  # sentences (0,6) (7,15) (16,23) (24,33)


def test_sentence_overlap_by_hand():
    """max_chunk_size=16 chars, overlap_sentences=1: (0,15) = 2 sentences; the next starts one
    sentence back, (7,23) = 16 fits; then "We ate. They hid." = 17 > 16, so no overlap: (24,33)."""
    from harness.chunkers.sentence import SentenceChunker

    chunker = SentenceChunker(max_chunk_size=16, overlap_sentences=1, unit="chars")
    chunks = chunker.chunk_all([Document("d", SENTENCES)])
    assert [c.spans[0] for c in chunks] == [(0, 15), (7, 23), (24, 33)]
    check_chunks(chunker, Document("d", SENTENCES), chunks)


def _chunks(doc, spans):
    return [Chunk.from_spans(doc, [sp], metadata={"size": sp[1] - sp[0], "unit": "chars"}) for sp in spans]


@pytest.mark.parametrize(
    "size, spans, message",
    [
        (26, [(0, 23), (7, 33)], r"share 2 sentences; expected at most 1"),  # two sentences shared
        (16, [(0, 15), (16, 23), (24, 33)], r"repeats 0 sentences .* although 1 fit"),  # overlap dropped although it fits
        (16, [(0, 15), (10, 23), (24, 33)], r"starts inside one of the sentences"),  # not whole sentences
    ],
)
def test_sentence_overlap_is_checked_in_sentences(size, spans, message):
    """The checker counts ``overlap_sentences`` in whole sentences (hand-made chunkings that
    break it are refused with a line naming the setting)."""
    from harness.chunkers.sentence import SentenceChunker

    chunker = SentenceChunker(max_chunk_size=size, overlap_sentences=1, unit="chars")
    doc = Document("d", SENTENCES)
    with pytest.raises(ChunkContractError, match=r"chunker.overlap_sentences=1: .*" + message):
        check_chunks(chunker, doc, _chunks(doc, spans))


def test_paragraph_overlap_is_checked_in_paragraphs():
    from harness.chunkers.paragraph import ParagraphChunker

    text = "One para.\n\nTwo para.\n\nThree p."  # paragraphs (0,9) (11,20) (22,30)
    chunker = ParagraphChunker(max_chunk_size=30, overlap_paragraphs=1, unit="chars")
    doc = Document("d", text)
    with pytest.raises(ChunkContractError, match=r"chunker.overlap_paragraphs=1: .*share 2 paragraphs"):
        check_chunks(chunker, doc, _chunks(doc, [(0, 20), (0, 30)]))


def test_semantic_min_chunk_size_is_checked():
    """min_chunk_size=6 tokens: a 2-token chunk that would fit merged with its neighbour
    (well under max_chunk_size=40) breaks the promise; the same chunk next to one it cannot
    be merged with (max_chunk_size=6) keeps it. No encoder needed to check a chunking."""
    from harness.chunkers.semantic import SemanticChunker

    text = "Hi there. The second sentence of this text is a longer one."
    doc = Document("d", text)
    spans = [(0, 9), (10, len(text))]
    counter = get_counter("tokens", "model")
    assert counter.count(text[0:9]) < 6 < counter.count(text)  # the premise, measured by the tokenizer itself
    chunker = SemanticChunker(max_chunk_size=40, min_chunk_size=6)
    tok = [Chunk.from_spans(doc, [sp], metadata={"size": counter.count(text[sp[0] : sp[1]]), "unit": "tokens"}) for sp in spans]
    with pytest.raises(ChunkContractError, match=r"chunker.min_chunk_size=6: .* < 6 although merged"):
        check_chunks(chunker, doc, tok)
    tight = SemanticChunker(max_chunk_size=counter.count(text[10:]), min_chunk_size=min(6, counter.count(text[10:])))
    check_chunks(tight, doc, tok)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"breakpoint": "percentile", "threshold": 0.7}, r"chunker.threshold=0.7 is read only by chunker.breakpoint=threshold, got breakpoint=percentile"),
        ({"breakpoint": "threshold", "percentile": 80.0}, r"chunker.percentile=80.0 is read only by chunker.breakpoint=percentile"),
        ({"breakpoint": "percentile", "percentile": 80.0, "number_of_chunks": 3}, r"chunker.percentile=80.0 is read only .* number_of_chunks"),
        ({"breakpoint": "threshold", "breakpoint_amount": 2.0}, r"chunker.breakpoint_amount=2.0 is read only by .*standard_deviation"),
    ],
)
def test_semantic_setting_its_mode_never_reads_is_refused(kwargs, message):
    """A sweep over a setting the mode ignores would compare identical chunkings: refused at construction."""
    from harness.chunkers.semantic import SemanticChunker

    with pytest.raises(ValueError, match=message):
        SemanticChunker(**kwargs)


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: TimestampChunker(mode="session", window_minutes=10.0), r"chunker.window_minutes=10.0 is read only with chunker.mode=window: leave it at 30.0"),
        (lambda: TimestampChunker(mode="window", gap_minutes=5), r"chunker.gap_minutes=5 is read only with chunker.mode=session"),
        (lambda: ClusterSemanticChunker(pieces="sentences", piece_size=20), r"chunker.piece_size=20 is read only with chunker.pieces=recursive"),
        (lambda: HierarchicalChunker(return_unit="parent", window_chars=100), r"chunker.window_chars=100 is read only with chunker.return_unit=window"),
        (lambda: HierarchicalChunker(mode="headings", markers=["^---$"]), r"chunker.markers=\['\^---\$'\] is read only with chunker.mode=markers"),
        (lambda: ModalityChunker(tables=False, oversize_tables="keep"), r"chunker.oversize_tables='keep' is read only with chunker.tables=true"),
    ],
)
def test_a_setting_the_configuration_never_reads_is_refused(build, message):
    with pytest.raises(ValueError, match=message):
        build()


CHAT = "[09:00] ana: hi\n[09:10] bo: hello\n[11:00] ana: back\n[11:05] bo: ok"  # messages at 0, 16, 34, 52


def test_timestamp_groups_are_checked_against_the_time_settings():
    """window_minutes=30: 09:00 and 11:00 in one group breaks the window; 09:00 and 09:10 in
    two groups breaks it too (09:10 lies in the first window). Chunkings made by hand."""
    chunker = TimestampChunker(mode="window", max_chunk_size=200, unit="chars")
    doc = Document("chat", CHAT)

    def chunks(spans_groups):
        return [Chunk.from_spans(doc, [sp], metadata={"group": g, "size": sp[1] - sp[0], "unit": "chars"}) for sp, g in spans_groups]

    check_chunks(chunker, doc, chunks([((0, 33), 0), ((34, len(CHAT)), 1)]))  # the right grouping
    with pytest.raises(ChunkContractError, match=r"chunker.window_minutes=30.0: group 0 of chat holds a message at"):
        check_chunks(chunker, doc, chunks([((0, 51), 0), ((52, len(CHAT)), 1)]))
    with pytest.raises(ChunkContractError, match=r"group 1 of chat starts a new group although"):
        check_chunks(chunker, doc, chunks([((0, 15), 0), ((16, 33), 1), ((34, len(CHAT)), 2)]))


def test_table_rows_per_chunk_is_checked():
    text = "| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |\n| 5 | 6 |"
    chunker = TableChunker(rows_per_chunk=2, max_chunk_size=200, unit="chars")
    doc = Document("t.md", text)
    whole = Chunk.from_spans(doc, [(0, len(text))], metadata={"kind": "table", "rows": [1, 3], "size": len(text), "unit": "chars"})
    with pytest.raises(ChunkContractError, match=r"chunker.rows_per_chunk=2: chunk .* holds rows \[1, 3\] = 3 data rows"):
        check_chunks(chunker, doc, [whole])
    chunks = chunker.chunk_all([doc])
    assert [c.metadata["rows"] for c in chunks] == [[1, 2], [3, 3]]  # by hand: 3 rows, 2 per chunk
    check_chunks(chunker, doc, chunks)


@pytest.mark.parametrize(
    "text", ["x \u0301", "e\u0301\U0001f44d\U0001f3fd\U0001f680e\u0301", "\u0301ab cd ef gh ij kl mn op", "ab\u0301 cd ef gh ij kl mn op qr st uv"]
)
def test_token_windows_keep_characters_the_tokenizer_drops(text):
    """A combining mark the model tokenizer's normaliser removes belongs to no token; a token
    window must still hold it (before: a trailing or window-edge U+0301 was in no chunk)."""
    chunker = FixedChunker(chunk_size=4, chunk_overlap=0, unit="tokens")
    doc = Document("d", text)
    chunks = chunker.chunk_all([doc])
    covered = {i for c in chunks for s, e in c.spans for i in range(s, e)}
    assert [i for i, ch in enumerate(text) if not ch.isspace() and i not in covered] == []
    check_chunks(chunker, doc, chunks)
