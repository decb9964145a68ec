"""Chunker behaviour: exact spans on repeated text, size limits in the configured unit,
coverage, LangChain parity for character recursion, and parameter validation."""

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.chunkers.fixed import FixedChunker
from harness.chunkers.recursive import RecursiveChunker
from harness.chunkers.semantic import SemanticChunker
from harness.text.sentences import sentence_spans
from harness.text.units import get_counter
from harness.types import Document


def check_invariants(doc, chunks, unit=None, tokenizer="model", limit=None):
    counter = get_counter(unit, tokenizer) if unit else None
    for c in chunks:
        assert c.doc_id == doc.doc_id
        assert c.text == "".join(doc.text[s:e] for s, e in c.spans)
        assert c.text.strip() == c.text and c.text
        if counter is not None:
            assert counter.count(c.text) <= limit, (c.chunk_id, counter.count(c.text), limit)


def uncovered_non_space(doc, chunks):
    covered = [False] * len(doc.text)
    for c in chunks:
        for s, e in c.spans:
            for i in range(s, e):
                covered[i] = True
    return [i for i, ch in enumerate(doc.text) if not ch.isspace() and not covered[i]]


def test_repeated_text_recursive_chars_gives_true_offsets():
    text = "Status: OK\n" * 4 + "Status: FAIL"
    doc = Document("status.log", text)
    chunks = RecursiveChunker(chunk_size=15, chunk_overlap=10, unit="chars").chunk(doc)
    assert [c.start for c in chunks] == [0, 11, 22, 33, 44]
    assert [c.text for c in chunks] == ["Status: OK"] * 4 + ["Status: FAIL"]
    assert len({c.chunk_id for c in chunks}) == 5


def test_repeated_paragraphs_with_overlap_keep_distinct_offsets():
    para = "The broker restarted. Workers reconnected. Queue drained.\n\n"
    doc = Document("rep.md", para * 6)
    for unit in ("chars", "words", "tokens"):
        size = {"chars": 70, "words": 12, "tokens": 14}[unit]
        chunks = RecursiveChunker(chunk_size=size, chunk_overlap=size // 3, unit=unit).chunk(doc)
        check_invariants(doc, chunks, unit, limit=size)
        starts = [c.start for c in chunks]
        assert starts == sorted(starts) and len(set(starts)) == len(starts)
        assert not uncovered_non_space(doc, chunks)


def test_recursive_chars_matches_langchain_texts(kestrel):
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    for doc in kestrel.documents:
        for size, overlap in [(200, 0), (400, 80), (120, 40)]:
            ours = RecursiveChunker(chunk_size=size, chunk_overlap=overlap, unit="chars").chunk(doc)
            theirs = RecursiveCharacterTextSplitter(chunk_size=size, chunk_overlap=overlap).split_text(doc.text)
            assert [c.text for c in ours] == theirs, (doc.doc_id, size, overlap)


def test_fixed_chars_windows_and_overlap():
    doc = Document("d", "abcdefghijklmnopqrstuvwxyz")
    chunks = FixedChunker(chunk_size=10, chunk_overlap=4, unit="chars").chunk(doc)
    assert [c.spans[0] for c in chunks] == [(0, 10), (6, 16), (12, 22), (18, 26)]


def test_fixed_words_windows():
    doc = Document("d", "one two three four five six seven")
    chunks = FixedChunker(chunk_size=3, chunk_overlap=1, unit="words").chunk(doc)
    assert [c.text for c in chunks] == ["one two three", "three four five", "five six seven"]


def test_token_windows_map_to_exact_spans_not_decoded_text():
    # WordPiece lowercases; the chunk text must keep the source casing and spacing.
    doc = Document("d", "Kestrel   Broker LISTENS on Port 8450.\nWorkers   HEARTBEAT every 15 s.")
    chunks = FixedChunker(chunk_size=5, chunk_overlap=0, unit="tokens").chunk(doc)
    check_invariants(doc, chunks, "tokens", limit=5)
    assert chunks[0].text.startswith("Kestrel   Broker")
    assert not uncovered_non_space(doc, chunks)


def test_cl100k_tokenizer_is_offline_and_respected():
    doc = Document("d", "Ünïcödé text, emoji 🚀🚀 and CJK 日本語の文章。 " * 20)
    chunks = FixedChunker(chunk_size=16, chunk_overlap=4, unit="tokens", tokenizer="cl100k_base").chunk(doc)
    check_invariants(doc, chunks, "tokens", "cl100k_base", 16)
    assert not uncovered_non_space(doc, chunks)


text_st = st.lists(
    st.sampled_from(
        ["Status: OK", "\n", "\n\n", " ", "  ", "lease renewal", "e.g.", "3.14", "日本語。", "naïve café", "\t", "x" * 40, "def f(x):\n    return x"]
    ),
    min_size=1,
    max_size=40,
).map("".join)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=text_st,
    unit=st.sampled_from(["chars", "words", "tokens", "tokens_cl100k"]),
    size=st.integers(4, 60),
    overlap_frac=st.floats(0, 0.9),
    strategy=st.sampled_from(["fixed", "recursive"]),
)
def test_property_spans_exact_sizes_respected_and_lossless(text, unit, size, overlap_frac, strategy):
    overlap = min(size - 1, int(size * overlap_frac))
    cls = FixedChunker if strategy == "fixed" else RecursiveChunker
    tokenizer = "cl100k_base" if unit == "tokens_cl100k" else "model"
    unit = unit.removesuffix("_cl100k")
    doc = Document("p", text)
    chunks = cls(chunk_size=size, chunk_overlap=overlap, unit=unit, tokenizer=tokenizer).chunk(doc)
    check_invariants(doc, chunks, unit, tokenizer, limit=size)
    assert not uncovered_non_space(doc, chunks)
    starts = [c.start for c in chunks]
    assert starts == sorted(starts)


