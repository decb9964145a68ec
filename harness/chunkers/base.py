"""Base class for chunkers."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Iterable

from harness.params import Param
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
    * :meth:`overlap_limit` holds between consecutive chunks (see :func:`check_chunks`);
    * deterministic: same input and parameters give identical chunks and ids.

    :func:`check_chunks` is the one checker of these promises (the tests run it on every
    ``conf/chunker/*.yaml`` over generated documents); :meth:`chunk_all` runs its cheap
    part, the overlap promise, on every document (:func:`check_overlap_promise`) and refuses a
    chunking that breaks it.

    Attributes:
        name: strategy name used in run names and metrics.
        needs_encoder: True when the strategy embeds text while splitting; the builder then
            passes the shared :class:`harness.embeddings.model.Encoder` as ``encoder=``.
        needs_cache_dir: True when the strategy keeps a cache of its own (e.g. LLM replies);
            the builder then passes the run's cache folder (or None) as ``cache_dir=``, kept
            out of the config hash.
        needs_builder: True when the strategy's config nests other chunker configs (an
            adaptive route, the modality text stream); the builder then passes
            :func:`harness.experiment.build.build_sub_chunker` as ``builder=``.
        fetch_multiplier: the run searches ``fetch_multiplier * depth`` indexed chunks per
            query (an integer >= 1) so that :meth:`expand` still fills ``depth`` results
            (``hierarchical``: children of one parent collapse into it). Default 1.
        contiguous: chunks are single spans in document order.
        partitions: chunks cover every non-whitespace character (no text is dropped).
    """

    name: str = "base"
    needs_encoder: bool = False
    needs_cache_dir: bool = False
    needs_builder: bool = False
    fetch_multiplier: int = 1
    contiguous: bool = True
    partitions: bool = True

    def stats(self) -> dict[str, float]:
        """The strategy's own counters, logged with the run's metrics at step 0
        (``{name: value}``, e.g. ``llm.calls``, ``adapter.tracked``). Default: none (``{}``)."""
        return {}

    def size_limit(self) -> tuple[str, str, int] | None:
        """``(unit, tokenizer, limit)`` that every chunk's source text respects, or None.

        ``unit`` is ``chars``, ``words`` or ``tokens``; ``tokenizer`` is ``"model"`` or a
        tiktoken encoding name (only meaningful for tokens).
        """
        return None

    def overlap_limit(self) -> int | None:
        """Most units (of :meth:`size_limit`'s unit) two consecutive chunks share, or None.

        The promise the overlap setting makes (``chunk_overlap`` of ``fixed`` and
        ``recursive``, ``child_overlap`` of ``hierarchical``), checked by
        :func:`check_overlap_promise` on every path a chunker takes (separator merges, hard cuts,
        the last chunk). "Consecutive" means neighbours in output order with the same
        document and the same ``parent_id``. With a limit ``O``:

        * ``O == 0``: consecutive chunks share no character;
        * ``O > 0``: consecutive chunks share at most ``O`` units (counted as the
          document's atoms, in :meth:`size_limit`'s unit, that meet the shared characters),
          and a cut inside a word (non-whitespace on both sides of a chunk's end) that is
          not at one of the strategy's own boundaries (:meth:`overlap_exempt`) is followed
          by a chunk that starts before that end, i.e. the overlap is never dropped at a
          hard cut.

        When :meth:`overlap_atoms` gives atoms (``sentence``, ``paragraph``), ``O`` counts
        those atoms instead (rules there); the overlap unit then differs from the size unit.

        None (the default): no promise.
        """
        return None

    def overlap_atoms(self, text: str) -> list[Span] | None:
        """The units :meth:`overlap_limit` counts when they are not the size unit, or None.

        ``sentence`` (``overlap_sentences``) and ``paragraph`` (``overlap_paragraphs``) count
        their overlap in whole sentences / paragraphs of ``text``: sorted, disjoint, trimmed
        spans (:attr:`overlap_unit` names them). With a limit ``O > 0`` and these atoms
        :func:`check_overlap_promise` checks, for consecutive chunks ``a``, ``b``: the shared
        text is whole atoms (``b`` starts at an atom), at most ``O`` of them, and the overlap
        is never dropped while it fits: when ``a`` starts at atom ``i`` and ends at atom
        ``j - 1`` and ``b`` starts at atom ``k > max(i + 1, j - O)``, then atoms ``k - 1 ..
        j`` together exceed the size limit (the rule of :func:`harness.text.packing.pack_units`).
        Default None: overlap is counted in :meth:`size_limit`'s unit.
        """
        return None

    #: Name of the units of :meth:`overlap_atoms` in messages (``sentences``, ``paragraphs``).
    overlap_unit: str = ""

    def min_size_limit(self) -> int | None:
        """Smallest chunk size promised, in :meth:`size_limit`'s unit, or None (no promise).

        ``semantic`` with ``min_chunk_size > 0``. A chunk of a contiguous strategy measuring
        less (its embedded text, as :meth:`size_limit`) is allowed only where it cannot be
        merged: the text from its start to the next chunk's end exceeds the size limit, or,
        for a document's last chunk, the text from the previous chunk's start to its end
        does (a document's only chunk may be smaller). Chunks cut by :func:`enforce_limit`
        (``metadata["hard_cut"]``) are exempt. Checked by :func:`check_chunks`.
        """
        return None

    def check_settings(self, doc: Document, chunks: list[Chunk]) -> None:
        """Check the strategy's own settings on the chunks of ``doc`` (``rows_per_chunk`` of
        ``table``, ``window_minutes`` / ``gap_minutes`` of ``timestamp``); called by
        :func:`check_chunks`. Default: nothing beyond the shared promises.

        Raises:
            ChunkContractError: one line naming the setting, the chunk and what was expected.
        """

    def overlap_exempt(self, text: str, pos: int) -> bool:
        """True when a chunk may end at ``pos`` of ``text`` inside a word without carrying
        overlap into the next chunk (a boundary of the strategy's own, e.g. a separator of
        ``recursive``, whose pieces are carried whole or not at all). Default: none."""
        return False

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
            ChunkContractError: a document's chunks break :meth:`overlap_limit` (a chunker
                bug; the message names the chunker, the setting and the chunks).
        """
        docs = list(docs)
        if progress:
            from tqdm.auto import tqdm

            docs = tqdm(docs, desc=f"chunk ({self.name})", unit="doc")
        out: list[Chunk] = []
        seen: set[str] = set()
        for doc in docs:
            chunks = self.finalize(doc, self.chunk(doc))
            check_overlap_promise(self, doc, chunks, measure_tokens=False)
            for c in chunks:
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
    Param(name, "int", low=0, high=bound, high_open=True, high_name=bound_name).check(value, "chunker")


def check_read(name: str, value, default, read: bool, reader: str) -> None:
    """Refuse a setting changed from its shipped ``default`` where the configuration never
    reads it (a sweep over it would compare identical chunkings).

    Args:
        name: the parameter, named as ``chunker.<name>``.
        value, default: its value and the value the shipped YAML gives it.
        read: whether the rest of the configuration reads it.
        reader: what reads it, for the message (e.g. ``"with chunker.mode=window"``).

    Raises:
        ValueError: ``chunker.<name>=<value> is read only <reader>: leave it at <default>``.
    """
    if not read and value != default:
        raise ValueError(f"chunker.{name}={value!r} is read only {reader}: leave it at {default!r}")


def check_size(name: str, value: int, minimum: int = 1) -> None:
    """Raise ``ValueError`` unless ``value`` is an int >= ``minimum`` (message names ``name``)."""
    Param(name, "int", low=minimum).check(value, "chunker")


def check_overlap(size: int, overlap: int) -> None:
    """Raise ``ValueError`` unless ``0 <= chunk_overlap < chunk_size``."""
    check_count_below("chunk_overlap", overlap, size, "chunk_size")


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
    why = " for unit=tokens (one character can take up to 4 tokens)" if unit == "tokens" else ""
    Param(name, "int", low=minimum, need=f"an integer >= {minimum}{why}").check(value, "chunker")


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


class ChunkContractError(ValueError):
    """A chunker's output breaks a promise of :class:`Chunker` (a chunker bug, never bad input)."""


