"""Code-aware chunking: functions and classes as units (Python via ``ast``), LangChain's
per-language separators for other languages, with exact spans and line ranges.

Python (``language="python"``, or ``"auto"`` for ``.py`` files): the module is parsed with the
standard :mod:`ast` module and cut at the line boundaries of its top-level statements.

* Every top-level function (``def``/``async def``) and class is one chunk, from its first
  decorator line to its last line. Comment lines, blank lines and anything else between two
  top-level statements belong to the *following* statement (so a comment block above a
  function, even when separated from it by a blank line, is chunked with that function);
  text after the last statement belongs to the last one, and text before the first (a
  shebang, a licence comment) to the first.
* Consecutive other top-level statements (imports, constants, the module docstring,
  ``if __name__ == "__main__":``) are packed whole, in order, into ``module`` chunks up to
  ``max_chunk_size``.
* A class larger than ``max_chunk_size`` is split into its members by the same rules: its
  header (decorators, ``class`` line, docstring, attributes before the first method) and
  other non-method statements are packed into ``class`` chunks, each method is a ``method``
  chunk named ``Class.method``, nested classes are handled recursively.
* A function, method or single statement still larger than the limit is cut by the
  recursive fallback (:class:`~harness.chunkers.recursive.RecursiveChunker` with LangChain's
  Python separators); those chunks carry ``part`` (1-based) and ``fallback: True``.
* Source that does not parse (``SyntaxError``) falls back to line windows: whole non-blank
  lines packed up to the limit (a single line over the limit is cut by the recursive
  fallback).

Other languages: the separators of LangChain's
``RecursiveCharacterTextSplitter.get_separators_for_language`` (langchain-text-splitters)
are fed to this project's :class:`RecursiveChunker`, which tracks exact spans. LangChain
marks these separators as regular expressions; for the languages offered here they are
literal strings once backslash escapes are removed (``\\(`` -> ``(``; COBOL's ``.`` is taken
literally), and are used that way.
"""

from __future__ import annotations

import ast
import functools
import re
import warnings
from dataclasses import dataclass

from harness.chunkers.base import Chunker, check_limit
from harness.chunkers.recursive import RecursiveChunker
from harness.text.blocks import (
    EXTENSION_LANGUAGES,
    LineIndex,
    SizeLimit,
    extension,
    pack,
    split_lines,
    split_region,
    stripped,
)
from harness.text.units import check_unit, get_counter
from harness.types import Chunk, Document, Span

#: LangChain ``Language`` values accepted by ``language=`` besides ``"auto"`` and ``"text"``
#: (languages whose separators are literal strings; markdown, rst, latex, haskell and
#: visualbasic6 use real regular expressions and are not offered).
LANGUAGES = (
    "python", "js", "ts", "go", "java", "kotlin", "php", "proto", "r", "ruby", "rust", "scala",
    "swift", "html", "sol", "csharp", "cobol", "c", "cpp", "lua", "elixir", "powershell",
)  # fmt: skip

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


@functools.lru_cache(maxsize=None)
def language_separators(language: str) -> tuple[str, ...]:
    """LangChain's separators for ``language`` as literal strings (escapes removed).

    Raises:
        ValueError: ``language`` is not in :data:`LANGUAGES`.
    """
    if language not in LANGUAGES:
        raise ValueError(f"chunker.language must be one of {['auto', 'text', *LANGUAGES]}, got {language!r}")
    from langchain_text_splitters import Language, RecursiveCharacterTextSplitter

    seps = RecursiveCharacterTextSplitter.get_separators_for_language(Language(language))
    return tuple(re.sub(r"\\(.)", r"\1", s) for s in seps)


@dataclass(slots=True)
class _Unit:
    """A line range (1-based, inclusive) of one or more statements."""

    first: int
    last: int
    nodes: list


def _first_line(node: ast.stmt) -> int:
    decorators = getattr(node, "decorator_list", None) or []
    return min([node.lineno] + [d.lineno for d in decorators])


