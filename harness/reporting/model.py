"""What a run report shows, as plain data, and the compact artifacts it is built from.

A run logs two small artifacts besides ``per_query.csv`` (:func:`chunks_artifact`,
:func:`ranking_artifact`):

* ``chunks.jsonl.gz``: one line per indexed chunk, ``{"id", "doc", "spans": [[start, end],
  ...], "tokens", "parent"}``: spans are half-open code-point offsets into the document,
  ``tokens`` the embedding model's tokens of the embedded text (special tokens included;
  null when the run counted none), ``parent`` the parent chunk id or null.
* ``ranking.jsonl.gz``: one line per query, ``{"query": id, "ids": [...], "scores": [...]}``:
  the units the metrics judged at the deepest cut-off, best first (the ``retrieved``
  column of ``per_query.csv``), with the retriever's score of each (null for a unit the
  strategy's ``expand`` produced, e.g. a parent, which the retriever did not score).

Documents and evidence come from the dataset (the run's own in memory, or the dataset
reloaded from the run's ``config.yaml`` and checked against its ``dataset_fingerprint``
tag by :mod:`harness.experiment.report`).
"""

from __future__ import annotations

import gzip
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from harness.evaluation.metrics import families as metric_families
from harness.params import is_number

#: Artifact names of the compact chunk list and the per-query ranking.
CHUNKS_ARTIFACT = "chunks.jsonl.gz"
RANKING_ARTIFACT = "ranking.jsonl.gz"

#: Metric families shown as headline cards (at the report's cut-off ``k``), in order: the
#: registry's ``headline`` families (:func:`harness.evaluation.metrics.families`).
HEADLINE_FAMILIES = metric_families("headline")

#: Miss reasons in precedence order (as :data:`harness.evaluation.diagnostics.REASONS`).
REASONS = ("not_covered", "boundary_split", "truncated", "rank_miss")

#: A label value meaning "not used": the ``embedding`` tag of a run that embeds nothing (BM25
#: with a chunker that needs no model). Such labels are left out of a report.
NO_VALUE = "none"

#: What each miss reason says, in plain words (the definitions of docs/evaluation.md, Diagnostics).
REASON_TEXT = {
    "not_covered": "no chunk holds the evidence: the chunker dropped that text",
    "boundary_split": "the evidence is cut across two or more chunks, and the top k did not bring all of them",
    "truncated": "a chunk holds the evidence, but past the embedding model's window: the model never saw it",
    "rank_miss": "a chunk holding the evidence exists but ranked below k: the retriever's fault, not the chunker's",
}