def _setting(chunker: Chunker, kind: str) -> str:
    """``chunker=<name>`` with the setting behind a promise, for one-line messages."""
    names = {
        "overlap": ("chunk_overlap", "child_overlap", "overlap_sentences", "overlap_paragraphs"),
        "size": ("chunk_size", "max_chunk_size", "child_size"),
        "min": ("min_chunk_size",),
    }
    for attr in names[kind]:
        if hasattr(chunker, attr):
            return f"chunker={chunker.name} chunker.{attr}={getattr(chunker, attr)}"
    return f"chunker={chunker.name}"


def _consecutive(chunks: list[Chunk]):
    """Pairs of neighbouring chunks (output order) with the same document and parent."""
    last: dict[tuple[str, str | None], Chunk] = {}
    for c in chunks:
        key = (c.doc_id, c.parent_id)
        prev = last.get(key)
        if prev is not None:
            yield prev, c
        last[key] = c


def check_overlap_promise(chunker: Chunker, doc: Document, chunks: list[Chunk], measure_tokens: bool = True) -> None:
    """Refuse chunks of ``doc`` that break ``chunker.overlap_limit()`` (rules there).

    The shared units of consecutive chunks ``a``, ``b`` are the atoms of the whole document
    (characters, ``\\S+`` words, or tokens of the size limit's tokenizer) that meet
    ``[b.start, a.end)``. Characters and words are always counted; tokens only when
    ``measure_tokens`` (it tokenises the document once: the tests do, :meth:`Chunker.chunk_all`
    does not, and counts only what needs no tokenizer). Multi-span chunks are compared by
    their first start and last end.

    Raises:
        ChunkContractError: one line naming the chunker, its overlap setting, the two
            chunks and what was expected.
    """
    limit = chunker.overlap_limit()
    if limit is None or len(chunks) < 2:
        return
    text = doc.text
    if limit == 0:
        for a, b in _consecutive(chunks):
            if b.start < a.end and any(s < ae and bs < e for s, e in a.spans for bs, ae in b.spans):
                raise ChunkContractError(f"{_setting(chunker, 'overlap')}: chunks {a.chunk_id} and {b.chunk_id} share characters; expected no overlap")
        return
    unit = (chunker.size_limit() or ("chars", "model", 0))[:2]
    if chunker.overlap_unit:
        if unit[0] != "tokens" or measure_tokens:
            _check_atom_overlap(chunker, doc, chunks, limit)
        return
    atoms = None  # (starts, ends) of the document's atoms, built on first need

    def shared(s: int, e: int) -> int | None:
        nonlocal atoms
        if unit[0] == "chars":
            return e - s
        if unit[0] == "tokens" and not measure_tokens:
            return None
        if atoms is None:
            from harness.text.units import get_counter, layout_of

            lay = layout_of(get_counter(*unit), text)
            atoms = (list(lay.starts), list(lay.ends))
        import bisect

        return max(0, bisect.bisect_left(atoms[0], e) - bisect.bisect_right(atoms[1], s))

    for a, b in _consecutive(chunks):
        if b.start < a.end:
            if a.end - b.start <= limit:
                continue  # at most `limit` characters: at most `limit` units of any kind
            n = shared(b.start, a.end)
            if n is not None and n > limit:
                raise ChunkContractError(f"{_setting(chunker, 'overlap')}: chunks {a.chunk_id} and {b.chunk_id} share {n} {unit[0]}; expected at most {limit}")
            continue
        if ends_in_word(text, a.end) and not chunker.overlap_exempt(text, a.end):
            raise ChunkContractError(
                f"{_setting(chunker, 'overlap')}: chunk {a.chunk_id} ends inside a word and the next chunk {b.chunk_id} repeats none of it; "
                f"expected up to {limit} {unit[0]} of overlap"
            )


