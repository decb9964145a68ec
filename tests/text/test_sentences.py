"""Sentence-level strategies: sentence and paragraph segmentation, the ``sentence`` and
``paragraph`` packers, the extended ``semantic`` breakpoints and the ``cluster_semantic``
dynamic programme. Expected values are worked out by hand in the comments."""

import itertools

import numpy as np
import pytest

from harness.chunkers.cluster_semantic import ClusterSemanticChunker, _segment, optimal_segmentation, similarity_band
from harness.chunkers.paragraph import ParagraphChunker
from harness.chunkers.recursive import RecursiveChunker
from harness.chunkers.semantic import SemanticChunker, breakpoint_indices
from harness.chunkers.sentence import SentenceChunker
from harness.text.packing import pack_units
from harness.text.sentences import merge_abbreviation_splits, paragraph_spans, sentence_spans
from harness.text.units import get_counter
from harness.types import Document

CRLF = "Line one here.\r\n\r\nLine two here.\r\n\r\nLine three...."
# "Line one here." = 14 chars at 0; "\r\n\r\n" = 4; next at 18..32; then 36..50.
CRLF_SPANS = [(0, 14), (18, 32), (36, 50)]
URL = "https://example.com/" + "a" * 300  # 320 characters, no whitespace
SLASHES = "x/" * 160  # 320 characters; WordPiece splits it into 320 one-character tokens


def check_chunks(doc, chunks, unit=None, limit=None, tokenizer="model", lossless=True):
    """Spans exact, no blank chunk, size limit, starts strictly increasing, optional coverage."""
    counter = get_counter(unit, tokenizer) if unit else None
    starts = []
    for c in chunks:
        assert len(c.spans) == 1
        assert c.text == doc.text[c.start : c.end]
        assert c.text.strip() == c.text and c.text
        if counter is not None:
            assert counter.count(c.text) <= limit, (c.chunk_id, counter.count(c.text), limit)
        starts.append(c.start)
    assert starts == sorted(set(starts))
    if lossless:
        covered = bytearray(len(doc.text))
        for c in chunks:
            covered[c.start : c.end] = b"\x01" * (c.end - c.start)
        assert all(covered[i] or ch.isspace() for i, ch in enumerate(doc.text))


# -- sentence and paragraph segmentation -------------------------------------------------


def test_sentence_spans_acceptance_abbreviations_decimals_and_cjk():
    text = "She arrived at 3.5 p.m. with Dr. Smith, e.g. early. It rained. 他来了。她走了！"
    first = "She arrived at 3.5 p.m. with Dr. Smith, e.g. early."  # 51 characters
    assert len(first) == 51
    # sentences end after "early." (51), "rained." (52 + 10 = 62), "。" (63 + 4 = 67), "！" (67 + 4 = 71)
    assert sentence_spans(text) == [(0, 51), (52, 62), (63, 67), (67, 71)]
    assert [text[s:e] for s, e in sentence_spans(text)] == [first, "It rained.", "他来了。", "她走了！"]


def test_sentence_spans_keep_et_al_and_decimals_inside_sentences():
    text = "Results were confirmed by Jones et al. in 2019. The value 2.75 held at 0.5 Hz."
    one = "Results were confirmed by Jones et al. in 2019."
    assert [text[s:e] for s, e in sentence_spans(text)] == [one, "The value 2.75 held at 0.5 Hz."]


def test_abbreviation_rule_rejoins_lowercase_continuations_only():
    text = "We met at 5 p.m. with the team. It rained. I like tvs. more than radio."
    # a segmenter that split after every full stop would give these spans:
    split = [(0, 16), (17, 31), (32, 42), (43, 54), (55, 71)]
    assert [text[s:e] for s, e in split] == ["We met at 5 p.m.", "with the team.", "It rained.", "I like tvs.", "more than radio."]
    # "p.m." + lowercase "with" -> joined; "team." + "It" -> kept; "tvs." is not "vs." -> kept
    assert merge_abbreviation_splits(text, split) == [(0, 31), (32, 42), (43, 54), (55, 71)]
    # never across a blank line
    text2 = "Fruit, nuts, etc.\n\nbread follows."
    assert merge_abbreviation_splits(text2, [(0, 17), (19, 33)]) == [(0, 17), (19, 33)]
    # case-insensitive abbreviations, e.g. "et al." and "VS."
    text3 = "Data of Li et al. show it. A VS. b"
    assert merge_abbreviation_splits(text3, [(0, 17), (18, 26), (27, 32), (33, 34)]) == [(0, 26), (27, 34)]


