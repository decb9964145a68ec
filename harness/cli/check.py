"""``harness check`` (also ``python -m harness.check``): the release gate.

Re-runs the candidate settings of a gate file (default ``experiments/gate/kestrel_kb.yaml``)
and tests them against its baseline; ``--update-baseline`` records a new baseline. Exit 0
pass, 1 regression, 2 config or data error. The library is :mod:`harness.experiment.gate`.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from harness.experiment.gate import DEFAULT_GATE, EXIT_ERROR, EXIT_PASS, GateError, _display_path, check, load_gate, update_baseline


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m harness.check",
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
    p.add_argument("overrides", nargs="*", help="Hydra overrides applied after the gate file's, e.g. chunker.chunk_size=400")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit code (0 pass or baseline written, 1 regression, 2 error)."""
    args = _parser().parse_args(argv)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    try:
        gate = load_gate(args.gate)
        if args.update_baseline:
            return _update(gate, args.overrides)
        return _check(gate, args.overrides)
    except GateError as exc:
        print(f"error: release gate: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except Exception:  # noqa: BLE001 - an unexpected crash must not read as "regression" (exit 1)
        import traceback

        traceback.print_exc()
        print("error: release gate: unexpected error (traceback above); the gate was not evaluated", file=sys.stderr)
        return EXIT_ERROR


def _check(gate, cli_overrides: Sequence[str]) -> int:
    outcome = check(gate, cli_overrides)
    print(outcome.report)
    print(f"\nMLflow run {outcome.run_id} tagged gate={outcome.tags['gate']} (tracking URI {outcome.tracking_uri})")
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