# Pieces where tokenisers are context-sensitive: contractions, a leading space or symbol
# glued to the next word, digit groups, combining marks, control characters, CJK, emoji,
# letters that case-fold to ASCII (ſ, K), special-token text and ASCII/non-ASCII borders.
TRICKY = [
    "Status: OK",
    "\n",
    "\n\n",
    " ",
    "  ",
    "\t",
    "\r\n",
    "   \n  ",
    "lease renewal",
    "e.g.",
    "3.14",
    "1234567",
    "日本語。",
    "naïve café",
    "Ünïcödé",
    "🚀",
    "don't",
    "IT'S",
    "'ll",
    "'s",
    "(word)",
    "l'été",
    "ſ",
    "K",
    "a\u0301",
    "\u0301",
    "\x0b",
    "\x00",
    "—",
    "ﬁ",
    "Ⅷ",
    "١٢٣",
    "ab-cd",
    "A.B.",
    "$100",
    "@user",
    "[MASK]",
    "<|endoftext|>",
    "x" * 40,
    "def f(x):\n    return x",
]


@pytest.mark.parametrize("tokenizer", ["model", "cl100k_base"])
def test_layout_count_equals_the_tokenizer_count_of_any_span(tokenizer, kestrel):
    """Layout.count (hard boundaries: two short ends tokenised, the middle read from the whole
    text's tokens) must equal tokenising the span itself, for any span of any text."""
    rng = random.Random(11)
    counter = get_counter("tokens", tokenizer)
    texts = ["".join(rng.choice(TRICKY) for _ in range(rng.randint(1, 120))) for _ in range(150)]
    texts += [d.text for d in kestrel.documents[:3]]
    checked = 0
    for text in texts:
        layout = counter.layout(text)
        assert [(int(s), int(e)) for s, e in zip(layout.starts, layout.ends)] == counter.atoms(text).spans
        for _ in range(40):
            s = rng.randint(0, len(text))
            e = rng.randint(s, len(text))
            assert layout.count(s, e) == counter.count(text[s:e]), (tokenizer, text[s:e])
            checked += 1
    assert checked == 40 * len(texts)


