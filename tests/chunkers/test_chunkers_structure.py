"""Structure-aware chunkers: markdown sections, code units, table rows, FAQ pairs.

Expected chunks are worked out by hand from the small documents written here (line numbers
counted in the literals, lengths computed from the literal pieces)."""

import re

import pytest

from harness.chunkers.code import CodeChunker
from harness.chunkers.faq import FAQChunker
from harness.chunkers.markdown import MarkdownChunker
from harness.chunkers.table import TableChunker
from harness.text.units import get_counter
from harness.types import Document


def check_chunks(doc, chunks, unit, limit, tokenizer="model"):
    """Contract on one document: text == prefix + span text, size on the source, coverage."""
    counter = get_counter(unit, tokenizer)
    covered = bytearray(len(doc.text))
    last = -1
    for c in chunks:
        assert len(c.spans) == 1
        s, e = c.spans[0]
        assert s >= last
        last = s
        source = doc.text[s:e]
        assert source.strip() == source and source
        assert c.text == c.metadata.get("prefix", "") + source
        assert counter.count(source) <= limit, (c.chunk_id, counter.count(source))
        covered[s:e] = b"\x01" * (e - s)
    missing = [i for i, ch in enumerate(doc.text) if not covered[i] and not ch.isspace()]
    assert not missing, missing[:5]


# --------------------------------------------------------------------------------------
# markdown
# --------------------------------------------------------------------------------------

FENCE_DOC = (
    "Kestrel setup notes.\n"
    "\n"
    "## Setup\n"
    "\n"
    "Install the package, then create the config:\n"
    "\n"
    "```bash\n"
    "# not a header\n"
    "pip install kestrel\n"
    "\n"
    "kestrelctl init\n"
    "```\n"
    "\n"
    "## Usage\n"
    "\n"
    "Start the broker with `kestrel-broker`.\n"
)
FENCE = "```bash\n# not a header\npip install kestrel\n\nkestrelctl init\n```"


def test_markdown_hash_line_in_fence_is_not_a_header():
    doc = Document("setup.md", FENCE_DOC)
    chunks = MarkdownChunker().chunk(doc)
    assert [c.metadata["section_path"] for c in chunks] == ["", "Setup", "Usage"]
    assert [c.text for c in chunks] == [
        "Kestrel setup notes.",
        "## Setup\n\nInstall the package, then create the config:\n\n" + FENCE,
        "## Usage\n\nStart the broker with `kestrel-broker`.",
    ]
    check_chunks(doc, chunks, "tokens", 254)


def test_markdown_fence_stays_whole_when_the_section_does_not_fit():
    doc = Document("setup.md", FENCE_DOC)
    setup_head = "## Setup\n\nInstall the package, then create the config:"
    # the fence fits alone, the Setup section (heading + paragraph + fence) does not
    size = len(FENCE) + 5
    assert len(setup_head) + 2 + len(FENCE) > size
    chunks = MarkdownChunker(max_chunk_size=size, unit="chars").chunk(doc)
    assert [c.text for c in chunks] == [
        "Kestrel setup notes.",
        setup_head,
        FENCE,
        "## Usage\n\nStart the broker with `kestrel-broker`.",
    ]
    assert [c.metadata["section_path"] for c in chunks] == ["", "Setup", "Setup", "Usage"]
    assert FENCE_DOC[chunks[2].start : chunks[2].end] == FENCE


def test_markdown_204_char_fence_is_never_split_at_256_chars():
    prints = [f"print('kestrel line {i:02d} ok')" for i in range(1, 7)]  # 27 chars each
    body = "\n".join(["# not a header either", *prints[:3], "", *prints[3:]])  # 21 + 6 * 27 + 7 newlines
    fence = "```python\n" + body + "\n```"  # 10 + 190 + 4
    assert len(body) == 190 and len(fence) == 204
    para1 = "The worker runs jobs. " * 4 + "It logs each run."  # 88 + 17 = 105 chars
    para2 = "After the block, " * 6 + "done."  # 102 + 5 = 107 chars
    assert (len(para1), len(para2)) == (105, 107)
    text = "## Code\n\n" + para1 + "\n\n" + fence + "\n\n" + para2 + "\n"
    doc = Document("code.md", text)
    chunks = MarkdownChunker(max_chunk_size=256, unit="chars").chunk(doc)
    # "## Code\n\n" + para1 = 114 chars; + "\n\n" + fence = 320 > 256; fence + "\n\n" + para2 = 313 > 256
    assert [c.text for c in chunks] == ["## Code\n\n" + para1, fence, para2]
    fence_start = text.index("```python")
    assert chunks[1].spans == ((fence_start, fence_start + 204),)
    check_chunks(doc, chunks, "chars", 256)


