"""Paired comparison of logged runs: ``python -m harness.compare RUN_A RUN_B [RUN_C ...]``.

The first run is the baseline; every other run is compared with it on the same queries,
metric by metric, using each run's ``per_query.csv`` artifact:

- ``diff``: mean over queries of ``other - baseline`` (> 0: the other run scores higher);
- ``ci_low``/``ci_high``: percentile-bootstrap interval of ``diff`` at level ``1 - alpha``,
  resampling queries (Efron & Tibshirani 1993);
- ``p``: two-sided paired sign-flip permutation p-value (exact when ``2**n <= --resamples``);
- ``p_holm``: Holm-adjusted p over the runs compared with the baseline *for that metric*
  (the family is the m = #runs - 1 comparisons of one metric; metrics are separate
  families because they are different questions about the same rankings);
- ``W/T/L``: queries where the other run is higher / equal / lower;
- ``sig``: ``*`` when ``p_holm <= alpha``.

See :mod:`harness.stats` for the methods. Runs are refused (exit code 2, message on stderr)
when their ``dataset_fingerprint`` tags differ or are missing, when their query id sets
differ, or when a requested metric is missing. Example::

    python -m harness.compare 3f2a... 9b7c... --metrics recall@5 iou@5 --json cmp.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pandas as pd

from harness.stats import holm, paired_comparison

#: Metrics compared when ``--metrics`` is not given (those present in every run are used).
DEFAULT_METRICS = (
    "recall@5",
    "recall@10",
    "recall@1024tok",  # equal context budget: large chunks cannot win merely by being large
    "precision@5",
    "iou@5",
    "precision_omega",
    "context_precision@5",
    "mrr@10",
    "ndcg@10",
)

#: Name of the per-query artifact written by :func:`harness.run.execute`.
PER_QUERY_ARTIFACT = "per_query.csv"


class CompareError(Exception):
    """Runs that cannot be compared (different datasets, query sets, missing data)."""


@dataclass
class LoggedRun:
    """One run as read back from MLflow: id, display name, dataset fingerprint, per-query table."""

    run_id: str
    name: str
    fingerprint: str | None
    per_query: pd.DataFrame

    @property
    def label(self) -> str:
        return f"{self.name} ({self.run_id[:8]})"


def load_run(client, run_id: str, workdir: str | Path) -> LoggedRun:
    """Fetch a run's tags and its ``per_query.csv`` artifact.

    Raises:
        CompareError: unknown run id, or the run has no ``per_query.csv`` artifact (e.g.
            it FAILED before scoring), or the table has no ``query_id`` column.
    """
    try:
        run = client.get_run(run_id)
    except Exception as exc:  # mlflow raises MlflowException for unknown ids
        raise CompareError(f"run {run_id!r} not found in the tracking store: {exc}") from exc
    name = run.info.run_name or run_id
    try:
        local = client.download_artifacts(run_id, PER_QUERY_ARTIFACT, str(Path(workdir) / run_id))
    except Exception as exc:
        raise CompareError(
            f"run {name} ({run_id}) has no {PER_QUERY_ARTIFACT} artifact (status {run.info.status}); only finished runs can be compared: {exc}"
        ) from exc
    table = pd.read_csv(local, dtype={"query_id": str}, keep_default_na=False, na_values=[""])
    if "query_id" not in table.columns:
        raise CompareError(f"run {name} ({run_id}): {PER_QUERY_ARTIFACT} has no query_id column")
    return LoggedRun(run_id, name, run.data.tags.get("dataset_fingerprint"), table)


def check_comparable(runs: Sequence[LoggedRun]) -> None:
    """Refuse runs that were not evaluated on the same dataset and the same queries.

    Raises:
        CompareError: a run lacks the ``dataset_fingerprint`` tag; fingerprints differ;
            a run has duplicate query ids; or query id sets differ (the message gives
            counts and a few ids missing on each side).
    """
    base = runs[0]
    for r in runs:
        if not r.fingerprint:
            raise CompareError(f"run {r.label} has no dataset_fingerprint tag, so its dataset cannot be checked")
    for r in runs[1:]:
        if r.fingerprint != base.fingerprint:
            raise CompareError(
                f"runs are on different datasets: baseline {base.label} has dataset_fingerprint {base.fingerprint}, "
                f"{r.label} has {r.fingerprint}; a paired comparison needs the same documents, queries and evidence"
            )
    for r in runs:
        dup = r.per_query["query_id"][r.per_query["query_id"].duplicated()]
        if len(dup):
            raise CompareError(f"run {r.label}: {PER_QUERY_ARTIFACT} repeats query ids {sorted(set(dup))[:5]}")
    base_ids = set(base.per_query["query_id"])
    for r in runs[1:]:
        ids = set(r.per_query["query_id"])
        if ids != base_ids:
            only_base, only_other = sorted(base_ids - ids), sorted(ids - base_ids)
            raise CompareError(
                f"runs have different query sets: baseline {base.label} has {len(base_ids)} queries, {r.label} has {len(ids)}; "
                f"{len(only_base)} only in the baseline {only_base[:5]}, {len(only_other)} only in {r.label} {only_other[:5]}"
            )


def select_metrics(runs: Sequence[LoggedRun], requested: Sequence[str] | None) -> list[str]:
    """Metric columns to compare: ``requested`` (each must exist in every run), else the
    :data:`DEFAULT_METRICS` present in every run, else every shared numeric ``name@k`` column.

    Raises:
        CompareError: a requested metric is missing from a run, or nothing to compare.
    """
    common = set.intersection(*(set(r.per_query.columns) for r in runs))
    if requested:
        for r in runs:
            missing = [m for m in requested if m not in r.per_query.columns]
            if missing:
                available = sorted(c for c in r.per_query.columns if "@" in c)
                raise CompareError(f"metric(s) {missing} not in {PER_QUERY_ARTIFACT} of run {r.label}; available: {available}")
        return list(dict.fromkeys(requested))
    chosen = [m for m in DEFAULT_METRICS if m in common]
    if not chosen:
        base_cols = runs[0].per_query.columns
        chosen = [c for c in base_cols if c in common and "@" in c and pd.api.types.is_numeric_dtype(runs[0].per_query[c])]
    if not chosen:
        raise CompareError(f"no metric column shared by all runs in {PER_QUERY_ARTIFACT}")
    return chosen


def compare_runs(runs: Sequence[LoggedRun], metrics: Sequence[str], n_resamples: int = 1000, seed: int = 0, alpha: float = 0.05) -> dict[str, pd.DataFrame]:
    """One table per metric: a row per non-baseline run, compared with ``runs[0]``.

    Queries are aligned by ``query_id``. Columns: ``run``, ``baseline``, ``mean``,
    ``diff``, ``ci_low``, ``ci_high`` (level ``1 - alpha``), ``p``, ``p_holm``, ``W``,
    ``T``, ``L``, ``sig`` (``"*"`` when ``p_holm <= alpha``), ``n``.

    Raises:
        ValueError: ``alpha`` outside (0, 1); a metric column with missing or
            non-numeric values (the message names run and metric).
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if len(runs) < 2:
        raise ValueError(f"need a baseline and at least one other run, got {len(runs)} run(s)")
    order = runs[0].per_query["query_id"].tolist()
    aligned = [r.per_query.set_index("query_id").loc[order] for r in runs]
    tables = {}
    for metric in metrics:
        cols = []
        for r, t in zip(runs, aligned):
            col = pd.to_numeric(t[metric], errors="coerce")
            if col.isna().any():
                raise ValueError(f"run {r.label}: metric {metric!r} has {int(col.isna().sum())} missing or non-numeric per-query values")
            cols.append(col.to_numpy(dtype=float))
        rows = []
        for r, values in zip(runs[1:], cols[1:]):
            res = paired_comparison(cols[0], values, n_resamples=n_resamples, confidence=1.0 - alpha, seed=seed)
            rows.append(
                {
                    "run": r.label,
                    "baseline": res.mean_a,
                    "mean": res.mean_b,
                    "diff": res.diff,
                    "ci_low": res.ci_low,
                    "ci_high": res.ci_high,
                    "p": res.p_value,
                    "W": res.wins,
                    "T": res.ties,
                    "L": res.losses,
                    "n": res.n,
                }
            )
        table = pd.DataFrame(rows)
        table.insert(table.columns.get_loc("p") + 1, "p_holm", holm(table["p"].tolist()))
        table.insert(table.columns.get_loc("L") + 1, "sig", ["*" if p <= alpha else "" for p in table["p_holm"]])
        tables[metric] = table
    return tables