def test_layout_count_window_equals_the_tokenizer_count_of_any_window():
    """Layout.count_window (token indices read off the window's atoms; cl100k_base) must equal
    tokenising the span, also where tokens start inside a code point (emoji, CJK)."""
    rng = random.Random(5)
    counter = get_counter("tokens", "cl100k_base")
    pieces = TRICKY + ["🚀🚀", "日本", "𝔘𝔫𝔦", "é", " "]
    checked = merged = 0
    for _ in range(300):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 80)))
        layout = counter.layout(text)
        merged += bool(counter._token_char_starts(text)[1])
        n = len(layout.starts)
        for _ in range(30):
            i = rng.randrange(n)
            j = rng.randint(i + 1, min(n, i + 60))
            a, b = int(layout.starts[i]), int(layout.ends[j - 1])
            s = rng.randint(a, b)
            e = rng.randint(s, b)
            assert layout.count_window(i, j, s, e) == counter.count(text[s:e]), (text[s:e], i, j)
            checked += 1
    assert checked == 300 * 30 and merged > 50


_ws_text_st = st.lists(
    st.one_of(
        st.sampled_from([" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\u00a0", "\u3000", "\x0b", "\u2028"]),
        st.sampled_from(["word", "Kestrel", "don't", "x" * 30, "3.14", "(a)", "e.g.", "naïve", "日本語", "🚀", "a\u0301", "ſ", "—"]),
        st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=6),
    ),
    min_size=1,
    max_size=60,
).map("".join)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_ws_text_st, size=st.integers(4, 80), overlap_frac=st.floats(0, 0.9))
def test_property_cl100k_windows_retokenise_within_the_limit(text, size, overlap_frac):
    """Fixed cl100k_base token windows on text with repeated and odd whitespace and
    non-ASCII: exact spans, stripped, sorted, no non-space character lost, and each chunk's
    own text re-tokenises (encode_ordinary) to at most chunk_size tokens. Sizes start at 4:
    an atom never splits a code point, and one code point can be up to 4 byte tokens."""
    from harness.types import make_chunk_id

    overlap = min(size - 1, int(size * overlap_frac))
    doc = Document("p", text)
    chunks = FixedChunker(chunk_size=size, chunk_overlap=overlap, unit="tokens", tokenizer="cl100k_base").chunk(doc)
    check_invariants(doc, chunks, "tokens", "cl100k_base", limit=size)
    enc = get_counter("tokens", "cl100k_base")._enc
    for c in chunks:
        assert len(enc.encode_ordinary(c.text)) <= size
        assert c.chunk_id == make_chunk_id(doc.doc_id, c.spans) and c.parent_id is None
        assert c.metadata == {"unit": "tokens", "n_chars": c.end - c.start, "size": len(enc.encode_ordinary(c.text))}
    assert not uncovered_non_space(doc, chunks)
    assert [c.start for c in chunks] == sorted(c.start for c in chunks)


def test_layout_count_without_known_hard_boundaries_tokenises_the_span(tmp_path):
    """A tokenizer whose pre-tokenisation is not the one the hard-boundary rules were derived
    for is measured whole (still exact): a BERT tokenizer.json with another pre-tokenizer,
    and cl100k_base with its rule switched off."""
    import json

    from harness.text.units import HFTokenCounter, TiktokenCounter, model_tokenizer_file

    spec = json.loads(open(model_tokenizer_file(), encoding="utf-8").read())
    spec["pre_tokenizer"] = {"type": "Whitespace"}
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    hf = HFTokenCounter(str(path))
    assert hf._bert_local is False and get_counter("tokens", "model")._bert_local is True
    tk = TiktokenCounter("cl100k_base")
    assert tk._known_pattern is True
    tk.__dict__["_known_pattern"] = False  # as for an encoding with another regex
    text = "Kestrel's broker (v2.1) restarted; workers re-connected — 日本語 🚀 don't."
    for counter in (hf, tk):
        layout = counter.layout(text)
        for s in range(0, len(text), 3):
            for e in range(s, len(text) + 1, 5):
                assert layout.count(s, e) == counter.count(text[s:e])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=text_st, size=st.integers(2, 80), overlap_frac=st.floats(0, 0.9))
def test_property_recursive_chars_gives_langchains_chunk_texts(text, size, overlap_frac):
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    overlap = min(size - 1, int(size * overlap_frac))
    ours = RecursiveChunker(chunk_size=size, chunk_overlap=overlap, unit="chars").chunk(Document("p", text))
    theirs = RecursiveCharacterTextSplitter(chunk_size=size, chunk_overlap=overlap).split_text(text)
    assert [c.text for c in ours] == theirs