def test_paragraph_spans_crlf_and_blank_lines_with_spaces():
    assert paragraph_spans(CRLF) == CRLF_SPANS
    text = "  alpha\n \t \nbeta\n\n\n\ngamma delta\n"
    # "alpha" 2..7; "\n \t \n" 7..12; "beta" 12..16; "\n\n\n\n" 16..20; "gamma delta" 20..31
    assert paragraph_spans(text) == [(2, 7), (12, 16), (20, 31)]
    assert paragraph_spans(" \r\n \n\t") == []
    assert paragraph_spans(text, 12, 31) == [(12, 16), (20, 31)]


def test_sentence_spans_can_break_at_blank_lines():
    text = "# Install\n\nRun the installer now. Then reboot."
    # BlingFire alone keeps the heading with the first sentence
    assert [text[s:e] for s, e in sentence_spans(text)][0].startswith("# Install\n\nRun")
    assert [text[s:e] for s, e in sentence_spans(text, split_paragraphs=True)] == [
        "# Install",
        "Run the installer now.",
        "Then reboot.",
    ]


def test_sentence_spans_exact_in_raw_crlf_text():
    assert sentence_spans(CRLF) == CRLF_SPANS


# -- packing helper ----------------------------------------------------------------------


def test_pack_units_overlap_never_stalls():
    text = "a b c. d e. f g h i. j."
    units = [(0, 6), (7, 11), (12, 20), (21, 23)]  # 3, 2, 4, 1 words
    words = get_counter("words")
    assert pack_units(text, units, words, 5) == [(0, 2), (2, 4)]
    # overlap 1 at 6 words: [a..e] (5), then back one: [d e. f g h i.] (6), then [f..i. j.] (5)
    assert pack_units(text, units, words, 6, overlap=1) == [(0, 2), (1, 3), (2, 4)]
    # overlap larger than what fits: shrinks to 0 instead of looping (d e. + f g h i. = 6 > 5)
    assert pack_units(text, units, words, 5, overlap=3) == [(0, 2), (2, 4)]
    # a huge overlap with one-word units still advances by one unit per chunk
    one = "a. b. c. d."
    assert pack_units(one, [(0, 2), (3, 5), (6, 8), (9, 11)], words, 2, overlap=1) == [(0, 2), (1, 3), (2, 4)]


# -- sentence strategy -------------------------------------------------------------------


def test_sentence_chunker_crlf_acceptance():
    doc = Document("crlf.txt", CRLF)
    # 3 + 3 words > 4: one sentence per chunk, spans exact in the raw CRLF string
    chunks = SentenceChunker(max_chunk_size=4, unit="words").chunk(doc)
    assert [c.spans[0] for c in chunks] == CRLF_SPANS
    assert [c.text for c in chunks] == ["Line one here.", "Line two here.", "Line three...."]
    # default size: the whole text is one chunk (trimmed, CRLF kept inside)
    (whole,) = SentenceChunker().chunk(doc)
    assert whole.spans == ((0, 50),) and whole.text == CRLF


def test_sentence_chunker_packs_whole_sentences_with_overlap():
    doc = Document("d", "One two three. Four five. Six seven eight nine. Ten.")
    assert [c.text for c in SentenceChunker(max_chunk_size=5, unit="words").chunk(doc)] == [
        "One two three. Four five.",
        "Six seven eight nine. Ten.",
    ]
    chunks = SentenceChunker(max_chunk_size=6, unit="words", overlap_sentences=1).chunk(doc)
    assert [c.text for c in chunks] == [
        "One two three. Four five.",
        "Four five. Six seven eight nine.",
        "Six seven eight nine. Ten.",
    ]
    assert [c.metadata["n_sentences"] for c in chunks] == [2, 2, 2]


def test_sentence_chunker_cuts_unbreakable_run_100_100_100_20():
    doc = Document("url", URL)
    chunks = SentenceChunker(max_chunk_size=100, unit="chars").chunk(doc)
    assert [c.spans[0] for c in chunks] == [(0, 100), (100, 200), (200, 300), (300, 320)]


