"""HTML pages -> markdown-like text with heading, paragraph, list, code, table and image elements.

Parsed with BeautifulSoup 4 and Python's own ``html.parser`` (named explicitly, so the
tree, and therefore the text and every span, does not depend on whether lxml or html5lib
happen to be installed). ``script``, ``style``, ``nav``, ``noscript``, ``template``,
``svg``, ``iframe`` and ``head`` are dropped (the ``<title>`` goes to
``metadata["title"]``).

Blocks, in document order, separated by a blank line:

* ``h1``-``h6`` -> ``"#" * level + " " + title`` (a ``heading`` element with ``level``);
* ``p`` and runs of loose inline text -> a ``paragraph``;
* ``ul``/``ol`` -> one ``list`` element, one line per item (``- item`` / ``1. item``),
  nested lists indented by two spaces per level;
* ``pre`` -> a ``code`` element, its text verbatim (``language`` from a
  ``language-xxx``/``lang-xxx`` class when present);
* ``table`` -> a GFM pipe table (or CSV with ``table_format="csv"``): the first row is the
  header, cells are single-line, short rows padded; a ``<caption>`` (or the
  ``<figcaption>`` of an enclosing ``<figure>``) is written as a paragraph just before the
  table and recorded as the table's ``caption``/``caption_start``/``caption_end``;
* ``img`` -> ``[image: NAME] ALT`` (NAME = the file name of ``src``), an ``image`` element
  with ``name``, ``src``, ``alt`` and ``width``/``height`` when given as integers; a
  ``<figcaption>`` becomes its caption;
* containers (``div``, ``section``, ``article``, ``main``, ``header``, ``footer``,
  ``aside``, ``blockquote``, ``figure``, ``details``, ``dl`` ...) are walked through.

Inline text has every whitespace run collapsed to one space. Everything else (paragraphs
such as "Table 2: ..." next to a table) follows :func:`harness.ingest.base.attach_captions`.
"""

from __future__ import annotations

import re
from typing import Any

from harness.ingest.base import Extraction, IngestError, TextBuilder, attach_captions, decode_utf8, serialise_table

DROP = ("script", "style", "nav", "noscript", "template", "svg", "iframe", "head")
CONTAINERS = frozenset(
    "html body div section article main header footer aside blockquote figure details summary dl dt dd center form fieldset address hgroup search".split()
)
HEADINGS = {f"h{i}": i for i in range(1, 7)}
_WS = re.compile(r"\s+")


def _collapse(s: str) -> str:
    return _WS.sub(" ", s).strip()