def format_tables(tables: dict[str, pd.DataFrame], baseline: LoggedRun, alpha: float, n_resamples: int, seed: int) -> str:
    """Plain-text report: a header and one table per metric."""
    n = len(baseline.per_query)
    lines = [
        f"baseline: {baseline.label}; {n} paired queries; diff = other - baseline; "
        f"{100 * (1 - alpha):g}% bootstrap CI; two-sided sign-flip permutation p; "
        f"Holm over {len(next(iter(tables.values())))} comparison(s) per metric; "
        f"* = p_holm <= {alpha:g}; resamples {n_resamples}, seed {seed}"
    ]
    for metric, table in tables.items():
        shown = table.drop(columns=["n"])
        lines.append(f"\n{metric}")
        lines.append(shown.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m harness.compare",
        description="Paired comparison of MLflow runs on the same queries; the first run is the baseline.",
    )
    p.add_argument("runs", nargs="+", metavar="RUN_ID", help="MLflow run ids; the first is the baseline (at least two)")
    p.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else the project store)")
    p.add_argument("--metrics", nargs="+", default=None, help=f"per-query metric columns (default: those of {list(DEFAULT_METRICS)} present)")
    p.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples and random sign patterns (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level; CIs are at 1 - alpha (default 0.05)")
    p.add_argument("--json", default=None, metavar="OUT.json", help="also write the tables as JSON")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit code (0 ok, 2 bad arguments or incomparable runs)."""
    args = _parser().parse_args(argv)
    if len(args.runs) < 2:
        print("error: give at least two run ids (the first is the baseline)", file=sys.stderr)
        return 2
    if len(set(args.runs)) != len(args.runs):
        print(f"error: a run id is repeated in {args.runs}", file=sys.stderr)
        return 2
    if args.resamples < 1:
        print(f"error: --resamples must be >= 1, got {args.resamples}", file=sys.stderr)
        return 2
    if not 0.0 < args.alpha < 1.0:
        print(f"error: --alpha must be in (0, 1), got {args.alpha}", file=sys.stderr)
        return 2

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # keep stderr for errors
    import mlflow

    from harness.build import PROJECT_ROOT
    from harness.tracking import resolve_tracking_uri

    uri = args.tracking_uri or resolve_tracking_uri(None, PROJECT_ROOT)
    client = mlflow.MlflowClient(uri)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            runs = [load_run(client, run_id, tmp) for run_id in args.runs]
        check_comparable(runs)
        metrics = select_metrics(runs, args.metrics)
        tables = compare_runs(runs, metrics, n_resamples=args.resamples, seed=args.seed, alpha=args.alpha)
    except (CompareError, ValueError) as exc:
        print(f"error: cannot compare: {exc}", file=sys.stderr)
        return 2
    print(format_tables(tables, runs[0], args.alpha, args.resamples, args.seed))
    print(f"\ntracking URI: {uri}")
    if args.json:
        payload = {
            "baseline": {"run_id": runs[0].run_id, "name": runs[0].name},
            "runs": [{"run_id": r.run_id, "name": r.name} for r in runs],
            "dataset_fingerprint": runs[0].fingerprint,
            "n_queries": len(runs[0].per_query),
            "alpha": args.alpha,
            "resamples": args.resamples,
            "seed": args.seed,
            "metrics": {m: t.to_dict(orient="records") for m, t in tables.items()},
        }
        Path(args.json).write_text(json.dumps(payload, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