def test_sentence_chunker_cuts_long_unpunctuated_sentence_at_line_breaks():
    lines = [
        "[2025-11-18 09:01:00] alice: broker one is slow",  # 47 chars
        "[2025-11-18 09:02:00] bob: looking at it now",  # 44
        "[2025-11-18 09:03:00] alice: queue depth keeps rising",  # 53
        "[2025-11-18 09:04:00] bob: restarting the workers",  # 49
    ]
    doc = Document("chat.log", "\n".join(lines))
    # one BlingFire "sentence" of 196 chars; two lines together exceed 60 chars
    chunks = SentenceChunker(max_chunk_size=60, unit="chars").chunk(doc)
    assert [c.text for c in chunks] == lines


def test_sentence_chunker_on_real_doc_with_overlap(kestrel):
    doc = kestrel.by_id["postmortem_2025_11_18.txt"]
    sents = sentence_spans(doc.text, split_paragraphs=True)
    tokens = get_counter("tokens")
    assert max(tokens.count(doc.text[s:e]) for s, e in sents) <= 56
    chunks = SentenceChunker(max_chunk_size=128, overlap_sentences=2).chunk(doc)
    check_chunks(doc, chunks, "tokens", 128)
    # no sentence exceeds 128 tokens, so every chunk is whole sentences
    assert all(c.start in {s for s, _ in sents} and c.end in {e for _, e in sents} for c in chunks)
    # two sentences (<= 56 tokens each) always fit in 128, so at least one is shared:
    # consecutive chunks overlap and each one ends later than the previous
    assert all(b.start < a.end < b.end for a, b in zip(chunks, chunks[1:]))
    assert len(chunks) > len(SentenceChunker(max_chunk_size=128).chunk(doc))


@pytest.mark.parametrize(
    "kwargs, param",
    [
        ({"max_chunk_size": 0}, "max_chunk_size"),
        ({"overlap_sentences": -1}, "overlap_sentences"),
        ({"max_chunk_size": 5, "overlap_sentences": 5}, "overlap_sentences"),
        ({"overlap_sentences": True}, "overlap_sentences"),
        ({"unit": "pages"}, "unit"),
        ({"tokenizer": "gpt2"}, "tokenizer"),
    ],
)
def test_sentence_chunker_validation(kwargs, param):
    with pytest.raises(ValueError, match=rf"^chunker\.{param} must"):
        SentenceChunker(**kwargs)


# -- paragraph strategy ------------------------------------------------------------------


def test_paragraph_chunker_crlf_acceptance():
    doc = Document("crlf.txt", CRLF)
    # paragraphs of 3, 3, 2 words; at 4 words no two fit together
    chunks = ParagraphChunker(max_chunk_size=4, unit="words").chunk(doc)
    assert [c.spans[0] for c in chunks] == CRLF_SPANS
    assert [c.text for c in chunks] == ["Line one here.", "Line two here.", "Line three...."]
    # at 5 words the last two paragraphs (3 + 2) share a chunk, blank CRLF line kept inside
    chunks = ParagraphChunker(max_chunk_size=5, unit="words").chunk(doc)
    assert [c.spans[0] for c in chunks] == [(0, 14), (18, 50)]


def test_paragraph_chunker_overlap_and_oversized_paragraph():
    text = "Short intro.\n\nOne two three four. Five six seven eight nine. Ten eleven twelve.\n\nOutro para."
    doc = Document("d", text)
    # middle paragraph is 12 words > 8: sentences 4 | 5 + 3 = 8; intro and outro stay alone
    chunks = ParagraphChunker(max_chunk_size=8, unit="words").chunk(doc)
    assert [c.text for c in chunks] == [
        "Short intro.",
        "One two three four.",
        "Five six seven eight nine. Ten eleven twelve.",
        "Outro para.",
    ]
    assert [c.metadata.get("split_paragraph", False) for c in chunks] == [False, True, True, False]
    doc2 = Document("d2", "A b c.\n\nD e.\n\nF g h i.\n\nJ.")
    chunks = ParagraphChunker(max_chunk_size=6, unit="words", overlap_paragraphs=1).chunk(doc2)
    assert [c.text for c in chunks] == ["A b c.\n\nD e.", "D e.\n\nF g h i.", "F g h i.\n\nJ."]