NESTED = "# Guide\n\nWelcome to the guide.\n\n## Install\n\nInstall steps.\n\n### Linux\n\nUse apt.\n\n### macOS\n\nUse brew.\n\n## Usage\n\nRun it.\n"


def test_markdown_section_paths_on_a_nested_document():
    doc = Document("guide.md", NESTED)
    chunks = MarkdownChunker().chunk(doc)
    assert [(c.metadata["section_path"], c.text) for c in chunks] == [
        ("Guide", "# Guide\n\nWelcome to the guide."),
        ("Guide > Install", "## Install\n\nInstall steps."),
        ("Guide > Install > Linux", "### Linux\n\nUse apt."),
        ("Guide > Install > macOS", "### macOS\n\nUse brew."),
        ("Guide > Usage", "## Usage\n\nRun it."),
    ]


def test_markdown_max_header_level_keeps_deeper_headings_inside_the_section():
    doc = Document("guide.md", NESTED)
    chunks = MarkdownChunker(max_header_level=2).chunk(doc)
    assert [(c.metadata["section_path"], c.text) for c in chunks] == [
        ("Guide", "# Guide\n\nWelcome to the guide."),
        ("Guide > Install", "## Install\n\nInstall steps.\n\n### Linux\n\nUse apt.\n\n### macOS\n\nUse brew."),
        ("Guide > Usage", "## Usage\n\nRun it."),
    ]


def test_markdown_heading_without_body_joins_the_next_section():
    doc = Document("g.md", "# Guide\n\n## Install\n\nRun the installer.\n")
    chunks = MarkdownChunker().chunk(doc)
    assert [(c.metadata["section_path"], c.text) for c in chunks] == [
        ("Guide > Install", "# Guide\n\n## Install\n\nRun the installer."),
    ]


def test_markdown_prepend_section_path_prefixes_text_and_keeps_spans():
    text = "Preamble line.\n\n" + NESTED
    doc = Document("guide.md", text)
    chunks = MarkdownChunker(prepend_section_path=True).chunk(doc)
    linux = chunks[3]
    assert linux.text == "Guide > Install > Linux\n\n### Linux\n\nUse apt."
    assert linux.metadata["prefix"] == "Guide > Install > Linux\n\n"
    start = text.index("### Linux")
    assert linux.spans == ((start, start + len("### Linux\n\nUse apt.")),)
    assert chunks[0].text == "Preamble line." and "prefix" not in chunks[0].metadata
    check_chunks(doc, chunks, "tokens", 254)


def test_markdown_heading_joins_the_first_fallback_piece_when_it_fits():
    para = " ".join(f"word{i}" for i in range(60))
    doc = Document("long.md", "# Title\n\n" + para + "\n")
    chunks = MarkdownChunker(max_chunk_size=30, unit="words").chunk(doc)
    # the paragraph is cut into 30 + 30 words; "# Title" + 30 words = 32 > 30 -> alone
    assert [len(c.text.split()) for c in chunks] == [2, 30, 30]
    items = "- short item\n\n" + "- " + " ".join(f"w{i}" for i in range(40))
    doc = Document("list.md", "## Steps\n\n" + items + "\n")
    chunks = MarkdownChunker(max_chunk_size=30, unit="words").chunk(doc)
    # the list block (3 + 41 = 44 words) is split at its blank line: "- short item" (3 words) and the
    # 41-word item (30 + 11); "## Steps" (2) joins "- short item"
    assert [c.text for c in chunks][0] == "## Steps\n\n- short item"
    assert [len(c.text.split()) for c in chunks] == [5, 30, 11]
    assert all(c.metadata["section_path"] == "Steps" for c in chunks)