def _line_units(stmts: list[ast.stmt], start: int, end: int) -> list[_Unit]:
    """Line ranges partitioning lines ``[start, end]`` among ``stmts``.

    Unit ``i`` runs from the line after unit ``i - 1``'s last statement line (``start`` for
    the first) to its own last line; the last unit runs to ``end``. Statements sharing a line
    (``a = 1; b = 2``) share a unit.
    """
    units: list[_Unit] = []
    for node in stmts:
        if units and _first_line(node) <= units[-1].last:
            units[-1].last = max(units[-1].last, node.end_lineno or node.lineno)
            units[-1].nodes.append(node)
            continue
        first = units[-1].last + 1 if units else start
        units.append(_Unit(first, node.end_lineno or node.lineno, [node]))
    if units:
        units[-1].last = max(units[-1].last, end)
    return units


class CodeChunker(Chunker):
    """Functions and classes as chunks (Python ``ast``), language separators otherwise.

    See the module docstring for the exact rules. Chunks are single contiguous spans in
    document order and cover every non-whitespace character (``contiguous``, ``partitions``).

    Metadata of every chunk: ``language``; ``kind`` (``function``, ``class``, ``method``,
    ``module`` for parsed Python; ``lines`` for the line-window fallback; ``fragment`` for
    other languages and plain text); ``name`` (qualified name such as ``"Scheduler.tick"``,
    ``"<module>"`` for module-level chunks, None when unknown); ``start_line`` and
    ``end_line`` (1-based, inclusive, of the chunk's span; lines end at ``\\n``, ``\\r\\n``
    or ``\\r`` as in Python's tokenizer).

    Args:
        max_chunk_size: maximum chunk size in ``unit``, >= 1.
        unit: ``"tokens"``, ``"chars"`` or ``"words"``.
        tokenizer: ``"model"`` (embedding model's WordPiece) or ``"cl100k_base"``.
        language: ``"auto"`` (by the doc id's extension, e.g. ``.py`` -> python, ``.js`` ->
            js, or ``metadata["type"] == "python"``; anything else -> ``"text"``),
            ``"text"`` (plain recursive splitting), or one of :data:`LANGUAGES`.

    Raises:
        ValueError: a parameter outside its range (the message names it).
    """

    name = "code"
    contiguous = True
    partitions = True

    def __init__(self, max_chunk_size: int = 254, unit: str = "tokens", tokenizer: str = "model", language: str = "auto") -> None:
        check_unit(unit, tokenizer)
        check_limit("max_chunk_size", max_chunk_size, unit)
        if language not in ("auto", "text", *LANGUAGES):
            raise ValueError(f"chunker.language must be one of {['auto', 'text', *LANGUAGES]}, got {language!r}")
        self.max_chunk_size = max_chunk_size
        self.unit = unit
        self.tokenizer = tokenizer
        self.language = language

    def size_limit(self) -> tuple[str, str, int]:
        return (self.unit, self.tokenizer, self.max_chunk_size)

    def language_of(self, doc: Document) -> str:
        """The language used for ``doc`` (resolves ``"auto"``)."""
        if self.language != "auto":
            return self.language
        lang = EXTENSION_LANGUAGES.get(extension(doc.doc_id))
        if lang is None and (doc.metadata or {}).get("type") == "python":
            lang = "python"
        return lang if lang in LANGUAGES else "text"

    def _splitter(self, language: str) -> RecursiveChunker:
        seps = None if language == "text" else list(language_separators(language))
        return RecursiveChunker(chunk_size=self.max_chunk_size, unit=self.unit, tokenizer=self.tokenizer, separators=seps)

    def chunk(self, doc: Document) -> list[Chunk]:
        language = self.language_of(doc)
        text = doc.text
        lines = split_lines(text)
        index = LineIndex(lines)
        splitter = self._splitter(language)
        pieces: list[tuple[Span, str, str | None, dict]]  # span, kind, name, extra metadata
        if language == "python":
            limit = SizeLimit(text, get_counter(self.unit, self.tokenizer), self.max_chunk_size)
            pieces = _PythonSplit(text, lines, limit, splitter).run()
        else:
            pieces = [(sp, "fragment", None, {}) for sp in splitter.split_spans(text)]
        chunks = []
        for (s, e), kind, name, extra in pieces:
            meta = {
                "language": language,
                "kind": kind,
                "name": name,
                "start_line": index.line_of(s),
                "end_line": index.line_of(e - 1),
                "unit": self.unit,
                **extra,
            }
            chunks.append(Chunk.from_spans(doc, [(s, e)], metadata=meta))
        return self.finalize(doc, chunks)


