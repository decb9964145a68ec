"""Document extraction (PDF, HTML, markdown, text, Python, CSV, chat exports) and the
``folder`` dataset: exact texts, element and page spans, bad files, skip/fail modes.

Expected texts and offsets are written out by hand from what the samples contain
(``ingest_samples.py``); offsets are sums of the block lengths plus the 2-character blank
line between blocks.
"""

import json
import shutil
import subprocess
import sys

import pytest
from conftest import PROJECT_ROOT, compose
from ingest_samples import (
    FIGURE_CAPTION,
    HTML,
    HTML_TEXT,
    IMAGE_WORDS,
    MARKDOWN,
    PDF_P1,
    PDF_P2,
    PDF_PAGE2,
    TABLE_CAPTION,
    TABLE_MD,
    TITLE,
    make_folder,
    make_pdf,
)

from harness.chunkers.timestamp import TimestampChunker
from harness.datasets.folder import FolderDataset, load_folder, read_folder
from harness.datasets.validate import DatasetError
from harness.experiment import build
from harness.ingest import IngestError, extract_bytes, extract_file
from harness.ingest.base import csv_table, markdown_table


def blocks_text(*blocks: str) -> str:
    return "\n\n".join(blocks)


def span_of(text: str, block: str) -> tuple[int, int]:
    """Offset of a block that occurs once (only used on hand-made expected texts)."""
    assert text.count(block) == 1, block
    s = text.index(block)
    return s, s + len(block)


# ------------------------------------------------------------------------------ PDF
@pytest.fixture(scope="module")
def pdf_bytes(tmp_path_factory):
    return make_pdf(tmp_path_factory.mktemp("pdf") / "harbour.pdf").read_bytes()


def test_pdf_text_pages_and_elements_exact(pdf_bytes):
    x = extract_bytes(pdf_bytes, "harbour.pdf")
    image_line = "[image: I1.png]"
    page1 = blocks_text(TITLE, PDF_P1, PDF_P2, TABLE_CAPTION, TABLE_MD, image_line, FIGURE_CAPTION)
    assert x.text == blocks_text(page1, PDF_PAGE2)
    assert x.type == "pdf"
    # 22 + 2 + 61 + 2 + 69 + 2 + 24 + 2 + 107 + 2 + 15 + 2 + 39 = 349
    assert len(page1) == 349
    assert x.pages == [{"page": 1, "start": 0, "end": 349}, {"page": 2, "start": 351, "end": 351 + len(PDF_PAGE2)}]
    assert x.metadata == {"n_pages": 2}
    el = x.elements
    assert [(e["type"], e["page"]) for e in el] == [
        ("heading", 1),
        ("paragraph", 1),
        ("paragraph", 1),
        ("paragraph", 1),
        ("table", 1),
        ("image", 1),
        ("paragraph", 1),
        ("paragraph", 2),
    ]
    assert (el[0]["start"], el[0]["end"], el[0]["level"]) == (0, 22, 1)  # the 20 pt title
    assert (el[1]["start"], el[1]["end"]) == (24, 85)
    assert (el[2]["start"], el[2]["end"]) == (87, 156)
    table = el[4]
    assert (table["start"], table["end"]) == (184, 291) and x.text[184:291] == TABLE_MD
    assert {k: table[k] for k in ("format", "rows", "columns", "caption", "caption_start", "caption_end")} == {
        "format": "markdown",
        "rows": 2,
        "columns": 3,
        "caption": TABLE_CAPTION,
        "caption_start": 158,
        "caption_end": 182,
    }
    image = el[5]
    assert (image["start"], image["end"]) == (293, 308)
    assert {k: image[k] for k in ("name", "width", "height", "ocr", "caption", "caption_start")} == {
        "name": "I1.png",
        "width": 400,
        "height": 100,
        "ocr": False,
        "caption": FIGURE_CAPTION,
        "caption_start": 310,
    }
    for e in el:  # every element span indexes the text exactly, and none overlap
        assert 0 <= e["start"] < e["end"] <= len(x.text)
    assert all(a["end"] <= b["start"] for a, b in zip(el, el[1:]))
    # table cells appear once: only inside the table block
    assert x.text.count("North Quay") == 1 and x.text.count("Departs") == 1


def test_pdf_extraction_is_deterministic_and_csv_tables(pdf_bytes):
    a, b = extract_bytes(pdf_bytes, "h.pdf"), extract_bytes(pdf_bytes, "h.pdf")
    assert (a.text, a.elements, a.pages) == (b.text, b.elements, b.pages)
    c = extract_bytes(pdf_bytes, "h.pdf", table_format="csv")
    table_csv = "Route,Departs,Fare\nGull Island,09:15,4.50\nNorth Quay,11:40,3.20"
    assert table_csv in c.text and "| Route |" not in c.text
    assert [e["format"] for e in c.elements if e["type"] == "table"] == ["csv"]


