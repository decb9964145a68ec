"""The base of the adapters that wrap another library's splitter (LangChain, chonkie).

:class:`LibraryAdapter` owns what both adapters share: the counters of placed, tracked,
ambiguous and unaligned chunks (:data:`ADAPTER_COUNTERS`, logged as ``adapter.*``
metrics), turning placed spans into chunks under ``on_unaligned`` / ``on_oversize``
(:func:`adapter_chunks`) and the warning for dropped chunks. Placing a library's chunk
strings on source offsets is :mod:`harness.text.align`.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Iterable

from harness.chunkers.base import Chunker, dropped_overlaps
from harness.text.align import AMBIGUOUS, MAX_CANDIDATES, PLACED, UNALIGNED, Alignment, placed  # noqa: F401
from harness.types import Chunk, Document, Span

log = logging.getLogger(__name__)

#: ``chunker.on_unaligned`` of every library adapter: raise, or drop and record the chunk.
ON_UNALIGNED = ("error", "skip")
#: ``chunker.on_oversize`` of every library adapter: raise, cut into windows, or keep.
ON_OVERSIZE = ("error", "split", "ignore")

#: Counter names the adapters' ``stats()`` report (chunks of the library output that are not
#: whitespace-only; placed from tracked/verified offsets; placed by alignment; refused as
#: ambiguous; refused as unaligned; documents that needed alignment; consecutive chunks that
#: share nothing at a cut inside a word although the library's overlap setting is > 0).
ADAPTER_COUNTERS = (
    "adapter.chunks",
    "adapter.tracked",
    "adapter.searched",
    "adapter.ambiguous",
    "adapter.unaligned",
    "adapter.fallback_docs",
    "adapter.overlap_dropped",
)


def import_class(path: str) -> type:
    """The class at dotted ``path`` (``"langchain_text_splitters.RecursiveCharacterTextSplitter"``),
    importing its module: the library class an adapter wraps is named by a setting.

    The longest importable module prefix is imported and the rest read as attributes
    (``pkg.module.Class.Inner`` works).

    Raises:
        ImportError: ``path`` is empty or relative, no prefix of it imports, or an attribute
            is missing (the message names the path and the missing part).
        TypeError: ``path`` names something that is not a class.
    """
    import importlib

    parts = str(path).split(".")
    if len(parts) < 2 or not all(parts):
        raise ImportError(f"{path!r} is not a dotted class path")
    for cut in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            obj = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
                continue  # this prefix is no module: try a shorter one
            raise ImportError(f"{path!r}: importing {module_name} failed: {exc}") from exc
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                raise ImportError(f"{path!r}: {getattr(obj, '__name__', obj)!s} has no attribute {attr!r}")
            obj = getattr(obj, attr)
        if not isinstance(obj, type):
            raise TypeError(f"{path!r} is a {type(obj).__name__}, not a class")
        return obj
    raise ImportError(f"{path!r}: no module named {parts[0]!r}")


def adapter_chunks(
    doc: Document,
    pieces: list[str],
    alignment: Alignment | list[Span | None],
    *,
    library: str,
    on_unaligned: str,
    on_oversize: str,
    limit: tuple[str, str, int] | None,
    unaligned: list[tuple[str, int]],
    ambiguous: list[tuple[str, int]] | None = None,
    overlap: int = 0,
) -> list[Chunk]:
    """Turn placed spans of a wrapped splitter's output into chunks (shared by the adapters).

    Args:
        doc: the source document.
        pieces: the library's chunk strings (for error messages).
        alignment: one trimmed span or None per piece and its status (from :func:`align`,
            from verified library offsets or from a verified tracked re-run); a plain list
            of spans counts every None as unaligned.
        library: the wrapped class path, named in errors and recorded as metadata
            ``splitter``.
        on_unaligned: ``"error"`` (raise) or ``"skip"`` (record ``(doc_id, index)`` in
            ``unaligned`` or ``ambiguous`` and drop the piece). Whitespace-only pieces
            are always dropped.
        on_oversize: with a ``limit``: ``"error"`` raises, ``"split"`` cuts an oversized
            span into word-aligned windows of the limit sharing ``overlap`` units (so a cut
            keeps the library's overlap setting), ``"ignore"`` keeps it.
        limit: ``(unit, tokenizer, size)`` the wrapped library promises, or None.
        unaligned, ambiguous: lists that collect skipped pieces (ambiguous ones go to
            ``unaligned`` when ``ambiguous`` is None).
        overlap: the library's overlap setting in the limit's unit, ``>= 0`` (clipped to
            ``limit - 1``).

    Returns:
        Chunks sorted by span (start, end), duplicate spans dropped; metadata ``splitter``
        and ``index`` (the piece's position in the library output).

    Raises:
        ValueError: an unplaced piece with ``on_unaligned="error"`` or an oversized piece
            with ``on_oversize="error"`` (message names the library, document and index).
    """
    from harness.text.units import get_counter, window_atoms

    if not isinstance(alignment, Alignment):
        spans = list(alignment)
        alignment = Alignment(spans, [PLACED if sp is not None else UNALIGNED for sp in spans])
    if ambiguous is None:
        ambiguous = unaligned
    counter = get_counter(limit[0], limit[1]) if limit and on_oversize != "ignore" else None
    out: list[Chunk] = []
    seen: set[Span] = set()
    for i, (piece, span) in enumerate(zip(pieces, alignment.spans)):
        if span is None or span[1] <= span[0]:
            if not piece.strip():
                continue
            kind = alignment.status[i]
            if on_unaligned == "error":
                if kind == AMBIGUOUS:
                    starts = alignment.positions.get(i)
                    where = f"starts {starts[:5]}" if starts else f"more than {MAX_CANDIDATES} positions"
                    raise ValueError(
                        f"{library}: chunk {i} of document {doc.doc_id!r} is ambiguous: its text fits several source "
                        f"positions consistent with the chunk order and overlap ({where}; text {piece[:40]!r}); "
                        "set chunker.on_unaligned=skip to drop such chunks"
                    )
                raise ValueError(
                    f"{library}: chunk {i} of document {doc.doc_id!r} cannot be aligned to the source text "
                    f"(starts {piece[:40]!r}); set chunker.on_unaligned=skip to drop such chunks"
                )
            (ambiguous if kind == AMBIGUOUS else unaligned).append((doc.doc_id, i))
            continue
        windows = [span]
        if counter is not None:
            n = counter.count(doc.text[span[0] : span[1]])
            if n > limit[2]:
                if on_oversize == "error":
                    raise ValueError(
                        f"{library}: chunk {i} of document {doc.doc_id!r} has {n} {limit[0]} > chunk_size {limit[2]}; set chunker.on_oversize=split to cut it"
                    )
                windows = window_atoms(doc.text, span[0], span[1], counter, limit[2], max(0, min(overlap, limit[2] - 1)))
        for w in windows:
            if w not in seen:
                seen.add(w)
                out.append(Chunk.from_spans(doc, [w], metadata={"splitter": library, "index": i}))
    out.sort(key=lambda c: c.spans[0])  # windows of a cut chunk may pass the next chunk's start
    return out


class LibraryAdapter(Chunker):
    """Shared part of the library adapters (``langchain``, ``chonkie``): the counters, the
    placement of a document's pieces and the warning for dropped chunks.

    A subclass calls :meth:`_init_adapter` in ``__init__`` with the wrapped class path
    (:attr:`library`, named in errors and warnings) and, in ``chunk``, computes an :class:`Alignment` (tracked offsets, or
    :func:`align` as the fallback) and returns :meth:`_place`'s result.
    """

    def _init_adapter(self, library: str, on_unaligned: str, on_oversize: str) -> None:
        """Check the two adapter options and set the adapter's state (empty records, zero counters).

        Raises:
            ValueError: ``on_unaligned`` not in :data:`ON_UNALIGNED` or ``on_oversize`` not
                in :data:`ON_OVERSIZE` (``chunker.<option> must be one of [...], got ...``).
        """
        if on_unaligned not in ON_UNALIGNED:
            raise ValueError(f"chunker.on_unaligned must be one of {list(ON_UNALIGNED)}, got {on_unaligned!r}")
        if on_oversize not in ON_OVERSIZE:
            raise ValueError(f"chunker.on_oversize must be one of {list(ON_OVERSIZE)}, got {on_oversize!r}")
        self.library = library
        self.on_unaligned = on_unaligned
        self.on_oversize = on_oversize
        self.unaligned: list[tuple[str, int]] = []
        self.ambiguous: list[tuple[str, int]] = []
        self.counters: Counter[str] = Counter({k: 0 for k in ADAPTER_COUNTERS})

    def _place(self, doc: Document, pieces: list[str], alignment: Alignment, tracked: bool) -> list[Chunk]:
        """Count the alignment's outcome (``adapter.*``) and build the chunks
        (:func:`adapter_chunks` with the adapter's ``on_unaligned`` / ``on_oversize``)."""
        if not tracked:
            self.counters["adapter.fallback_docs"] += 1
        status = Counter(alignment.status)
        self.counters["adapter.chunks"] += len(pieces) - status["empty"]
        self.counters["adapter.tracked" if tracked else "adapter.searched"] += status[PLACED]
        self.counters["adapter.ambiguous"] += status[AMBIGUOUS]
        self.counters["adapter.unaligned"] += status[UNALIGNED]
        chunks = adapter_chunks(
            doc,
            pieces,
            alignment,
            library=self.library,
            on_unaligned=self.on_unaligned,
            on_oversize=self.on_oversize,
            limit=self.size_limit(),
            unaligned=self.unaligned,
            ambiguous=self.ambiguous,
            overlap=self.library_overlap(),
        )
        if self.library_overlap() > 0:
            self.counters["adapter.overlap_dropped"] += len(dropped_overlaps(doc.text, chunks))
        return chunks

    def library_overlap(self) -> int:
        """The wrapped library's overlap setting in :meth:`size_limit`'s unit (0: none or unknown).

        The adapters promise no overlap of their own (:meth:`overlap_limit` is None): the library's
        output is taken as it is, and a cut the adapter makes (``on_oversize="split"``) keeps this
        overlap. Where the library's own chunks share nothing at a cut inside a word although this
        is > 0, the pair is counted (``adapter.overlap_dropped``) and :meth:`chunk_all` warns.
        """
        return 0

    def chunk_all(self, docs: Iterable[Document], progress: bool = False) -> list[Chunk]:
        """Chunk every document; warns (logging) with the counts when chunks were dropped
        (``on_unaligned="skip"``) and when the library dropped its overlap at cuts inside a
        word (``adapter.overlap_dropped``, see :meth:`library_overlap`)."""
        before = len(self.ambiguous), len(self.unaligned)
        dropped = self.counters["adapter.overlap_dropped"]
        chunks = super().chunk_all(docs, progress=progress)
        dropped = self.counters["adapter.overlap_dropped"] - dropped
        if dropped:
            log.warning(
                "%s: %d pairs of consecutive chunks share no text at a cut inside a word although the overlap setting is %d "
                "(the library drops it there); counted as chunker stats adapter.overlap_dropped",
                self.library,
                dropped,
                self.library_overlap(),
            )
        amb, una = len(self.ambiguous) - before[0], len(self.unaligned) - before[1]
        if amb or una:
            log.warning(
                "%s: dropped %d ambiguous and %d unaligned chunks (chunker.on_unaligned=skip); see chunker stats adapter.*",
                self.library,
                amb,
                una,
            )
        return chunks

    def stats(self) -> dict[str, float]:
        """Adapter counters as ``{name: value}`` (floats; see the subclass docstring)."""
        return {k: float(v) for k, v in self.counters.items()}