def test_paragraph_chunker_cuts_unbreakable_run_100_100_100_20():
    doc = Document("url", "Intro line.\n\n" + URL)
    chunks = ParagraphChunker(max_chunk_size=100, unit="chars").chunk(doc)
    assert [c.spans[0] for c in chunks] == [(0, 11), (13, 113), (113, 213), (213, 313), (313, 333)]


def test_paragraph_chunker_on_real_docs_cuts_on_paragraph_boundaries(kestrel):
    for name in ("faq.md", "scheduler.py", "incident_chat.log"):
        doc = kestrel.by_id[name]
        chunks = ParagraphChunker(max_chunk_size=96).chunk(doc)
        check_chunks(doc, chunks, "tokens", 96)
        paras = paragraph_spans(doc.text)
        starts, ends = {s for s, _ in paras}, {e for _, e in paras}
        for c in chunks:
            if not c.metadata.get("split_paragraph"):
                assert c.start in starts and c.end in ends, (name, c.chunk_id)


@pytest.mark.parametrize(
    "kwargs, param",
    [
        ({"max_chunk_size": -3}, "max_chunk_size"),
        ({"overlap_paragraphs": 254}, "overlap_paragraphs"),
        ({"overlap_paragraphs": 1.5}, "overlap_paragraphs"),
        ({"unit": "lines"}, "unit"),
    ],
)
def test_paragraph_chunker_validation(kwargs, param):
    with pytest.raises(ValueError, match=rf"^chunker\.{param} must"):
        ParagraphChunker(**kwargs)


# -- semantic breakpoints ----------------------------------------------------------------


def test_breakpoints_percentile_and_interquartile_by_hand():
    d = [0.1, 0.2, 0.3, 0.4, 0.9]
    # median 0.3 -> strictly above: 0.4 (index 3) and 0.9 (index 4)
    assert breakpoint_indices(d, "percentile", 50) == [3, 4]
    # 95th percentile: position 0.95 * 4 = 3.8 -> 0.4 + 0.8 * 0.5 = 0.8 -> only 0.9
    assert breakpoint_indices(d, "percentile", 95) == [4]
    # mean 0.38, Q1 = 0.2, Q3 = 0.4, IQR = 0.2; 1.5 -> cut 0.68; 0 -> cut 0.38; 0.1 -> cut 0.40
    assert breakpoint_indices(d, "interquartile", 1.5) == [4]
    assert breakpoint_indices(d, "interquartile", 0) == [3, 4]
    assert breakpoint_indices(d, "interquartile", 0.1) == [4]


def test_breakpoints_standard_deviation_by_hand():
    d = [0.1, 0.1, 0.9, 0.1, 0.1, 0.1, 0.1, 0.1]
    # mean = 1.6 / 8 = 0.2; variance = (7 * 0.01 + 0.49) / 8 = 0.07; std = 0.2646
    # amount 2 -> cut 0.729: only index 2; amount 3 (default) -> cut 0.994: none
    assert breakpoint_indices(d, "standard_deviation", 2) == [2]
    assert breakpoint_indices(d, "standard_deviation", 3) == []
    # amount 0 -> cut = mean 0.2 -> index 2
    assert breakpoint_indices(d, "standard_deviation", 0) == [2]


def test_breakpoints_gradient_by_hand():
    d = [0.1, 0.1, 0.5, 0.1, 0.1]
    # numpy.gradient: [0.1-0.1, (0.5-0.1)/2, (0.1-0.1)/2, (0.1-0.5)/2, 0.1-0.1] = [0, 0.2, 0, -0.2, 0]
    # 95th percentile of [-0.2, 0, 0, 0, 0.2]: position 3.8 -> 0 + 0.8 * 0.2 = 0.16 -> index 1
    assert breakpoint_indices(d, "gradient", 95) == [1]
    assert breakpoint_indices(d, "gradient", 50) == [1]  # median 0: only 0.2 is above
    assert breakpoint_indices([0.7], "gradient", 95) == []  # gradient needs two distances
    assert breakpoint_indices([], "percentile", 95) == []
    with pytest.raises(ValueError, match="chunker.breakpoint"):
        breakpoint_indices(d, "threshold", 0.5)


TOPICS = (
    "Cats sleep for most of the day. A kitten purrs when it is content. House cats like to chase toy mice. "
    "Income tax returns are due in April. The tax office audits some deductions. Late filing of a return incurs a penalty."
)
TOPIC_BREAK = 101  # the tax sentences start at 102; the cat block ends at 101


