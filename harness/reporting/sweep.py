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
    top_settings=None,
) -> SweepView:
    """The :class:`SweepView` of a sweep.

    Args:
        parent: the parent run (a :class:`harness.tracking.runs.RunRecord`).
        jobs: ``[(job number, status, run record), ...]`` (:func:`harness.tracking.runs.sweep_jobs`).
        metric_values: run record -> metric name -> value (:func:`harness.tracking.runs.metric_values`).
        load_per_query: run id -> :class:`harness.evaluation.compare.LoggedRun`; None skips the comparison.
        link: run record -> link of its report, or None.
        baseline: the comparison's baseline as given (``harness report --baseline``: a run id,
            run name or job number); default :func:`choose_baseline` (the configured
            ``tracking.sweep_baseline``, else the shipped default configuration, else the
            runner-up; never job 1 by position).
        n_resamples, seed, alpha: of the paired comparison.
        top_settings: :class:`harness.evaluation.stats.TopSetSettings` of the top set; None:
            those the sweep recorded (tag ``sweep.top_set_settings``), else the defaults.

    The comparison is left out (the page says so) when the two runs have no comparable
    per-query tables.

    Raises:
        ValueError: ``baseline`` (given or configured) is not a finished job of the sweep.
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
    baseline, rule = choose_baseline(done, best, objective, baseline, parent.tags.get("sweep.baseline"), parent.tags.get("sweep.default_job"))
    top = _top_set(parent, done, objective, load_per_query, top_settings)
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
    return SweepView(parent.run_id, parent.name, "", objective, rows, best, baseline, comparison, alpha, rule, *top)


def _resolve(done: Sequence[dict], given, where: str) -> dict:
    """The finished job ``given`` names: a job number, a run id or a run name (unique)."""
    text = str(given).strip()
    found = [r for r in done if r["run_id"] == text or (text.isdigit() and r["job"] == int(text))]
    if not found:
        found = [r for r in done if r["name"] == text]
    if len(found) != 1:
        jobs = ", ".join(f"job {r['job']} {r['name']}" for r in sorted(done, key=lambda r: r["job"]))
        why = "names several jobs" if found else "is not a finished job of this sweep"
        raise ValueError(f"{where} {text!r} {why}; give a job number or a run id of one of: {jobs}")
    return found[0]


def choose_baseline(done: Sequence[dict], best: str | None, objective: str, given=None, configured=None, default_job=None) -> tuple[str | None, str]:
    """The baseline the best job is compared with, and the rule that chose it (in words).

    The one statement of the rule: the baseline given (``harness report --baseline``), else the
    configured one (``tracking.sweep_baseline``, tag ``sweep.baseline``), else the job that runs
    the shipped default configuration (tag ``sweep.default_job``: every swept setting at its
    unswept value) unless it is the best itself, else the runner-up (second by the objective;
    equal values: the lower job number). Never job 1 because it is job 1.

    Args:
        done: the finished jobs with a value (dicts with ``job``, ``run_id``, ``name``, ``metrics``).
        best: run id of the best job.
        objective: the sweep's objective (``context_tokens@k``: lower is better).
        given, configured: a job number, run id or run name, or None.
        default_job: the default job's number (text or int), or None.

    Returns:
        ``(run id or None, rule)``; None when no finished job other than the best exists.

    Raises:
        ValueError: ``given`` or ``configured`` names no finished job (one line listing the jobs).
    """
    if given is not None:
        row = _resolve(done, given, "--baseline")
        return row["run_id"], f"job {row['job']} {row['name']}, given with --baseline"
    if configured not in (None, ""):
        row = _resolve(done, configured, "tracking.sweep_baseline")
        return row["run_id"], f"job {row['job']} {row['name']}, the configured baseline (tracking.sweep_baseline={configured})"
    note = ""
    if default_job not in (None, ""):
        row = next((r for r in done if str(r["job"]) == str(default_job)), None)
        if row is not None and row["run_id"] != best:
            return row["run_id"], f"job {row['job']} {row['name']}, the shipped default configuration (every swept setting at its default)"
        if row is not None:
            note = f"; the shipped default configuration (job {row['job']}) is the best job itself"
    sign = 1.0 if lower_is_better(objective) else -1.0
    others = sorted((r for r in done if r["run_id"] != best), key=lambda r: (sign * r["metrics"][objective], r["job"]))
    if not others:
        return None, "no finished job besides the best"
    row = others[0]
    return row[
        "run_id"
    ], f"job {row['job']} {row['name']}, the runner-up by {objective} (no baseline configured, no job runs the shipped default configuration{note})"


def _top_set(parent, done: Sequence[dict], objective: str, load_per_query, top_settings) -> tuple[list[dict], str, list[str], list[dict], str]:
    """``(rows, test, tie-breaker metrics, choices, error)`` of the top set for :class:`SweepView`
    (its fields ``top_set``, ``top_test``, ``tie_metrics``, ``tie_breaks``, ``top_error``), via
    :func:`harness.evaluation.compare.top_set_of_runs`."""
    import json

    from harness.evaluation.compare import CompareError, second_metric_for, tie_breakers, top_set_of_runs
    from harness.evaluation.stats import TopSetSettings

    if load_per_query is None or not done:
        return [], "", [], [], "no per-query tables"
    try:
        if top_settings is None:
            recorded = parent.tags.get("sweep.top_set_settings")
            top_settings = TopSetSettings.from_mapping(json.loads(recorded) if recorded else None)
        runs = {r["job"]: load_per_query(r["run_id"]) for r in done}
        result = top_set_of_runs(runs, objective, top_settings, lower=lower_is_better(objective))
    except (CompareError, ValueError) as exc:
        return [], "", [], [], str(exc)
    k = objective.rsplit("@", 1)[1] if "@" in objective and objective.rsplit("@", 1)[1].isdigit() else "5"
    second = second_metric_for(objective, top_settings.second_metric)
    by_job = {r["job"]: r for r in done}
    values = {j: {m: by_job[j]["metrics"][m] for m in (f"context_tokens@{k}", "chunks.n_chunks", second) if m in by_job[j]["metrics"]} for j in result.members}
    rules = tie_breakers(result.members, values, objective, top_settings.second_metric) if len(result.members) > 1 else []
    rows = [
        {
            "job": j,
            "run_id": by_job[j]["run_id"],
            "name": by_job[j]["name"],
            "mean": result.means[j],
            "p": result.p_values.get(j),
            "p_holm": result.p_holm.get(j),
            "best": j == result.best,
            "values": values[j],
        }
        for j in result.members
    ]
    choices = [{"rule": b.rule, "metric": b.metric, "job": b.choice, "name": by_job[b.choice]["name"] if b.choice is not None else None} for b in rules]
    test = f"{top_settings.test_text()}, {result.n_queries} queries"
    return rows, test, [f"context_tokens@{k}", "chunks.n_chunks", second], choices, ""
