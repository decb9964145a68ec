"""PDF files -> text with page spans and paragraph, heading, table and image elements.

Text and tables come from pdfplumber (pdfminer.six layout), images from pypdf:

* **Tables**: ``page.find_tables()`` (pdfplumber's default ruling-line strategy, so tables
  need drawn cell borders; borderless tables stay ordinary text). A detected table with at
  least 2 rows and 2 columns is written as one block, a GFM pipe table (or CSV with
  ``table_format="csv"``; see :func:`harness.ingest.base.serialise_table`), and its
  characters are removed from the text flow (a character belongs to a table when its centre
  lies in the table's bounding box), so table text is never duplicated.
* **Text**: the remaining characters as lines (``extract_text_lines``); consecutive lines
  form one paragraph (joined by ``\\n``) unless the vertical gap between them exceeds
  ``paragraph_gap`` times the previous line's height or the font size changes by more than
  10 %. A paragraph of at most 2 lines and 200 characters whose median font size is at
  least 1.2 times the document's body size (the most frequent character size) is a
  ``heading``; levels 1, 2, ... follow the distinct heading sizes, largest first. Headings
  are plain lines (no ``#``), so quoted text is found as printed.
* **Images**: each image of ``pypdf``'s ``page.images`` becomes ``[image: NAME]`` (an
  ``image`` element with ``name``, ``width``/``height`` in pixels), placed by its position
  from pdfplumber (``page.images``, matched by name) or at the end of its page. With
  ``ocr=True`` the text tesseract reads in the image (``pytesseract.image_to_string``,
  language ``ocr_lang``; blank lines dropped, lines stripped) follows on the next lines
  inside the same element (``ocr=True`` in the element).
* Blocks are ordered top to bottom on each page (single-column reading order; multi-column
  layouts are read line by line across columns) and separated by a blank line; pages too.
  ``metadata["pages"]`` gives each page's span (pages without text are left out),
  ``n_pages`` counts every page. Caption paragraphs ("Table 1: ...", "Figure 2. ...")
  next to a table or image are attached (:func:`harness.ingest.base.attach_captions`).

Extraction is deterministic: the same bytes (and the same tesseract version for OCR) give
the same text, so evidence spans located in it stay valid between runs.
"""

from __future__ import annotations

import io
import statistics
from collections import Counter
from typing import Any

from harness.ingest.base import Extraction, IngestError, TextBuilder, attach_captions, serialise_table

HEADING_RATIO = 1.2


def _inside(obj: dict, bbox: tuple[float, float, float, float]) -> bool:
    x = (obj["x0"] + obj["x1"]) / 2
    y = (obj["top"] + obj["bottom"]) / 2
    x0, top, x1, bottom = bbox
    return x0 <= x <= x1 and top <= y <= bottom


def _line_size(line: dict) -> float:
    sizes = [round(c.get("size", 0.0), 1) for c in line.get("chars", []) if c.get("text", "").strip()]
    return statistics.median(sizes) if sizes else 0.0


def _paragraphs(lines: list[dict], gap: float) -> list[dict]:
    """Group text lines into paragraphs: ``{"text", "top", "x0", "size", "n_lines"}``."""
    out: list[dict] = []
    for ln in lines:
        text = ln["text"].strip()
        if not text:
            continue
        size = _line_size(ln)
        height = max(ln["bottom"] - ln["top"], 1e-6)
        if out:
            prev = out[-1]
            same_size = prev["size"] == 0 or abs(size - prev["size"]) <= 0.1 * prev["size"]
            if ln["top"] - prev["bottom"] <= gap * prev["height"] and same_size:
                prev["text"] += "\n" + text
                prev["bottom"], prev["height"], prev["n_lines"] = ln["bottom"], height, prev["n_lines"] + 1
                continue
        out.append({"text": text, "top": ln["top"], "bottom": ln["bottom"], "x0": ln["x0"], "size": size, "height": height, "n_lines": 1})
    return out


def _ocr(image, lang: str) -> str:
    import pytesseract

    raw = pytesseract.image_to_string(image, lang=lang)
    return "\n".join(line.strip() for line in raw.splitlines() if line.strip())