@pytest.mark.parametrize(
    "breakpoint, amount",
    [("standard_deviation", 1.0), ("interquartile", 1.5), ("percentile", None)],
)
def test_semantic_modes_split_two_topics(encoder, breakpoint, amount):
    doc = Document("topics", TOPICS)
    kwargs = {"breakpoint_amount": amount} if amount is not None else {"percentile": 70.0}
    chunks = SemanticChunker(breakpoint=breakpoint, encoder=encoder, **kwargs).chunk(doc)
    check_chunks(doc, chunks, "tokens", 254)
    assert TOPIC_BREAK in {c.end for c in chunks}


@pytest.mark.slow
def test_semantic_boundaries_follow_the_distance_series_on_real_text(kestrel, encoder):
    doc = kestrel.by_id["architecture_overview.txt"]
    sents = sentence_spans(doc.text)
    vecs = encoder.encode([doc.text[s:e] for s, e in sents])
    dist = 1.0 - np.sum(vecs[:-1] * vecs[1:], axis=1)
    # mean + 1.5 std, and the 90th percentile of the gradient, written out with numpy
    std_cut = {i + 1 for i in range(len(dist)) if dist[i] > dist.mean() + 1.5 * dist.std()}
    g = np.gradient(dist)
    grad_cut = {i + 1 for i in range(len(g)) if g[i] > np.percentile(g, 90)}
    for mode, amount, expected in [("standard_deviation", 1.5, std_cut), ("gradient", 90.0, grad_cut)]:
        # max_chunk_size larger than the whole document: no size cuts
        chunks = SemanticChunker(breakpoint=mode, breakpoint_amount=amount, max_chunk_size=100_000, encoder=encoder).chunk(doc)
        first_sentence = {s: k for k, (s, _) in enumerate(sents)}
        starts = {first_sentence[c.start] for c in chunks[1:]}
        assert starts == expected, mode
        assert expected  # the series has breakpoints in both modes


@pytest.mark.slow
def test_semantic_buffer_embeds_sentence_windows_but_keeps_sentence_spans(kestrel, encoder):
    doc = kestrel.by_id["postmortem_2025_11_18.txt"]
    sents = sentence_spans(doc.text)
    n = len(sents)
    windows = [doc.text[sents[max(0, i - 1)][0] : sents[min(n - 1, i + 1)][1]] for i in range(n)]
    vecs = encoder.encode(windows)
    dist = 1.0 - np.sum(vecs[:-1] * vecs[1:], axis=1)
    expected = {i + 1 for i in range(n - 1) if dist[i] > np.percentile(dist, 90)}
    chunks = SemanticChunker(breakpoint="percentile", percentile=90, buffer_size=1, max_chunk_size=100_000, encoder=encoder).chunk(doc)
    first_sentence = {s: k for k, (s, _) in enumerate(sents)}
    assert {first_sentence[c.start] for c in chunks[1:]} == expected
    assert {c.end for c in chunks} <= {e for _, e in sents}


@pytest.mark.slow
def test_semantic_min_and_max_guards_on_real_text(kestrel, encoder):
    tokens = get_counter("tokens")
    for name in ("architecture_overview.txt", "faq.md"):
        doc = kestrel.by_id[name]
        for mode in ("threshold", "standard_deviation", "gradient"):
            kwargs = {"threshold": 0.6} if mode == "threshold" else {"breakpoint_amount": 0.5 if mode == "standard_deviation" else 60.0}
            plain = SemanticChunker(breakpoint=mode, max_chunk_size=128, encoder=encoder, **kwargs).chunk(doc)
            guarded = SemanticChunker(breakpoint=mode, max_chunk_size=128, min_chunk_size=48, encoder=encoder, **kwargs).chunk(doc)
            check_chunks(doc, guarded, "tokens", 128)
            assert len(guarded) < len(plain)
            sizes = [tokens.count(c.text) for c in guarded]
            for k, c in enumerate(guarded):
                if sizes[k] >= 48:
                    continue
                # a small chunk exists only where merging it with a neighbour would exceed max_chunk_size
                if k + 1 < len(guarded):
                    assert tokens.count(doc.text[c.start : guarded[k + 1].end]) > 128, (name, mode, k)
                else:
                    assert tokens.count(doc.text[guarded[k - 1].start : c.end]) > 128, (name, mode, k)


