"""Adapter: any LangChain ``TextSplitter`` (langchain-text-splitters) as a harness chunker.

The splitter is built from its class path and keyword arguments, ``split_text`` is called
on each document, and each output string is mapped to a source span by the left-to-right
alignment of :mod:`harness.chunkers.align` (exact match first, then a whitespace-insensitive
match for splitters that re-join text). LangChain's own ``add_start_index`` is never used:
it re-finds chunks from an offset that can point at an earlier copy of a repeated passage.

Chunk text is the source text of the span (``doc.text[start:end]``), which equals the
splitter's string for exact matches and differs only in whitespace for re-joined ones.
"""

from __future__ import annotations

import functools
from typing import Any

from harness.chunkers.align import adapter_chunks, align_chunks
from harness.chunkers.base import Chunker
from harness.types import Chunk, Document

ON_UNALIGNED = ("error", "skip")
ON_OVERSIZE = ("error", "split", "ignore")

#: Splitters whose output covers every non-whitespace character of the input when they
#: keep their separators (the default); other splitters may drop text, so ``partitions``
#: is only claimed for these.
LOSSLESS_SPLITTERS = (
    "langchain_text_splitters.RecursiveCharacterTextSplitter",
    "langchain_text_splitters.character.RecursiveCharacterTextSplitter",
)


def _import(path: str):
    from hydra.utils import get_class

    return get_class(path)


class LangChainChunker(Chunker):
    """Wrap a LangChain text splitter; spans by left-to-right alignment of its output.

    Args:
        splitter: dotted class path of a ``langchain_text_splitters.TextSplitter`` subclass,
            e.g. ``"langchain_text_splitters.RecursiveCharacterTextSplitter"``.
        kwargs: constructor keyword arguments of the splitter (``chunk_size``,
            ``chunk_overlap``, ``separators``, ...). ``add_start_index`` is ignored (only
            ``split_text`` is called) and rejected to avoid suggesting it is used.
        on_unaligned: ``"error"`` raises ``ValueError`` naming the splitter, the document
            and the chunk index when a chunk string cannot be found in the source at or
            after the cursor; ``"skip"`` drops that chunk and records ``(doc_id, index)`` in
            :attr:`unaligned` (and ``partitions`` is then not claimed).
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
        if on_unaligned not in ON_UNALIGNED:
            raise ValueError(f"chunker.on_unaligned must be one of {list(ON_UNALIGNED)}, got {on_unaligned!r}")
        if on_oversize not in ON_OVERSIZE:
            raise ValueError(f"chunker.on_oversize must be one of {list(ON_OVERSIZE)}, got {on_oversize!r}")
        self.splitter = splitter
        self.kwargs = kwargs
        self.on_unaligned = on_unaligned
        self.on_oversize = on_oversize
        self.unaligned: list[tuple[str, int]] = []
        keep = kwargs.get("keep_separator", True)
        self._covers = splitter in LOSSLESS_SPLITTERS and keep is not False
        self.partitions = self._covers and on_unaligned == "error"

    @functools.cached_property
    def _splitter(self):
        from langchain_text_splitters import TextSplitter

        try:
            cls = _import(self.splitter)
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

    def chunk(self, doc: Document) -> list[Chunk]:
        pieces = self._splitter.split_text(doc.text)
        _, overlap = self._char_limits()
        spans = align_chunks(doc.text, pieces, max_overlap=overlap, covers=self._covers)
        return adapter_chunks(
            doc,
            pieces,
            spans,
            library=self.splitter,
            on_unaligned=self.on_unaligned,
            on_oversize=self.on_oversize,
            limit=self.size_limit(),
            unaligned=self.unaligned,
        )
