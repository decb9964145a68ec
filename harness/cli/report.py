"""``harness report``: the HTML report of a run, a sweep, or two runs side by side.

``harness report RUN_ID`` writes the run's report (headline metrics with CIs, charts, the
document viewer with chunk boundaries and evidence, the query browser);
``harness report --sweep PARENT_ID`` the sweep's (the top set with its tie-breakers, job
table, charts, best against a baseline); ``harness report RUN_A RUN_B`` the two runs side by side. The library is
:mod:`harness.experiment.report` over :mod:`harness.reporting`; see docs/report.md.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Sequence

from harness.cli import add_tracking_uri, tracking_uri
from harness.experiment.report import ReportError, run_report_html, side_by_side_html, sweep_report_html
from harness.tracking.runs import TrackingStoreError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="harness report",
        description="Write a self-contained HTML report: of one run (RUN_ID), of two runs side by side (RUN_A RUN_B), or of a sweep (--sweep PARENT_ID).",
    )
    p.add_argument("runs", nargs="*", metavar="RUN_ID", help="one run id, or two for a side-by-side report")
    p.add_argument("--sweep", default=None, metavar="PARENT_ID", help="the parent run id of a sweep (printed when the sweep starts)")
    p.add_argument(
        "--baseline",
        default=None,
        metavar="RUN_ID",
        help="with --sweep: the job the best one is compared with, a run id, run name or job number (default: tracking.sweep_baseline, else the job running the shipped default configuration, else the runner-up)",
    )
    p.add_argument("--out", default=None, metavar="FILE", help="output file (default: report-<id>.html in the current folder)")
    add_tracking_uri(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit code (0 ok, 1 tracking store failure, 2 bad arguments
    or a run that cannot be reported)."""
    args = _parser().parse_args(argv)
    if args.sweep and args.runs:
        print(f"error: give either --sweep PARENT_ID or run ids, not both (got --sweep {args.sweep} and {args.runs})", file=sys.stderr)
        return 2
    if not args.sweep and len(args.runs) not in (1, 2):
        print(f"error: give one run id, two run ids (side by side) or --sweep PARENT_ID; got {len(args.runs)} run ids", file=sys.stderr)
        return 2
    if args.baseline and not args.sweep:
        print("error: --baseline only applies to a sweep report (--sweep PARENT_ID)", file=sys.stderr)
        return 2
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    uri = tracking_uri(args.tracking_uri)
    try:
        if args.sweep:
            html, name = sweep_report_html(uri, args.sweep, args.baseline), f"report-sweep-{args.sweep[:8]}.html"
        elif len(args.runs) == 1:
            html, name = run_report_html(uri, args.runs[0]), f"report-{args.runs[0][:8]}.html"
        else:
            html, name = side_by_side_html(uri, *args.runs), f"report-{args.runs[0][:8]}-{args.runs[1][:8]}.html"
    except ReportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except TrackingStoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    out = Path(args.out or name)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(html, encoding="utf-8")
    size = len(html.encode("utf-8"))
    print(f"wrote {out} ({size / 1e6:.1f} MB)" if size >= 1e6 else f"wrote {out} ({size / 1e3:.0f} kB)")
    return 0


def run_command(argv: Sequence[str]) -> int:
    """``harness report ARGV``: the exit code of :func:`main`."""
    return main(list(argv))