def ends_in_word(text: str, end: int) -> bool:
    """True when a chunk ending at ``end`` cuts inside a word (non-whitespace on both sides)."""
    return 0 < end < len(text) and not text[end - 1].isspace() and not text[end].isspace()


def dropped_overlaps(text: str, chunks: list[Chunk], exempt=None) -> list[tuple[Chunk, Chunk]]:
    """Consecutive chunks (same document and parent) where the first ends inside a word
    (:func:`ends_in_word`, not at a position ``exempt(text, pos)`` allows) and the second
    repeats none of it: where an overlap setting ``> 0`` was dropped at a hard cut."""
    return [(a, b) for a, b in _consecutive(chunks) if b.start >= a.end and ends_in_word(text, a.end) and not (exempt and exempt(text, a.end))]


def _check_atom_overlap(chunker: Chunker, doc: Document, chunks: list[Chunk], limit: int) -> None:
    """The overlap promise counted in :meth:`Chunker.overlap_atoms` (rules there)."""
    import bisect

    from harness.text.packing import fits
    from harness.text.units import get_counter

    text = doc.text
    atoms = chunker.overlap_atoms(text) or []
    what = chunker.overlap_unit
    size = chunker.size_limit()
    counter = get_counter(size[0], size[1]) if size else None
    starts = [s for s, _ in atoms]
    at_start = {s: i for i, (s, _) in enumerate(atoms)}
    at_end = {e: i for i, (_, e) in enumerate(atoms)}
    for a, b in _consecutive(chunks):
        j = bisect.bisect_left(starts, a.end)  # first atom after a
        if b.start < a.end:
            k = at_start.get(b.start)
            if k is None:
                raise ChunkContractError(
                    f"{_setting(chunker, 'overlap')}: chunk {b.chunk_id} starts inside one of the {what} of chunk {a.chunk_id}; expected whole {what} of overlap"
                )
            if j - k > limit:
                raise ChunkContractError(f"{_setting(chunker, 'overlap')}: chunks {a.chunk_id} and {b.chunk_id} share {j - k} {what}; expected at most {limit}")
        else:
            k = at_start.get(b.start, j)
        i = at_start.get(a.start)
        if i is None or at_end.get(a.end) != j - 1 or j >= len(atoms) or counter is None or k > j:
            continue
        if k > max(i + 1, j - limit) and fits(text, atoms[k - 1][0], atoms[j][1], counter, size[2]):
            raise ChunkContractError(
                f"{_setting(chunker, 'overlap')}: chunk {b.chunk_id} repeats {max(0, j - k)} {what} of chunk {a.chunk_id} "
                f"although {j - k + 1} fit with the next one; expected min({limit}, what fits)"
            )