def extract_pdf(data: bytes, name: str, table_format: str = "markdown", ocr: bool = False, ocr_lang: str = "eng", paragraph_gap: float = 0.5) -> Extraction:
    """One PDF file as a document (rules in the module docstring).

    Args:
        data: the file's bytes.
        name: file name for messages.
        table_format: ``"markdown"`` or ``"csv"``.
        ocr: run tesseract on every image and write the text it reads.
        ocr_lang: tesseract language(s), e.g. ``"eng"`` or ``"eng+deu"``.
        paragraph_gap: a vertical gap above this many line heights starts a paragraph, > 0.

    Raises:
        IngestError: ``empty`` (no bytes, or no text, table or image on any page);
            ``corrupt`` (pdfplumber/pdfminer cannot parse it; the parser's message is kept).
    """
    if not data.strip():
        raise IngestError("empty", f"{name}: empty file")
    import pdfplumber
    import pypdf

    try:
        with pdfplumber.open(io.BytesIO(data)) as pdf:
            pages = [_read_page(p) for p in pdf.pages]
        reader = pypdf.PdfReader(io.BytesIO(data))
        images = [_page_images(reader.pages[i], ocr, ocr_lang) for i in range(len(reader.pages))]
    except IngestError:
        raise
    except Exception as exc:  # pdfminer/pypdf raise many types for a broken file
        raise IngestError("corrupt", f"{name}: not a readable PDF ({type(exc).__name__}: {exc})") from exc
    sizes: Counter = Counter()
    for page in pages:
        for ln in page["lines"]:
            size = _line_size(ln)
            if size:
                sizes[size] += len(ln["text"])
    body = sizes.most_common(1)[0][0] if sizes else 0.0
    b = TextBuilder()
    heading_sizes: set[float] = set()
    page_items: list[list[tuple]] = []
    for page, page_images in zip(pages, images):
        items: list[tuple] = []
        for para in _paragraphs(page["lines"], paragraph_gap):
            is_heading = body and para["size"] >= HEADING_RATIO * body and para["n_lines"] <= 2 and len(para["text"]) <= 200
            if is_heading:
                heading_sizes.add(para["size"])
            items.append((para["top"], para["x0"], 0, "heading" if is_heading else "paragraph", para))
        for t in page["tables"]:
            items.append((t["top"], t["x0"], 1, "table", t))
        positions = page["image_positions"]
        for k, im in enumerate(page_images):
            top, x0 = positions.get(im["stem"], (float("inf"), float(k)))
            items.append((top, x0, 2, "image", im))
        items.sort(key=lambda it: (it[0], it[2], it[1]))
        page_items.append(items)
    levels = {size: i + 1 for i, size in enumerate(sorted(heading_sizes, reverse=True))}
    for number, items in enumerate(page_items, start=1):
        b.begin_page(number)
        for _, _, _, kind, item in items:
            if kind == "heading":
                b.add(item["text"], "heading", level=levels[item["size"]])
            elif kind == "paragraph":
                b.add(item["text"], "paragraph")
            elif kind == "table":
                rows = item["rows"]
                b.add(serialise_table(rows, table_format), "table", format=table_format, rows=len(rows) - 1, columns=max(len(r) for r in rows))
            else:
                text = f"[image: {item['name']}]" + (f"\n{item['ocr']}" if item.get("ocr") else "")
                extra = {k: item[k] for k in ("name", "width", "height") if item.get(k) is not None}
                b.add(text, "image", **extra, ocr=bool(item.get("ocr")))
        b.end_page()
    text = b.text
    if not text.strip():
        raise IngestError("empty", f"{name}: no text, table or image on any of its {len(pages)} page(s) (a scan without OCR?)")
    attach_captions(text, b.elements)
    return Extraction(text=text, type="pdf", elements=b.elements, pages=b.pages, metadata={"n_pages": len(pages)})


def _read_page(page) -> dict[str, Any]:
    tables = []
    for t in page.find_tables():
        rows = [["" if c is None else str(c) for c in r] for r in t.extract()]
        rows = [r for r in rows if any(c.strip() for c in r)]
        if len(rows) >= 2 and max(len(r) for r in rows) >= 2:
            x0, top, _, _ = t.bbox
            tables.append({"rows": rows, "bbox": t.bbox, "top": top, "x0": x0})
    boxes = [t["bbox"] for t in tables]
    flow = page.filter(lambda o: o.get("object_type") != "char" or not any(_inside(o, bb) for bb in boxes)) if boxes else page
    lines = flow.extract_text_lines(strip=True, return_chars=True)
    positions = {}
    for im in page.images:
        positions.setdefault(str(im.get("name", "")), (im["top"], im["x0"]))
    return {"lines": lines, "tables": tables, "image_positions": positions}


def _page_images(page, ocr: bool, lang: str) -> list[dict[str, Any]]:
    out = []
    for im in page.images:
        name = str(im.name)
        item: dict[str, Any] = {"name": name, "stem": name.rsplit(".", 1)[0]}
        pil = None
        try:
            pil = im.image
        except Exception:  # noqa: BLE001 - an undecodable image keeps its name, loses size/OCR
            pil = None
        if pil is not None:
            item["width"], item["height"] = pil.size
            if ocr:
                item["ocr"] = _ocr(pil, lang)
        out.append(item)
    return out
