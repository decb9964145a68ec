"""Semantic chunking: sentences -> embeddings -> boundaries where the topic shifts.

Breakpoint modes (``breakpoint=``) and the parameter each one reads:

* ``threshold`` (reads ``threshold``) -- walk the sentences in order keeping the running
  centroid (mean of the normalised sentence embeddings) of the current chunk; start a new
  chunk when the next sentence's cosine similarity to that centroid falls below
  ``threshold``.
* The other four modes use the cosine distances ``d_i = 1 - cos(s_i, s_{i+1})`` between
  adjacent sentences and cut between sentences ``i`` and ``i + 1`` when a score exceeds a
  document-level cut-off (:func:`breakpoint_indices`). They are the breakpoint types of
  Greg Kamradt's semantic chunking ("5 Levels of Text Splitting") as implemented by
  langchain-experimental's ``SemanticChunker``:

  - ``percentile`` (reads ``percentile``, default 95): ``d_i`` > the ``percentile``-th
    percentile of all ``d``;
  - ``standard_deviation`` (reads ``breakpoint_amount``, default 3): ``d_i > mean(d) +
    amount * std(d)`` (population standard deviation);
  - ``interquartile`` (reads ``breakpoint_amount``, default 1.5): ``d_i > mean(d) + amount
    * (Q3 - Q1)``, quartiles of ``d``;
  - ``gradient`` (reads ``breakpoint_amount``, default 95): ``g_i`` > the ``amount``-th
    percentile of ``g``, where ``g = numpy.gradient(d)`` (central differences inside,
    one-sided at the ends); needs at least two distances (three sentences).

Number of chunks (``number_of_chunks = k``, langchain-experimental's option of that name,
for the four distance modes): instead of the mode's cut-off, the cut-off that yields ``k``
chunks per document -- the cuts are the ``min(k, n) - 1`` boundaries with the highest
scores (``d`` for ``percentile``, ``standard_deviation`` and ``interquartile``, which
therefore all give the same chunks; the gradient ``g`` for ``gradient``), ties broken
towards the earlier boundary. The mode's own amount (``percentile``,
``breakpoint_amount``) is not read; setting ``breakpoint_amount`` too is refused, and so
is ``breakpoint=threshold`` (no distance series to rank). Degenerate documents: no
sentences give no chunk, one sentence one chunk, and ``k >= n`` sentences make every
sentence a chunk (two sentences and ``k >= 2``: two chunks, also for ``gradient``, which
has no gradient for one distance). On distinct distances the semantic cuts equal
LangChain's for ``1 <= k <= n - 1`` (LangChain interpolates a percentile of ``d``
linearly from ``k``: ``100 * (n - 1 - k) / (n - 2)``, whose strict ``>`` cut leaves
exactly ``k - 1`` distances above it); they differ by design where LangChain cannot reach
``k``: ``k >= n`` (LangChain gives ``n - 1`` chunks, and one chunk for two sentences),
tied distances at the cut-off (LangChain cuts none of the tied ones, so fewer chunks),
and ``gradient`` (LangChain ranks ``d`` whatever the mode). The size guards below still
apply, so ``max_chunk_size`` can add cuts and ``min_chunk_size`` remove some: ``k`` is
the number of semantic groups, the chunk count is ``k`` only when no guard fires.

Target chunk size (``target_chunk_size = T``, the rule of Chroma's
``KamradtModifiedChunker``, for ``percentile``, ``standard_deviation`` and
``interquartile``): with ``total`` the sum of the sentences' token counts (tokens of
``tokenizer``, each sentence counted alone) the document gets ``cuts = total // T``
semantic cuts, placed where ``d`` is largest, through the reference's bisection of a
distance cut-off (:func:`target_size_breakpoints`: ``lo, hi = 0, 1``; while ``hi - lo >
1e-6`` the midpoint ``t`` becomes ``lo`` when more than ``cuts`` distances exceed it, else
``hi``; then every ``d_i`` above the last midpoint is cut). So chunks average about ``T``
tokens before the size guards. The count is ``cuts`` up to that rounding: distances
within 1e-6 above the final cut-off are cut too (so there can be more), equal distances
are all cut or all kept, distances above 1 are always cut, and a series with fewer than
``cuts`` distances above 1e-6 gets fewer cuts. The mode's own amount is not read
(``breakpoint_amount`` set too is refused, as are ``number_of_chunks``,
``breakpoint=threshold`` and ``breakpoint=gradient``, whose score is not a distance); the
three modes give the same chunks. The size guards below still apply.

Compatible with Chroma's ``KamradtModifiedChunker`` (``compatible="chroma"``, needs
``target_chunk_size``, its ``avg_chunk_size``, and ``tokenizer="cl100k_base"``): the
units are not sentences but the reference's pieces, ``RecursiveTokenChunker`` chunks of
50 cl100k_base tokens (:func:`harness.chunkers.chroma.semantic_pieces`); piece ``i`` is
embedded as the strings of pieces ``i - 3 .. i + 3`` joined by single spaces
(:func:`harness.chunkers.chroma.kamradt_windows`), each embedding is scaled to unit
length, ``d_i = 1 - e_i . e_{i+1}``, ``total`` is the sum of the pieces' cl100k_base token
counts, and the cuts are those of :func:`target_size_breakpoints`. The reference joins a
chunk's pieces with spaces; here a chunk is one span from its first piece's start to its
last piece's end (the source's own whitespace between pieces). No size guard is applied,
as in the reference: :meth:`SemanticChunker.size_limit` is None, ``max_chunk_size`` is
not read, ``min_chunk_size`` must stay 0, and ``buffer_size`` must be 0 (its default) or 3
(both mean the reference's window of 3 pieces; other values are refused, not ignored).
Windows of 7 pieces can exceed MiniLM's 256 word pieces; the model truncates them, as it
does in the reference with that model, and the encoder warns (``embedding.on_truncate``).
``metadata["size"]`` is each chunk's own size in cl100k_base tokens.

LangChain's class re-joins sentences with spaces, so its chunks are not substrings of the
source; here the breakpoints are applied to exact sentence spans.

Sentence windows (``buffer_size``, Kamradt's "combined sentences"): with ``buffer_size =
b > 0`` sentence ``i`` is represented by the embedding of the source text from sentence
``i - b`` to sentence ``i + b`` (clipped at the document ends), which smooths the distance
series; chunk spans are still sentence spans. A window longer than the model's input
(256 word pieces for all-MiniLM-L6-v2) is truncated by the model when embedded.

Size guards, applied while grouping in every mode: a chunk never exceeds
``max_chunk_size`` tokens (re-measured on the chunk's own text; a single sentence longer
than that is cut into token windows first), and a semantic boundary is skipped while the
group before it is smaller than ``min_chunk_size`` tokens (the group is merged with the
next one). The final group, if smaller than ``min_chunk_size``, is merged into the
previous one when the result fits ``max_chunk_size``. ``max_chunk_size`` wins over
``min_chunk_size``. A chunk's span runs from its first sentence's start to its last
sentence's end, so the whitespace between sentences is kept and ``text ==
doc.text[start:end]``.
"""