class _PythonSplit:
    """One run of the Python rules over one document (see the module docstring)."""

    def __init__(self, text: str, lines, limit: SizeLimit, splitter: RecursiveChunker) -> None:
        self.text = text
        self.lines = lines
        self.limit = limit
        self.splitter = splitter
        self.out: list[tuple[Span, str, str | None, dict]] = []

    def run(self) -> list[tuple[Span, str, str | None, dict]]:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # SyntaxWarning for odd escapes must not leak
                tree = ast.parse(self.text)
        except (SyntaxError, ValueError):
            return self.line_windows()
        if not tree.body or tree.body[-1].end_lineno is None or tree.body[-1].end_lineno > len(self.lines):
            return self.line_windows()
        self.emit(_line_units(tree.body, 1, len(self.lines)), "")
        return self.out

    # -- helpers ---------------------------------------------------------------------------
    def span(self, unit: _Unit) -> Span | None:
        return stripped(self.text, self.lines[unit.first - 1].start, self.lines[unit.last - 1].end)

    def fallback(self, span: Span, kind: str, name: str | None) -> None:
        parts = split_region(self.text, span[0], span[1], self.splitter)
        for i, sp in enumerate(parts, 1):
            self.out.append((sp, kind, name, {"part": i, "fallback": True}))

    def add(self, span: Span, kind: str, name: str | None) -> None:
        if self.limit.fits(*span):
            self.out.append((span, kind, name, {}))
        else:
            self.fallback(span, kind, name)

    def pack_run(self, spans: list[Span], kind: str, name: str | None) -> None:
        fitting: list[Span] = []
        for sp in spans + [None]:
            if sp is not None and self.limit.fits(*sp):
                fitting.append(sp)
                continue
            for group in pack(fitting, self.limit.fits):
                self.out.append(((fitting[group[0]][0], fitting[group[-1]][1]), kind, name, {}))
            fitting = []
            if sp is not None:
                self.fallback(sp, kind, name)

    # -- rules -----------------------------------------------------------------------------
    def emit(self, units: list[_Unit], owner: str) -> None:
        """Emit chunks for the units of a module (``owner == ""``) or of a class body."""
        run_kind, run_name = ("module", "<module>") if not owner else ("class", owner)
        run: list[Span] = []
        for unit in units:
            span = self.span(unit)
            if span is None:
                continue
            node = unit.nodes[0]
            if len(unit.nodes) > 1 or not isinstance(node, (*_DEFS, ast.ClassDef)):
                run.append(span)
                continue
            self.pack_run(run, run_kind, run_name)
            run = []
            qual = f"{owner}.{node.name}" if owner else node.name
            if isinstance(node, ast.ClassDef):
                if self.limit.fits(*span) or not node.body:
                    self.add(span, "class", qual)
                else:
                    self.emit(self.class_units(unit, node), qual)
            else:
                self.add(span, "method" if owner else "function", qual)
        self.pack_run(run, run_kind, run_name)

    def class_units(self, unit: _Unit, node: ast.ClassDef) -> list[_Unit]:
        """Header unit (lines before the first member) plus one unit per member."""
        first_member = _first_line(node.body[0])
        members = _line_units(node.body, max(first_member, unit.first), unit.last)
        if first_member > unit.first:  # the header is packed like a non-method member
            return [_Unit(unit.first, first_member - 1, [ast.Pass()]), *members]
        members[0].first = unit.first
        return members

    def line_windows(self) -> list[tuple[Span, str, str | None, dict]]:
        spans = [sp for ln in self.lines if (sp := stripped(self.text, ln.start, ln.end))]
        self.pack_run(spans, "lines", None)
        return self.out
