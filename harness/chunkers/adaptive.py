"""Adaptive chunking: detect each document's type and route it to a strategy for that type.

Document types (:data:`DOC_TYPES`) and how :func:`sniff_type` recognises them, first match
wins:

0. ``document`` -- an extracted PDF or HTML page (``metadata["type"]`` is ``pdf`` or
   ``html``, as the ``folder`` dataset sets it): routed by default to the ``modality``
   strategy, so its tables and images are atomic chunks and its text is split recursively;
1. ``code`` -- the doc id's extension is a source-code one (:data:`CODE_EXTENSIONS`);
2. ``table`` -- extension ``.csv`` / ``.tsv``;
3. ``chat`` -- at least 3 lines, and at least half of the non-blank lines, start with a
   timestamp (:data:`harness.chunkers.timestamp.DEFAULT_TIMESTAMP_REGEX`);
4. ``faq`` -- at least 2 lines that start with ``Q:`` (optionally after ``**``, ``__``,
   ``#``, ``-`` or ``>`` markup, e.g. ``**Q: ...?**``);
5. ``code`` -- the content parses as Python (``ast.parse``) and defines at least 2
   functions or classes;
6. ``table`` -- at least half of the non-blank lines are pipe-table rows (``| a | b |``);
7. ``markdown`` -- extension ``.md`` / ``.markdown``, or the content has an ATX heading
   (``# Title``) or a fenced code block (a line starting with ```` ``` ````);
8. ``prose`` -- everything else.

The extension is taken from ``Document.doc_id`` (file corpora use the file name as id);
``metadata["source"]`` is not used, because benchmark corpora often carry a misleading
``.md`` on plain text. Only rule 0 reads ``metadata["type"]``, which only extraction sets
to ``pdf``/``html``.

Routes map each type to a chunker config (``{"_target_": "harness.chunkers....", **args}``)
that is built on first use (one instance per type) by the ``builder`` the run's builder
passes in (:func:`harness.experiment.build.build_sub_chunker`; this module instantiates
nothing from config).
A routed strategy that embeds text gets this chunker's ``encoder``. Routing by detected
document structure is the "document-specific / content-aware chunking" of e.g.
LangChain's language- and markdown-aware splitters, combined per document.
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from pathlib import PurePosixPath
from typing import Any, Callable, Mapping

from harness.chunkers.base import Chunker
from harness.chunkers.timestamp import DEFAULT_TIMESTAMP_REGEX
from harness.types import Chunk, Document

DOC_TYPES = ("code", "markdown", "table", "faq", "chat", "prose", "document")

#: Types a ``routes`` config may leave out, so configs written before the type existed stay
#: valid: a missing ``document`` route is ``modality`` with the ``prose`` route as its text
#: stream (same size limit as prose).
OPTIONAL_TYPES = frozenset({"document"})

#: ``metadata["type"]`` values of extracted documents routed as ``document``.
EXTRACTED_TYPES = frozenset({"pdf", "html"})

CODE_EXTENSIONS = frozenset(
    ".py .pyi .js .mjs .cjs .jsx .ts .tsx .java .kt .scala .go .rs .c .h .cc .cpp .hpp .cs .rb .php .swift .m .sh .bash .zsh .ps1 .lua .r .jl .sql .pl".split()
)
TABLE_EXTENSIONS = frozenset({".csv", ".tsv"})
MARKDOWN_EXTENSIONS = frozenset({".md", ".markdown", ".mdx"})

#: Default routes: each type to its specialised strategy, prose to recursive splitting.
DEFAULT_ROUTES: dict[str, dict[str, Any]] = {
    "code": {"_target_": "harness.chunkers.code.CodeChunker"},
    "markdown": {"_target_": "harness.chunkers.markdown.MarkdownChunker"},
    "table": {"_target_": "harness.chunkers.table.TableChunker"},
    "faq": {"_target_": "harness.chunkers.faq.FAQChunker"},
    "chat": {"_target_": "harness.chunkers.timestamp.TimestampChunker"},
    "prose": {"_target_": "harness.chunkers.recursive.RecursiveChunker"},
    "document": {
        "_target_": "harness.chunkers.modality.ModalityChunker",
        "_recursive_": False,
        "text_chunker": {"_target_": "harness.chunkers.recursive.RecursiveChunker"},
    },
}

_TIMESTAMP_LINE = re.compile(DEFAULT_TIMESTAMP_REGEX, re.MULTILINE)
_FAQ_LINE = re.compile(r"^\ufeff?[ \t]*(?:[*_#>\-]+[ \t]*)?Q[ \t]*:", re.MULTILINE)
_PIPE_ROW = re.compile(r"^\ufeff?[ \t]*\|.*\|[ \t]*$")
_ATX_HEADING = re.compile(r"^\ufeff?#{1,6}[ \t]+\S", re.MULTILINE)
_FENCE = re.compile(r"^\ufeff?[ \t]*(```|~~~)", re.MULTILINE)


def require_builder(builder, where: str):
    """``builder`` when one was given, else ValueError naming ``where`` and how to get one.

    The strategies that nest chunker configs (adaptive, modality) build them only through a
    builder handed in from outside, so config is turned into objects in one place
    (:mod:`harness.experiment.build`)."""
    if builder is None:
        raise ValueError(
            f"{where}: no builder for nested chunker configs; build this chunker with harness.experiment.build.build_chunker, "
            "or pass builder=harness.experiment.build.build_sub_chunker"
        )
    return builder


def _python_defs(text: str) -> int:
    """Functions and classes defined in ``text`` if it parses as Python, else 0."""
    if "def " not in text and "class " not in text:
        return 0
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return 0
    return sum(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for n in ast.walk(tree))


def sniff_type(doc: Document) -> str:
    """The document type of ``doc``, one of :data:`DOC_TYPES` (rules in the module docstring)."""
    if (doc.metadata or {}).get("type") in EXTRACTED_TYPES:
        return "document"
    ext = PurePosixPath(doc.doc_id).suffix.lower()
    text = doc.text
    if ext in CODE_EXTENSIONS:
        return "code"
    if ext in TABLE_EXTENSIONS:
        return "table"
    lines = [ln for ln in text.splitlines() if ln.strip()]
    n = len(lines)
    stamped = sum(1 for m in _TIMESTAMP_LINE.finditer(text) if m.start() == 0 or text[m.start() - 1] == "\n")
    if stamped >= 3 and stamped * 2 >= n:
        return "chat"
    if len(_FAQ_LINE.findall(text)) >= 2:
        return "faq"
    if _python_defs(text) >= 2:
        return "code"
    if n and sum(1 for ln in lines if _PIPE_ROW.match(ln)) * 2 >= n:
        return "table"
    if ext in MARKDOWN_EXTENSIONS or _ATX_HEADING.search(text) or _FENCE.search(text):
        return "markdown"
    return "prose"


class AdaptiveChunker(Chunker):
    """Route each document to a per-type chunker by sniffing its type.

    Args:
        routes: mapping from every type in :data:`DOC_TYPES` to a chunker config, a mapping
            with ``_target_`` (dotted class path of a :class:`Chunker`) and its constructor
            arguments; ``document`` may be left out (see :data:`OPTIONAL_TYPES`). Default
            :data:`DEFAULT_ROUTES`. Routes are built lazily by ``builder``; the config file
            sets ``_recursive_: false`` so Hydra leaves them as plain dicts.
        encoder: passed to every routed chunker whose class has ``needs_encoder``; the
            builder passes the run's shared encoder.
        builder: ``builder(where, config, encoder) -> Chunker`` builds one route
            (``where`` is ``chunker.routes.<type>``, named in its errors);
            :func:`harness.experiment.build.build_chunker` passes
            :func:`~harness.experiment.build.build_sub_chunker` (``needs_builder``). Without
            one, using a route raises ValueError.

    Flags are the conjunction over all routes: ``contiguous`` / ``partitions`` are True only
    when every routed chunker has them; :meth:`size_limit` is the routes' common limit when
    they all declare the same one, else None. Reading them builds every route (cheap: no
    route does heavy work in its constructor). :meth:`expand` defers to the chunk's route.

    Chunk metadata: the routed chunker's metadata plus ``doc_type`` and ``routed_to`` (the
    routed chunker's ``name``).

    Raises:
        ValueError: ``routes`` misses a type, names an unknown type, or has an entry
            without a string ``_target_``; on first use, a route that does not build a
            :class:`Chunker`, or no ``builder`` was given.
    """

    name = "adaptive"
    needs_encoder = True
    #: The builder passes ``builder=`` (its nested-chunker factory) to this strategy.
    needs_builder = True

    def __init__(
        self,
        routes: Mapping[str, Mapping[str, Any]] | None = None,
        encoder=None,
        builder: Callable[[str, Mapping[str, Any], Any], Chunker] | None = None,
    ) -> None:
        routes = DEFAULT_ROUTES if routes is None else routes
        if not isinstance(routes, Mapping):
            raise ValueError(f"chunker.routes must map each of {list(DOC_TYPES)} to a chunker config, got {routes!r}")
        unknown = sorted(set(routes) - set(DOC_TYPES))
        missing = [t for t in DOC_TYPES if t not in routes and t not in OPTIONAL_TYPES]
        if unknown or missing:
            raise ValueError(
                f"chunker.routes must map the document types {list(DOC_TYPES)} ({sorted(OPTIONAL_TYPES)} optional); missing {missing}, unknown {unknown}"
            )
        if "document" not in routes and isinstance(routes.get("prose"), Mapping):
            modality = "harness.chunkers.modality.ModalityChunker"
            routes = {**routes, "document": {"_target_": modality, "_recursive_": False, "text_chunker": dict(routes["prose"])}}
        for t in DOC_TYPES:
            cfg = routes[t]
            if not isinstance(cfg, Mapping) or not isinstance(cfg.get("_target_"), str):
                raise ValueError(f"chunker.routes.{t} must be a chunker config with a _target_ class path, got {cfg!r}")
        self.routes = {t: dict(routes[t]) for t in DOC_TYPES}
        self.encoder = encoder
        self.builder = builder
        self._built: dict[str, Chunker] = {}

    def route(self, doc_type: str) -> Chunker:
        """The chunker for ``doc_type`` (built on first use).

        Raises:
            ValueError: the route's ``_target_`` cannot be imported or is not a Chunker (the
                builder's message), or no ``builder`` was given.
        """
        if doc_type not in self._built:
            where = f"chunker.routes.{doc_type}"
            built = require_builder(self.builder, where)(where, self.routes[doc_type], self.encoder)
            if not isinstance(built, Chunker):
                raise ValueError(f"{where}._target_ {self.routes[doc_type]['_target_']!r} does not build a harness Chunker")
            self._built[doc_type] = built
        return self._built[doc_type]

    def _all(self) -> list[Chunker]:
        return [self.route(t) for t in DOC_TYPES]

    @property
    def contiguous(self) -> bool:  # type: ignore[override]
        return all(c.contiguous for c in self._all())

    @property
    def partitions(self) -> bool:  # type: ignore[override]
        return all(c.partitions for c in self._all())

    def size_limit(self) -> tuple[str, str, int] | None:
        limits = set()
        for c in self._all():
            limit = c.size_limit()
            if limit is not None and limit[0] != "tokens":  # the tokenizer only matters for tokens
                limit = (limit[0], "model", limit[2])
            limits.add(limit)
        return limits.pop() if len(limits) == 1 else None

    def expand(self, ranked: list[Chunk], documents: dict[str, Document]) -> list[Chunk]:
        out: list[Chunk] = []
        seen: set[str] = set()
        for c in ranked:
            doc_type = c.metadata.get("doc_type")
            expanded = self.route(doc_type).expand([c], documents) if doc_type in self.routes else [c]
            for e in expanded:
                if e.chunk_id not in seen:
                    seen.add(e.chunk_id)
                    out.append(e)
        return out

    def chunk(self, doc: Document) -> list[Chunk]:
        doc_type = sniff_type(doc)
        chunker = self.route(doc_type)
        extra = {"doc_type": doc_type, "routed_to": chunker.name}
        return [replace(c, metadata={**c.metadata, **extra}) for c in chunker.finalize(doc, chunker.chunk(doc))]
