"""Render the reports as single self-contained HTML files with jinja2 (templates in
:mod:`harness.reporting.templates`; style and script inlined from
:mod:`harness.reporting.assets`; figures inline SVG from :mod:`harness.reporting.charts`).

* :func:`run_report`: one run (:class:`~harness.reporting.model.RunView`).
* :func:`side_by_side_report`: two runs on one dataset.
* :func:`sweep_report`: a sweep's jobs (:class:`SweepView`).

Pages fetch nothing: they open from disk and inside MLflow's artifact viewer.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from harness.reporting import charts
from harness.reporting.assets import CSS, JS
from harness.reporting.model import REASON_TEXT, RunView

#: Metrics of a sweep's job table, in column order (those the jobs logged).
SWEEP_COLUMNS = ("recall@5", "precision@5", "iou@5", "context_precision@5", "ndcg@10", "context_tokens@5", "recall@1024tok")


def preload() -> None:
    """Import jinja2 and matplotlib's figure module with its PNG and SVG canvases now (a
    second or more on a busy machine, once per process; :func:`harness.reporting.charts.preload`),
    e.g. in the tracking worker while the job computes (a run hands this function to the
    worker as its ``warm`` step); the modules stay for the process
    (:func:`harness.runtime.long_lived`)."""
    from harness.runtime import long_lived

    charts.preload()
    with long_lived("jinja2"):
        import jinja2  # noqa: F401


def run_report_artifact(view: RunView, artifact_file: str = "report.html") -> dict[str, str]:
    """``{artifact_file: the page of}`` :func:`run_report` of ``view``: what a run hands its
    tracker to log (in a job, rendered in the tracking worker, off the job's critical path)."""
    return {artifact_file: run_report(view)}


def _environment():
    import jinja2

    from harness.reporting.templates import TEMPLATES

    env = jinja2.Environment(loader=jinja2.DictLoader(TEMPLATES), autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["fmt"] = _fmt
    env.filters["full"] = lambda v: "" if v is None or (isinstance(v, float) and math.isnan(v)) else repr(float(v))
    return env


def _render(template: str, **context) -> str:
    """Page ``template`` rendered with ``context`` and the report's stylesheet and script."""
    return _environment().get_template(template).render(css=CSS, js=JS, **context)


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "–"
    if isinstance(value, float) and math.isnan(value):
        return "–"
    if isinstance(value, (int, float)) and abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def json_block(data: Any) -> str:
    """JSON text safe inside ``<script type="application/json">`` (``</`` and ``<!--`` escaped)."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def _doc_payloads(views: Sequence[RunView]) -> tuple[list[str], list[dict]]:
    """Document ids in corpus order and, per document, ``{"id", "text", "cuts": [per run:
    [[start, end, chunk number, over window 0/1], ...]], "ev": [[start, end, [query ids]], ...]}``."""
    base = views[0]
    ids = list(base.documents)
    index = {d: i for i, d in enumerate(ids)}
    cuts: list[list[list]] = [[[] for _ in views] for _ in ids]
    for r, view in enumerate(views):
        numbers: dict[str, int] = {}
        for c in view.chunks:
            i = index.get(c.doc_id)
            if i is None:
                continue
            numbers[c.doc_id] = numbers.get(c.doc_id, 0) + 1
            over = int(bool(view.max_seq_length and c.tokens is not None and c.tokens > view.max_seq_length))
            for s, e in c.spans:
                cuts[i][r].append([s, e, numbers[c.doc_id], over])
    evidence: dict[tuple[str, int, int], list[str]] = {}
    for q in base.queries:
        for d, s, e in q.evidence:
            evidence.setdefault((d, s, e), []).append(q.query_id)
    ev: list[list] = [[] for _ in ids]
    for (d, s, e), qids in sorted(evidence.items()):
        if d in index:
            ev[index[d]].append([s, e, qids])
    payloads = [{"id": d, "text": base.documents[d], "cuts": cuts[i], "ev": ev[i]} for i, d in enumerate(ids)]
    return ids, payloads


def _hits(view: RunView, q, index: Mapping[str, int]) -> list[dict]:
    return [{"id": h.chunk_id, "d": index[h.doc_id], "s": [list(s) for s in h.spans], "sc": h.score, "o": h.overlap} for h in q.hits if h.doc_id in index]


def _doc_rows(view: RunView, views: Sequence[RunView]) -> list[dict]:
    counts = [dict() for _ in views]
    for r, v in enumerate(views):
        for c in v.chunks:
            counts[r][c.doc_id] = counts[r].get(c.doc_id, 0) + 1
    n_ev: dict[str, int] = {}
    for q in view.queries:
        for d, _, _ in q.evidence:
            n_ev[d] = n_ev.get(d, 0) + 1
    return [
        {"i": i, "id": d, "chars": len(t), "chunks": [c.get(d, 0) for c in counts], "evidence": n_ev.get(d, 0)}
        for i, (d, t) in enumerate(view.documents.items())
    ]


def run_report(view: RunView, links: Mapping[str, str] | None = None) -> str:
    """The HTML report of one run.

    Sections: headline metrics with their CIs, the recall@k curve, the chunk-size histogram
    against the model window, miss-reason counts, the document viewer (chunk boundaries,
    evidence spans, chunks over the window) and the query browser (evidence, top-k with
    scores and overlap, miss reason; filter to misses).

    Args:
        view: the run.
        links: optional ``{"run": url}`` link to the run in the MLflow UI.
    """
    ids, payloads = _doc_payloads([view])
    index = {d: i for i, d in enumerate(ids)}
    k = view.k
    qdata, rows = {}, []
    for q in view.queries:
        qdata[q.query_id] = {"ev": [[index[d], s, e] for d, s, e in q.evidence if d in index], "docs": {index[d]: d for d, _, _ in q.evidence if d in index}}
        qdata[q.query_id]["hits"] = _hits(view, q, index)
        reason = q.miss.get(k)
        rows.append(
            {
                "id": q.query_id,
                "text": q.text,
                "recall": q.values.get(f"recall@{k}"),
                "reason": reason,
                "missed": reason is not None,
                "overlapping": sum(1 for h in q.hits[:k] if h.overlap > 0),
            }
        )
    tokens = [c.tokens for c in view.chunks if c.tokens is not None]
    sizes = tokens if tokens else [c.n_chars for c in view.chunks]
    counts = view.miss_counts.get(k, {})
    figures = [
        ("recall@k, precision@k and IoU@k against k", charts.recall_curve(view.metrics, view.ks)),
        (
            "chunk sizes" + (f" against the model window ({view.max_seq_length} tokens)" if view.max_seq_length else ""),
            charts.size_histogram(sizes, view.max_seq_length if tokens else None, "model tokens" if tokens else "characters"),
        ),
        (f"why queries missed at k={k}", charts.miss_bars({r: int(counts.get(r, 0)) for r in view.reasons()}, k)),
    ]
    return _render(
        "run.html",
        view=view,
        k=k,
        headline=view.headline(),
        figures=figures,
        docs=_doc_rows(view, [view]),
        payloads=[json_block(p) for p in payloads],
        query_rows=rows,
        query_json=json_block(qdata),
        n_missed=sum(1 for r in rows if r["missed"]),
        over_window=view.over_window(),
        reasons=view.reasons(),
        reason_text=REASON_TEXT,
        counts=counts,
        links=dict(links or {}),
    )


def side_by_side_report(a: RunView, b: RunView, metric: str | None = None) -> str:
    """Two runs on one dataset: their headline metrics, the same document cut both ways,
    and the queries each wins (higher per-query ``metric``, default ``recall@k``).

    Raises:
        ValueError: the runs are on different datasets (fingerprints or query sets differ),
            or ``metric`` is not a per-query metric of both.
    """
    fa, fb = a.labels.get("dataset_fingerprint"), b.labels.get("dataset_fingerprint")
    if not fa or fa != fb:
        raise ValueError(f"runs {a.name} ({a.run_id}) and {b.name} ({b.run_id}) are on different datasets (dataset_fingerprint {fa} vs {fb})")
    if [q.query_id for q in a.queries] != [q.query_id for q in b.queries]:
        raise ValueError(f"runs {a.name} and {b.name} have different query sets")
    k = min(a.k, b.k)
    metric = metric or f"recall@{k}"
    for v in (a, b):
        if not all(metric in q.values for q in v.queries):
            raise ValueError(f"metric {metric!r} is not a per-query value of run {v.name} ({v.run_id})")
    ids, payloads = _doc_payloads([a, b])
    index = {d: i for i, d in enumerate(ids)}
    qdata, wins = {}, {"a": [], "b": []}
    n_tied = 0
    for qa, qb in zip(a.queries, b.queries):
        va, vb = qa.values[metric], qb.values[metric]
        entry = {
            "ev": [[index[d], s, e] for d, s, e in qa.evidence if d in index],
            "docs": {index[d]: d for d, _, _ in qa.evidence if d in index},
            "runs": [{"label": f"A: {a.name}", "hits": _hits(a, qa, index)[:k]}, {"label": f"B: {b.name}", "hits": _hits(b, qb, index)[:k]}],
        }
        qdata[qa.query_id] = entry
        row = {"id": qa.query_id, "text": qa.text, "a": va, "b": vb, "reason_a": qa.miss.get(k), "reason_b": qb.miss.get(k), "diff": va - vb}
        if va > vb:
            wins["a"].append(row)
        elif vb > va:
            wins["b"].append(row)
        else:
            n_tied += 1
    for side in wins.values():
        side.sort(key=lambda r: -abs(r["diff"]))
    names = [n for n, _, _ in a.headline() if n in b.metrics]
    metrics = [(n, a.metrics[n], b.metrics[n]) for n in names]
    first_doc = max(range(len(ids)), key=lambda i: sum(1 for q in wins["a"] + wins["b"] for dd in qdata[q["id"]]["docs"] if dd == i)) if ids else 0
    return _render(
        "pair.html",
        a=a,
        b=b,
        k=k,
        metric=metric,
        metrics=metrics,
        docs=_doc_rows(a, [a, b]),
        first_doc=first_doc,
        payloads=[json_block(p) for p in payloads],
        query_json=json_block(qdata),
        wins=wins,
        n_tied=n_tied,
    )


@dataclass
class SweepView:
    """A sweep as plain data for :func:`sweep_report`.

    Attributes:
        run_id, name, experiment: the sweep's parent run.
        objective: the sweep's objective metric (``recall@5``).
        jobs: one dict per job: ``job``, ``run_id``, ``name``, ``status``, ``chunker``,
            ``chunk_size``, ``chunk_overlap``, ``unit``, ``retriever``, ``embedding`` (text or
            None), ``metrics`` (metric name -> logged value), ``cis`` (metric name -> (low,
            high)), ``link`` (URL of the job's report, or None).
        best: run id of the best job (highest objective; lowest for ``context_tokens``), or None.
        baseline: run id of the baseline of the paired comparison, or None.
        comparison: rows of :func:`harness.evaluation.compare.compare_runs` (best against
            baseline), one dict per metric with ``metric``, ``mean``, ``diff``, ``ci_low``,
            ``ci_high``, ``p``, ``p_holm``, ``W``, ``T``, ``L``, ``sig``, ``n``.
        alpha: significance level of the comparison.
        baseline_rule: why :attr:`baseline` is the baseline, in words
            (:func:`harness.reporting.sweep.choose_baseline`).
        top_set: the jobs not significantly worse than the best
            (:func:`harness.evaluation.stats.top_set`), best first: dicts with ``job``, ``run_id``,
            ``name``, ``mean``, ``p``, ``p_holm`` (None for the best), ``best``, ``values``
            (tie-breaker metric -> value).
        top_test: the test in words (test, correction, alpha, margin, queries).
        tie_metrics: the tie-breaker metrics, in column order.
        tie_breaks: one dict per rule: ``rule``, ``metric``, ``job``, ``name`` (None: no member has the value).
        top_error: why there is no top set (one line), else "".
    """

    run_id: str
    name: str
    experiment: str
    objective: str
    jobs: list[dict]
    best: str | None = None
    baseline: str | None = None
    comparison: list[dict] = field(default_factory=list)
    alpha: float = 0.05
    baseline_rule: str = ""
    top_set: list[dict] = field(default_factory=list)
    top_test: str = ""
    tie_metrics: list[str] = field(default_factory=list)
    tie_breaks: list[dict] = field(default_factory=list)
    top_error: str = ""


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def sweep_report(view: SweepView, best_report: str | None = None) -> str:
    """The HTML report of a sweep: the job table (sortable; the best job marked), the
    objective against chunk size per chunker, recall against context tokens with the Pareto
    front, the paired comparison of the best job with a baseline, links to each job's report,
    and ``best_report`` (the best job's own report page, its HTML text) shown inside the page
    (an ``<iframe srcdoc>``: the page stays one self-contained file), so that one page tells
    which chunking is best, where it cut the documents and why its misses missed."""
    objective = view.objective
    columns = [objective, *[c for c in SWEEP_COLUMNS if c != objective and any(c in j["metrics"] for j in view.jobs)]]
    done = [j for j in view.jobs if j["status"] in ("FINISHED", "SKIPPED") and objective in j["metrics"]]
    groups: dict[str, list[tuple[float, float]]] = {}
    for j in done:
        size = _number(j.get("chunk_size"))
        if not math.isnan(size):
            label = " ".join(
                str(x)
                for x in (j.get("chunker"), f"overlap {j.get('chunk_overlap')}" if j.get("chunk_overlap") not in (None, "", "0") else None, j.get("retriever"))
                if x
            )
            groups.setdefault(label, []).append((size, j["metrics"][objective]))
    figures = []
    if groups:
        figures.append((f"{objective} against chunk size, per chunker", charts.lines_by_group(groups, "chunk size (chunker.chunk_size)", objective)))
    k = objective.split("@", 1)[1] if "@" in objective and objective.split("@", 1)[1].isdigit() else "5"
    recall, cost = f"recall@{k}", f"context_tokens@{k}"
    pts = [(j["metrics"][cost], j["metrics"][recall]) for j in done if cost in j["metrics"] and recall in j["metrics"]]
    labelled = [j for j in done if cost in j["metrics"] and recall in j["metrics"]]
    front = [labelled[i]["run_id"] for i in charts.pareto_front(pts)]
    if pts:
        figures.append(
            (
                f"{recall} against the context it costs ({cost}); the Pareto front in red",
                charts.pareto_scatter(pts, [j["name"] for j in labelled], cost, recall),
            )
        )
    by_id = {j["run_id"]: j for j in view.jobs}
    return _render(
        "sweep.html",
        view=view,
        columns=columns,
        figures=figures,
        front=set(front),
        best=by_id.get(view.best),
        baseline=by_id.get(view.baseline),
        best_report=best_report,
        counts={s: sum(1 for j in view.jobs if j["status"] == s) for s in ("FINISHED", "SKIPPED", "FAILED", "KILLED", "BUSY", "INVALID")},
    )
