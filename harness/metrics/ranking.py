"""Per-query retrieval metrics over a ranked list of chunks with span-labelled evidence.

Definitions (``c_1..c_n`` the ranked chunks of one query, ``E`` the union of its evidence
spans, ``R_k`` the union of the spans of ``c_1..c_k``; sizes in characters; when fewer
than k chunks were retrieved, all of them are used):

* ``recall@k = |E ∩ R_k| / |E|`` -- share of evidence characters retrieved. Chunk-agnostic
  and equal to the token-level recall of Smith & Troynikov (Chroma, 2024) computed on
  characters.
* ``precision@k = |E ∩ R_k| / |R_k|`` -- share of retrieved characters that are evidence
  (0 when nothing was retrieved). Overlapping chunks are counted once (union).
* ``iou@k = |E ∩ R_k| / |E ∪ R_k|`` -- intersection over union (Chroma's IoU).
* relevance: chunk ``c`` is relevant when, for some evidence span ``e``,
  ``overlap(c, e) > 0`` and ``overlap(c, e) >= f * min(|c|, |e|)`` with ``f =
  relevance_fraction`` (default 0.5).
* ``context_precision@k = Σ_{i<=k} P@i · v_i / Σ_{i<=k} v_i`` where ``v_i = 1`` when ``c_i``
  is relevant and ``P@i`` is the share of relevant chunks among the first ``i`` (the
  rank-weighted definition of Ragas, Es et al., "RAGAS: Automated Evaluation of Retrieval
  Augmented Generation", 2023); 0 when no chunk in the top k is relevant.
* ``mrr@k = 1 / rank`` of the first relevant chunk within the top k, else 0.
* ``context_tokens@k`` -- tokens of the top-k chunks' texts summed (what a generator
  would read), counted with the configured tokenizer. Not bounded to [0, 1].

All metrics except ``context_tokens`` lie in [0, 1]. Every labelled query is scored: a
query with no retrieved chunk scores 0 (never dropped from the mean).
"""

from __future__ import annotations

from typing import Callable, Sequence

from harness.metrics import span as sp
from harness.types import Chunk, Query


def is_relevant(chunk: Chunk, query: Query, fraction: float = 0.5) -> bool:
    """Whether ``chunk`` is relevant to ``query`` under the overlap-fraction rule above.

    Args:
        fraction: ``f`` in [0, 1]; 0 means "any overlap".
    """
    n_chunk = chunk.n_chars
    for ev in query.evidence:
        if ev.doc_id != chunk.doc_id:
            continue
        ov = sp.overlap_chars(chunk.spans, ev.span)
        if ov > 0 and ov >= fraction * min(n_chunk, ev.end - ev.start):
            return True
    return False


def query_metrics(
    query: Query,
    ranked_chunks: Sequence[Chunk],
    ks: Sequence[int],
    relevance_fraction: float = 0.5,
    count_tokens: Callable[[str], int] | None = None,
) -> dict[str, float]:
    """All metrics of one query at every k.

    Args:
        query: the labelled query.
        ranked_chunks: retrieved chunks, best first (any length, possibly empty).
        ks: cut-offs, each >= 1.
        relevance_fraction: ``f`` of the relevance rule.
        count_tokens: token counter for ``context_tokens@k``; omitted when None.

    Returns:
        ``{"recall@5": ..., "precision@5": ..., "iou@5": ..., "context_precision@5": ...,
        "mrr@5": ..., "context_tokens@5": ...}`` for each k.
    """
    evidence = sp.span_set((e.doc_id, e.span) for e in query.evidence)
    n_evidence = sp.size(evidence)
    rel = [is_relevant(c, query, relevance_fraction) for c in ranked_chunks]
    tokens = [count_tokens(c.text) for c in ranked_chunks] if count_tokens else None
    out: dict[str, float] = {}
    for k in ks:
        top = ranked_chunks[:k]
        retrieved = sp.span_set((c.doc_id, s) for c in top for s in c.spans)
        n_ret = sp.size(retrieved)
        inter = sp.intersection_size(evidence, retrieved)
        union = n_evidence + n_ret - inter
        out[f"recall@{k}"] = inter / n_evidence if n_evidence else 0.0
        out[f"precision@{k}"] = inter / n_ret if n_ret else 0.0
        out[f"iou@{k}"] = inter / union if union else 0.0
        hits = 0
        weighted = 0.0
        first = 0
        for i, r in enumerate(rel[:k], start=1):
            if r:
                hits += 1
                weighted += hits / i
                if not first:
                    first = i
        out[f"context_precision@{k}"] = weighted / hits if hits else 0.0
        out[f"mrr@{k}"] = 1.0 / first if first else 0.0
        if tokens is not None:
            out[f"context_tokens@{k}"] = float(sum(tokens[:k]))
    return out
