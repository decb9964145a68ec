"""Span recall at a context-token budget: ``recall@Btok``.

For one query with evidence ``E`` (union of its spans) and ranked chunks ``c_1, c_2, ...``
(after ``chunker.expand``), chunks are taken in rank order until ``B`` tokens of their
texts, counted with the context tokenizer (``metrics.context_tokenizer``), are used:

* a chunk that fits entirely contributes all its source spans;
* the chunk that crosses the budget contributes the source characters of its first
  ``r`` tokens, ``r`` = tokens left (its text is cut at the budget, as a context builder
  with a hard token limit would);
* later chunks contribute nothing.

``recall@Btok = |E ∩ R_B| / |E|`` with ``R_B`` the union of the contributed spans, so
overlapping or duplicate chunks never count a character twice (they do spend budget: a
generator would read them twice). In [0, 1]; 0 when nothing was retrieved.

Why cut rather than stop before the crossing chunk: stopping would give every chunk
longer than ``B`` a recall of exactly 0 and make the metric a step function of how chunk
sizes divide ``B``; cutting hands every strategy exactly ``B`` tokens, which is the point
of the comparison (large chunks cannot win merely by being large, small ones are not
punished for leaving a remainder).

Mapping tokens back to source characters. Token offsets index ``chunk.text``. When the text
is the concatenation of the chunk's source spans (plain chunks) the first ``p`` text
characters are the first ``p`` source characters, walked across the spans in order. When a
chunker prepended context (``text == prefix + source``), prefix tokens spend budget but
cover no source. Any other text (rewritten, not a prefix + source) cannot be mapped: the
chunk contributes all its spans if it fits and nothing if it crosses the budget
(conservative). Tokens are the tokenizer's atoms with their offsets
(:meth:`harness.text.units.SizeCounter.atoms`), never decoded text.

``budget_filled@Btok`` is 1 when the ranked list held at least ``B`` tokens, else 0: the
retrieval depth was enough to spend the whole budget.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from harness.evaluation.metrics import span as sp
from harness.params import is_int
from harness.types import Chunk, Document, Query, Span


def source_offset(chunk: Chunk, doc_text: str) -> int | None:
    """Where the chunk's source text starts inside ``chunk.text``: 0 for a plain chunk,
    ``len(prefix)`` when ``text == prefix + source``, None when the text is neither."""
    source = "".join(doc_text[s:e] for s, e in chunk.spans)
    if chunk.text == source:
        return 0
    if chunk.text.endswith(source):
        return len(chunk.text) - len(source)
    return None


def source_prefix(spans: Sequence[Span], n_chars: int) -> list[Span]:
    """The first ``n_chars`` source characters of a chunk as spans (walking ``spans`` in order)."""
    out: list[Span] = []
    left = n_chars
    for s, e in spans:
        if left <= 0:
            break
        take = min(e - s, left)
        out.append((s, s + take))
        left -= take
    return out


def budget_recall(
    query: Query,
    ranked_chunks: Sequence[Chunk],
    budgets: Sequence[int],
    token_ends: Callable[[Chunk], list[int]],
    documents: Mapping[str, Document],
) -> dict[str, float]:
    """``recall@Btok`` and ``budget_filled@Btok`` for each budget (see the module docstring).

    Args:
        query: the labelled query.
        ranked_chunks: the scored ranking, best first (as deep as was fetched).
        budgets: token budgets, each >= 1.
        token_ends: for a chunk, the end offset in ``chunk.text`` of each of its tokens, in
            order (``len`` = its token count).
        documents: documents by id, to check how ``chunk.text`` maps to its spans.

    Raises:
        ValueError: a budget < 1 (names ``metrics.budgets``).
    """
    if any(not is_int(b) or b < 1 for b in budgets):
        raise ValueError(f"metrics.budgets must be integers >= 1, got {list(budgets)!r}")
    evidence = sp.span_set((e.doc_id, e.span) for e in query.evidence)
    n_evidence = sp.size(evidence)
    out: dict[str, float] = {}
    for b in budgets:
        taken: list[tuple[str, Span]] = []
        left = b
        for c in ranked_chunks:
            if left <= 0:
                break
            ends = token_ends(c)
            if len(ends) <= left:
                taken += [(c.doc_id, s) for s in c.spans]
                left -= len(ends)
                continue
            offset = source_offset(c, documents[c.doc_id].text)
            if offset is not None:
                n_source = max(0, ends[left - 1] - offset)
                taken += [(c.doc_id, s) for s in source_prefix(c.spans, n_source)]
            left = 0
        got = sp.intersection_size(evidence, sp.span_set(taken))
        out[f"recall@{b}tok"] = got / n_evidence if n_evidence else 0.0
        out[f"budget_filled@{b}tok"] = 1.0 if left <= 0 else 0.0
    return out