@pytest.mark.skipif(shutil.which("tesseract") is None, reason="tesseract is not installed (apt-get install tesseract-ocr)")
def test_pdf_ocr_text_goes_inside_the_image_element(pdf_bytes):
    x = extract_bytes(pdf_bytes, "harbour.pdf", ocr=True)
    image = next(e for e in x.elements if e["type"] == "image")
    assert image["ocr"] is True
    assert x.text[image["start"] : image["end"]] == "[image: I1.png]\n" + IMAGE_WORDS
    assert image["caption"] == FIGURE_CAPTION


# ------------------------------------------------------------------------------ HTML
def test_html_headings_tables_and_dropped_script_nav_style():
    x = extract_bytes(HTML.encode("utf-8"), "museum.html")
    assert x.text == HTML_TEXT
    assert x.type == "html" and x.metadata == {"title": "Tide Mill Museum"}
    for dropped in ("never index", "tracker", "Home", "Visit", "color"):
        assert dropped not in x.text
    types = [(e["type"], x.text[e["start"] : e["end"]]) for e in x.elements]
    table_md = "| Day | Opens | Closes |\n| --- | --- | --- |\n| Saturday | 10:00 | 16:00 |\n| Sunday | 12:00 | 16:00 |"
    assert types == [
        ("heading", "# Tide Mill Museum"),
        ("paragraph", "The museum in the old tide mill shows how grain was ground by the ebb tide."),
        ("heading", "## Opening hours"),
        ("paragraph", "Table 2: Opening hours"),
        ("table", table_md),
        ("paragraph", "Entry is free for children under twelve."),
    ]
    assert [e.get("level") for e in x.elements if e["type"] == "heading"] == [1, 2]
    table = x.elements[4]
    assert (table["caption"], table["caption_start"], table["caption_end"]) == ("Table 2: Opening hours", 115, 137)


def test_html_lists_code_images_and_figures():
    html = (
        "<body><h3> </h3><ul><li>Dogs travel free</li><li>Bikes<ol><li>off-peak only</li></ol></li></ul>"
        "<pre class='language-python'>def fare():\n    return 4.5\n</pre>"
        "<figure><img src='img/map.png?v=2' alt='Map of the harbour' width='400'><figcaption>Figure 3: The harbour</figcaption></figure>"
        "<div>Loose <i>inline</i> text.</div></body>"
    )
    x = extract_bytes(html.encode(), "page.htm")
    assert x.text == blocks_text(
        "- Dogs travel free\n- Bikes\n  1. off-peak only",
        "def fare():\n    return 4.5",
        "[image: map.png] Map of the harbour",
        "Figure 3: The harbour",
        "Loose inline text.",
    )
    code, image = x.elements[1], x.elements[2]
    assert code["type"] == "code" and code["language"] == "python"
    assert {k: image[k] for k in ("type", "name", "alt", "width", "caption", "caption_start")} == {
        "type": "image",
        "name": "map.png",
        "alt": "Map of the harbour",
        "width": 400,
        "caption": "Figure 3: The harbour",
        "caption_start": x.text.index("Figure 3"),
    }


# ------------------------------------------------------------------------------ text formats
def test_markdown_text_python_and_log_kept_as_stored():
    md = extract_bytes(MARKDOWN.encode(), "bakery.md")
    assert md.text == MARKDOWN and md.type == "markdown"
    assert [(e["type"], e["start"], e["end"]) for e in md.elements] == [("heading", 0, 18), ("paragraph", 20, 86), ("heading", 88, 97), ("paragraph", 99, 142)]
    crlf = "First paragraph.\r\n\r\nSecond one.\r\n"
    txt = extract_bytes(crlf.encode(), "a.txt")
    assert txt.text == crlf and [(e["start"], e["end"]) for e in txt.elements] == [(0, 16), (20, 31)]
    src = "def f():\n    return 1\n"
    py = extract_bytes(src.encode(), "f.py")
    assert py.type == "python" and py.elements == [{"type": "code", "start": 0, "end": 21, "language": "python"}]
    log = extract_bytes(b"[09:00] ana: hi\n", "room.log")
    assert (log.type, log.elements) == ("chat", [])


def test_markdown_table_caption_and_serialisers():
    md = "Intro.\n\nTable 4: Tides\n\n| a | b |\n|---|---|\n| 1 | 2 |\n"
    x = extract_bytes(md.encode(), "t.md")
    table = next(e for e in x.elements if e["type"] == "table")
    assert (table["start"], table["end"], table["rows"], table["columns"], table["caption"]) == (24, 53, 1, 2, "Table 4: Tides")
    assert markdown_table([["a", "b|c"], ["multi\nline", None]]) == "| a | b\\|c |\n| --- | --- |\n| multi line |  |"
    assert csv_table([["a", "b,c"], ["x"]]) == 'a,"b,c"\nx,'


