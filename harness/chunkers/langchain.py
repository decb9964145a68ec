"""Adapter: any LangChain ``TextSplitter`` (langchain-text-splitters) as a harness chunker.

The splitter is built from its class path and keyword arguments and ``split_text`` is called
on each document. Spans are never found by searching for a chunk's text when the
splitter's algorithm is known: for ``RecursiveCharacterTextSplitter`` (and its subclasses
that only change settings), ``CharacterTextSplitter`` and ``TokenTextSplitter`` the same
algorithm is re-run on source spans (:mod:`harness.chunkers.tracked`) and its strings are
compared with the library's output; the spans are used only when every string is equal.
Otherwise (other splitters, or a library version that behaves differently) the chunks are
placed by constrained alignment (:func:`harness.text.align.align`), which refuses a
chunk whose text fits more than one consistent position. LangChain's own
``add_start_index`` is never used: it re-finds chunks from an offset that can point at an
earlier copy of a repeated passage.

Chunk text is the source text of the span (``doc.text[start:end]``), which equals the
splitter's string when it keeps separators and differs only where the splitter dropped or
re-joined them.
"""

from __future__ import annotations

import functools
from typing import Any

from harness.chunkers.adapter import LibraryAdapter, import_class
from harness.text.align import align, placed
from harness.types import Chunk, Document

#: Splitters whose output covers every non-whitespace character of the input when they
#: keep their separators (the default); other splitters may drop text, so ``partitions``
#: is only claimed for these.
LOSSLESS_SPLITTERS = (
    "langchain_text_splitters.RecursiveCharacterTextSplitter",
    "langchain_text_splitters.character.RecursiveCharacterTextSplitter",
)