from __future__ import annotations

import numpy as np

from harness.chunkers.base import Chunker, check_limit, check_size
from harness.chunkers.chroma import KAMRADT_BUFFER, check_compatible, check_tiktoken, kamradt_windows, semantic_pieces, token_count
from harness.params import Param
from harness.text.sentences import sentence_spans
from harness.text.units import check_unit, get_counter, window_atoms
from harness.types import Chunk, Document, Span

BREAKPOINTS = ("threshold", "percentile", "standard_deviation", "interquartile", "gradient")

#: ``breakpoint_amount`` used when it is None, per mode (langchain-experimental's defaults).
DEFAULT_AMOUNTS = {"standard_deviation": 3.0, "interquartile": 1.5, "gradient": 95.0}


def breakpoint_indices(distances, mode: str, amount: float, number_of_chunks: int | None = None) -> list[int]:
    """Positions of the breakpoints in a series of adjacent-sentence distances.

    Args:
        distances: ``d_i`` = cosine distance between sentence ``i`` and ``i + 1``, shape
            ``(n - 1,)`` for ``n`` sentences.
        mode: ``"percentile"``, ``"standard_deviation"``, ``"interquartile"`` or
            ``"gradient"`` (definitions in the module docstring).
        amount: the mode's parameter: a percentile in (0, 100) for ``percentile`` and
            ``gradient``, a multiplier (>= 0) of the standard deviation or of the
            interquartile range otherwise. Not read when ``number_of_chunks`` is set.
        number_of_chunks: None, or ``k >= 1``: return the ``min(k, n) - 1`` positions
            with the highest scores (``d``, or its gradient for ``gradient``; among equal
            scores the earlier position first), i.e. the cut-off that yields ``min(k, n)``
            groups (module docstring: how this relates to LangChain's option).

    Returns:
        Sorted indices ``i`` such that a new chunk starts at sentence ``i + 1`` (the score
        at ``i`` is strictly greater than the cut-off). Empty for an empty series, and for
        ``gradient`` with fewer than two distances unless ``number_of_chunks >= 2`` asks
        for every boundary.

    Raises:
        ValueError: unknown ``mode``, or ``number_of_chunks`` not an integer >= 1.
    """
    d = np.asarray(distances)
    if mode not in BREAKPOINTS or mode == "threshold":
        raise ValueError(f"chunker.breakpoint must be one of {list(BREAKPOINTS[1:])} for a distance series, got {mode!r}")
    if number_of_chunks is not None:
        return _top_boundaries(d, mode, number_of_chunks)
    if d.size == 0:
        return []
    score = d
    if mode == "percentile":
        cut = np.percentile(d, amount)
    elif mode == "standard_deviation":
        cut = np.mean(d) + amount * np.std(d)
    elif mode == "interquartile":
        q1, q3 = np.percentile(d, [25, 75])
        cut = np.mean(d) + amount * (q3 - q1)
    else:  # gradient
        if d.size < 2:
            return []
        score = np.gradient(d)
        cut = np.percentile(score, amount)
    return [int(i) for i in np.flatnonzero(score > cut)]


