"""Base class for chunkers."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Iterable

from harness.types import Chunk, Document, Span


class Chunker(ABC):
    """Splits documents into span-exact chunks.

    Subclasses take explicit typed keyword arguments (a misspelt YAML key fails), validate
    them in ``__init__`` with a ``ValueError`` naming the parameter and its allowed range,
    do no expensive work in ``__init__``, and implement :meth:`chunk`.

    Contract (checked for every ``conf/chunker/*.yaml`` by ``tests/test_configs.py``):

    * every span lies in its document; ``chunk.text == metadata.get("prefix", "") +
      metadata.get("joiner", "").join(span texts) + metadata.get("suffix", "")``, i.e.
      added context (a section path, a table header) is declared in metadata;
    * no empty or whitespace-only chunk; no two chunks with identical spans;
    * :meth:`size_limit` holds for the *embedded* text of every chunk (``chunk.text``:
      prefix, joiners and suffix included), and ``metadata["size"]`` is that size in
      ``metadata["unit"]`` (see :meth:`finalize`);
    * when ``contiguous``: one span per chunk and starts non-decreasing per document;
    * when ``partitions``: every non-whitespace character of a document is in some chunk;
    * deterministic: same input and parameters give identical chunks and ids.

    Attributes:
        name: strategy name used in run names and metrics.
        needs_encoder: True when the strategy embeds text while splitting; the builder then
            passes the shared :class:`harness.embeddings.model.Encoder` as ``encoder=``.
        contiguous: chunks are single spans in document order.
        partitions: chunks cover every non-whitespace character (no text is dropped).
    """

    name: str = "base"
    needs_encoder: bool = False
    contiguous: bool = True
    partitions: bool = True

    def size_limit(self) -> tuple[str, str, int] | None:
        """``(unit, tokenizer, limit)`` that every chunk's source text respects, or None.

        ``unit`` is ``chars``, ``words`` or ``tokens``; ``tokenizer`` is ``"model"`` or a
        tiktoken encoding name (only meaningful for tokens).
        """
        return None

    def finalize(self, doc: Document, chunks: list[Chunk]) -> list[Chunk]:
        """Make every chunk of ``doc`` keep :meth:`size_limit` and record its size.

        Strategies call this at the end of :meth:`chunk`; :meth:`chunk_all` calls it for
        every document as well (cheap for chunks that already record their size), so a
        strategy that does not is still held to its limit. See :func:`enforce_limit`.
        """
        return enforce_limit(doc, chunks, self.size_limit())

    def expand(self, ranked: list[Chunk], documents: dict[str, Document]) -> list[Chunk]:
        """Map ranked indexed chunks to what is handed to the generator (default: themselves).

        Hierarchical ("small-to-big") strategies return each hit's parent, deduplicated.
        Metrics score the expanded list.
        """
        return ranked

    @abstractmethod
    def chunk(self, doc: Document) -> list[Chunk]:
        """Split one document.

        Returns:
            Chunks of ``doc`` in document order; every span lies inside ``doc.text``.
        """

    def chunk_all(self, docs: Iterable[Document], progress: bool = False) -> list[Chunk]:
        """Chunk every document and concatenate the results (document order kept).

        Raises:
            ValueError: two chunks share a chunk id (a chunker bug: identical spans twice).
        """
        docs = list(docs)
        if progress:
            from tqdm.auto import tqdm

            docs = tqdm(docs, desc=f"chunk ({self.name})", unit="doc")
        out: list[Chunk] = []
        seen: set[str] = set()
        for doc in docs:
            for c in self.finalize(doc, self.chunk(doc)):
                if c.chunk_id in seen:
                    continue  # identical spans from an overlapping window: keep one
                seen.add(c.chunk_id)
                out.append(c)
        return out


class SizedChunker(Chunker):
    """Base for strategies capped at ``max_chunk_size`` units of ``unit`` (chars, words or tokens).

    Subclasses call :meth:`_init_size` in ``__init__``; :meth:`size_limit` then reports the cap.
    """

    max_chunk_size: int
    unit: str
    tokenizer: str

    def _init_size(self, max_chunk_size: int, unit: str, tokenizer: str) -> None:
        """Validate and store the cap.

        Raises:
            ValueError: ``max_chunk_size`` below :func:`check_limit`'s minimum, unknown
                ``unit`` or ``tokenizer``.
        """
        from harness.text.units import check_unit

        check_unit(unit, tokenizer)
        check_limit("max_chunk_size", max_chunk_size, unit)
        self.max_chunk_size = max_chunk_size
        self.unit = unit
        self.tokenizer = tokenizer

    def size_limit(self) -> tuple[str, str, int]:
        return (self.unit, self.tokenizer, self.max_chunk_size)


def check_count_below(name: str, value: int, bound: int, bound_name: str) -> None:
    """Raise ``ValueError`` unless ``0 <= value < bound`` (an integer); the message names both parameters."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < bound:
        raise ValueError(f"chunker.{name} must be an integer in [0, {bound_name}) = [0, {bound}), got {value!r}")


def check_size(name: str, value: int, minimum: int = 1) -> None:
    """Raise ``ValueError`` unless ``value`` is an int >= ``minimum`` (message names ``name``)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"chunker.{name} must be an integer >= {minimum}, got {value!r}")


def check_overlap(size: int, overlap: int) -> None:
    """Raise ``ValueError`` unless ``0 <= chunk_overlap < chunk_size``."""
    if isinstance(overlap, bool) or not isinstance(overlap, int) or overlap < 0 or overlap >= size:
        raise ValueError(f"chunker.chunk_overlap must be an integer in [0, chunk_size) = [0, {size}), got {overlap!r}")


#: Smallest size limit accepted in ``unit="tokens"``: one code point alone can take up to 4
#: tokens (cl100k_base encodes any code point as at most its 4 UTF-8 byte tokens; the
#: model's WordPiece needs up to 3, for Hangul syllables), and a chunk cannot be cut
#: inside a code point, so a smaller limit could not be kept on every text.
MIN_TOKEN_LIMIT = 4


def check_limit(name: str, value: int, unit: str = "chars") -> None:
    """Raise ``ValueError`` unless ``value`` is a size limit that can be kept in ``unit``.

    An integer >= 1 for ``chars`` and ``words`` (one code point is at most one of either),
    >= :data:`MIN_TOKEN_LIMIT` for ``tokens``. The message names ``chunker.<name>``.
    """
    minimum = MIN_TOKEN_LIMIT if unit == "tokens" else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        why = " for unit=tokens (one character can take up to 4 tokens)" if unit == "tokens" else ""
        raise ValueError(f"chunker.{name} must be an integer >= {minimum}{why}, got {value!r}")


def measure(counter, text: str) -> int:
    """Size of ``text`` in the counter's unit (``len`` for characters, no tokenizing)."""
    return len(text) if counter.unit == "chars" else counter.count(text)


def fit_prefix(prefix: str, counter, limit: int) -> tuple[str, dict[str, Any]]:
    """Cut a context prefix (section path, table header, question, caption) to at most
    half of ``limit``, so that the chunk body keeps at least the other half.

    The prefix is kept whole when ``measure(prefix) <= limit // 2``. Otherwise its text
    (without its trailing whitespace separator, e.g. ``"\n\n"``) is cut to its longest
    leading part that, with the separator, fits ``limit // 2`` (word-aligned where
    possible); the result is flagged ``{"prefix_truncated": True}``. When nothing fits
    (a tiny limit) the prefix is dropped: ``("", {"prefix_dropped": True})``.

    Args:
        prefix: the context text put before the chunk body, usually ending in a newline.
        counter: size unit (:func:`harness.text.units.get_counter`).
        limit: the chunk's size limit in that unit, >= 1.

    Returns:
        ``(prefix to use, metadata flags)``.
    """
    budget = limit // 2
    if not prefix or measure(counter, prefix) <= budget:
        return prefix, {}
    content = prefix.rstrip()
    sep = prefix[len(content) :]
    room = budget - measure(counter, sep)
    if room >= 1 and content.strip():
        from harness.text.units import window_atoms

        windows = window_atoms(content, 0, len(content), counter, room, 0)
        end = windows[0][1] if windows else 0
        while end > 0:
            cut = content[:end].rstrip()
            if cut.strip() and measure(counter, cut + sep) <= budget:
                return cut + sep, {"prefix_truncated": True}
            end -= 1
    return "", {"prefix_dropped": True}


def enforce_limit(doc: Document, chunks: list[Chunk], limit: tuple[str, str, int] | None) -> list[Chunk]:
    """Every chunk of ``doc`` within ``limit``, measured on its embedded text, with its size.

    Each chunk's ``text`` (the embedded text: ``prefix + joiner.join(span texts) +
    suffix``) is measured in the limit's unit; ``metadata["size"]`` (that size) and
    ``metadata["unit"]`` (``chars``, ``words`` or ``tokens``; tokens of the limit's
    tokenizer, without ``[CLS]``/``[SEP]``) are recorded. A chunk that already records
    ``size`` in the same ``unit`` is trusted (its strategy measured its final text).

    A chunk over the limit is the strategies' last resort and is cut here (marked
    ``metadata["hard_cut"] = True``): its prefix is first cut to half the limit
    (:func:`fit_prefix`), its suffix dropped (``suffix_dropped``), then its spans are
    grouped greedily while ``prefix + joiner.join(parts)`` fits; a span that does not fit
    alone is cut into word-aligned windows and, where even those do not fit, at code
    points (each piece as long as fits, whitespace trimmed). A single code point that
    does not fit after the prefix is emitted without the prefix (``prefix_dropped``).
    Spans stay exact; no non-whitespace character is lost.

    Args:
        doc: the document the chunks index into.
        chunks: its chunks in order.
        limit: ``(unit, tokenizer, size)`` from :meth:`Chunker.size_limit`, or None (no
            limit: chunks are returned unchanged).

    Returns:
        The chunks, over-limit ones replaced by their pieces, in the same order.
    """
    if limit is None or not chunks:
        return chunks
    from harness.text.units import get_counter

    unit, tokenizer, size = limit
    counter = get_counter(unit, tokenizer)
    out: list[Chunk] = []
    for c in chunks:
        meta = c.metadata
        if "size" in meta and meta.get("unit") == unit:
            n = meta["size"]
        else:
            n = measure(counter, c.text)
        if n <= size:
            if meta.get("size") != n or meta.get("unit") != unit:
                c = Chunk(c.doc_id, c.spans, c.text, c.chunk_id, {**meta, "size": n, "unit": unit}, c.parent_id)
            out.append(c)
            continue
        out.extend(_hard_cut(doc, c, counter, size))
    return out


def _hard_cut(doc: Document, chunk: Chunk, counter, size: int) -> list[Chunk]:
    """Pieces of an over-limit chunk that fit ``size`` (rules in :func:`enforce_limit`)."""
    from harness.text.units import strip_span, window_atoms

    text = doc.text
    meta = {k: v for k, v in chunk.metadata.items() if k not in ("size", "n_chars", "prefix", "suffix")}
    meta["hard_cut"] = True
    joiner = chunk.metadata.get("joiner", "")
    prefix, flags = fit_prefix(chunk.metadata.get("prefix", ""), counter, size)
    meta.update(flags)
    if chunk.metadata.get("suffix"):
        meta["suffix_dropped"] = True

    def embedded(spans: list[Span], pre: str) -> str:
        return pre + joiner.join(text[s:e] for s, e in spans)

    def fits(spans: list[Span], pre: str = prefix) -> bool:
        return measure(counter, embedded(spans, pre)) <= size

    # 1. each span on its own: whole, else word-aligned windows, else code-point pieces
    parts: list[tuple[Span, bool, bool]] = []  # (span, the whole original span, fits with the prefix)
    for s, e in chunk.spans:
        if fits([(s, e)]):
            parts.append(((s, e), True, True))
            continue
        room = max(1, size - measure(counter, prefix))
        for ws, we in window_atoms(text, s, e, counter, room, 0):
            if fits([(ws, we)]):
                parts.append(((ws, we), False, True))
                continue
            pos = ws
            while pos < we:
                pos, _ = strip_span(text, pos, we)
                if pos >= we:
                    break
                lo, hi = pos + 1, we  # longest [pos, m) that fits (checked, not assumed monotone)
                while lo < hi:
                    mid = (lo + hi + 1) // 2
                    if fits([(pos, mid)]):
                        lo = mid
                    else:
                        hi = mid - 1
                m = lo
                while m > pos + 1 and not fits([(pos, m)]):
                    m -= 1
                ps, pe = strip_span(text, pos, m)
                if pe > ps:
                    parts.append(((ps, pe), False, fits([(ps, pe)])))
                pos = m
    # 2. whole spans grouped greedily while prefix + joined parts fit; pieces stay alone
    out: list[Chunk] = []

    def emit(spans: list[Span], with_prefix: bool) -> None:
        pre = prefix if with_prefix else ""
        m = dict(meta)
        if pre:
            m["prefix"] = pre
        elif chunk.metadata.get("prefix"):
            m["prefix_dropped"] = True
            m.pop("prefix_truncated", None)
        body = embedded(spans, pre)
        m["size"] = measure(counter, body)
        m["unit"] = counter.unit
        out.append(Chunk.from_spans(doc, spans, text=body, metadata=m, parent_id=chunk.parent_id))

    group: list[Span] = []
    for span, whole, ok in parts:
        if whole and group and fits(group + [span]):
            group.append(span)
            continue
        if group:
            emit(group, True)
            group = []
        if whole:
            group = [span]
        else:
            emit([span], ok)
    if group:
        emit(group, True)
    return out
