"""``harness datasets audit``: rank a dataset's chunks with BM25 and audit its labels.

The ranking the audit reads is built here (no model, a few seconds on ``kestrel_kb``):
the corpus is cut by :class:`harness.chunkers.recursive.RecursiveChunker` into chunks of
at most ``chunk_size`` characters (no overlap, the default separators) and each query
searches a :class:`harness.retrievers.bm25.BM25Retriever` (``k1=1.5``, ``b=0.75``) for its
first ``rule.k`` chunks; :func:`harness.evaluation.audit.audit` does the rest.
"""

from __future__ import annotations

from harness.evaluation.audit import AuditRule, Candidate, audit
from harness.params import Param
from harness.retrievers.base import ranked as ranked_ids
from harness.types import Dataset


def audit_dataset(dataset: Dataset, rule: AuditRule | None = None, chunk_size: int = 1000) -> dict[str, list[Candidate]]:
    """Flagged candidates per query of ``dataset`` under a BM25 ranking (module docstring).

    Args:
        dataset: a loaded dataset (spans verified by its loader).
        rule: flag rule and depth ``k`` (default :class:`AuditRule`, ``k=10``).
        chunk_size: chunk size in characters, >= 1.

    Returns:
        ``{query_id: [Candidate, ...]}`` for every query, in dataset order.

    Raises:
        ValueError: ``chunk_size`` is not an integer >= 1, or a rule field is out of range.
    """
    from harness.chunkers.recursive import RecursiveChunker
    from harness.retrievers.bm25 import BM25Retriever

    rule = AuditRule() if rule is None else rule
    Param("audit chunk size", "int", low=1, note="characters").check(chunk_size)
    chunks = RecursiveChunker(chunk_size=chunk_size, unit="chars").chunk_all(dataset.documents)
    retriever = BM25Retriever()
    retriever.index(chunks)
    run = retriever.search(dataset.queries, min(rule.k, len(chunks)))
    by_id = {c.chunk_id: c for c in chunks}
    ranking = {q.query_id: [by_id[cid] for cid in ranked_ids(run, q.query_id)] for q in dataset.queries}
    return audit(dataset.queries, dataset.by_id, ranking, rule)
