"""``harness compare list|runs``: list runs, or compare runs query by query.

``harness compare list`` lists the experiment's runs (best recall@5 first); ``harness
compare runs RUN_A RUN_B ...`` pairs their per-query results with paired tests. The library is
:mod:`harness.evaluation.compare` (tables and tests) over :mod:`harness.tracking.runs`
(reading the runs).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Sequence

from harness.cli import add_tracking_uri, tracking_uri
from harness.evaluation.compare import (
    DEFAULT_METRICS,
    LIST_FORMATS,
    CompareError,
    check_comparable,
    compare_runs,
    format_listing,
    format_tables,
    select_metrics,
)
from harness.tracking.runs import TrackingStoreError, UnknownExperiment, experiment_name, list_runs, load_run


def default_experiment() -> str:
    """The experiment ``harness run`` logs to with no overrides (:func:`harness.tracking.runs.experiment_name`
    of the project's composed config)."""
    from harness.experiment.config import compose

    return experiment_name(compose([]))


def _list_main(args) -> int:
    """Listing mode of :func:`main`: 0 ok, 1 tracking store error, 2 bad arguments or unknown experiment."""
    if args.k < 1:
        print(f"error: --k must be >= 1, got {args.k}", file=sys.stderr)
        return 2
    if args.limit is not None and args.limit < 1:
        print(f"error: --limit must be >= 1, got {args.limit}", file=sys.stderr)
        return 2
    uri = tracking_uri(args.tracking_uri)
    experiment = args.experiment or default_experiment()
    try:
        table = list_runs(
            uri,
            experiment,
            k=args.k,
            filter_string=args.filter,
            tags=args.tag or (),
            sort=args.sort,
            ascending=args.ascending,
            limit=args.limit,
            all_statuses=args.all_runs,
        )
    except (UnknownExperiment, CompareError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except TrackingStoreError as exc:  # store unreachable or failing
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.format == "csv":
        print(format_listing(table, "csv"))
        return 0
    if table.empty:
        print(f"no {'' if args.all_runs else 'finished '}runs in experiment {experiment!r} match (tracking URI: {uri})")
        return 0
    sort = args.sort or f"recall@{args.k}"
    print(
        f"experiment {experiment!r}: {len(table)} run(s), sorted by {sort} {'ascending' if args.ascending else 'descending'}; time_s = time.total_s (seconds)\n"
    )
    print(format_listing(table, "markdown"))
    print(f"\ntracking URI: {uri}")
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="harness compare",
        description=(
            "harness compare list: an experiment's runs as a table. "
            "harness compare runs RUN_A RUN_B ...: paired comparison on the same queries; the first run is the baseline."
        ),
    )
    sub = p.add_subparsers(dest="mode", required=True, metavar="{list,runs}")
    ls = sub.add_parser("list", help="list an experiment's runs as a table (best recall@K first)", description="List an experiment's runs as a table.")
    add_tracking_uri(ls)
    ls.add_argument("--experiment", default=None, help="experiment name (default: the one `harness run` logs to: tracking.experiment, else the dataset's name)")
    ls.add_argument("--k", type=int, default=5, help="rank cut-off of the metric columns (default 5)")
    ls.add_argument("--sort", default=None, metavar="METRIC", help="metric (recall@5, recall_at_5, time.total_s, ...) or column to sort by (default recall@K)")
    ls.add_argument("--ascending", action="store_true", help="sort ascending (default descending)")
    ls.add_argument(
        "--filter",
        default=None,
        metavar="EXPR",
        help="MLflow search filter, e.g. \"tags.chunker = 'fixed'\" or \"params.chunker.chunk_size = '200'\" (clauses joined by 'and')",
    )
    ls.add_argument("--tag", action="append", default=None, metavar="KEY=VALUE", help="keep runs with this tag value (repeatable; ANDed with --filter)")
    ls.add_argument("--format", choices=LIST_FORMATS, default="markdown", help="markdown table (default) or csv")
    ls.add_argument("--limit", type=int, default=None, help="show at most this many runs (after sorting)")
    ls.add_argument(
        "--all-runs", "--all", action="store_true", help="also list unfinished, failed, sweep-parent, gate and benchmark runs, with a status column"
    )
    pc = sub.add_parser(
        "runs",
        help="compare two or more runs query by query with paired tests (the first is the baseline)",
        description="Paired comparison of two or more runs on the same queries; the first run is the baseline.",
    )
    pc.add_argument("runs", nargs="+", metavar="RUN_ID", help="MLflow run ids or unique prefixes (the 8 characters tables show); the first is the baseline")
    add_tracking_uri(pc)
    pc.add_argument("--metrics", nargs="+", default=None, help=f"per-query metric columns (default: those of {list(DEFAULT_METRICS)} present)")
    pc.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples and random sign patterns (default 1000)")
    pc.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    pc.add_argument("--alpha", type=float, default=0.05, help="significance level; CIs are at 1 - alpha (default 0.05)")
    pc.add_argument("--json", default=None, metavar="OUT.json", help="also write the tables as JSON")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit code (0 ok, 1 tracking store unreachable, 2 bad
    arguments, unknown experiment or incomparable runs). ``list``: list runs
    (:func:`harness.tracking.runs.list_runs`); ``runs RUN_A RUN_B ...``: paired comparison
    (:func:`harness.evaluation.compare.compare_runs`)."""
    args = _parser().parse_args(argv)  # argparse exits 2 on an unknown option or a missing mode
    if args.mode == "list":
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        return _list_main(args)
    return _runs_main(args)


def _runs_main(args) -> int:
    """Paired-comparison mode of :func:`main`: 0 ok, 1 tracking store error, 2 bad arguments or incomparable runs."""
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
    uri = tracking_uri(args.tracking_uri)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            runs = [load_run(uri, run_id, tmp) for run_id in args.runs]  # a run id or any unique prefix of one
        same = [(given, r.run_id) for given, r in zip(args.runs, runs) if [x.run_id for x in runs].count(r.run_id) > 1]
        if same:
            raise CompareError(f"{' and '.join(repr(g) for g, _ in same)} name the same run {same[0][1]}; give each run once")
        check_comparable(runs)
        metrics = select_metrics(runs, args.metrics)
        tables = compare_runs(runs, metrics, n_resamples=args.resamples, seed=args.seed, alpha=args.alpha)
    except (CompareError, ValueError) as exc:
        print(f"error: cannot compare: {exc}", file=sys.stderr)
        return 2
    except TrackingStoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
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


def run_command(argv: Sequence[str]) -> int:
    """``harness compare ARGV``: the exit code of :func:`main`."""
    return main(list(argv))