def test_markdown_oversized_paragraph_uses_recursive_fallback():
    para = " ".join(f"word{i}" for i in range(60))  # 60 words
    doc = Document("long.md", "# Title\n\n" + para + "\n\nTail.\n")
    chunks = MarkdownChunker(max_chunk_size=25, unit="words").chunk(doc)
    check_chunks(doc, chunks, "words", 25)
    # the paragraph (60 words) is cut by the fallback into 25 + 25 + 10 words; the heading
    # (2 words) cannot join the first 25-word piece, so it is a chunk of its own
    assert [c.metadata["fallback"] for c in chunks] == [False, True, True, True, False]
    assert [len(c.text.split()) for c in chunks] == [2, 25, 25, 10, 1]
    assert chunks[0].text == "# Title"
    assert chunks[1].text.startswith("word0 ") and chunks[3].text.endswith("word59")
    assert chunks[-1].text == "Tail."


def test_markdown_tables_that_fit_are_whole_in_install_guide(kestrel):
    doc = kestrel.by_id["install_guide.md"]
    chunks = MarkdownChunker().chunk(doc)
    check_chunks(doc, chunks, "tokens", 254)
    counter = get_counter("tokens", "model")
    tables = [m.span() for m in re.finditer(r"(?m)^\|.*(?:\n\|.*)*", doc.text)]
    assert len(tables) >= 2
    for s, e in tables:
        if counter.count(doc.text[s:e]) <= 254:
            assert any(c.start <= s and e <= c.end for c in chunks), doc.text[s : s + 40]


# --------------------------------------------------------------------------------------
# code
# --------------------------------------------------------------------------------------

MODULE = '''"""Tiny module."""

import os

LIMIT = 10
NAME = "demo"


# Helper decorator.
def traced(fn):
    return fn


@traced
def run(x):
    return x + LIMIT


class Box:
    """A box."""

    def __init__(self, v):
        self.v = v

    def get(self):
        return self.v


if __name__ == "__main__":
    run(1)
'''


def units_of(chunks):
    return [(c.metadata["kind"], c.metadata["name"], c.metadata["start_line"], c.metadata["end_line"]) for c in chunks]


def test_code_python_units_names_and_lines():
    doc = Document("demo.py", MODULE)
    chunks = CodeChunker().chunk(doc)
    assert units_of(chunks) == [
        ("module", "<module>", 1, 6),
        ("function", "traced", 9, 11),
        ("function", "run", 14, 16),
        ("class", "Box", 19, 26),
        ("module", "<module>", 29, 30),
    ]
    assert chunks[1].text == "# Helper decorator.\ndef traced(fn):\n    return fn"
    assert chunks[2].text.startswith("@traced\ndef run(x):")
    assert all(c.metadata["language"] == "python" for c in chunks)
    check_chunks(doc, chunks, "tokens", 254)


def test_code_large_class_is_split_into_methods():
    doc = Document("demo.py", MODULE)
    # Box (lines 19-26) is 111 chars; its header + docstring is 27, __init__ 41, get 36
    chunks = CodeChunker(max_chunk_size=60, unit="chars").chunk(doc)
    box = [u for u in units_of(chunks) if u[1] and u[1].startswith("Box")]
    assert box == [
        ("class", "Box", 19, 20),
        ("method", "Box.__init__", 22, 23),
        ("method", "Box.get", 25, 26),
    ]
    texts = {c.metadata["name"]: c.text for c in chunks if c.metadata["kind"] == "method"}
    assert texts["Box.get"] == "def get(self):\n        return self.v"
    check_chunks(doc, chunks, "chars", 60)


def test_code_scheduler_methods_on_real_module(kestrel):
    doc = kestrel.by_id["scheduler.py"]
    chunks = CodeChunker().chunk(doc)
    check_chunks(doc, chunks, "tokens", 254)
    tick = [c for c in chunks if c.metadata["name"] == "Scheduler.tick"]
    assert tick and all(c.metadata["kind"] == "method" for c in tick)
    # `def tick` is on line 407, `return enqueued` (its last line) on 432
    assert tick[0].metadata["start_line"] == 407
    assert tick[0].text.startswith("def tick(self, now: datetime | None = None) -> int:")
    assert tick[-1].metadata["end_line"] == 432
    # the banner comment above `class Scheduler` (line 314) belongs to the class header
    header = [c for c in chunks if c.metadata["name"] == "Scheduler" and c.metadata["kind"] == "class"]
    assert header[0].metadata["start_line"] == 314