class LangChainChunker(LibraryAdapter):
    """Wrap a LangChain text splitter; spans from a verified tracked re-run or constrained alignment.

    Args:
        splitter: dotted class path of a ``langchain_text_splitters.TextSplitter`` subclass,
            e.g. ``"langchain_text_splitters.RecursiveCharacterTextSplitter"``.
        kwargs: constructor keyword arguments of the splitter (``chunk_size``,
            ``chunk_overlap``, ``separators``, ...). ``add_start_index`` is ignored (only
            ``split_text`` is called) and rejected to avoid suggesting it is used.
        on_unaligned: what to do with a chunk that cannot be placed for certain: its text is
            at no position consistent with the chunk order and overlap (*unaligned*), or at
            more than one (*ambiguous*; never resolved by picking one). ``"error"``
            raises ``ValueError`` naming the splitter, the document and the chunk index;
            ``"skip"`` drops that chunk, records ``(doc_id, index)`` in :attr:`unaligned`
            or :attr:`ambiguous` and warns with the counts after :meth:`chunk_all`
            (``partitions`` is then not claimed).
        on_oversize: what to do when the splitter measures length in characters (see
            :meth:`size_limit`) and an aligned chunk is longer than its
            ``chunk_size`` (a splitter without a finer separator can exceed it, and a
            re-joined chunk's source may carry more whitespace): ``"error"`` raises
            ``ValueError``; ``"split"`` cuts that chunk into word-aligned windows of at most
            ``chunk_size`` characters; ``"ignore"`` keeps it and :meth:`size_limit` returns
            None.

    ``size_limit()`` is ``("chars", "model", chunk_size)`` when the splitter is a
    ``CharacterTextSplitter`` / ``RecursiveCharacterTextSplitter`` (or subclass, e.g. the
    markdown and code splitters) whose length function is ``len`` and ``on_oversize`` is not
    ``"ignore"``; else None (a token length function or a token-window splitter counts a
    tokenizer the harness does not check). ``partitions`` is True
    only for :data:`LOSSLESS_SPLITTERS` with ``keep_separator`` on and
    ``on_unaligned="error"``. Chunks are contiguous (one span, starts increasing).

    How spans are found, per document: (1) the tracked re-run of the splitter's algorithm
    when it has one and reproduces ``split_text`` string for string (counter
    ``adapter.tracked``); else (2) constrained alignment (``adapter.fallback_docs``
    counts such documents, ``adapter.searched`` the chunks placed that way), with the
    overlap bound ``chunk_overlap`` only when it bounds source characters (length
    function ``len`` and separators kept). :meth:`stats` returns the counters
    (``adapter.chunks``, ``adapter.tracked``, ``adapter.searched``, ``adapter.ambiguous``,
    ``adapter.unaligned``, ``adapter.fallback_docs``), which a run logs as metrics.

    Source: LangChain text splitters (langchain-text-splitters), wrapped as is.

    Raises:
        ValueError: ``splitter`` is not an importable ``TextSplitter`` subclass, ``kwargs``
            is not a mapping, or an option is outside its choices (message names it).
    """

    name = "langchain"
    contiguous = True
    partitions = False

    def __init__(
        self,
        splitter: str = "langchain_text_splitters.RecursiveCharacterTextSplitter",
        kwargs: dict[str, Any] | None = None,
        on_unaligned: str = "error",
        on_oversize: str = "split",
    ) -> None:
        if not isinstance(splitter, str) or "." not in splitter:
            raise ValueError(f"chunker.splitter must be a dotted class path of a LangChain TextSplitter, got {splitter!r}")
        kwargs = dict(kwargs or {})
        if any(not isinstance(k, str) for k in kwargs):
            raise ValueError(f"chunker.kwargs must be a mapping of keyword arguments, got {kwargs!r}")
        if "add_start_index" in kwargs:
            raise ValueError("chunker.kwargs must not set add_start_index: offsets come from our alignment, not LangChain's")
        self.splitter = splitter
        self.kwargs = kwargs
        self._init_adapter(self.splitter, on_unaligned, on_oversize)
        keep = kwargs.get("keep_separator", True)
        self._covers = splitter in LOSSLESS_SPLITTERS and keep is not False
        self.partitions = self._covers and on_unaligned == "error"

    @functools.cached_property
    def _splitter(self):
        from langchain_text_splitters import TextSplitter

        try:
            cls = import_class(self.splitter)
        except Exception as exc:  # ImportError, AttributeError, hydra's wrapped errors
            raise ValueError(f"chunker.splitter must be an importable class path, {self.splitter!r} is not: {exc}") from exc
        if not (isinstance(cls, type) and issubclass(cls, TextSplitter)):
            raise ValueError(f"chunker.splitter must name a langchain_text_splitters.TextSplitter subclass, got {self.splitter!r}")
        return cls(**self.kwargs)

    def _char_limits(self) -> tuple[int | None, int | None]:
        """``(chunk_size, chunk_overlap)`` in characters when the splitter measures with ``len``."""
        from langchain_text_splitters import CharacterTextSplitter, RecursiveCharacterTextSplitter

        sp = self._splitter
        if isinstance(sp, (CharacterTextSplitter, RecursiveCharacterTextSplitter)) and getattr(sp, "_length_function", None) is len:
            return int(sp._chunk_size), int(sp._chunk_overlap)
        return None, None

    def size_limit(self) -> tuple[str, str, int] | None:
        size, _ = self._char_limits()
        if size is None or self.on_oversize == "ignore":
            return None
        return ("chars", "model", size)

    def library_overlap(self) -> int:
        """``chunk_overlap`` in characters when the splitter measures with ``len`` (else 0: not in a unit checked here)."""
        return self._char_limits()[1] or 0

    def _fallback_limits(self) -> tuple[int | None, bool]:
        """``(max_overlap, covers)`` for constrained alignment: the overlap bounds source
        characters only when lengths are ``len`` and separators are kept (a dropped run of
        separators makes the source overlap longer than the joined strings')."""
        from langchain_text_splitters import TokenTextSplitter

        sp = self._splitter
        _, overlap = self._char_limits()
        keeps = bool(getattr(sp, "_keep_separator", False))
        if isinstance(sp, TokenTextSplitter):
            return None, True  # token windows cover the text; their overlap is in tokens
        return (overlap if keeps else None), self._covers

    def chunk(self, doc: Document) -> list[Chunk]:
        from harness.chunkers.tracked import langchain_expected

        text = doc.text
        pieces = self._splitter.split_text(text)
        expected = langchain_expected(self._splitter, text)
        if expected is not None and [e for e, _ in expected] == pieces:
            alignment = placed(text, pieces, [span for _, span in expected])
            tracked = True
        else:
            max_overlap, covers = self._fallback_limits()
            alignment = align(text, pieces, max_overlap=max_overlap, covers=covers)
            tracked = False
        return self._place(doc, pieces, alignment, tracked)