def _gzip_lines(records: Iterable[Mapping[str, Any]]) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=6, mtime=0) as fh:
        for record in records:
            fh.write((json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8"))
    return buf.getvalue()


def read_jsonl_gz(path: str | Path) -> list[dict]:
    """The records of a gzip-compressed JSON Lines file (``chunks.jsonl.gz``, ``ranking.jsonl.gz``).

    Raises:
        ValueError: a line is not JSON (the message names the file and line).
    """
    out = []
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if line.strip():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}: line {n} is not JSON: {exc}") from exc
    return out


def chunks_artifact(chunks: Sequence[Any], tokens: Sequence[int] | None) -> bytes:
    """``chunks.jsonl.gz`` of ``chunks`` (:class:`harness.types.Chunk`, in index order).

    Args:
        chunks: the indexed chunks.
        tokens: embedding-model tokens per chunk aligned with ``chunks``, or None.

    Raises:
        ValueError: ``tokens`` is not aligned with ``chunks``.
    """
    if tokens is not None and len(tokens) != len(chunks):
        raise ValueError(f"tokens has {len(tokens)} counts for {len(chunks)} chunks")
    return _gzip_lines(
        {"id": c.chunk_id, "doc": c.doc_id, "spans": [list(s) for s in c.spans], "tokens": None if tokens is None else int(tokens[i]), "parent": c.parent_id}
        for i, c in enumerate(chunks)
    )


def ranking_artifact(retrieved: Mapping[str, Sequence[str]], scores: Mapping[str, Mapping[str, float]]) -> bytes:
    """``ranking.jsonl.gz``: per query the judged units in rank order with their scores.

    Args:
        retrieved: query id -> unit ids, best first (the ``retrieved`` column of the per-query table).
        scores: the raw retrieval run, query id -> {chunk id -> score}; a unit without a
            score (an expanded parent) gets null.
    """

    def score(qid: str, uid: str):
        value = scores.get(qid, {}).get(uid)
        return None if value is None or not math.isfinite(float(value)) else float(value)

    return _gzip_lines({"query": qid, "ids": list(ids), "scores": [score(qid, u) for u in ids]} for qid, ids in retrieved.items())


def split_retrieved(value: Any) -> list[str]:
    """The unit ids of a ``retrieved`` cell of ``per_query.csv`` (``;``-separated; empty or NaN: none)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return []
    return [part for part in str(value).split(";") if part]


def spans_of_id(unit_id: str) -> tuple[str, list[tuple[int, int]]]:
    """``(doc_id, spans)`` of a chunk id ``"{doc_id}#{start}-{end}[+{start}-{end}...]"``
    (:meth:`harness.types.Chunk.make`), for units not in the chunk list (expanded parents).

    Raises:
        ValueError: the id does not have that form.
    """
    doc, sep, tail = unit_id.rpartition("#")
    try:
        spans = [tuple(int(x) for x in part.split("-", 1)) for part in tail.split("+")]
        if not sep or any(len(s) != 2 for s in spans):
            raise ValueError
    except ValueError:
        raise ValueError(f"chunk id {unit_id!r} is not of the form 'doc#start-end[+start-end...]'") from None
    return doc, [(int(s), int(e)) for s, e in spans]


@dataclass(frozen=True)
class Hit:
    """One retrieved unit of a query: ``rank`` from 1, ``chunk_id``, ``doc_id``, ``spans``
    (code points), retriever ``score`` (None when not scored), ``overlap`` = characters it
    shares with the query's evidence (0: it holds none of it)."""

    rank: int
    chunk_id: str
    doc_id: str
    spans: tuple[tuple[int, int], ...]
    score: float | None
    overlap: int


@dataclass(frozen=True)
class QueryView:
    """One query of a run report.

    Attributes:
        query_id, text: the query.
        evidence: ``((doc_id, start, end), ...)`` code-point spans.
        hits: the judged units at the deepest cut-off, best first.
        miss: ``{k: reason or None}`` (None: not missed at k; see :mod:`harness.evaluation.diagnostics`).
        values: the query's per-query metrics (``recall@5`` ...), as logged in ``per_query.csv``.
    """

    query_id: str
    text: str
    evidence: tuple[tuple[str, int, int], ...]
    hits: tuple[Hit, ...]
    miss: Mapping[int, str | None]
    values: Mapping[str, float]


@dataclass(frozen=True)
class ChunkView:
    """One indexed chunk: ``chunk_id``, ``doc_id``, ``spans`` (code points), ``tokens``
    (embedding-model tokens or None), ``parent_id``."""

    chunk_id: str
    doc_id: str
    spans: tuple[tuple[int, int], ...]
    tokens: int | None
    parent_id: str | None = None

    @property
    def n_chars(self) -> int:
        """Source characters of the chunk (sum of its span lengths)."""
        return sum(e - s for s, e in self.spans)


@dataclass
class RunView:
    """Everything a run report shows, as plain data.

    Attributes:
        run_id, name, experiment: the MLflow run.
        labels: what the run was (``chunker``, ``chunk_size``, ``chunk_overlap``, ``unit``,
            ``retriever``, ``embedding``, ``dataset``, ``dataset_fingerprint``), as text;
            a label that is None, empty or :data:`NO_VALUE` is left out.
        ks: the rank cut-offs, ascending.
        metrics: mean metrics as logged, metric name (``recall@5``) -> value.
        cis: metric name -> ``(low, high)`` bootstrap interval (empty when not computed).
        confidence: coverage of ``cis`` (e.g. 0.95).
        chunks: the indexed chunks.
        max_seq_length: the embedding model's window in tokens, or None (BM25 without a model).
        documents: doc id -> text, in corpus order.
        queries: the queries, in dataset order.
        miss_counts: ``{k: {reason: queries}}`` (plus ``missed`` and ``queries``).
        artifact_links: optional run id -> link of that run's report (sweep pages).
    """

    run_id: str
    name: str
    experiment: str
    labels: dict[str, str]
    ks: list[int]
    metrics: dict[str, float]
    cis: dict[str, tuple[float, float]]
    confidence: float
    chunks: list[ChunkView]
    max_seq_length: int | None
    documents: dict[str, str]
    queries: list[QueryView]
    miss_counts: dict[int, dict[str, int]] = field(default_factory=dict)

    @property
    def k(self) -> int:
        """The report's headline cut-off: 5 when the run has it, else its deepest k."""
        return 5 if 5 in self.ks else max(self.ks)

    def headline(self) -> list[tuple[str, float, tuple[float, float] | None]]:
        """``[(metric, value, ci or None), ...]`` for :data:`HEADLINE_FAMILIES` at :attr:`k`,
        then ``ndcg@10`` / ``mrr@10`` when logged, then the budget recalls (``recall@1024tok``)."""
        names = [f"{f}@{self.k}" for f in HEADLINE_FAMILIES]
        names += [n for n in ("ndcg@10", "mrr@10") if n not in names]
        names += sorted((n for n in self.metrics if n.startswith("recall@") and n.endswith("tok")), key=lambda n: int(n[7:-3]))
        return [(n, self.metrics[n], self.cis.get(n)) for n in names if n in self.metrics]

    def reasons(self) -> tuple[str, ...]:
        """The miss reasons this run can have, in :data:`REASONS` order: ``truncated`` only
        with a model window (:attr:`max_seq_length`; a run that embeds nothing, such as BM25,
        truncates nothing, so its report neither counts nor explains truncation)."""
        return tuple(r for r in REASONS if r != "truncated" or self.max_seq_length)

    def over_window(self) -> int:
        """Chunks whose tokens exceed :attr:`max_seq_length` (0 without a window)."""
        if not self.max_seq_length:
            return 0
        return sum(1 for c in self.chunks if c.tokens is not None and c.tokens > self.max_seq_length)


def _overlap(spans: Sequence[tuple[int, int]], doc_id: str, evidence: Sequence[tuple[str, int, int]]) -> int:
    return sum(max(0, min(e, ee) - max(s, es)) for s, e in spans for d, es, ee in evidence if d == doc_id)


def metric_names_of(per_query_columns: Iterable[str]) -> list[str]:
    """The metric columns of a per-query table (``name@k``, ``name@Btok``, ``precision_omega``)."""
    return [c for c in per_query_columns if "@" in c or c == "precision_omega"]


def build_run_view(
    *,
    run_id: str,
    name: str,
    experiment: str,
    labels: Mapping[str, Any],
    metrics: Mapping[str, float],
    cis: Mapping[str, tuple[float, float]],
    confidence: float,
    per_query: Any,
    chunks: Sequence[ChunkView],
    ranking: Mapping[str, tuple[Sequence[str], Sequence[float | None]]],
    documents: Sequence[tuple[str, str]],
    queries: Sequence[Any],
    max_seq_length: int | None,
    miss_counts: Mapping[Any, Mapping[str, Any]] | None = None,
) -> RunView:
    """A :class:`RunView` from a run's pieces (in memory, or read back from its artifacts).

    Args:
        run_id, name, experiment: the MLflow run.
        labels: descriptive tags (chunker, sizes, retriever, embedding, dataset).
        metrics: logged mean metrics, metric name -> value.
        cis: metric name -> (low, high).
        confidence: coverage of ``cis``.
        per_query: the per-query table (pandas DataFrame with ``query_id`` and the
            ``miss_reason_at_<k>`` columns).
        chunks: the indexed chunks.
        ranking: query id -> (unit ids best first, scores or None).
        documents: ``(doc_id, text)`` in corpus order.
        queries: the dataset's :class:`harness.types.Query` objects.
        max_seq_length: the model window in tokens, or None.
        miss_counts: ``{k: {reason: n}}`` as in ``miss_reasons.json`` (None: counted from the table).

    Raises:
        ValueError: a query of the per-query table is not in ``queries`` (the run was made
            on another dataset), or a unit id is malformed.
    """
    by_id = {c.chunk_id: c for c in chunks}
    known = {q.query_id: q for q in queries}
    metric_cols = metric_names_of(per_query.columns)
    ks = sorted({int(c.rsplit("_", 1)[1]) for c in per_query.columns if c.startswith("miss_reason_at_")}) or sorted(
        {int(m.split("@", 1)[1]) for m in metrics if m.startswith("recall@") and m.split("@", 1)[1].isdigit()}
    )
    views = []
    for row in per_query.to_dict(orient="records"):
        qid = str(row["query_id"])
        if qid not in known:
            raise ValueError(f"query {qid!r} of the run's per-query table is not in the dataset: the run was made on another dataset")
        q = known[qid]
        evidence = tuple((e.doc_id, int(e.start), int(e.end)) for e in q.evidence)
        ids, scores = ranking.get(qid, (split_retrieved(row.get("retrieved")), []))
        hits = []
        for rank, uid in enumerate(ids, 1):
            chunk = by_id.get(uid)
            doc, spans = (chunk.doc_id, list(chunk.spans)) if chunk else spans_of_id(uid)
            score = scores[rank - 1] if rank - 1 < len(scores) else None
            hits.append(Hit(rank, uid, doc, tuple(tuple(s) for s in spans), None if score is None else float(score), _overlap(spans, doc, evidence)))
        miss = {}
        for k in ks:
            value = row.get(f"miss_reason_at_{k}")
            miss[k] = value if isinstance(value, str) and value else None
        values = {m: float(row[m]) for m in metric_cols if is_number(row.get(m))}
        views.append(QueryView(qid, str(q.text), evidence, tuple(hits), miss, values))
    if miss_counts is None:
        counts: dict[int, dict[str, int]] = {}
        for k in ks:
            reasons = [v.miss[k] for v in views]
            counts[k] = {r: sum(1 for x in reasons if x == r) for r in REASONS}
    else:
        counts = {int(k): {r: int(v.get(r, 0)) for r in REASONS} for k, v in miss_counts.items()}
    return RunView(
        run_id=run_id,
        name=name,
        experiment=experiment,
        labels={k: str(v) for k, v in labels.items() if v is not None and str(v) not in ("", NO_VALUE)},
        ks=ks,
        metrics={k: float(v) for k, v in metrics.items()},
        cis={k: (float(lo), float(hi)) for k, (lo, hi) in cis.items()},
        confidence=float(confidence),
        chunks=list(chunks),
        max_seq_length=max_seq_length,
        documents=dict(documents),
        queries=views,
        miss_counts=counts,
    )


def chunk_views(records: Iterable[Mapping[str, Any]]) -> list[ChunkView]:
    """:class:`ChunkView` objects from ``chunks.jsonl.gz`` records.

    Raises:
        ValueError: a record lacks ``id``, ``doc`` or ``spans``.
    """
    out = []
    for n, r in enumerate(records, 1):
        try:
            spans = tuple((int(s), int(e)) for s, e in r["spans"])
            out.append(ChunkView(str(r["id"]), str(r["doc"]), spans, None if r.get("tokens") is None else int(r["tokens"]), r.get("parent")))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{CHUNKS_ARTIFACT}: record {n} is not {{id, doc, spans, tokens, parent}}: {exc}") from exc
    return out


def cis_from_metrics(metrics: Mapping[str, float]) -> dict[str, tuple[float, float]]:
    """``{metric: (low, high)}`` from logged ``<metric>_ci_low`` / ``<metric>_ci_high`` values
    (keys as metric names, e.g. ``recall@5``)."""
    out = {}
    for key, low in metrics.items():
        if key.endswith("_ci_low"):
            base = key[: -len("_ci_low")]
            high = metrics.get(base + "_ci_high")
            if high is not None:
                out[base] = (float(low), float(high))
    return out