def test_semantic_cuts_unbreakable_run_100_100_100_20(encoder):
    doc = Document("slashes", SLASHES)
    for mode in ("threshold", "standard_deviation"):
        chunks = SemanticChunker(breakpoint=mode, max_chunk_size=100, encoder=encoder).chunk(doc)
        assert [c.spans[0] for c in chunks] == [(0, 100), (100, 200), (200, 300), (300, 320)]


@pytest.mark.parametrize(
    "kwargs, param",
    [
        ({"breakpoint": "kmeans"}, "breakpoint"),
        ({"breakpoint": "gradient", "breakpoint_amount": 100.0}, "breakpoint_amount"),
        ({"breakpoint": "standard_deviation", "breakpoint_amount": -1.0}, "breakpoint_amount"),
        ({"breakpoint_amount": "high"}, "breakpoint_amount"),
        ({"max_chunk_size": 100, "min_chunk_size": 101}, "min_chunk_size"),
        ({"min_chunk_size": -1}, "min_chunk_size"),
        ({"buffer_size": -1}, "buffer_size"),
        ({"buffer_size": True}, "buffer_size"),
        ({"threshold": 1.5}, "threshold"),
        ({"percentile": 100}, "percentile"),
    ],
)
def test_semantic_validation(kwargs, param):
    with pytest.raises(ValueError, match=rf"^chunker\.{param} must"):
        SemanticChunker(**kwargs)


def test_semantic_mode_parameters_and_defaults():
    assert SemanticChunker(breakpoint="standard_deviation").amount == 3.0
    assert SemanticChunker(breakpoint="interquartile").amount == 1.5
    assert SemanticChunker(breakpoint="gradient").amount == 95.0
    assert SemanticChunker(breakpoint="gradient", breakpoint_amount=80).amount == 80.0
    assert SemanticChunker(breakpoint="percentile", percentile=70).amount == 70.0
    with pytest.raises(ValueError, match=r"chunker.breakpoint_amount=10 is read only by"):  # percentile mode never reads it
        SemanticChunker(breakpoint="percentile", percentile=70, breakpoint_amount=10)
    assert SemanticChunker().amount is None


# -- cluster-semantic dynamic programme --------------------------------------------------


def block_matrix(n, blocks, within, across=0.0):
    s = np.full((n, n), across)
    for block in blocks:
        for i in block:
            for j in block:
                s[i, j] = within
    np.fill_diagonal(s, 1.0)
    return s


def test_dp_finds_the_two_obvious_blocks():
    s = block_matrix(6, [(0, 1, 2), (3, 4, 5)], within=0.9, across=0.1)
    # mu = (6 * 0.9 + 9 * 0.1) / 15 = 0.42; each block scores 3 * (0.9 - 0.42) = 1.44
    assert optimal_segmentation(s, max_pieces=3) == [(0, 3), (3, 6)]
    # the whole document scores sum(S_ij - mu) over all pairs = 0 < 2.88
    assert optimal_segmentation(s, max_pieces=6) == [(0, 3), (3, 6)]
    # nothing is more similar than average -> single pieces (reward 0 each)
    assert optimal_segmentation(np.eye(4), max_pieces=4) == [(0, 1), (1, 2), (2, 3), (3, 4)]


def test_dp_uneven_blocks_caps_and_allowed_predicate():
    s = block_matrix(6, [(0, 1), (2, 3, 4)], within=0.8)
    s[2, 3] = s[3, 2] = 0.9
    s[3, 4] = s[4, 3] = 0.7
    # mu = (0.8 + 0.9 + 0.7 + 0.8) / 15 = 0.2133; {0,1}: 0.587; {2,3,4}: 2.4 - 3 mu = 1.76;
    # piece 5 alone (adding it to {2,3,4} adds three pairs at 0 - mu < 0)
    assert optimal_segmentation(s, max_pieces=3) == [(0, 2), (2, 5), (5, 6)]
    # at most 2 pieces: {2,3} (0.9 - mu) beats {3,4} (0.7 - mu)
    assert optimal_segmentation(s, max_pieces=2) == [(0, 2), (2, 4), (4, 5), (5, 6)]

    # a size predicate forbidding any chunk that reaches from 2 to 4 does the same
    def allowed(a, b):
        return not (a <= 2 and b >= 4)

    assert optimal_segmentation(s, max_pieces=6, allowed=allowed) == [(0, 2), (2, 4), (4, 5), (5, 6)]