def test_code_syntax_error_falls_back_to_whole_line_windows():
    text = "def broken(:\n    return 1\nvalue = 2\n"
    doc = Document("broken.py", text)
    chunks = CodeChunker(max_chunk_size=30, unit="chars").chunk(doc)
    # "def broken(:\n    return 1" is 25 chars; adding "\nvalue = 2" makes 35 > 30
    assert [c.text for c in chunks] == ["def broken(:\n    return 1", "value = 2"]
    assert units_of(chunks) == [("lines", None, 1, 2), ("lines", None, 3, 3)]


JS = "const a = 1;\nfunction add(x, y) {\n  return x + y;\n}\nfunction sub(x, y) {\n  return x - y;\n}"


def test_code_javascript_uses_language_separators():
    doc = Document("math.txt", JS)
    chunks = CodeChunker(max_chunk_size=45, unit="chars", language="js").chunk(doc)
    # pieces at "\nfunction ": 12, 39 and 39 chars; 12 + 39 > 45, 39 + 39 > 45
    assert [c.text for c in chunks] == [
        "const a = 1;",
        "function add(x, y) {\n  return x + y;\n}",
        "function sub(x, y) {\n  return x - y;\n}",
    ]
    assert units_of(chunks)[1] == ("fragment", None, 2, 4)
    # plain line splitting cuts the first function after its opening line
    plain = CodeChunker(max_chunk_size=45, unit="chars", language="text").chunk(doc)
    assert plain[0].text == "const a = 1;\nfunction add(x, y) {"


def test_code_auto_language_by_extension():
    chunker = CodeChunker()
    assert chunker.language_of(Document("a.py", "x = 1\n")) == "python"
    assert chunker.language_of(Document("lib/app.js", "x\n")) == "js"
    assert chunker.language_of(Document("notes.md", "x\n")) == "text"
    doc = Document("notes.md", "# Notes\n\nSome prose.\n")
    chunks = chunker.chunk(doc)
    assert [(c.text, c.metadata["kind"]) for c in chunks] == [("# Notes\n\nSome prose.", "fragment")]


# --------------------------------------------------------------------------------------
# table
# --------------------------------------------------------------------------------------

HEADER = "| Host | Port |"
SEP = "|------|------|"
ROWS = [f"| node{i:02d} | {8400 + i} |" for i in range(1, 13)]  # 12 rows, 17 chars each


def test_table_12_rows_at_4_per_chunk():
    intro = "Cluster hosts:"
    text = intro + "\n\n" + "\n".join([HEADER, SEP, *ROWS]) + "\n\nEnd of list.\n"
    doc = Document("hosts.md", text)
    chunks = TableChunker(rows_per_chunk=4).chunk(doc)
    table = [c for c in chunks if c.metadata["kind"] == "table"]
    assert len(table) == 3
    head = HEADER + "\n" + SEP
    for c in table:
        assert c.text.startswith(head + "\n")
        assert c.metadata["header"] == HEADER
    # header and separator are 15 chars + newline each; row i (1-based) starts at
    # t0 + 32 + (i - 1) * 18 and ends 17 chars later
    t0 = len(intro) + 2
    row_start = [t0 + 32 + k * 18 for k in range(12)]
    row_end = [s + 17 for s in row_start]
    assert [c.spans[0] for c in table] == [(t0, row_end[3]), (row_start[4], row_end[7]), (row_start[8], row_end[11])]
    assert [c.metadata["rows"] for c in table] == [[1, 4], [5, 8], [9, 12]]
    assert table[1].text == head + "\n" + "\n".join(ROWS[4:8])
    assert table[1].metadata["prefix"] == head + "\n" and "prefix" not in table[0].metadata
    assert [c.text for c in chunks if c.metadata["kind"] == "text"] == [intro, "End of list."]
    check_chunks(doc, chunks, "tokens", 254)


CSV = 'id,city,notes\n1,Rotterdam,port city\n2,Delft,"has ""quotes"""\n3,Leiden,"two\nlines"\n4,Utrecht,central\n5,Gouda,cheese\n'


def test_table_csv_rows_with_quoted_newline():
    doc = Document("cities.csv", CSV)
    chunks = TableChunker(rows_per_chunk=2).chunk(doc)
    assert [c.metadata["rows"] for c in chunks] == [[1, 2], [3, 4], [5, 5]]
    assert chunks[0].text == 'id,city,notes\n1,Rotterdam,port city\n2,Delft,"has ""quotes"""'
    assert chunks[1].text == 'id,city,notes\n3,Leiden,"two\nlines"\n4,Utrecht,central'
    assert chunks[1].metadata["prefix"] == "id,city,notes\n"
    assert doc.text[chunks[1].start : chunks[1].end] == '3,Leiden,"two\nlines"\n4,Utrecht,central'
    assert all(c.metadata["header"] == "id,city,notes" and c.metadata["format"] == "csv" for c in chunks)
    check_chunks(doc, chunks, "tokens", 254)