def test_csv_kept_as_stored_with_one_table_element():
    data = 'route,fare\n"Gull Island, north",4.50\nQuay,3.20\n'
    x = extract_bytes(data.encode(), "fares.csv")
    assert x.text == data and x.type == "csv"
    assert x.elements == [{"type": "table", "start": 0, "end": len(data) - 1, "format": "csv", "rows": 2, "columns": 2}]


def test_chat_export_becomes_lines_the_timestamp_chunker_reads():
    export = {
        "channel": "ops",
        "messages": [
            {"timestamp": "2025-11-18T09:02:17", "author": "mira", "text": "Queue is stuck"},
            {"timestamp": "2025-11-18T08:05:00-01:00", "author": "jon", "text": "Looking\nat it now"},
            {"timestamp": 1763467200, "text": "Deploy finished"},
        ],
    }
    x = extract_bytes(json.dumps(export).encode(), "ops.json")
    lines = [
        "[2025-11-18 09:02:17] mira: Queue is stuck",
        "[2025-11-18 09:05:00] jon: Looking\n  at it now",  # -01:00 converted to UTC
        "[2025-11-18 12:00:00] Deploy finished",  # 1763467200 = 2025-11-18T12:00:00Z
    ]
    assert x.text == "\n".join(lines) and x.type == "chat"
    assert [(e["start"], e["end"], e.get("author"), e["timestamp"]) for e in x.elements] == [
        (0, 42, "mira", "2025-11-18T09:02:17"),
        (43, 89, "jon", "2025-11-18T09:05:00"),
        (90, 127, None, "2025-11-18T12:00:00"),
    ]
    from harness.types import Document

    chunks = TimestampChunker(mode="session", gap_minutes=30.0, unit="chars", max_chunk_size=1000).chunk(Document("ops.json", x.text))
    # 09:02 and 09:05 are one session, 12:00 starts another (gap > 30 min)
    assert [c.spans for c in chunks] == [((0, 89),), ((90, 127),)]
    assert [c.metadata["first_timestamp"] for c in chunks] == ["2025-11-18T09:02:17", "2025-11-18T12:00:00"]


# ------------------------------------------------------------------------------ bad files
@pytest.mark.parametrize(
    "name, data, kind, fragment",
    [
        ("empty.md", b"", "empty", "empty.md: empty file"),
        ("blank.txt", b" \n\t\n", "empty", "blank.txt: empty file"),
        ("latin1.txt", "caf\u00e9".encode("latin-1"), "not_utf8", "latin1.txt: not UTF-8 (byte 0xe9 at offset 3)"),
        ("blob.txt", b"ab\x00cd", "binary", "blob.txt: binary file (NUL byte at offset 2)"),
        ("broken.pdf", b"%PDF-1.4\nnot a pdf\n", "corrupt", "broken.pdf: not a readable PDF"),
        ("empty.pdf", b"", "empty", "empty.pdf: empty file"),
        ("slides.pptx", b"PK\x03\x04", "unsupported", "slides.pptx: unsupported file type '.pptx'"),
        ("noext", b"text", "unsupported", "unsupported file type '(no extension)'"),
        ("bad.json", b"{not json", "corrupt", "bad.json: invalid JSON"),
        ("list.json", b'{"a": 1}', "invalid", "list.json: not a chat export"),
        ("msg.json", b'[{"timestamp": "yesterday", "text": "x"}]', "invalid", "messages[0]: field 'timestamp' 'yesterday' is not ISO 8601"),
        ("nomsg.json", b'[{"timestamp": "2025-01-01T00:00:00"}]', "invalid", "messages[0]: field 'text' must be a non-empty string"),
        ("none.json", b"[]", "empty", "none.json: the chat export has no messages"),
        ("script.html", b"<script>x()</script><style>p{}</style>", "empty", "script.html: no text left"),
    ],
)
def test_bad_files_raise_with_kind_and_name(name, data, kind, fragment):
    with pytest.raises(IngestError) as info:
        extract_bytes(data, name)
    assert info.value.kind == kind
    assert fragment in str(info.value)


def test_unreadable_path_and_bad_table_format(tmp_path):
    with pytest.raises(IngestError) as info:
        extract_file(tmp_path / "missing.txt")
    assert info.value.kind == "unreadable" and "missing.txt: cannot be read" in str(info.value)
    with pytest.raises(ValueError, match="table_format must be one of"):
        extract_bytes(b"x", "a.txt", table_format="latex")


