"""Sample documents for the ingestion, modality and compression tests, written for this
project (a fictional harbour town). The PDF is generated with fpdf2, the image with Pillow;
the expected extracted texts below were written by hand from the content put into them."""

from __future__ import annotations

import json
from pathlib import Path

TITLE = "Saltmere Harbour Guide"
PDF_P1 = "The Saltmere lighthouse on Gull Island was first lit in 1862."
PDF_P2 = "Keepers lived on the island until 1954, when the light was automated."
TABLE_CAPTION = "Table 1: Ferry timetable"
TABLE_ROWS = [["Route", "Departs", "Fare"], ["Gull Island", "09:15", "4.50"], ["North Quay", "11:40", "3.20"]]
TABLE_MD = "| Route | Departs | Fare |\n| --- | --- | --- |\n| Gull Island | 09:15 | 4.50 |\n| North Quay | 11:40 | 3.20 |"
FIGURE_CAPTION = "Figure 1: Chart of the harbour entrance"
PDF_PAGE2 = "The tide mill on the east quay ground corn until 1921."
IMAGE_WORDS = "HARBOUR MAP"

HTML = """<!DOCTYPE html>
<html><head><title>Tide Mill Museum</title><style>p { color: red }</style></head>
<body>
<nav><a href="/">Home</a> | <a href="/visit">Visit</a></nav>
<h1>Tide Mill Museum</h1>
<p>The museum in the old <b>tide mill</b> shows
how grain was ground by the ebb tide.</p>
<script>var tracker = "never index this";</script>
<h2>Opening hours</h2>
<table><caption>Table 2: Opening hours</caption>
<tr><th>Day</th><th>Opens</th><th>Closes</th></tr>
<tr><td>Saturday</td><td>10:00</td><td>16:00</td></tr>
<tr><td>Sunday</td><td>12:00</td><td>16:00</td></tr>
</table>
<p>Entry is free for children under twelve.</p>
</body></html>
"""
HTML_TEXT = (
    "# Tide Mill Museum\n\n"
    "The museum in the old tide mill shows how grain was ground by the ebb tide.\n\n"
    "## Opening hours\n\n"
    "Table 2: Opening hours\n\n"
    "| Day | Opens | Closes |\n"
    "| --- | --- | --- |\n"
    "| Saturday | 10:00 | 16:00 |\n"
    "| Sunday | 12:00 | 16:00 |\n\n"
    "Entry is free for children under twelve."
)

MARKDOWN = """# Pennock's Bakery

Pennock's bakery on Chapel Street bakes saffron buns every Friday.

## Orders

Large orders must be placed two days ahead.
"""

QUESTIONS = [
    {"query_id": "lighthouse", "query": "When was the lighthouse on Gull Island first lit?", "excerpts": [PDF_P1]},
    {"query_id": "keepers", "query": "Until when did keepers live on the island?", "excerpts": [PDF_P2]},
    {"query_id": "ferry_table", "query": "What time does the ferry to North Quay depart and what is the fare?", "excerpts": [TABLE_MD]},
    {"query_id": "museum", "query": "How was grain ground in the tide mill museum?", "excerpts": ["how grain was ground by the ebb tide"]},
    {"query_id": "buns", "query": "Which day does the bakery bake saffron buns?", "excerpts": ["bakes saffron buns every Friday"]},
]


def make_image(path: Path) -> Path:
    """A 400x100 white PNG with IMAGE_WORDS in large black letters."""
    from PIL import Image, ImageDraw, ImageFont

    img = Image.new("RGB", (400, 100), "white")
    ImageDraw.Draw(img).text((10, 25), IMAGE_WORDS, fill="black", font=ImageFont.load_default(size=40))
    img.save(path)
    return path


def make_pdf(path: Path) -> Path:
    """Title (20 pt), two paragraphs, a captioned ruled table and a captioned image on page 1,
    one paragraph on page 2."""
    from fpdf import FPDF

    image = make_image(path.with_suffix(".png"))
    pdf = FPDF()
    pdf.add_page()
    pdf.set_font("Helvetica", size=20)
    pdf.cell(0, 10, TITLE)
    pdf.ln(14)
    pdf.set_font("Helvetica", size=12)
    pdf.cell(0, 6, PDF_P1)
    pdf.ln(10)
    pdf.cell(0, 6, PDF_P2)
    pdf.ln(10)
    pdf.cell(0, 6, TABLE_CAPTION)
    pdf.ln(8)
    with pdf.table() as table:
        for row in TABLE_ROWS:
            r = table.row()
            for cell in row:
                r.cell(cell)
    pdf.ln(4)
    pdf.image(str(image), w=80)
    pdf.cell(0, 6, FIGURE_CAPTION)
    pdf.add_page()
    pdf.cell(0, 6, PDF_PAGE2)
    pdf.output(str(path))
    image.unlink()
    return path


def make_folder(root: Path, bad_files: bool = True) -> Path:
    """A dataset=folder layout: corpus/ with a PDF, an HTML page and a markdown file (and,
    with ``bad_files``, a corrupt PDF and an empty file), plus excerpts.jsonl (5 questions)."""
    corpus = root / "corpus"
    (corpus / "guides").mkdir(parents=True)
    make_pdf(corpus / "harbour.pdf")
    (corpus / "museum.html").write_text(HTML, encoding="utf-8")
    (corpus / "guides" / "bakery.md").write_text(MARKDOWN, encoding="utf-8")
    if bad_files:
        (corpus / "broken.pdf").write_bytes(b"%PDF-1.4\nthis is not really a pdf\n%%EOF\n")
        (corpus / "empty.txt").write_bytes(b"")
    (root / "excerpts.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS), encoding="utf-8")
    return root
