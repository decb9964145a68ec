"""Contextual compression: after retrieval, keep only the sentences of the top-k chunks that
are most similar to the query, up to a size budget, and score what is kept.

For one query and one cut-off ``k``:

1. **Candidates** -- the sentences of the top-k returned chunks (after ``expand``), as
   exact spans: each chunk span is segmented by :func:`harness.text.sentences.
   sentence_spans` (BlingFire, ``split_paragraphs`` so no sentence crosses a blank line).
   A sentence span met twice (overlapping chunks) is one candidate, owned by the better
   ranked chunk.
2. **Similarity** -- cosine of the query embedding and each sentence embedding (the run's
   encoder, all-MiniLM-L6-v2 by default; vectors L2-normalised so cosine = dot product).
3. **Selection** -- candidates in decreasing similarity (ties: better ranked chunk, then
   earlier start) are kept while the running size stays within ``budget`` (in ``unit`` of
   ``tokenizer``, each sentence measured on its own text); a sentence that would overflow
   is skipped and the next, smaller one may still fit. The kept sentences are the
   compressed context, a set of spans ``C_k``.

Metrics per query, averaged like every other metric (``E`` = evidence spans, ``R_k`` = the
union of the top-k chunk spans; sizes in characters):

* ``compressed.recall@k = |E ∩ C_k| / |E|``, ``compressed.precision@k = |E ∩ C_k| /
  |C_k|`` (0 when nothing is kept), ``compressed.iou@k = |E ∩ C_k| / |E ∪ C_k|``;
* ``compressed.context_tokens@k``: tokens (context tokenizer) of the kept sentences' texts,
  summed;
* ``compression.tokens_saved@k = context_tokens@k − compressed.context_tokens@k``, where
  ``context_tokens@k`` sums the tokens of the top-k chunks' texts as the uncompressed
  metric does (so a declared prefix, such as a section path, counts as saved);
* ``compression.precision_gain@k = compressed.precision@k − precision@k`` (``precision@k
  = |E ∩ R_k| / |R_k|``, the uncompressed span precision).

MLflow keys follow :func:`harness.evaluation.metrics.mlflow_key` (``compressed.precision_at_5``).

Source: the embeddings-filter form of contextual compression (LangChain's
``ContextualCompressionRetriever`` with an ``EmbeddingsFilter``, here at sentence level and
with a size budget instead of a similarity threshold); no LLM is involved.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from harness.params import Param
from harness.types import Chunk, Document, Query, Span

UNITS = ("tokens", "chars", "words")


class Compressor:
    """Post-retrieval sentence selection under a budget (see the module docstring).

    Args:
        enabled: compute the compression metrics (False: :meth:`evaluate` is not called by
            the pipeline and nothing is loaded).
        budget: maximum size of the kept sentences in ``unit``, >= 1.
        unit: ``"tokens"``, ``"chars"`` or ``"words"``.
        tokenizer: ``"model"`` (the embedding model's WordPiece) or ``"cl100k_base"``, for
            ``unit="tokens"``.
        split_paragraphs: also cut sentences at blank lines (default True).
        encoder: a :class:`harness.embeddings.model.Encoder` (``encode(texts) -> (n, dim)``
            float array); required when ``enabled``.

    Raises:
        ValueError: ``enabled`` not a bool, ``budget`` < 1, an unknown ``unit`` or
            ``tokenizer``, or ``enabled`` without an encoder (each message names
            ``compression.<parameter>``).
    """

    needs_encoder = True

    def __init__(
        self,
        enabled: bool = False,
        budget: int = 256,
        unit: str = "tokens",
        tokenizer: str = "model",
        split_paragraphs: bool = True,
        encoder=None,
    ) -> None:
        from harness.text.units import check_unit

        Param("enabled", "bool").check(enabled, "compression")
        Param("budget", "int", low=1, note="in compression.unit").check(budget, "compression")
        if unit not in UNITS:
            raise ValueError(f"compression.unit must be one of {list(UNITS)}, got {unit!r}")
        try:
            check_unit(unit, tokenizer)
        except ValueError as exc:
            raise ValueError(f"compression.tokenizer: {exc}") from exc
        Param("split_paragraphs", "bool").check(split_paragraphs, "compression")
        if enabled and encoder is None:
            raise ValueError("compression.enabled=true needs an encoder (the run's embedding model)")
        self.enabled = enabled
        self.budget = budget
        self.unit = unit
        self.tokenizer = tokenizer
        self.split_paragraphs = split_paragraphs
        self.encoder = encoder
        self._sentences: dict[tuple[str, Span], list[Span]] = {}

    # -- building blocks -------------------------------------------------------------------
    def sentences(self, chunks: Sequence[Chunk], documents: Mapping[str, Document]) -> list[tuple[int, str, Span]]:
        """Candidate sentences of ranked ``chunks``: ``(chunk rank from 0, doc_id, span)``.

        Each chunk span is segmented separately; a span already met in a better ranked chunk
        is left out. Order: by rank, then start.
        """
        from harness.text.sentences import sentence_spans

        out: list[tuple[int, str, Span]] = []
        seen: set[tuple[str, Span]] = set()
        for rank, c in enumerate(chunks):
            text = documents[c.doc_id].text
            for s, e in c.spans:
                key = (c.doc_id, (s, e))
                if key not in self._sentences:
                    self._sentences[key] = sentence_spans(text, s, e, split_paragraphs=self.split_paragraphs)
                for sent in self._sentences[key]:
                    if (c.doc_id, sent) not in seen:
                        seen.add((c.doc_id, sent))
                        out.append((rank, c.doc_id, sent))
        return out

    def select(self, scores: Sequence[float], sizes: Sequence[int], ranks: Sequence[int], starts: Sequence[int]) -> list[int]:
        """Indices of the candidates kept under :attr:`budget` (greedy by score, see module docstring).

        Args:
            scores: similarity of each candidate to the query.
            sizes: each candidate's size in :attr:`unit`.
            ranks: rank of the chunk each candidate comes from (tie-break).
            starts: start offset of each candidate (tie-break).

        Returns:
            Kept indices, sorted ascending.
        """
        order = sorted(range(len(scores)), key=lambda i: (-float(scores[i]), ranks[i], starts[i]))
        kept, used = [], 0
        for i in order:
            if used + sizes[i] <= self.budget:
                kept.append(i)
                used += sizes[i]
        return sorted(kept)

    # -- evaluation ------------------------------------------------------------------------
    def evaluate(
        self,
        queries: Sequence[Query],
        scored: Mapping[str, Sequence[Chunk]],
        ks: Sequence[int],
        documents: Mapping[str, Document],
        context_token_counter: Callable[[str], int] | None = None,
    ) -> dict[str, dict[str, float]]:
        """Compression metrics for every query at every ``k`` (names in the module docstring).

        Args:
            queries: the labelled queries.
            scored: query id -> the ranked chunks handed to the generator (at least the
                top ``max(ks)``; fewer when fewer were retrieved).
            ks: cut-offs, each >= 1.
            documents: doc id -> document.
            context_token_counter: counts context tokens of one text; without it the
                ``context_tokens``/``tokens_saved`` metrics are omitted.

        Returns:
            ``{query_id: {"compressed.recall@5": ..., "compression.tokens_saved@5": ..., ...}}``.

        Raises:
            ValueError: the compressor is not enabled (it has no encoder then).
        """
        from harness.evaluation.metrics import span as sp
        from harness.text.units import get_counter

        if not self.enabled:
            raise ValueError("compression.enabled is false: nothing to evaluate")
        ks = sorted(set(ks))
        top = max(ks)
        counter = get_counter(self.unit, self.tokenizer)
        candidates = {q.query_id: self.sentences(list(scored.get(q.query_id, ()))[:top], documents) for q in queries}
        texts = sorted({documents[d].text[s:e] for cands in candidates.values() for _, d, (s, e) in cands})
        vectors = self._embed([q.text for q in queries] + texts)
        q_vec = {q.query_id: vectors[i] for i, q in enumerate(queries)}
        s_vec = {t: vectors[len(queries) + i] for i, t in enumerate(texts)}
        sizes: dict[str, int] = {}
        out: dict[str, dict[str, float]] = {}
        for q in queries:
            evidence = sp.span_set((e.doc_id, e.span) for e in q.evidence)
            e_size = sp.size(evidence)
            ranked = list(scored.get(q.query_id, ()))[:top]
            cands = candidates[q.query_id]
            cand_texts = [documents[d].text[s:e] for _, d, (s, e) in cands]
            for t in cand_texts:
                if t not in sizes:
                    sizes[t] = counter.count(t)
            scores = [float(np.dot(q_vec[q.query_id], s_vec[t])) for t in cand_texts]
            row: dict[str, float] = {}
            for k in ks:
                idx = [i for i, (rank, _, _) in enumerate(cands) if rank < k]
                kept = [
                    idx[j]
                    for j in self.select(
                        [scores[i] for i in idx], [sizes[cand_texts[i]] for i in idx], [cands[i][0] for i in idx], [cands[i][2][0] for i in idx]
                    )
                ]
                kept_set = sp.span_set((cands[i][1], cands[i][2]) for i in kept)
                retrieved = sp.span_set((c.doc_id, s) for c in ranked[:k] for s in c.spans)
                hit_c = sp.intersection_size(evidence, kept_set)
                hit_r = sp.intersection_size(evidence, retrieved)
                c_size, r_size = sp.size(kept_set), sp.size(retrieved)
                precision_c = hit_c / c_size if c_size else 0.0
                precision_r = hit_r / r_size if r_size else 0.0
                row[f"compressed.recall@{k}"] = hit_c / e_size if e_size else 0.0
                row[f"compressed.precision@{k}"] = precision_c
                row[f"compressed.iou@{k}"] = hit_c / (e_size + c_size - hit_c) if (e_size + c_size - hit_c) else 0.0
                row[f"compression.precision_gain@{k}"] = precision_c - precision_r
                if context_token_counter is not None:
                    kept_tokens = float(sum(context_token_counter(cand_texts[i]) for i in kept))
                    full_tokens = float(sum(context_token_counter(c.text) for c in ranked[:k]))
                    row[f"compressed.context_tokens@{k}"] = kept_tokens
                    row[f"compression.tokens_saved@{k}"] = full_tokens - kept_tokens
            out[q.query_id] = row
        return out

    def _embed(self, texts: list[str]) -> np.ndarray:
        vectors = np.asarray(self.encoder.encode(texts), dtype=np.float32)
        if len(vectors) and not getattr(self.encoder, "normalize", True):
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors = vectors / np.where(norms == 0, 1.0, norms)
        return vectors


def from_config(config: Mapping[str, Any] | None, encoder=None) -> Compressor | None:
    """A :class:`Compressor` from the plain ``compression`` config, or None when absent or disabled.

    ``config`` holds the constructor arguments (an optional ``_target_`` key is ignored).

    Raises:
        ValueError: as :class:`Compressor` (an unknown key names itself too).
    """
    if not config:
        return None
    args = {k: v for k, v in dict(config).items() if k != "_target_"}
    known = {"enabled", "budget", "unit", "tokenizer", "split_paragraphs"}
    unknown = sorted(set(args) - known)
    if unknown:
        raise ValueError(f"compression: unknown key(s) {unknown}; expected {sorted(known)}")
    compressor = Compressor(**args, encoder=encoder if args.get("enabled") else None)
    return compressor if compressor.enabled else None
