"""Reports of runs and sweeps: gather a run's data (in memory at run time, or from the tracking
store) and render it with :mod:`harness.reporting`.

* :func:`log_report`: what every run logs (``chunks.jsonl.gz``, ``ranking.jsonl.gz``,
  ``report.html``), called by :func:`harness.experiment.run.log_run` when
  ``tracking.report`` is true.
* :func:`run_view`: a logged run read back. Its documents and evidence come from the dataset
  reloaded from the run's ``config.yaml``; the reload is refused when its fingerprint differs
  from the run's ``dataset_fingerprint`` tag (the dataset changed since the run).
* :func:`run_report_html`, :func:`sweep_report_html`, :func:`side_by_side_html`: the pages of
  ``harness report RUN_ID``, ``--sweep PARENT_ID`` and ``RUN_A RUN_B``.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any, Mapping

from harness.evaluation.stats import query_mean

#: Artifacts a run report reads back.
REPORT_INPUTS = ("per_query.csv", "chunks.jsonl.gz", "ranking.jsonl.gz", "miss_reasons.json", "config.yaml")


class ReportError(ValueError):
    """A report cannot be made (a run without the artifacts it needs, another dataset); the message says which and why."""


def _labels(tags: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "chunker": tags.get("chunker"),
        "chunk_size": params.get("chunker.chunk_size"),
        "chunk_overlap": params.get("chunker.chunk_overlap"),
        "unit": params.get("chunker.unit"),
        "retriever": tags.get("retriever"),
        "embedding": tags.get("embedding"),
        "dataset": tags.get("dataset"),
        "dataset_fingerprint": tags.get("dataset_fingerprint"),
    }


def log_report(tracker, run_name: str, experiment: str, ev, dataset, parts, tags: Mapping[str, Any], cis: Mapping[str, float], confidence: float) -> None:
    """Log ``chunks.jsonl.gz``, ``ranking.jsonl.gz`` and ``report.html`` of a run just evaluated.

    Args:
        tracker: the run's tracker (``log_bytes``, ``log_rendered``).
        run_name, experiment: of the run.
        ev: the :class:`harness.experiment.pipeline.Evaluation`.
        dataset: the run's :class:`harness.types.Dataset`.
        parts: the run's :class:`harness.experiment.run.Components`.
        tags: the run's descriptive tags (chunker, retriever, embedding, dataset, dataset_fingerprint).
        cis: the logged CIs, ``{"recall@5_ci_low": ..., "recall@5_ci_high": ...}`` (empty: none).
        confidence: their coverage.
    """
    import functools

    from harness.reporting.html import run_report_artifact
    from harness.reporting.model import (
        CHUNKS_ARTIFACT,
        RANKING_ARTIFACT,
        ChunkView,
        build_run_view,
        chunks_artifact,
        cis_from_metrics,
        ranking_artifact,
        split_retrieved,
    )

    tokens = ev.chunk_tokens
    retrieved = {str(q): split_retrieved(r) for q, r in zip(ev.per_query["query_id"], ev.per_query["retrieved"])} if "retrieved" in ev.per_query else {}
    tracker.log_bytes(chunks_artifact(ev.chunks, tokens), CHUNKS_ARTIFACT)
    tracker.log_bytes(ranking_artifact(retrieved, ev.run), RANKING_ARTIFACT)
    chunker = parts.chunker
    params = {f"chunker.{a}": getattr(chunker, a) for a in ("chunk_size", "chunk_overlap", "unit") if getattr(chunker, a, None) is not None}
    chunks = [
        ChunkView(c.chunk_id, c.doc_id, tuple(tuple(s) for s in c.spans), None if tokens is None else int(tokens[i]), c.parent_id)
        for i, c in enumerate(ev.chunks)
    ]
    ranking = {q: (ids, [ev.run.get(q, {}).get(u) for u in ids]) for q, ids in retrieved.items()}
    window = parts.encoder.max_seq_length if (parts.retriever.needs_encoder or parts.chunker.needs_encoder) else None
    view = build_run_view(
        run_id=tracker.run_id,
        name=run_name,
        experiment=experiment,
        labels=_labels(tags, params),
        metrics={k: v for k, v in ev.metrics.items() if isinstance(v, (int, float))},
        cis=cis_from_metrics(cis),
        confidence=confidence,
        per_query=ev.per_query,
        chunks=chunks,
        ranking=ranking,
        documents=[(d.doc_id, d.text) for d in dataset.documents],
        queries=dataset.queries,
        max_seq_length=window,
    )
    # rendered by harness.reporting.html, run by the tracker (in a job: in its tracking worker), timed as time.report_render_s
    tracker.log_rendered(functools.partial(run_report_artifact, view, "report.html"), "time.report_render_s")


def run_view(uri: str, run_id: str, workdir: str | Path):
    """A logged run as a :class:`harness.reporting.model.RunView`.

    Metric values come from the run's logged metrics (:func:`harness.tracking.runs.metric_values`),
    falling back to the means of ``per_query.csv`` for metrics not logged as MLflow metrics.

    Raises:
        ReportError: unknown run, a run without ``per_query.csv`` / ``chunks.jsonl.gz`` /
            ``config.yaml`` (failed, or logged with ``tracking.report=false`` or before
            reports existed), or a dataset whose fingerprint is not the run's.
        harness.tracking.runs.TrackingStoreError: the store failed.
    """
    import pandas as pd
    from omegaconf import OmegaConf

    from harness.experiment import build
    from harness.reporting.model import build_run_view, chunk_views, cis_from_metrics, metric_names_of, read_jsonl_gz
    from harness.tracking.runs import UnknownRun, download_artifacts, get_run, metric_values

    try:
        run = get_run(uri, run_id)
    except UnknownRun as exc:
        raise ReportError(str(exc)) from exc
    run_id = run.run_id  # a unique prefix, resolved
    files = download_artifacts(uri, run_id, REPORT_INPUTS, Path(workdir) / run_id)
    missing = [n for n in ("per_query.csv", "chunks.jsonl.gz", "config.yaml") if files[n] is None]
    if missing:
        raise ReportError(
            f"run {run.name} ({run_id}, status {run.status}) has no {', '.join(missing)}: reports need a finished run logged with tracking.report=true; "
            "rerun its configuration with resume=false"
        )
    per_query = pd.read_csv(files["per_query.csv"], dtype={"query_id": str, "retrieved": str}, keep_default_na=False, na_values=[""])
    cfg = OmegaConf.load(files["config.yaml"])
    try:
        dataset = build.build_dataset(cfg)
    except Exception as exc:  # noqa: BLE001 - any loader error: say which run's dataset could not be reloaded
        raise ReportError(f"run {run.name} ({run_id}): cannot reload its dataset from its config.yaml (dataset.path={cfg.dataset.get('path')}): {exc}") from exc
    fingerprint = run.tags.get("dataset_fingerprint")
    if fingerprint and dataset.fingerprint() != fingerprint:
        raise ReportError(
            f"run {run.name} ({run_id}) was made on dataset fingerprint {fingerprint}, but {dataset.source} now has {dataset.fingerprint()}: "
            "the dataset changed since the run, so its spans would be drawn on other text; rerun the configuration"
        )
    values = metric_values(run, uri)
    metrics = {m: query_mean(per_query[m], m)[0] for m in metric_names_of(per_query.columns) if pd.api.types.is_numeric_dtype(per_query[m])}
    metrics.update({k: v for k, v in values.items() if "@" in k and not k.endswith(("_ci_low", "_ci_high")) or k == "precision_omega"})
    ranking = {str(r["query"]): (list(r["ids"]), list(r["scores"])) for r in read_jsonl_gz(files["ranking.jsonl.gz"])} if files["ranking.jsonl.gz"] else {}
    counts = json.loads(Path(files["miss_reasons.json"]).read_text()) if files["miss_reasons.json"] else None
    chunks = chunk_views(read_jsonl_gz(files["chunks.jsonl.gz"]))
    window = _window(values)  # logged only when the run embedded with a model window
    return build_run_view(
        run_id=run_id,
        name=run.name,
        experiment=cfg.get("tracking", {}).get("experiment") or run.tags.get("dataset", ""),
        labels=_labels(run.tags, run.params),
        metrics=metrics,
        cis=cis_from_metrics(values),
        confidence=float(run.params.get("stats.confidence", 0.95)),
        per_query=per_query,
        chunks=chunks,
        ranking=ranking,
        documents=[(d.doc_id, d.text) for d in dataset.documents],
        queries=dataset.queries,
        max_seq_length=window,
        miss_counts=counts,
    )


def _window(values: Mapping[str, float]) -> int | None:
    value = values.get("chunks.max_seq_length")
    return int(value) if value else None


def run_report_html(uri: str, run_id: str) -> str:
    """The report of run ``run_id`` (see :func:`run_view`)."""
    from harness.reporting.html import run_report
    from harness.tracking.runs import get_run, report_link

    with tempfile.TemporaryDirectory() as tmp:
        view = run_view(uri, run_id, tmp)
    link = report_link(uri, get_run(uri, run_id), "")
    return run_report(view, {"run": link} if link and link.startswith("http") else None)


def side_by_side_html(uri: str, run_a: str, run_b: str) -> str:
    """Runs ``run_a`` and ``run_b`` side by side (:func:`harness.reporting.html.side_by_side_report`).

    Raises:
        ReportError: as :func:`run_view`, or the runs are on different datasets.
    """
    from harness.reporting.html import side_by_side_report

    if run_a == run_b:
        raise ReportError(f"give two different runs, got {run_a} twice")
    with tempfile.TemporaryDirectory() as tmp:
        a, b = run_view(uri, run_a, tmp), run_view(uri, run_b, tmp)
    try:
        return side_by_side_report(a, b)
    except ValueError as exc:
        raise ReportError(str(exc)) from exc


def sweep_report_page(uri: str, parent_run_id: str, top_settings=None) -> str:
    """The ``report.html`` a sweep logs on its parent run when it ends (job table, charts, the
    top set of ``top_settings`` (a :class:`harness.evaluation.stats.TopSetSettings`, default
    ones when None) with its tie-breakers, the best job against the baseline of
    :func:`harness.reporting.sweep.choose_baseline`, the best job's own page inside); handed
    to :class:`harness.tracking.callbacks.SweepRunCallback` by ``conf/config.yaml``.

    Raises:
        whatever reading the store or rendering raises (the callback records it as the tag
        ``sweep.report_error``).
    """
    from harness.reporting.html import sweep_report
    from harness.reporting.sweep import build_sweep_view
    from harness.tracking.runs import artifact_text, load_run, metric_values, report_link, sweep_jobs

    parent, jobs = sweep_jobs(uri, parent_run_id)
    with tempfile.TemporaryDirectory() as tmp:
        view = build_sweep_view(
            parent, jobs, lambda r: metric_values(r, uri), lambda rid: load_run(uri, rid, tmp), lambda r: report_link(uri, r), top_settings=top_settings
        )
    best_report = artifact_text(uri, view.best, "report.html") if view.best else None  # shown inside the sweep's page
    return sweep_report(view, best_report)


def sweep_report_html(uri: str, parent_run_id: str, baseline: str | None = None) -> str:
    """The report of the sweep whose parent run is ``parent_run_id`` (see
    :func:`harness.reporting.sweep.build_sweep_view`); ``baseline`` picks the comparison's baseline run.

    Raises:
        ReportError: not a sweep's parent run, or ``baseline`` is not one of its finished jobs.
    """
    from harness.reporting.html import sweep_report
    from harness.reporting.sweep import build_sweep_view
    from harness.tracking.runs import UnknownRun, artifact_text, load_run, metric_values, report_link, sweep_jobs

    try:
        parent, jobs = sweep_jobs(uri, parent_run_id)
        with tempfile.TemporaryDirectory() as tmp:
            view = build_sweep_view(
                parent, jobs, lambda r: metric_values(r, uri), lambda rid: load_run(uri, rid, tmp), lambda r: report_link(uri, r), baseline=baseline
            )
    except (UnknownRun, ValueError) as exc:
        raise ReportError(str(exc)) from exc
    return sweep_report(view, artifact_text(uri, view.best, "report.html") if view.best else None)