#: Shipped values of the settings only some breakpoint modes read (``conf/chunker/semantic.yaml``).
DEFAULT_THRESHOLD, DEFAULT_PERCENTILE, DEFAULT_MAX = 0.5, 95.0, 254


def _check_read(breakpoint: str, threshold, percentile, amount, number_of_chunks, target_chunk_size) -> None:
    """Refuse a setting the chosen mode never reads (a sweep over it would compare identical
    chunkings): ``threshold`` other than 0.5 needs ``breakpoint=threshold``; ``percentile``
    other than 95 needs ``breakpoint=percentile`` without ``number_of_chunks`` /
    ``target_chunk_size``; ``breakpoint_amount`` needs ``standard_deviation``,
    ``interquartile`` or ``gradient``.

    Raises:
        ValueError: one line naming the setting, the mode and what would read it.
    """
    if threshold != DEFAULT_THRESHOLD and breakpoint != "threshold":
        raise ValueError(
            f"chunker.threshold={threshold!r} is read only by chunker.breakpoint=threshold, got breakpoint={breakpoint}: leave it at {DEFAULT_THRESHOLD}"
        )
    if percentile != DEFAULT_PERCENTILE and (breakpoint != "percentile" or number_of_chunks is not None or target_chunk_size is not None):
        why = f"breakpoint={breakpoint}" if breakpoint != "percentile" else "number_of_chunks / target_chunk_size set (they replace it)"
        raise ValueError(
            f"chunker.percentile={percentile!r} is read only by chunker.breakpoint=percentile without number_of_chunks and target_chunk_size, got {why}: leave it at {DEFAULT_PERCENTILE}"
        )
    if amount is not None and breakpoint in ("threshold", "percentile"):
        raise ValueError(
            f"chunker.breakpoint_amount={amount!r} is read only by chunker.breakpoint=standard_deviation | interquartile | gradient, got breakpoint={breakpoint}: set it null"
        )


#: ``chunker.number_of_chunks``: null, or the chunks per document (an integer >= 1).
NUMBER_OF_CHUNKS = Param("number_of_chunks", "int", low=1, allow_none=True, none="null or {}", note="chunks per document")


def _top_boundaries(d: np.ndarray, mode: str, number_of_chunks: int) -> list[int]:
    """The ``min(k, n) - 1`` highest-scoring boundaries of ``n = d.size + 1`` sentences."""
    NUMBER_OF_CHUNKS.check(number_of_chunks, "chunker")
    cuts = min(number_of_chunks, d.size + 1) - 1
    if cuts <= 0:
        return []
    if cuts >= d.size:  # as many chunks as sentences: every boundary, whatever the scores
        return list(range(d.size))
    score = np.gradient(d) if mode == "gradient" else d  # d.size >= 2 here
    order = np.lexsort((np.arange(d.size), -score))  # highest score first, then earliest
    return sorted(int(i) for i in order[:cuts])