def test_table_rows_close_early_at_the_size_limit():
    text = "\n".join([HEADER, SEP, *ROWS])
    doc = Document("hosts.md", text)
    # 64 chars hold header + separator + 1 row (49; with 2 rows 67). Later chunks repeat the
    # header as a 32-character prefix ("| Host | Port |\n|------|------|\n"), which counts
    # against the limit: prefix + 1 row = 49, + 2 rows = 67 > 64, so one row each.
    chunks = TableChunker(rows_per_chunk=10, max_chunk_size=64, unit="chars").chunk(doc)
    assert [c.metadata["rows"] for c in chunks] == [[1, 1]] + [[i, i] for i in range(2, 13)]
    assert all(len(c.text) <= 64 and c.metadata["size"] == len(c.text) for c in chunks)
    check_chunks(doc, chunks, "chars", 64)


def test_table_in_fence_is_not_a_table():
    text = "```\n" + "\n".join([HEADER, SEP, *ROWS[:2]]) + "\n```\n"
    chunks = TableChunker(rows_per_chunk=1).chunk(Document("f.md", text))
    assert [c.metadata["kind"] for c in chunks] == ["text"]


@pytest.mark.parametrize("value", [0, -1, 2.5, True, "4"])
def test_table_rows_per_chunk_validation(value):
    with pytest.raises(ValueError, match=r"^chunker\.rows_per_chunk must"):
        TableChunker(rows_per_chunk=value)


# --------------------------------------------------------------------------------------
# faq
# --------------------------------------------------------------------------------------

FAQ = """# Help

Short intro.

**Q: How do I start?**

A: Run this:

```
Q: not a question
```

Q: Where are logs?
A: In /var/log.

## Is it free?

Yes, under Apache 2.0.

## Contact

Mail us.
"""


def test_faq_pairs_by_hand():
    doc = Document("help.md", FAQ)
    chunks = FAQChunker().chunk(doc)
    assert [(c.metadata["kind"], c.metadata["question"], c.text) for c in chunks] == [
        ("text", None, "# Help\n\nShort intro."),
        ("qa", "How do I start?", "**Q: How do I start?**\n\nA: Run this:\n\n```\nQ: not a question\n```"),
        ("qa", "Where are logs?", "Q: Where are logs?\nA: In /var/log."),
        ("qa", "Is it free?", "## Is it free?\n\nYes, under Apache 2.0."),
        ("text", None, "## Contact\n\nMail us."),
    ]
    check_chunks(doc, chunks, "tokens", 254)


def test_faq_oversized_pair_repeats_the_question():
    answer = "A: " + " ".join(["Retries back off exponentially."] * 5)
    text = "**Q: Why retry?**\n\n" + answer + "\n"
    doc = Document("r.md", text)
    chunks = FAQChunker(max_chunk_size=60, unit="chars").chunk(doc)
    check_chunks(doc, chunks, "chars", 60)
    assert len(chunks) >= 3
    assert chunks[0].text.startswith("**Q: Why retry?**") and "prefix" not in chunks[0].metadata
    for c in chunks[1:]:
        assert c.metadata["prefix"] == "**Q: Why retry?**\n\n"
        assert c.text.startswith("**Q: Why retry?**\n\n")
    assert {c.metadata["question"] for c in chunks} == {"Why retry?"}
    assert [c.metadata["part"] for c in chunks] == list(range(1, len(chunks) + 1))


def test_faq_on_kestrel_faq(kestrel):
    doc = kestrel.by_id["faq.md"]
    chunks = FAQChunker().chunk(doc)
    n_questions = sum(1 for line in doc.text.splitlines() if line.startswith("**Q:"))
    assert n_questions == 26
    # outside text by hand: title + intro + "## General"; "## Jobs and retries";
    # "## Operations"; "## Licensing and support"
    assert len(chunks) == n_questions + 4
    qa = [c for c in chunks if c.metadata["kind"] == "qa"]
    assert len(qa) == 26 and all(c.text.startswith("**Q:") and "\n\nA: " in c.text for c in qa)
    assert [c.text for c in chunks if c.metadata["kind"] == "text"][1:] == [
        "## Jobs and retries",
        "## Operations",
        "## Licensing and support",
    ]
    assert qa[1].metadata["question"] == "Which database does the broker need?"
    check_chunks(doc, chunks, "tokens", 254)


