"""README.md and docs/*.md as a reader meets them: the README stays a short user guide (at
most 300 lines, its Contents line the list of its sections), every relative link and anchor
resolves, commands are written ``harness <command>`` with a command that exists, and each
generated block (a table written from committed JSON between ``<!-- name:start -->`` and
``<!-- name:end -->``) lives in exactly one file, where its own test checks it.

Anchors follow GitHub's rule for heading ids: lower-cased, every character that is not a
letter, digit, underscore, hyphen or space dropped, spaces turned into hyphens, and ``-1``,
``-2``, ... appended to repeats; ``<a id="...">`` tags count as anchors too."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from conftest import PROJECT_ROOT

from harness.cli import COMMANDS

README = PROJECT_ROOT / "README.md"
DOCS = sorted((PROJECT_ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]
#: The issue's limit on the README's length (issue 26, item 7).
README_MAX_LINES = 300
#: The README's first lines: install and run the main job on the embedded dataset; run the tests.
FRESH_MACHINE = ('python3 -m venv .venv && .venv/bin/pip install -e ".[dev]" && .venv/bin/python -m harness.run', ".venv/bin/python -m pytest")

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
INLINE_CODE = re.compile(r"(`+)(.+?)\1", re.S)  # a span may wrap onto the next line of its paragraph
MODULE_COMMAND = re.compile(r"python3? -m harness\.(\w+)\b(?!\.)")  # a command shim, not a module such as harness.evaluation.metrics.reference
HARNESS_COMMAND = re.compile(r"(?:^|[\s$(])harness ([a-z][\w-]*)")
MARKER = re.compile(r"<!-- ([\w-]+):(start|end)\b")


def _split(text: str) -> tuple[list[str], list[str]]:
    """``(prose lines, code lines)`` of a Markdown text: lines inside fenced blocks are code."""
    prose, code, fenced = [], [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif fenced:
            code.append(line)
        else:
            prose.append(line)
    return prose, code


def slug(heading: str) -> str:
    """GitHub's id of a heading's text (see the module docstring)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())  # a link in a heading keeps its text
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor a link may name in a Markdown text: heading ids (repeats numbered) and ``<a id>`` tags."""
    prose, _ = _split(text)
    seen: Counter[str] = Counter()
    found = set()
    for line in prose:
        found.update(HTML_ANCHOR.findall(line))
        m = HEADING.match(line)
        if m:
            base = slug(m.group(2))
            found.add(base if not seen[base] else f"{base}-{seen[base]}")
            seen[base] += 1
    return found


def _paragraphs(prose: list[str]) -> list[str]:
    """Prose lines joined into paragraphs (inline code never crosses a blank line)."""
    return [p for p in "\n".join(prose).split("\n\n") if p.strip()]


def links(text: str) -> list[str]:
    """Link and image targets of a Markdown text, outside code blocks and inline code."""
    prose, _ = _split(text)
    return [target for p in _paragraphs(prose) for target in LINK.findall(INLINE_CODE.sub("", p))]


def commands(text: str) -> list[str]:
    """Every command text of a page: the lines of fenced blocks, then the inline code spans."""
    prose, code = _split(text)
    return code + [span.replace("\n", " ") for p in _paragraphs(prose) for _, span in INLINE_CODE.findall(p)]


def sections(text: str) -> list[str]:
    """The ``##`` headings of a Markdown text, outside code blocks, in order."""
    prose, _ = _split(text)
    return [m.group(2) for line in prose if (m := HEADING.match(line)) and len(m.group(1)) == 2]


def test_the_helpers_on_a_hand_written_page():
    page = (
        "# Title\n\n## Run `harness run` (one job)\n\n## Run `harness run` (one job)\n\n"
        "## A × B: why?\n\n<a id=\"kept\"></a>\n```text\n## Not a heading\n[not](a-link.md)\n```\n"
        "See [x](other.md#a--b-why) and `[code](skipped.md)` and ![img](img/p.png).\n"
    )
    assert anchors(page) == {"title", "run-harness-run-one-job", "run-harness-run-one-job-1", "a--b-why", "kept"}
    assert links(page) == ["other.md#a--b-why", "img/p.png"]
    assert sections(page) == ["Run `harness run` (one job)", "Run `harness run` (one job)", "A × B: why?"]
    assert "## Not a heading" in commands(page) and "harness run" in commands(page)


def test_the_readme_is_a_short_user_guide():
    text = README.read_text(encoding="utf-8")
    n = len(text.splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines (at most {README_MAX_LINES}): move reference material to docs/"
    first_block = text.split("```")[1]
    # the two fresh-machine commands open the README: install and run the main job, then the tests
    assert first_block.startswith("bash\n") and first_block.splitlines()[1:] == list(FRESH_MACHINE)


def test_the_readme_contents_line_lists_its_sections_in_order():
    text = README.read_text(encoding="utf-8")
    start = text.index("**Contents:**")
    contents = text[start : text.index("\n\n", start)]
    listed = re.findall(r"\[([^\]]+)\]\(#([^)]+)\)", contents)
    assert [name for name, _ in listed] == sections(text)
    assert [anchor for _, anchor in listed] == [slug(s) for s in sections(text)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_and_anchor_resolves(page):
    text = page.read_text(encoding="utf-8")
    broken = []
    for target in links(text):
        if re.match(r"^[a-z]+:", target):  # http(s), mailto: not checked offline
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no file {file}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text(encoding="utf-8")):
            broken.append(f"{target}: no heading #{anchor} in {file.name}")
    assert not broken, f"{page.name}: " + "; ".join(broken)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_commands_are_written_harness_command(page):
    texts = commands(page.read_text(encoding="utf-8"))
    modules = [m for t in texts for m in MODULE_COMMAND.findall(t) if m != "run"]
    assert not modules, f"{page.name} writes python -m harness.<command> for {sorted(set(modules))}: write harness <command>"
    unknown = {c for t in texts for c in HARNESS_COMMAND.findall(t) if c not in COMMANDS}
    assert not unknown, f"{page.name} names harness commands that do not exist: {sorted(unknown)}"
    if page == README:
        # python -m harness.run only in the fresh-machine command at the top; elsewhere harness run
        assert [t for t in texts if "-m harness." in t] == [FRESH_MACHINE[0]]


def test_each_generated_block_lives_in_one_file():
    where: dict[str, list[str]] = {}
    for page in [*PAGES, *sorted((PROJECT_ROOT / "experiments").glob("**/*.md"))]:
        found = MARKER.findall(page.read_text(encoding="utf-8"))
        for name in {n for n, _ in found}:
            assert found.count((name, "start")) == 1 and found.count((name, "end")) == 1, f"{page.name}: block {name} is not one start and one end marker"
            where.setdefault(name, []).append(page.name)
    assert where, "no generated block found: the marker pattern no longer matches"
    assert {name: files for name, files in where.items() if len(files) > 1} == {}
    # the tables the README used to carry now live in docs/ (one sentence and a link left in the README)
    assert {name for name, files in where.items() if "README.md" in files} == set()
