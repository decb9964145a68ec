"""``python -m harness.datasets validate <path> [--format native|chroma]``: check a dataset folder.

Prints document/question counts, evidence statistics and every span check; exits 1 with the
first problem (naming the file, query and span) when the dataset is invalid.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from harness.datasets.validate import DatasetError


def _detect(path: Path) -> str:
    if (path / "questions.jsonl").is_file():
        return "native"
    if (path / "questions.csv").is_file():
        return "chroma"
    raise DatasetError(f"{path}: neither questions.jsonl (native format) nor questions.csv (chroma format) found")


def validate(path: str, fmt: str | None = None) -> int:
    """Load and check the dataset at ``path``; print a report; return a process exit code."""
    from harness.datasets.chroma import load_chroma_general
    from harness.datasets.native import load_native

    root = Path(path)
    try:
        fmt = fmt or _detect(root)
        ds = load_native(root) if fmt == "native" else load_chroma_general(root)
    except DatasetError as exc:
        print(f"INVALID: {exc}", file=sys.stderr)
        return 1
    spans = [e for q in ds.queries for e in q.evidence]
    lengths = [e.end - e.start for e in spans]
    multi = sum(1 for q in ds.queries if len(q.evidence) >= 2)
    print(f"dataset {ds.name!r} ({fmt} format) at {root}")
    print(f"  documents:       {len(ds.documents)} ({ds.n_chars:,} characters)")
    print(f"  queries:         {len(ds.queries)} ({multi} with two or more evidence spans)")
    print(f"  evidence spans:  {len(spans)}, median {statistics.median(lengths):.0f} chars, max {max(lengths)}")
    print(f"  span checks:     {len(spans)}/{len(spans)} in range and equal to their stored excerpt")
    print(f"  fingerprint:     {ds.fingerprint()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.datasets", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    v = sub.add_parser("validate", help="check every evidence span of a dataset folder")
    v.add_argument("path")
    v.add_argument("--format", choices=["native", "chroma"], default=None)
    args = parser.parse_args(argv)
    return validate(args.path, args.format)


if __name__ == "__main__":
    sys.exit(main())