# ------------------------------------------------------------------------------ dataset=folder
@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_folder(tmp_path_factory.mktemp("folder") / "harbour_docs")


def test_folder_skip_mode_counts_two_skipped_files_and_locates_evidence(folder, caplog):
    with caplog.at_level("WARNING", logger="harness.datasets.folder"):
        ds = load_folder(folder)
    assert isinstance(ds, FolderDataset) and ds.name == "harbour_docs" and ds.source == str(folder)
    assert ds.skipped_files == 2
    report = ds.load_report
    assert report.counts == {"skipped_files": 2}
    assert report.info["skipped_corrupt"] == 1 and report.info["skipped_empty"] == 1
    assert {report.info[f"files_{t}"] for t in ("pdf", "html", "markdown")} == {1}
    assert "skipped_files=2" in caplog.text and "broken.pdf: not a readable PDF" in caplog.text and "empty.txt: empty file" in caplog.text
    assert [d.doc_id for d in ds.documents] == ["guides/bakery.md", "harbour.pdf", "museum.html"]
    docs = ds.by_id
    pdf = docs["harbour.pdf"]
    assert {k: pdf.metadata[k] for k in ("source", "type", "format", "n_pages")} == {"source": "harbour.pdf", "type": "pdf", "format": "pdf", "n_pages": 2}
    assert pdf.metadata["pages"] == [{"page": 1, "start": 0, "end": 349}, {"page": 2, "start": 351, "end": 405}]
    assert docs["museum.html"].text == HTML_TEXT and docs["museum.html"].metadata["title"] == "Tide Mill Museum"
    assert docs["guides/bakery.md"].metadata["source"] == "guides/bakery.md" and docs["guides/bakery.md"].text == MARKDOWN
    ev = {q.query_id: [(e.doc_id, e.start, e.end) for e in q.evidence] for q in ds.queries}
    assert ev == {
        "lighthouse": [("harbour.pdf", 24, 85)],
        "keepers": [("harbour.pdf", 87, 156)],
        "ferry_table": [("harbour.pdf", 184, 291)],
        "museum": [("museum.html", 58, 94)],  # "# Tide Mill Museum\n\n" (20) + "The museum in the old tide mill shows " (38)
        "buns": [("guides/bakery.md", 54, 85)],  # 20 + "Pennock's bakery on Chapel Street " (34)
    }
    assert all(docs[q.evidence[0].doc_id].text[q.evidence[0].start : q.evidence[0].end] == q.evidence[0].text for q in ds.queries)
    assert pdf.text[24:85] == PDF_P1 and pdf.text[87:156] == PDF_P2
    assert ds.fingerprint() == load_folder(folder).fingerprint()  # deterministic extraction


def test_folder_fail_mode_names_the_file(folder):
    with pytest.raises(DatasetError, match=r"corpus file 'broken.pdf' .*not a readable PDF.*dataset.on_error=fail"):
        load_folder(folder, on_error="fail")


def test_folder_parameter_and_layout_errors(folder, tmp_path):
    with pytest.raises(DatasetError, match="dataset.on_error must be one of"):
        load_folder(folder, on_error="ignore")
    with pytest.raises(DatasetError, match="dataset.table_format must be one of"):
        load_folder(folder, table_format="html")
    with pytest.raises(DatasetError, match="dataset.path is not set"):
        load_folder(None)
    with pytest.raises(DatasetError, match="expected a corpus folder"):
        load_folder(tmp_path)
    # evidence in a skipped file is missing, which stops the load unless allowed
    dst = tmp_path / "only_bad"
    shutil.copytree(folder, dst)
    (dst / "corpus" / "museum.html").write_bytes(b"\xff\xfe broken")
    with pytest.raises(DatasetError, match=r"1 excerpt\(s\) could not be located \(missing=1"):
        load_folder(dst)
    ds = read_folder(dst, allow_unlocated=True)
    assert ds.skipped_files == 3 and len(ds.queries) == 4
    assert ds.load_report.info["skipped_not_utf8"] == 1


def test_folder_config_composes_and_builds(folder):
    cfg = compose(["dataset=folder", f"dataset.path={folder}"])
    assert cfg.dataset.on_error == "skip" and cfg.dataset.ocr is False
    ds = build.build_dataset(cfg)
    assert ds.name == "harbour_docs" and ds.skipped_files == 2 and len(ds.queries) == 5  # named after the corpus folder


def test_validate_cli_detects_the_folder_format(folder):
    proc = subprocess.run([sys.executable, "-m", "harness", "datasets", "validate", str(folder)], capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "(folder format)" in out and "documents:       3" in out and "queries:         5" in out
    assert "skipped_files=2" in out and "broken.pdf" in out
