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
from harness.experiment.gate import EXIT_ERROR, EXIT_FAIL, EXIT_PASS, DEFAULT_GATE, GateError, Gate, load_gate, Baseline, load_baseline, baseline_payload, write_baseline, describe_changes, _display_path, compose_candidate, validate_candidate, check_same_data, run_candidate, evaluate_gate, format_report, record_in_mlflow  # noqa: F401


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


def _check(gate: Gate, cli_overrides: Sequence[str]) -> int:
    from harness.evaluation.metrics import mlflow_key

    baseline = load_baseline(gate.baseline, list(gate.margins))
    cfg = compose_candidate(gate, cli_overrides, "gate")
    dataset = validate_candidate(cfg, gate)
    check_same_data(baseline, dataset, cfg)
    run_id, per_query, uri, _ = run_candidate(cfg)
    results, flips = evaluate_gate(gate, baseline, per_query)
    report = format_report(gate, baseline, results, flips, run_id)
    passed = bool((results["verdict"] == "pass").all())
    failed = results.loc[results["verdict"] == "fail", "metric"].tolist()
    tags = {
        "gate": "pass" if passed else "fail",
        "gate.role": "candidate",
        "gate.file": _display_path(gate.path),
        "gate.baseline": _display_path(gate.baseline),
        "gate.baseline_run_id": str(baseline.data.get("source_run_id")),
        "gate.failed": ",".join(failed),
        "gate.flipped_queries": str(len(flips)),
        **{f"gate.{mlflow_key(r['metric'])}": r["verdict"] for r in results.to_dict(orient="records")},
    }
    numbers = {}
    for r in results.to_dict(orient="records"):
        for field in ("diff", "ci_low", "ci_high", "p"):
            numbers[f"gate.{r['metric']}.{field}"] = r[field]
    record_in_mlflow(uri, run_id, tags, numbers, report)
    print(report)
    print(f"\nMLflow run {run_id} tagged gate={tags['gate']} (tracking URI {uri})")
    sys.stdout.flush()
    return EXIT_PASS if passed else EXIT_FAIL


def _update(gate: Gate, cli_overrides: Sequence[str]) -> int:
    old = None
    if gate.baseline.is_file():
        try:
            old = load_baseline(gate.baseline)
        except GateError as exc:
            print(f"warning: the existing baseline cannot be read and will be replaced: {exc}", file=sys.stderr)
    cfg = compose_candidate(gate, cli_overrides, "baseline")
    dataset = validate_candidate(cfg, gate)
    run_id, per_query, uri, experiment = run_candidate(cfg)
    missing = [m for m in gate.margins if m not in per_query.columns]
    if missing:
        raise GateError(f"the run has no per-query column(s) {missing}")
    payload = baseline_payload(gate, cli_overrides, cfg, dataset, run_id, experiment, per_query)
    summary = describe_changes(old, payload)
    write_baseline(gate.baseline, payload)
    record_in_mlflow(uri, run_id, {"gate.role": "baseline", "gate.file": _display_path(gate.path), "gate.baseline": _display_path(gate.baseline)})
    print(f"## Baseline update: {_display_path(gate.baseline)}\n")
    print(summary)
    print(f"\nwrote {gate.baseline} from run {run_id} ({len(per_query)} queries; tracking URI {uri}); review and commit it")
    sys.stdout.flush()
    return EXIT_PASS


def run_command(argv: Sequence[str]) -> int:
    """``harness check ARGV``: the exit code of :func:`main`."""
    return main(list(argv))