def brute_force(sim, max_pieces):
    n = len(sim)
    mu = sim[np.triu_indices(n, 1)].mean()
    best, best_seg = -np.inf, None
    for cuts in itertools.product([False, True], repeat=n - 1):
        bounds = [0] + [i + 1 for i, c in enumerate(cuts) if c] + [n]
        seg = list(zip(bounds, bounds[1:]))
        if any(b - a > max_pieces for a, b in seg):
            continue
        score = sum(sim[i, j] - mu for a, b in seg for i in range(a, b) for j in range(i + 1, b))
        if score > best + 1e-12:
            best, best_seg = score, seg
    return best_seg, best


def test_dp_matches_brute_force_and_band_path():
    rng = np.random.default_rng(7)
    for trial in range(20):
        n = int(rng.integers(2, 9))
        v = rng.normal(size=(n, 5))
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        sim = v @ v.T
        for max_pieces in (1, 2, 3, n):
            seg = optimal_segmentation(sim, max_pieces)
            expected, best = brute_force(sim, max_pieces)
            mu = sim[np.triu_indices(n, 1)].mean()
            score = sum(sim[i, j] - mu for a, b in seg for i in range(a, b) for j in range(i + 1, b))
            assert score == pytest.approx(best), (trial, max_pieces)
            band, band_mu = similarity_band(v, min(max_pieces, n))
            assert band_mu == pytest.approx(mu)
            assert _segment(band, band_mu, None) == seg


def test_cluster_semantic_separates_two_topics(encoder):
    doc = Document("topics", TOPICS)
    chunks = ClusterSemanticChunker(pieces="sentences", encoder=encoder).chunk(doc)
    assert [c.spans[0] for c in chunks] == [(0, TOPIC_BREAK), (TOPIC_BREAK + 1, len(TOPICS))]


@pytest.mark.slow
def test_cluster_semantic_on_real_docs(kestrel, encoder):
    tokens = get_counter("tokens")
    for name in ("faq.md", "incident_chat.log"):
        doc = kestrel.by_id[name]
        chunks = ClusterSemanticChunker(max_chunk_size=128, piece_size=32, encoder=encoder).chunk(doc)
        check_chunks(doc, chunks, "tokens", 128)
        pieces = RecursiveChunker(chunk_size=32, unit="tokens").split_spans(doc.text)
        starts, ends = {s for s, _ in pieces}, {e for _, e in pieces}
        assert all(c.start in starts and c.end in ends for c in chunks)
        assert max(c.metadata["n_pieces"] for c in chunks) <= 128 // 32
        assert sum(c.metadata["n_pieces"] for c in chunks) == len(pieces)
        by_sentence = ClusterSemanticChunker(max_chunk_size=128, pieces="sentences", encoder=encoder).chunk(doc)
        check_chunks(doc, by_sentence, "tokens", 128)
        assert all(tokens.count(c.text) <= 128 for c in by_sentence)


def test_cluster_semantic_cuts_unbreakable_run_100_100_100_20(encoder):
    doc = Document("slashes", SLASHES)
    chunks = ClusterSemanticChunker(max_chunk_size=100, piece_size=100, encoder=encoder).chunk(doc)
    assert [c.spans[0] for c in chunks] == [(0, 100), (100, 200), (200, 300), (300, 320)]


@pytest.mark.parametrize(
    "kwargs, param",
    [
        ({"max_chunk_size": 0}, "max_chunk_size"),
        ({"piece_size": 0}, "piece_size"),
        ({"max_chunk_size": 40, "piece_size": 50}, "piece_size"),
        ({"pieces": "paragraphs"}, "pieces"),
        ({"tokenizer": "bert"}, "tokenizer"),
    ],
)
def test_cluster_semantic_validation(kwargs, param):
    with pytest.raises(ValueError, match=rf"^chunker\.{param} must"):
        ClusterSemanticChunker(**kwargs)
    with pytest.raises(ValueError, match="max_pieces"):
        optimal_segmentation(np.eye(3), max_pieces=0)