def test_sentence_spans_handle_abbreviations_decimals_cjk_and_crlf():
    text = "Dr. Vos met the team on Jan. 5, e.g. to review 2.3.1.\r\nLatency fell to 3.5 ms. 日本語の文。次の文！Done?"
    spans = sentence_spans(text)
    sents = [text[s:e] for s, e in spans]
    assert sents[0] == "Dr. Vos met the team on Jan. 5, e.g. to review 2.3.1."
    assert "Latency fell to 3.5 ms." in sents
    assert "日本語の文。" in sents and "次の文！" in sents


@pytest.mark.slow
def test_semantic_threshold_is_monotone_in_chunk_count(kestrel, encoder):
    doc = kestrel.by_id["architecture_overview.txt"]
    counts = []
    for threshold in (0.2, 0.5, 0.8):
        chunks = SemanticChunker(threshold=threshold, max_chunk_size=256, encoder=encoder).chunk(doc)
        check_invariants(doc, chunks, "tokens", limit=256)
        assert not uncovered_non_space(doc, chunks)
        counts.append(len(chunks))
    assert counts[0] <= counts[1] <= counts[2]
    assert counts[0] < counts[2]


@pytest.mark.slow
def test_semantic_percentile_mode(kestrel, encoder):
    doc = kestrel.by_id["postmortem_2025_11_18.txt"]
    chunks = SemanticChunker(breakpoint="percentile", percentile=80, max_chunk_size=128, encoder=encoder).chunk(doc)
    check_invariants(doc, chunks, "tokens", limit=128)
    n_sent = len(sentence_spans(doc.text))
    assert 1 < len(chunks) < n_sent


@pytest.mark.parametrize(
    "cls, kwargs, param",
    [
        (FixedChunker, {"chunk_size": 100, "chunk_overlap": 100}, "chunk_overlap"),
        (FixedChunker, {"chunk_size": 100, "chunk_overlap": 150}, "chunk_overlap"),
        (FixedChunker, {"chunk_size": 0}, "chunk_size"),
        (FixedChunker, {"chunk_size": -5}, "chunk_size"),
        (FixedChunker, {"unit": "sentences"}, "unit"),
        (FixedChunker, {"unit": "tokens", "tokenizer": "gpt2"}, "tokenizer"),
        (RecursiveChunker, {"chunk_size": 50, "chunk_overlap": 50}, "chunk_overlap"),
        (RecursiveChunker, {"chunk_size": 0}, "chunk_size"),
        (RecursiveChunker, {"unit": "bytes"}, "unit"),
        (SemanticChunker, {"threshold": 1.5}, "threshold"),
        (SemanticChunker, {"threshold": -1.01}, "threshold"),
        (SemanticChunker, {"breakpoint": "gradient_x"}, "breakpoint"),
        (SemanticChunker, {"max_chunk_size": 0}, "max_chunk_size"),
        (SemanticChunker, {"percentile": 100}, "percentile"),
    ],
)
def test_invalid_parameters_name_the_parameter(cls, kwargs, param):
    with pytest.raises(ValueError, match=rf"chunker\.{param}"):
        cls(**kwargs)


@pytest.mark.parametrize("cls", [FixedChunker, RecursiveChunker])
def test_words_size_8_overlap_4_on_a_40_word_sentence(cls):
    words = [f"w{i:02d}" for i in range(40)]
    text = " ".join(words) + "."
    doc = Document("s", text)
    chunks = cls(chunk_size=8, chunk_overlap=4, unit="words").chunk(doc)
    starts = [c.start for c in chunks]
    assert all(s >= 0 for s in starts)
    assert starts == sorted(set(starts))  # strictly increasing
    windows = [c.text.split() for c in chunks]
    assert all(len(w) <= 8 for w in windows)
    for prev, cur in zip(windows, windows[1:]):
        shared = len(set(prev) & set(cur))
        assert shared <= 4
    assert {w.rstrip(".") for win in windows for w in win} == set(words)  # nothing lost