# --------------------------------------------------------------------------------------
# shared: unbreakable runs, validation
# --------------------------------------------------------------------------------------

URL = "https://example.org/" + "a" * 300  # 320 chars, no whitespace


@pytest.mark.parametrize(
    "make",
    [
        lambda: MarkdownChunker(max_chunk_size=100, unit="chars"),
        lambda: CodeChunker(max_chunk_size=100, unit="chars"),
        lambda: CodeChunker(max_chunk_size=100, unit="chars", language="python"),
        lambda: TableChunker(max_chunk_size=100, unit="chars"),
        lambda: FAQChunker(max_chunk_size=100, unit="chars"),
    ],
)
def test_unbreakable_url_is_cut_100_100_100_20(make):
    assert len(URL) == 320
    doc = Document("url.txt", URL)
    chunks = make().chunk(doc)
    assert [c.spans[0] for c in chunks] == [(0, 100), (100, 200), (200, 300), (300, 320)]


@pytest.mark.parametrize(
    "cls, kwargs, param",
    [
        (MarkdownChunker, {"max_chunk_size": 0}, "max_chunk_size"),
        (MarkdownChunker, {"unit": "lines"}, "unit"),
        (MarkdownChunker, {"tokenizer": "gpt2"}, "tokenizer"),
        (MarkdownChunker, {"prepend_section_path": "yes"}, "prepend_section_path"),
        (MarkdownChunker, {"min_header_level": 0}, "min_header_level"),
        (MarkdownChunker, {"min_header_level": 3, "max_header_level": 2}, "max_header_level"),
        (MarkdownChunker, {"max_header_level": 7}, "max_header_level"),
        (CodeChunker, {"max_chunk_size": -5}, "max_chunk_size"),
        (CodeChunker, {"language": "klingon"}, "language"),
        (CodeChunker, {"language": "markdown"}, "language"),
        (CodeChunker, {"unit": "bytes"}, "unit"),
        (TableChunker, {"format": "xlsx"}, "format"),
        (TableChunker, {"max_chunk_size": 1.5}, "max_chunk_size"),
        (FAQChunker, {"max_chunk_size": 0}, "max_chunk_size"),
        (FAQChunker, {"tokenizer": "bert"}, "tokenizer"),
    ],
)
def test_parameter_validation(cls, kwargs, param):
    with pytest.raises(ValueError, match=rf"^chunker\.{param} must"):
        cls(**kwargs)


# --------------------------------------------------------------------------------------
# property: the contract holds on random structured text
# --------------------------------------------------------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

FRAGMENTS = [
    "# Title", "## Setup", "### Deep ###", "#no-space", "    # indented code", "```", "~~~~", "```py",
    "| a | b |", "|---|:-:|", "| 1 | 2 |", "- item", "  continued", "1. first", "**Q: Why?**", "Q: How?",
    "A: Because.", "## Is it?", "def f(x):", "    return x", "class C:", "id,name", '1,"x\ny"', "",
    "plain words here", "https://example.org/" + "z" * 70, "\r", "\t", "  ",
]  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lines=st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=40),
    size=st.integers(min_value=1, max_value=80),
    name=st.sampled_from(["d.md", "d.py", "d.csv", "d.txt", "d.js"]),
)
def test_contract_on_random_structured_text(lines, size, name):
    doc = Document(name, "\n".join(lines))
    for chunker in (
        MarkdownChunker(max_chunk_size=size, unit="chars", prepend_section_path=True),
        CodeChunker(max_chunk_size=size, unit="chars"),
        TableChunker(rows_per_chunk=2, max_chunk_size=size, unit="chars"),
        FAQChunker(max_chunk_size=size, unit="chars"),
    ):
        chunks = chunker.chunk(doc)
        check_chunks(doc, chunks, "chars", size)
        assert len({c.chunk_id for c in chunks}) == len(chunks)
        assert [c.chunk_id for c in chunker.chunk(doc)] == [c.chunk_id for c in chunks]
