"""Per-query retrieval metrics over a ranked list of chunks with span-labelled evidence.

Definitions (``c_1..c_n`` the ranked chunks of one query, i.e. the units handed back after
``chunker.expand``, which are parents or windows for small-to-big strategies; ``E`` the
union of its evidence spans; ``R_k`` the union of the spans of ``c_1..c_k``; sizes in characters;
when fewer than k chunks were retrieved, all of them are used):

* ``recall@k = |E ∩ R_k| / |E|`` -- share of evidence characters retrieved. Chunk-agnostic
  and equal to the token-level recall of Smith & Troynikov (Chroma, 2024) computed on
  characters.
* ``precision@k = |E ∩ R_k| / |R_k|`` -- share of retrieved characters that are evidence
  (0 when nothing was retrieved). Overlapping chunks are counted once (union).
* ``iou@k = |E ∩ R_k| / |E ∪ R_k|`` -- intersection over union (Chroma's IoU).
* relevance: chunk ``c`` is relevant when, for some evidence span ``e`` of the query, the
  configured rule (``metrics.relevance``, see :data:`RELEVANCE_RULES`) holds:

  - ``overlap_fraction`` (default): ``overlap(c, e) > 0`` and
    ``overlap(c, e) >= f * min(|c|, |e|)`` with ``f = relevance_fraction`` (default 0.5);
  - ``any_overlap``: ``overlap(c, e) > 0`` (same as ``overlap_fraction`` with ``f = 0``);
  - ``contains_evidence``: ``overlap(c, e) == |e|`` (the chunk holds the whole span).
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

from harness.evaluation.metrics import span as sp
from harness.params import Param
from harness.types import Chunk, Evidence, Query

#: Rules that turn evidence spans into binary chunk relevance (``metrics.relevance``).
RELEVANCE_RULES: dict[str, str] = {
    "overlap_fraction": "overlap(c, e) > 0 and overlap(c, e) >= f * min(|c|, |e|), f = relevance_fraction",
    "any_overlap": "overlap(c, e) > 0",
    "contains_evidence": "overlap(c, e) == |e|: the chunk's spans hold the whole evidence span",
}


def check_relevance(rule: str, fraction: float = 0.5) -> None:
    """Validate a relevance rule and its fraction.

    Raises:
        ValueError: ``rule`` not in :data:`RELEVANCE_RULES` (message names
            ``metrics.relevance``) or ``fraction`` outside [0, 1] (names
            ``metrics.relevance_fraction``).
    """
    if rule not in RELEVANCE_RULES:
        raise ValueError(f"metrics.relevance must be one of {sorted(RELEVANCE_RULES)}, got {rule!r}")
    Param("relevance_fraction", "number", low=0, high=1, noun="").check(fraction, "metrics")


def relevant_to(chunk: Chunk, ev: Evidence, fraction: float = 0.5, rule: str = "overlap_fraction") -> bool:
    """Whether ``chunk`` is relevant to the single evidence span ``ev`` under ``rule``.

    Overlap is counted in characters over the chunk's (disjoint) source spans, so the text
    a chunker adds as context (a heading path, a table header) never makes it relevant.
    Touching spans (``chunk.end == ev.start``) do not overlap.
    """
    if ev.doc_id != chunk.doc_id:
        return False
    ov = sp.overlap_chars(chunk.spans, ev.span)
    if ov <= 0:
        return False
    if rule == "overlap_fraction":
        return ov >= fraction * min(chunk.n_chars, ev.end - ev.start)
    if rule == "any_overlap":
        return True
    if rule == "contains_evidence":
        return ov == ev.end - ev.start
    raise ValueError(f"metrics.relevance must be one of {sorted(RELEVANCE_RULES)}, got {rule!r}")


def is_relevant(chunk: Chunk, query: Query, fraction: float = 0.5, rule: str = "overlap_fraction") -> bool:
    """Whether ``chunk`` is relevant to ``query``: :func:`relevant_to` holds for at least one
    of its evidence spans.

    Args:
        fraction: ``f`` in [0, 1] of the ``overlap_fraction`` rule; 0 means "any overlap".
            Ignored by the other rules.
        rule: one of :data:`RELEVANCE_RULES`.

    Raises:
        ValueError: unknown ``rule``.
    """
    if rule not in RELEVANCE_RULES:
        raise ValueError(f"metrics.relevance must be one of {sorted(RELEVANCE_RULES)}, got {rule!r}")
    return any(relevant_to(chunk, ev, fraction, rule) for ev in query.evidence)


def query_metrics(
    query: Query,
    ranked_chunks: Sequence[Chunk],
    ks: Sequence[int],
    relevance_fraction: float = 0.5,
    count_tokens: Callable[[str], int] | None = None,
    relevance: str = "overlap_fraction",
) -> dict[str, float]:
    """All metrics of one query at every k.

    Args:
        query: the labelled query.
        ranked_chunks: retrieved chunks, best first (any length, possibly empty).
        ks: cut-offs, each >= 1.
        relevance_fraction: ``f`` of the ``overlap_fraction`` relevance rule.
        count_tokens: token counter for ``context_tokens@k``; omitted when None.
        relevance: relevance rule for ``context_precision`` and ``mrr`` (one of
            :data:`RELEVANCE_RULES`); span metrics do not depend on it.

    Returns:
        ``{"recall@5": ..., "precision@5": ..., "iou@5": ..., "context_precision@5": ...,
        "mrr@5": ..., "context_tokens@5": ...}`` for each k.

    Raises:
        ValueError: ``relevance`` is not one of :data:`RELEVANCE_RULES`.
    """
    if relevance not in RELEVANCE_RULES:
        raise ValueError(f"metrics.relevance must be one of {sorted(RELEVANCE_RULES)}, got {relevance!r}")
    evidence = sp.span_set((e.doc_id, e.span) for e in query.evidence)
    n_evidence = sp.size(evidence)
    rel = [is_relevant(c, query, relevance_fraction, relevance) for c in ranked_chunks]
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
