"""A sweep's report data (:class:`harness.reporting.html.SweepView`) from its runs as plain records.

The runs are read by :func:`harness.tracking.runs.sweep_jobs`; the paired comparison of the
best job with a baseline is :func:`harness.evaluation.compare.compare_runs` (bootstrap CI of
the mean difference and a paired sign-flip test per metric, Holm-adjusted).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

from harness.reporting.html import SweepView
from harness.reporting.model import cis_from_metrics

#: Per-query metrics of the best-against-baseline comparison (those both runs have).
COMPARED = ("recall@5", "precision@5", "iou@5", "context_precision@5", "ndcg@10", "recall@1024tok")


def lower_is_better(objective: str) -> bool:
    """True for ``context_tokens@k`` (text handed to the generator); every other metric is maximised."""
    return objective.split("@", 1)[0] == "context_tokens"


def build_sweep_view(
    parent: Any,
    jobs: Sequence[tuple[int, str, Any]],
    metric_values: Callable[[Any], dict[str, float]],
    load_per_query: Callable[[str], Any] | None = None,
    link: Callable[[Any], str | None] | None = None,
    baseline: str | None = None,
    n_resamples: int = 1000,
    seed: int = 0,
    alpha: float = 0.05,
) -> SweepView:
    """The :class:`SweepView` of a sweep.

    Args:
        parent: the parent run (a :class:`harness.tracking.runs.RunRecord`).
        jobs: ``[(job number, status, run record), ...]`` (:func:`harness.tracking.runs.sweep_jobs`).
        metric_values: run record -> metric name -> value (:func:`harness.tracking.runs.metric_values`).
        load_per_query: run id -> :class:`harness.evaluation.compare.LoggedRun`; None skips the comparison.
        link: run record -> link of its report, or None.
        baseline: run id of the comparison's baseline; default the lowest-numbered finished
            job other than the best.
        n_resamples, seed, alpha: of the paired comparison.

    The comparison is left out (the page says so) when the two runs have no comparable
    per-query tables.

    Raises:
        ValueError: ``baseline`` is not a finished job of the sweep.
    """
    objective = str(parent.tags.get("sweep.objective") or "recall@5")
    rows = []
    for job, status, run in jobs:
        values = metric_values(run)
        p = run.params
        rows.append(
            {
                "job": job,
                "run_id": run.run_id,
                "name": run.name,
                "status": status,
                "chunker": run.tags.get("chunker") or p.get("chunker._target_", "").rsplit(".", 1)[-1],
                "chunk_size": p.get("chunker.chunk_size") or p.get("chunker.child_size"),
                "chunk_overlap": p.get("chunker.chunk_overlap"),
                "unit": p.get("chunker.unit"),
                "retriever": run.tags.get("retriever"),
                "embedding": run.tags.get("embedding"),
                "metrics": {k: v for k, v in values.items() if not k.endswith(("_ci_low", "_ci_high"))},
                "cis": cis_from_metrics(values),
                "link": link(run) if link else None,
            }
        )
    done = [r for r in rows if r["status"] in ("FINISHED", "SKIPPED") and not math.isnan(r["metrics"].get(objective, math.nan))]
    best = None
    if done:
        pick = min if lower_is_better(objective) else max
        best = pick(done, key=lambda r: r["metrics"][objective])["run_id"]
    if baseline is not None and baseline not in {r["run_id"] for r in done}:
        raise ValueError(f"baseline run {baseline!r} is not a finished job of sweep {parent.name} ({parent.run_id})")
    if baseline is None:
        others = [r for r in sorted(done, key=lambda r: r["job"]) if r["run_id"] != best]
        baseline = others[0]["run_id"] if others else None
    comparison: list[dict] = []
    if load_per_query is not None and best and baseline and best != baseline:
        from harness.evaluation.compare import CompareError, check_comparable, compare_runs

        try:
            runs = [load_per_query(baseline), load_per_query(best)]
            check_comparable(runs)
            shared = set(runs[0].per_query.columns) & set(runs[1].per_query.columns)
            metrics = [m for m in dict.fromkeys([objective, *COMPARED]) if m in shared]
            tables = compare_runs(runs, metrics, n_resamples=n_resamples, seed=seed, alpha=alpha)
        except (CompareError, ValueError):  # no per-query tables (or not comparable): the page says the comparison is not available
            tables = {}
        for metric, table in tables.items():
            row = table.iloc[0].to_dict()
            comparison.append({"metric": metric, **row})
    return SweepView(parent.run_id, parent.name, "", objective, rows, best, baseline, comparison, alpha)