class _Walker:
    def __init__(self, table_format: str) -> None:
        self.b = TextBuilder()
        self.table_format = table_format
        self.figcaptions: dict[int, str] = {}  # id(table or img tag) -> its figure's caption

    # -- blocks ---------------------------------------------------------------------------
    def walk(self, node) -> None:
        from bs4 import NavigableString, Tag
        from bs4.element import Comment, Declaration, Doctype, ProcessingInstruction

        inline: list[str] = []
        images: list[Any] = []

        def flush() -> None:
            text = _collapse("".join(inline))
            if text:
                self.b.add(text, "paragraph")
            inline.clear()
            for img in images:
                self.image(img)
            images.clear()

        for child in node.children:
            if isinstance(child, (Comment, Doctype, Declaration, ProcessingInstruction)):
                continue
            if isinstance(child, NavigableString):
                inline.append(str(child))
                continue
            if not isinstance(child, Tag):
                continue
            name = child.name.lower()
            if name in HEADINGS:
                flush()
                title = _collapse(child.get_text())
                if title:
                    self.b.add("#" * HEADINGS[name] + " " + title, "heading", level=HEADINGS[name])
            elif name == "p":
                flush()
                inline.append(child.get_text())
                images.extend(child.find_all("img"))
                flush()
            elif name in ("ul", "ol"):
                flush()
                lines = self.list_lines(child, 0)
                if lines:
                    self.b.add("\n".join(lines), "list")
            elif name == "pre":
                flush()
                self.b.add(child.get_text(), "code", **self.language(child))
            elif name == "table":
                flush()
                self.table(child)
            elif name == "img":
                flush()
                self.image(child)
            elif name == "figure":
                flush()
                self.figure(child)
            elif name in ("hr", "br"):
                flush()
            elif name in CONTAINERS or name == "li":
                flush()
                self.walk(child)
            else:  # inline markup: its text joins the running paragraph
                inline.append(child.get_text())
                images.extend(child.find_all("img"))
        flush()

    def list_lines(self, lst, depth: int) -> list[str]:
        out: list[str] = []
        ordered = lst.name.lower() == "ol"
        n = 0
        for li in lst.find_all("li", recursive=False):
            n += 1
            nested = li.find_all(["ul", "ol"], recursive=False)
            for sub in nested:
                sub.extract()
            marker = f"{n}." if ordered else "-"
            text = _collapse(li.get_text())
            if text:
                out.append("  " * depth + f"{marker} {text}")
            for sub in nested:
                out.extend(self.list_lines(sub, depth + 1))
        return out

    @staticmethod
    def language(pre) -> dict[str, str]:
        for el in [pre, *pre.find_all("code")]:
            for cls in el.get("class") or []:
                m = re.match(r"^(?:language|lang)-(.+)$", cls)
                if m:
                    return {"language": m.group(1)}
        return {}

    def table(self, table) -> dict[str, Any] | None:
        rows: list[list[str]] = []
        for tr in table.find_all("tr"):
            if tr.find_parent("table") is not table:
                continue  # a row of a nested table: part of its cell's text
            cells = [_collapse(c.get_text()) for c in tr.find_all(["td", "th"], recursive=False)]
            if any(cells):
                rows.append(cells)
        if not rows:
            return None
        cap = table.find("caption")
        caption = _collapse(cap.get_text()) if cap is not None and cap.find_parent("table") is table else ""
        caption = caption or self.figcaptions.pop(id(table), "")
        cap_el = self.b.add(caption, "paragraph") if caption else None
        el = self.b.add(serialise_table(rows, self.table_format), "table", format=self.table_format, rows=len(rows) - 1, columns=max(len(r) for r in rows))
        if el is not None and cap_el is not None:
            el.update(caption=caption, caption_start=cap_el["start"], caption_end=cap_el["end"])
        return el

    def image(self, img) -> dict[str, Any] | None:
        src = str(img.get("src") or "")
        name = src.split("?", 1)[0].split("#", 1)[0].rstrip("/").rsplit("/", 1)[-1] or "image"
        alt = _collapse(str(img.get("alt") or ""))
        extra: dict[str, Any] = {"name": name, "src": src, "alt": alt}
        for dim in ("width", "height"):
            value = str(img.get(dim) or "").strip()
            if value.isdigit():
                extra[dim] = int(value)
        el = self.b.add(f"[image: {name}]" + (f" {alt}" if alt else ""), "image", **extra)
        caption = self.figcaptions.pop(id(img), "")
        cap_el = self.b.add(caption, "paragraph") if caption else None
        if el is not None and cap_el is not None:
            el.update(caption=caption, caption_start=cap_el["start"], caption_end=cap_el["end"])
        return el

    def figure(self, fig) -> None:
        figcap = fig.find("figcaption")
        caption = _collapse(figcap.get_text()) if figcap is not None else ""
        if figcap is not None:
            figcap.extract()
        targets = fig.find_all(["table", "img"])
        if caption and len(targets) == 1:
            self.figcaptions[id(targets[0])] = caption
            caption = ""
        self.walk(fig)
        if caption:  # several tables/images share it: a plain paragraph after the figure
            self.b.add(caption, "paragraph")


def extract_html(data: bytes, name: str, table_format: str = "markdown") -> Extraction:
    """One HTML file as a document (rules in the module docstring).

    Args:
        data: the file's bytes (UTF-8).
        name: file name for messages.
        table_format: ``"markdown"`` or ``"csv"`` serialisation of tables.

    Raises:
        IngestError: empty, binary or not UTF-8; ``empty`` when no text is left after
            dropping scripts, styles and navigation.
    """
    from bs4 import BeautifulSoup

    html = decode_utf8(data, name, strip_bom=True)  # offsets index the extracted text, not the markup
    soup = BeautifulSoup(html, "html.parser")
    title_tag = soup.find("title")
    title = _collapse(title_tag.get_text()) if title_tag is not None else ""
    for tag in soup.find_all(DROP):
        tag.decompose()
    walker = _Walker(table_format)
    walker.walk(soup.body if soup.body is not None else soup)
    text = walker.b.text
    if not text.strip():
        raise IngestError("empty", f"{name}: no text left after dropping script, style and navigation")
    attach_captions(text, walker.b.elements)
    meta = {"title": title} if title else {}
    return Extraction(text=text, type="html", elements=walker.b.elements, metadata=meta)
