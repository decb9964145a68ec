"""Topic chunking: sentences (or paragraphs) clustered by topic; one chunk per topic group.

Every unit (sentence or paragraph) of a document is assigned a topic; all units of one
topic form one chunk, wherever they are in the document, so a chunk is NON-CONTIGUOUS: it
has one span per run of consecutive member units (a run's span covers the whitespace
between its units, so a chunk has as few spans as possible). The chunk text joins the
span texts with ``"\\n"`` (declared as ``metadata["joiner"]``).

Topic assignment (``method``):

* ``"kmeans"`` -- k-means over the units' sentence embeddings (all-MiniLM-L6-v2 through the
  run's encoder; scikit-learn ``KMeans``, fixed ``random_state``). Clustering sentence
  embeddings into topics follows e.g. BERTopic (Grootendorst 2022) without its
  dimensionality reduction.
* ``"lda"`` -- Latent Dirichlet Allocation (Blei, Ng & Jordan, JMLR 2003; scikit-learn
  ``LatentDirichletAllocation`` over ``CountVectorizer`` term counts with English stop
  words removed); each unit takes its dominant topic. A document without any countable
  term forms a single topic.

A topic group whose text exceeds ``max_chunk_size`` tokens is split into several chunks,
each a run of consecutive members (in document order) of that group. Units longer than
``max_chunk_size`` are cut first (a paragraph into sentences, a sentence into word-aligned
token windows). Chunks are returned in document order of their first span. Every
non-whitespace character is in exactly one chunk.
"""

from __future__ import annotations

import re

from harness.chunkers.base import Chunker, check_limit, check_size
from harness.params import Param
from harness.text.sentences import sentence_spans
from harness.text.units import check_unit, get_counter, strip_span, window_atoms
from harness.types import Chunk, Document, Span

METHODS = ("kmeans", "lda")
GROUPINGS = ("sentence", "paragraph")
JOINER = "\n"
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n\s*")


def auto_topics(n_units: int) -> int:
    """Number of topics for ``n_topics="auto"``: ``round(n_units / 8)`` clamped to [2, 20],
    and never more than ``n_units`` (one topic for a single unit)."""
    return max(1, min(n_units, max(2, min(20, round(n_units / 8)))))


