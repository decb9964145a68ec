"""``harness check``: the release gate.

Re-runs the candidate settings of a gate file (default ``experiments/gate/kestrel_kb.yaml``)
and tests them against its baseline; ``--update-baseline`` records a new baseline. Exit 0
pass, 1 regression, 2 config or data error. The library is :mod:`harness.studies.gate`.

Besides the markdown table on stdout, ``--junit PATH`` writes the verdict as JUnit XML (one
test case per guarded metric, the flipped queries in a failure's text; one error case when
the gate could not be evaluated), and when the environment variable ``GITHUB_STEP_SUMMARY``
names a file (GitHub Actions sets it) the report is appended to it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Sequence

from harness.studies.gate import DEFAULT_GATE, EXIT_ERROR, EXIT_PASS, GateError, _display_path, check, junit_xml, load_gate, update_baseline

#: Environment variable naming the file GitHub Actions shows as the job's summary (markdown, appended to).
STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="harness check",
        description=(
            "Release gate: run the candidate settings and test every guarded metric for non-inferiority "
            "against the committed baseline. Exit 0 pass, 1 a metric regresses, 2 configuration or data error."
        ),
    )
    p.add_argument("--gate", default=str(DEFAULT_GATE), help=f"gate file (default: {_display_path(DEFAULT_GATE)})")
    p.add_argument(
        "--update-baseline",
        action="store_true",
        help="run the settings and (re)write the gate's baseline file, printing old vs new means; no test",
    )
    p.add_argument(
        "--junit",
        metavar="PATH",
        help="also write the verdict as JUnit XML to PATH (one test case per guarded metric; flipped queries in the failure text)",
    )
    p.add_argument("overrides", nargs="*", help="Hydra overrides applied after the gate file's, e.g. chunker.chunk_size=400")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit code (0 pass or baseline written, 1 regression, 2 error)."""
    args = _parser().parse_args(argv)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    started = time.monotonic()
    try:
        junit = junit_path(args.junit, args.update_baseline)
    except GateError as exc:
        print(f"error: release gate: {exc}", file=sys.stderr)
        return EXIT_ERROR
    gate = None
    try:
        gate = load_gate(args.gate)
        if args.update_baseline:
            return _update(gate, args.overrides)
        return _check(gate, args.overrides, junit, started)
    except GateError as exc:
        message = str(exc)
        print(f"error: release gate: {message}", file=sys.stderr)
    except Exception as exc:  # noqa: BLE001 - an unexpected crash must not read as "regression" (exit 1)
        import traceback

        traceback.print_exc()
        message = f"unexpected error {type(exc).__name__}: {exc}; the gate was not evaluated"
        print("error: release gate: unexpected error (traceback above); the gate was not evaluated", file=sys.stderr)
    if not args.update_baseline:
        publish(junit, junit_xml(gate, None, None, error=message, seconds=time.monotonic() - started), f"## Release gate: ERROR\n\n{message}")
    return EXIT_ERROR


def junit_path(value: str | None, update_baseline: bool) -> Path | None:
    """Validate ``--junit PATH`` before any work; create its folder. None when not given.

    Raises:
        GateError: with ``--update-baseline`` (no test is run), or PATH is a folder or its
            folder cannot be created or written to (one line naming ``--junit`` and PATH).
    """
    if value is None:
        return None
    if update_baseline:
        raise GateError("--junit writes a check's verdict; --update-baseline runs no check: drop one of them")
    path = Path(value)
    if path.is_dir():
        raise GateError(f"--junit {value}: is a folder; expected the path of an XML file such as {Path(value) / 'gate.xml'}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise GateError(f"--junit {value}: cannot create its folder {path.parent}: {exc.strerror or exc}") from exc
    if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise GateError(f"--junit {value}: not writable")
    return path


def publish(junit: Path | None, xml: str, summary: str, environ=os.environ) -> None:
    """Write the JUnit file (when ``--junit`` was given) and append ``summary`` (markdown) to
    the file named by ``GITHUB_STEP_SUMMARY`` (when set). A summary that cannot be written
    is a warning on stderr, never a changed exit code."""
    if junit is not None:
        junit.write_text(xml, encoding="utf-8")
    target = environ.get(STEP_SUMMARY_ENV)
    if target:
        try:
            with open(target, "a", encoding="utf-8") as fh:
                fh.write(summary.rstrip("\n") + "\n\n")
        except OSError as exc:
            print(f"warning: {STEP_SUMMARY_ENV}={target}: cannot append the gate report: {exc.strerror or exc}", file=sys.stderr)


def _check(gate, cli_overrides: Sequence[str], junit: Path | None = None, started: float | None = None) -> int:
    outcome = check(gate, cli_overrides)
    print(outcome.report)
    print(f"\nMLflow run {outcome.run_id} tagged gate={outcome.tags['gate']} (tracking URI {outcome.tracking_uri})")
    seconds = 0.0 if started is None else time.monotonic() - started
    publish(junit, junit_xml(gate, outcome.results, outcome.flips, seconds=seconds), outcome.report)
    if junit is not None:
        print(f"JUnit XML written to {junit}")
    sys.stdout.flush()
    return outcome.exit_code


def _update(gate, cli_overrides: Sequence[str]) -> int:
    done = update_baseline(gate, cli_overrides, warn=lambda message: print(f"warning: {message}", file=sys.stderr))
    print(f"## Baseline update: {_display_path(done.path)}\n")
    print(done.summary)
    print(f"\nwrote {done.path} from run {done.run_id} ({done.n_queries} queries; tracking URI {done.tracking_uri}); review and commit it")
    sys.stdout.flush()
    return EXIT_PASS


def run_command(argv: Sequence[str]) -> int:
    """``harness check ARGV``: the exit code of :func:`main`."""
    return main(list(argv))