#: ``chunker.target_chunk_size``: null, or the average chunk size in tokens (an integer >= 1).
TARGET_CHUNK_SIZE = Param("target_chunk_size", "int", low=1, allow_none=True, none="null or {}", note="average chunk size in tokens of chunker.tokenizer")


def bisect_cut_off(distances, number_of_cuts: int) -> float:
    """The distance cut-off of ``KamradtModifiedChunker``'s bisection (Chroma's ``chunking_evaluation``).

    ``lo, hi = 0.0, 1.0``; while ``hi - lo > 1e-6``: ``t = (lo + hi) / 2``, and ``lo = t``
    when more than ``number_of_cuts`` distances are strictly above ``t``, else ``hi = t``.

    Args:
        distances: cosine distances between adjacent units (any real values).
        number_of_cuts: the wanted number of cuts, >= 0.

    Returns:
        The last midpoint ``t`` (in (0, 1)), which the reference cuts at (``d > t``).
    """
    d = np.asarray(distances, dtype=np.float64)
    lo, hi = 0.0, 1.0
    t = 0.5
    while hi - lo > 1e-6:
        t = (lo + hi) / 2.0
        if int(np.sum(d > t)) > number_of_cuts:
            lo = t
        else:
            hi = t
    return t


def target_size_breakpoints(distances, total_tokens: int, target_chunk_size: int) -> list[int]:
    """Breakpoints for chunks of ``target_chunk_size`` tokens on average (``KamradtModifiedChunker``'s rule).

    Args:
        distances: ``d_i`` = cosine distance between unit ``i`` and ``i + 1``, shape ``(n - 1,)``.
        total_tokens: the document's size, the sum of its units' token counts, >= 0.
        target_chunk_size: wanted average chunk size in the same tokens, >= 1.

    Returns:
        Sorted indices ``i`` with ``d_i > bisect_cut_off(distances, total_tokens //
        target_chunk_size)``: a new chunk starts at unit ``i + 1``. About ``total_tokens //
        target_chunk_size`` of them (exactly, unless distances lie within 1e-6 above the
        cut-off, are equal, exceed 1, or fewer than that many exceed 1e-6).

    Raises:
        ValueError: ``target_chunk_size`` not an integer >= 1.
    """
    if target_chunk_size is None:
        raise ValueError("chunker.target_chunk_size must be an integer >= 1 here, got None")
    TARGET_CHUNK_SIZE.check(target_chunk_size, "chunker")
    d = np.asarray(distances, dtype=np.float64)
    t = bisect_cut_off(d, int(total_tokens) // target_chunk_size)
    return [int(i) for i in np.flatnonzero(d > t)]


class SemanticChunker(Chunker):
    """Embedding-breakpoint chunking over exact sentence spans.

    Args:
        breakpoint: ``"threshold"``, ``"percentile"``, ``"standard_deviation"``,
            ``"interquartile"`` or ``"gradient"`` (see the module docstring).
        threshold: cosine-similarity cut-off in [-1, 1], read by ``threshold`` mode only
            (higher gives smaller chunks).
        percentile: percentile in (0, 100) of adjacent-sentence distances above which a
            breakpoint is placed, read by ``percentile`` mode only.
        breakpoint_amount: the parameter of ``standard_deviation`` (std multiplier, >= 0,
            default 3), ``interquartile`` (IQR multiplier, >= 0, default 1.5) and
            ``gradient`` (percentile in (0, 100), default 95); None means the mode's
            default. Ignored by ``threshold`` and ``percentile``.
        number_of_chunks: None (off), or an integer ``k >= 1``: semantic groups per
            document, LangChain's ``number_of_chunks`` -- the cut-off of the distance mode
            is replaced by the one that yields ``min(k, sentences)`` groups (module
            docstring). Needs a distance mode (not ``threshold``) and
            ``breakpoint_amount=None``; ``percentile`` is then not read. The size guards
            still apply.
        target_chunk_size: None (off), or an integer ``T >= 1``: average chunk size in
            tokens of ``tokenizer`` -- the mode's cut-off is replaced by
            ``KamradtModifiedChunker``'s bisection for ``total_tokens // T`` cuts (module
            docstring). Needs ``breakpoint`` in ``percentile``, ``standard_deviation``,
            ``interquartile`` and ``breakpoint_amount=None``, ``number_of_chunks=None``.
            The size guards still apply (not with ``compatible="chroma"``).
        max_chunk_size: maximum chunk size in tokens of ``tokenizer``, >= 4 (not read with
            ``compatible="chroma"``).
        min_chunk_size: minimum chunk size in tokens, ``0 <= min_chunk_size <=
            max_chunk_size``; a group below it is merged with the next one (0: off; must
            be 0 with ``compatible="chroma"``).
        buffer_size: neighbouring sentences on each side embedded with each sentence,
            >= 0 (0: each sentence alone). With ``compatible="chroma"`` 0 or 3, both
            meaning the reference's 3 pieces each side.
        tokenizer: ``"model"`` (the embedding model's WordPiece) or ``"cl100k_base"``
            (required by ``compatible="chroma"``).
        compatible: None (this project's units and guards) or ``"chroma"``: Chroma's
            ``KamradtModifiedChunker`` exactly, with ``avg_chunk_size = target_chunk_size``
            (module docstring); no size guard, :meth:`size_limit` None.
        encoder: the :class:`harness.embeddings.model.Encoder` used for sentence
            embeddings; the builder passes the run's shared encoder.

    Raises:
        ValueError: a parameter outside its range or a combination above that is refused
            (the message names the setting and the value needed), or :meth:`chunk` called
            without an encoder.
    """

    name = "semantic"
    needs_encoder = True

    def __init__(
        self,
        breakpoint: str = "threshold",
        threshold: float = 0.5,
        percentile: float = 95.0,
        breakpoint_amount: float | None = None,
        number_of_chunks: int | None = None,
        target_chunk_size: int | None = None,
        max_chunk_size: int = 254,
        min_chunk_size: int = 0,
        buffer_size: int = 0,
        tokenizer: str = "model",
        compatible: str | None = None,
        encoder=None,
    ) -> None:
        if breakpoint not in BREAKPOINTS:
            raise ValueError(f"chunker.breakpoint must be one of {list(BREAKPOINTS)}, got {breakpoint!r}")
        Param("threshold", "number", low=-1, high=1, noun="a cosine similarity").check(threshold, "chunker")
        Param("percentile", "number", low=0, high=100, low_open=True, high_open=True, noun="").check(percentile, "chunker")
        Param("breakpoint_amount", "number", allow_none=True, none="null or {}", noun="a finite number").check(breakpoint_amount, "chunker")
        if breakpoint_amount is not None:
            if breakpoint == "gradient" and not 0.0 < breakpoint_amount < 100.0:
                raise ValueError(f"chunker.breakpoint_amount must be a percentile in (0, 100) for breakpoint=gradient, got {breakpoint_amount!r}")
            if breakpoint in ("standard_deviation", "interquartile") and breakpoint_amount < 0:
                raise ValueError(f"chunker.breakpoint_amount must be >= 0 for breakpoint={breakpoint}, got {breakpoint_amount!r}")
        _check_read(breakpoint, threshold, percentile, breakpoint_amount, number_of_chunks, target_chunk_size)
        NUMBER_OF_CHUNKS.check(number_of_chunks, "chunker")
        if number_of_chunks is not None and breakpoint == "threshold":
            raise ValueError(
                "chunker.number_of_chunks ranks the adjacent-sentence distances, which chunker.breakpoint=threshold "
                "does not use: set chunker.breakpoint=percentile (or standard_deviation | interquartile | gradient)"
            )
        if number_of_chunks is not None and breakpoint_amount is not None:
            raise ValueError(
                f"chunker.number_of_chunks={number_of_chunks} replaces the cut-off that chunker.breakpoint_amount="
                f"{breakpoint_amount!r} sets: set one of them (the other null)"
            )
        TARGET_CHUNK_SIZE.check(target_chunk_size, "chunker")
        if target_chunk_size is not None:
            if breakpoint in ("threshold", "gradient"):
                raise ValueError(
                    f"chunker.target_chunk_size cuts where the adjacent-sentence distances exceed a searched cut-off, which chunker.breakpoint={breakpoint} "
                    "does not use: set chunker.breakpoint=percentile (or standard_deviation | interquartile)"
                )
            if number_of_chunks is not None:
                raise ValueError(
                    f"chunker.target_chunk_size={target_chunk_size} and chunker.number_of_chunks={number_of_chunks} both set the number of cuts: set one of them (the other null)"
                )
            if breakpoint_amount is not None:
                raise ValueError(
                    f"chunker.target_chunk_size={target_chunk_size} replaces the cut-off that chunker.breakpoint_amount="
                    f"{breakpoint_amount!r} sets: set one of them (the other null)"
                )
        check_compatible(compatible)
        check_limit("max_chunk_size", max_chunk_size, "tokens")
        Param("min_chunk_size", "int", low=0, high=max_chunk_size, high_name="max_chunk_size").check(min_chunk_size, "chunker")
        check_size("buffer_size", buffer_size, minimum=0)
        check_unit("tokens", tokenizer)
        if compatible is not None:
            if target_chunk_size is None:
                raise ValueError(
                    "chunker.compatible=chroma re-runs KamradtModifiedChunker, whose avg_chunk_size is chunker.target_chunk_size: "
                    "set it (an integer >= 1, in cl100k_base tokens; 400 is the reference's default)"
                )
            check_tiktoken(tokenizer)
            if buffer_size not in (0, KAMRADT_BUFFER):
                raise ValueError(
                    f"chunker.compatible=chroma embeds each piece with the reference's {KAMRADT_BUFFER} pieces on each side: "
                    f"needs chunker.buffer_size=0 (default) or {KAMRADT_BUFFER}, got {buffer_size!r}"
                )
            if min_chunk_size != 0:
                raise ValueError(f"chunker.compatible=chroma applies no size guard, as the reference: needs chunker.min_chunk_size=0, got {min_chunk_size!r}")
            if max_chunk_size != DEFAULT_MAX:
                raise ValueError(
                    f"chunker.compatible=chroma applies no size guard, as the reference: chunker.max_chunk_size={max_chunk_size!r} is not read, leave it at {DEFAULT_MAX}"
                )
        self.breakpoint = breakpoint
        self.threshold = float(threshold)
        self.percentile = float(percentile)
        self.breakpoint_amount = None if breakpoint_amount is None else float(breakpoint_amount)
        self.number_of_chunks = number_of_chunks
        self.target_chunk_size = target_chunk_size
        self.max_chunk_size = max_chunk_size
        self.min_chunk_size = min_chunk_size
        self.buffer_size = buffer_size
        self.tokenizer = tokenizer
        self.compatible = compatible
        self.encoder = encoder

    @property
    def amount(self) -> float | None:
        """The cut-off parameter the configured mode reads (None for ``threshold``)."""
        if self.breakpoint == "threshold":
            return None
        if self.breakpoint == "percentile":
            return self.percentile
        return DEFAULT_AMOUNTS[self.breakpoint] if self.breakpoint_amount is None else self.breakpoint_amount

    def _units(self, text: str) -> list[Span]:
        """Sentence spans, with sentences over ``max_chunk_size`` tokens cut into windows."""
        counter = get_counter("tokens", self.tokenizer)
        out: list[Span] = []
        for s, e in sentence_spans(text):
            if counter.count(text[s:e]) <= self.max_chunk_size:
                out.append((s, e))
            else:
                out.extend(window_atoms(text, s, e, counter, self.max_chunk_size, 0))
        return out

    def _embed(self, text: str, units: list[Span]) -> np.ndarray:
        """One embedding per unit: the unit alone, or with ``buffer_size`` neighbours each side."""
        b, n = self.buffer_size, len(units)
        texts = [text[units[max(0, i - b)][0] : units[min(n - 1, i + b)][1]] for i in range(n)]
        return self.encoder.encode(texts, desc="embed sentences")

    def size_limit(self) -> tuple[str, str, int] | None:
        return None if self.compatible else ("tokens", self.tokenizer, self.max_chunk_size)

    def min_size_limit(self) -> int | None:
        """``min_chunk_size`` tokens when > 0: a chunk is smaller only where merging it with its
        neighbour would break ``max_chunk_size`` (rules in :meth:`Chunker.min_size_limit`)."""
        return self.min_chunk_size or None

    def chunk(self, doc: Document) -> list[Chunk]:
        if self.encoder is None:
            raise ValueError("SemanticChunker needs an encoder (built by harness.experiment.build with the run's embedding model)")
        if self.compatible:
            return self._chunk_chroma(doc)
        text = doc.text
        units = self._units(text)
        if not units:
            return []
        vecs = self._embed(text, units)
        if self.breakpoint == "threshold":
            starts = self._boundaries_threshold_sized(text, units, vecs)
        else:
            dist = 1.0 - np.einsum("ij,ij->i", vecs[:-1], vecs[1:])
            if self.target_chunk_size is not None:
                total = sum(self._tokens(text, s, e) for s, e in units)
                cuts = target_size_breakpoints(dist, total, self.target_chunk_size)
            else:
                cuts = breakpoint_indices(dist, self.breakpoint, self.amount, self.number_of_chunks)
            semantic = {i + 1 for i in cuts}
            starts = self._size_cap(text, units, semantic)
        starts = self._merge_small_tail(text, units, starts)
        groups: list[list[Span]] = []
        for i, sp in enumerate(units):
            if i == 0 or i in starts:
                groups.append([])
            groups[-1].append(sp)
        meta_base = {"breakpoint": self.breakpoint}
        return [Chunk.from_spans(doc, [(g[0][0], g[-1][1])], metadata={**meta_base, "n_sentences": len(g)}) for g in groups]

    def _chunk_chroma(self, doc: Document) -> list[Chunk]:
        """``KamradtModifiedChunker`` chunks of ``doc`` as single-span chunks (module docstring)."""
        text = doc.text
        pieces = semantic_pieces(text)
        if not pieces:
            return []
        strings = [p for _, p in pieces]
        vecs = np.asarray(self.encoder.encode(kamradt_windows(strings, KAMRADT_BUFFER), desc="embed pieces"), dtype=np.float64)
        vecs = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
        dist = 1.0 - np.einsum("ij,ij->i", vecs[:-1], vecs[1:])
        count = token_count("cl100k_base")
        total = sum(count(p) for p in strings)
        starts = [0] + [i + 1 for i in target_size_breakpoints(dist, total, self.target_chunk_size)] + [len(pieces)]
        chunks = []
        for a, b in zip(starts[:-1], starts[1:]):
            s, e = pieces[a][0][0], pieces[b - 1][0][1]
            meta = {"compatible": self.compatible, "target_chunk_size": self.target_chunk_size, "n_pieces": b - a, "size": count(text[s:e]), "unit": "tokens"}
            chunks.append(Chunk.from_spans(doc, [(s, e)], metadata=meta))
        return chunks

    def _tokens(self, text: str, start: int, end: int) -> int:
        return get_counter("tokens", self.tokenizer).count(text[start:end])

    def _fits(self, text: str, start: int, end: int) -> bool:
        return self._tokens(text, start, end) <= self.max_chunk_size

    def _too_small(self, text: str, start: int, end: int) -> bool:
        return self.min_chunk_size > 0 and self._tokens(text, start, end) < self.min_chunk_size

    def _boundaries_threshold_sized(self, text: str, units: list[Span], vecs: np.ndarray) -> set[int]:
        """Threshold mode with both size guards applied while walking (centroid resets at every cut)."""
        starts: set[int] = set()
        first = 0
        centroid = vecs[0].astype(np.float64).copy()
        for i in range(1, len(units)):
            c = centroid / (np.linalg.norm(centroid) or 1.0)
            similar = float(vecs[i] @ c) >= self.threshold
            keep = similar or self._too_small(text, units[first][0], units[i - 1][1])
            if keep and self._fits(text, units[first][0], units[i][1]):
                centroid += vecs[i]
                continue
            starts.add(i)
            first = i
            centroid = vecs[i].astype(np.float64).copy()
        return starts

    def _size_cap(self, text: str, units: list[Span], semantic: set[int]) -> set[int]:
        """Final group starts: semantic starts not blocked by ``min_chunk_size``, plus cuts forced by ``max_chunk_size``."""
        out: set[int] = set()
        first = 0
        for i in range(1, len(units)):
            cut = i in semantic and not self._too_small(text, units[first][0], units[i - 1][1])
            if cut or not self._fits(text, units[first][0], units[i][1]):
                out.add(i)
                first = i
        return out

    def _merge_small_tail(self, text: str, units: list[Span], starts: set[int]) -> set[int]:
        """Drop the last boundary when the final group is below ``min_chunk_size`` and the merge fits."""
        if self.min_chunk_size == 0 or not starts:
            return starts
        ordered = sorted(starts)
        last = ordered[-1]
        prev = ordered[-2] if len(ordered) > 1 else 0
        if self._too_small(text, units[last][0], units[-1][1]) and self._fits(text, units[prev][0], units[-1][1]):
            return set(ordered[:-1])
        return starts