class TopicChunker(Chunker):
    """Topic-grouped, non-contiguous chunks of sentences or paragraphs.

    Args:
        method: ``"kmeans"`` (embeddings, needs the encoder) or ``"lda"`` (term counts).
        n_topics: ``"auto"`` (:func:`auto_topics`: about one topic per 8 units, clamped to
            [2, 20]) or an integer >= 1 (capped at the number of units).
        unit_of_grouping: ``"sentence"`` (BlingFire sentences) or ``"paragraph"`` (text
            between blank lines).
        max_chunk_size: maximum chunk size in tokens of ``tokenizer``, >= 1, measured on the
            concatenated span texts and on the joined chunk text.
        tokenizer: ``"model"`` (embedding model's WordPiece) or ``"cl100k_base"``.
        random_state: seed of KMeans / LDA (results are deterministic for a given seed).
        encoder: :class:`harness.embeddings.model.Encoder` for ``method="kmeans"``; the
            builder passes the run's shared encoder.

    Chunk metadata: ``joiner`` (``"\\n"``), ``topic`` (topic id, numbered in order of first
    appearance), ``n_units``, ``method``, ``unit_of_grouping``.

    Raises:
        ValueError: a parameter outside its range (the message names it), or
            ``method="kmeans"`` used without an encoder.
    """

    name = "topic"
    needs_encoder = True
    contiguous = False
    partitions = True

    def __init__(
        self,
        method: str = "kmeans",
        n_topics: int | str = "auto",
        unit_of_grouping: str = "sentence",
        max_chunk_size: int = 254,
        tokenizer: str = "model",
        random_state: int = 0,
        encoder=None,
    ) -> None:
        if method not in METHODS:
            raise ValueError(f"chunker.method must be one of {list(METHODS)}, got {method!r}")
        if n_topics != "auto":
            Param("n_topics", "int", low=1, need="'auto' or an integer >= 1").check(n_topics, "chunker")
        if unit_of_grouping not in GROUPINGS:
            raise ValueError(f"chunker.unit_of_grouping must be one of {list(GROUPINGS)}, got {unit_of_grouping!r}")
        check_unit("tokens", tokenizer)
        check_limit("max_chunk_size", max_chunk_size, "tokens")
        check_size("random_state", random_state, minimum=0)
        self.method = method
        self.n_topics = n_topics
        self.unit_of_grouping = unit_of_grouping
        self.max_chunk_size = max_chunk_size
        self.tokenizer = tokenizer
        self.random_state = random_state
        self.encoder = encoder

    def size_limit(self) -> tuple[str, str, int]:
        return ("tokens", self.tokenizer, self.max_chunk_size)

    # -- units ---------------------------------------------------------------------------
    def units(self, text: str) -> list[Span]:
        """Grouping units of ``text`` (sorted, whitespace-trimmed spans), none over the size limit."""
        counter = get_counter("tokens", self.tokenizer)
        limit = self.max_chunk_size

        def sentences(s: int, e: int) -> list[Span]:
            out: list[Span] = []
            for a, b in sentence_spans(text, s, e):
                if counter.count(text[a:b]) <= limit:
                    out.append((a, b))
                else:
                    out.extend(window_atoms(text, a, b, counter, limit, 0))
            return out

        if self.unit_of_grouping == "sentence":
            return sentences(0, len(text))
        out: list[Span] = []
        cursor = 0
        bounds = [m.start() for m in _PARAGRAPH_BREAK.finditer(text)] + [len(text)]
        for b in bounds:
            s, e = strip_span(text, cursor, b)
            cursor = b
            if e <= s:
                continue
            if counter.count(text[s:e]) <= limit:
                out.append((s, e))
            else:
                out.extend(sentences(s, e))
        return out

    # -- topics --------------------------------------------------------------------------
    def topics(self, texts: list[str]) -> list[int]:
        """Topic label per unit text, renumbered 0, 1, ... in order of first appearance."""
        n = len(texts)
        k = auto_topics(n) if self.n_topics == "auto" else min(self.n_topics, n)
        if k <= 1:
            raw = [0] * n
        elif self.method == "kmeans":
            raw = self._kmeans(texts, k)
        else:
            raw = self._lda(texts, k)
        order: dict[int, int] = {}
        return [order.setdefault(int(r), len(order)) for r in raw]

    def _kmeans(self, texts: list[str], k: int) -> list[int]:
        import warnings

        import numpy as np
        from sklearn.cluster import KMeans
        from sklearn.exceptions import ConvergenceWarning

        if self.encoder is None:
            raise ValueError("TopicChunker(method='kmeans') needs an encoder (built by harness.experiment.build with the run's embedding model)")
        vecs = np.asarray(self.encoder.encode(texts, desc="embed units"), dtype=np.float64)
        k = min(k, len(np.unique(vecs.round(6), axis=0)))  # no more clusters than distinct points
        if k <= 1:
            return [0] * len(texts)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            km = KMeans(n_clusters=k, random_state=self.random_state, n_init=10)
            return km.fit_predict(vecs).tolist()

    def _lda(self, texts: list[str], k: int) -> list[int]:
        from sklearn.decomposition import LatentDirichletAllocation
        from sklearn.feature_extraction.text import CountVectorizer

        try:
            counts = CountVectorizer(stop_words="english").fit_transform(texts)
        except ValueError:  # empty vocabulary: nothing but stop words / punctuation
            return [0] * len(texts)
        lda = LatentDirichletAllocation(n_components=k, random_state=self.random_state, learning_method="batch")
        return lda.fit_transform(counts).argmax(axis=1).tolist()

    # -- chunking ------------------------------------------------------------------------
    def chunk(self, doc: Document) -> list[Chunk]:
        text = doc.text
        units = self.units(text)
        if not units:
            return []
        labels = self.topics([text[s:e] for s, e in units])
        counter = get_counter("tokens", self.tokenizer)
        groups: dict[int, list[int]] = {}
        for i, lab in enumerate(labels):
            groups.setdefault(lab, []).append(i)

        def spans_of(members: list[int]) -> list[Span]:
            """Spans of sorted unit indices; consecutive units share one span (gap included)."""
            spans: list[Span] = []
            for j, i in enumerate(members):
                if j and members[j - 1] == i - 1:
                    spans[-1] = (spans[-1][0], units[i][1])
                else:
                    spans.append(units[i])
            return spans

        def fits(spans: list[Span]) -> bool:
            parts = [text[s:e] for s, e in spans]
            return max(counter.count("".join(parts)), counter.count(JOINER.join(parts))) <= self.max_chunk_size

        out: list[Chunk] = []
        for topic in sorted(groups):  # label order = order of first appearance
            members = groups[topic]
            pieces: list[list[int]] = []
            for i in members:
                if pieces and fits(spans_of(pieces[-1] + [i])):
                    pieces[-1].append(i)
                else:
                    pieces.append([i])
            for piece in pieces:
                spans = spans_of(piece)
                meta = {
                    "joiner": JOINER,
                    "topic": topic,
                    "n_units": len(piece),
                    "method": self.method,
                    "unit_of_grouping": self.unit_of_grouping,
                }
                out.append(Chunk.from_spans(doc, spans, text=JOINER.join(text[s:e] for s, e in spans), metadata=meta))
        out.sort(key=lambda c: c.spans[0])  # document order of each chunk's first span
        return self.finalize(doc, out)