def _check_min_size(chunker: Chunker, doc: Document, chunks: list[Chunk], counter, low: int) -> None:
    """The minimum size promise of :meth:`Chunker.min_size_limit` (rules there)."""
    text = doc.text
    size = chunker.size_limit()[2]
    for idx, c in enumerate(chunks):
        n = measure(counter, c.text)
        if n >= low or c.metadata.get("hard_cut"):
            continue
        if idx + 1 < len(chunks):
            other = chunks[idx + 1]
            merged = text[c.start : other.end]
        elif idx > 0:
            other = chunks[idx - 1]
            merged = text[other.start : c.end]
        else:
            continue
        m = measure(counter, merged)
        if m <= size:
            raise ChunkContractError(
                f"{_setting(chunker, 'min')}: chunk {c.chunk_id} measures {n} {counter.unit} < {low} although merged with its neighbour "
                f"{other.chunk_id} it would measure {m} <= {size}; expected at least {low} {counter.unit}"
            )


def check_chunks(chunker: Chunker, doc: Document, chunks: list[Chunk]) -> None:
    """Check every promise of :class:`Chunker` on the chunks of one document.

    Spans inside ``doc`` and exact (``chunk.text == prefix + joiner.join(span texts) +
    suffix``); no empty or whitespace-only chunk; no two chunks with identical spans
    (children of different parents excepted); :meth:`Chunker.size_limit` on the embedded
    text, counted with the limit's own counter, and ``metadata["size"]``/``["unit"]``
    recording it; one span per chunk and non-decreasing starts when ``contiguous``;
    every non-whitespace character in some chunk when ``partitions``; the minimum size
    (:meth:`Chunker.min_size_limit`); the strategy's own settings
    (:meth:`Chunker.check_settings`); the overlap promise (:func:`check_overlap_promise`,
    tokens counted).

    Raises:
        ChunkContractError: the first broken promise, in one line naming the chunker, the
            setting or rule, and the chunk.
    """
    text = doc.text
    limit = chunker.size_limit()
    counter = None
    if limit is not None:
        from harness.text.units import get_counter

        counter = get_counter(limit[0], limit[1])
    name = f"chunker={chunker.name}"
    seen: set = set()
    last_start = 0
    covered = bytearray(len(text))
    for c in chunks:
        if c.doc_id != doc.doc_id:
            raise ChunkContractError(f"{name}: chunk {c.chunk_id} names document {c.doc_id!r}, expected {doc.doc_id!r}")
        if not all(0 <= s < e <= len(text) for s, e in c.spans):
            raise ChunkContractError(f"{name}: chunk {c.chunk_id} has a span outside [0, {len(text)}]")
        meta = c.metadata
        parts = [text[s:e] for s, e in c.spans]
        if c.text != meta.get("prefix", "") + meta.get("joiner", "").join(parts) + meta.get("suffix", ""):
            raise ChunkContractError(f"{name}: chunk {c.chunk_id} text is not prefix + its span texts + suffix")
        if not "".join(parts).strip():
            raise ChunkContractError(f"{name}: chunk {c.chunk_id} is whitespace-only")
        if counter is not None:
            n = measure(counter, c.text)
            if n > limit[2]:
                raise ChunkContractError(f"{_setting(chunker, 'size')}: chunk {c.chunk_id} measures {n} {limit[0]}; expected at most {limit[2]}")
            if (meta.get("size"), meta.get("unit")) != (n, limit[0]):
                raise ChunkContractError(f"{name}: chunk {c.chunk_id} records size {meta.get('size')!r} {meta.get('unit')!r}; measured {n} {limit[0]}")
        key = (c.spans, c.parent_id)
        if key in seen:
            raise ChunkContractError(f"{name}: spans of chunk {c.chunk_id} appear twice")
        seen.add(key)
        if chunker.contiguous:
            if len(c.spans) != 1:
                raise ChunkContractError(f"{name}: chunk {c.chunk_id} has {len(c.spans)} spans; a contiguous strategy gives one")
            if c.start < last_start:
                raise ChunkContractError(f"{name}: chunk {c.chunk_id} starts before the previous chunk (start {c.start} < {last_start})")
            last_start = c.start
        for s, e in c.spans:
            covered[s:e] = b"\x01" * (e - s)
    if chunker.partitions:
        for i, ch in enumerate(text):
            if not covered[i] and not ch.isspace():
                raise ChunkContractError(
                    f"{name}: character {i} ({ch!r}) of {doc.doc_id} is in no chunk; the strategy promises to cover every non-whitespace character"
                )
    chunker.check_settings(doc, chunks)
    low = chunker.min_size_limit()
    if low and counter is not None and chunker.contiguous:
        _check_min_size(chunker, doc, chunks, counter, low)
    check_overlap_promise(chunker, doc, chunks)
