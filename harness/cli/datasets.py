"""``harness datasets validate|audit <path> [--format FORMAT]``: check a dataset, audit its labels.

``audit`` lists, per query, retrieved statements that likely state the answer but are not
labelled, side by side with the labelled evidence (method: :mod:`harness.evaluation.audit`;
the BM25 ranking it reads: :mod:`harness.studies.audit`); ``--out FILE.json|FILE.csv``
writes every candidate as a record. Exits 0 (candidates are findings, not errors) or 1
when the dataset cannot be loaded.

Formats and how ``<path>`` is recognised when ``--format`` is not given:

* ``native``   -- folder with ``questions.jsonl`` (and ``corpus/``)
* ``chroma``   -- folder with ``questions.csv`` (and ``corpora/``)
* ``beir``     -- folder with ``corpus.jsonl`` and ``queries.jsonl`` (qrels split: ``--split``)
* ``squad``    -- a ``.json`` file, or a folder holding exactly one ``.json`` file
* ``excerpts`` -- folder with ``excerpts.jsonl`` (and ``corpus/``)
* ``folder``   -- folder with ``excerpts.jsonl`` and a ``corpus/`` holding sub-folders or
  files that need extraction (``.pdf``, ``.html``, ``.htm``, ``.json``); files that cannot be
  extracted are skipped and listed

Prints document/query counts, evidence statistics, the span checks and every record the
loader dropped or could not resolve (first ``--show`` problems), including
``queries_without_evidence`` (queries a run excludes instead of scoring them 0). Exits 1
when the dataset cannot be loaded (the message names the file, line or field; for a file
that is not UTF-8, the file and the byte offset) or when an excerpts dataset
has missing or ambiguous excerpts (the run would stop on it unless
``dataset.allow_unlocated=true``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Sequence

from harness.datasets.detect import FORMATS, detect_format, load_any
from harness.datasets.validate import DatasetError


def validate(path: str, fmt: str | None = None, split: str = "test", show: int = 10) -> int:
    """Load and check the dataset at ``path``; print a report; return a process exit code."""
    root = Path(path)
    try:
        fmt = fmt or detect_format(root)
        if fmt not in FORMATS:
            raise DatasetError(f"--format must be one of {list(FORMATS)}, got {fmt!r}")
        ds, report = load_any(root, fmt, split)
    except DatasetError as exc:
        print(f"INVALID: {exc}", file=sys.stderr)
        return 1
    spans = [e for q in ds.queries for e in q.evidence]
    lengths = [e.end - e.start for e in spans]
    multi = sum(1 for q in ds.queries if len(q.evidence) >= 2)
    with_text = sum(1 for e in spans if e.text)
    print(f"dataset {ds.name!r} ({fmt} format) at {root}")
    print(f"  documents:       {len(ds.documents)} ({ds.n_chars:,} characters)")
    print(f"  queries:         {len(ds.queries)} ({multi} with two or more evidence spans)")
    print(f"  evidence spans:  {len(spans)}, median {statistics.median(lengths):.0f} chars, max {max(lengths)}")
    print(f"  span checks:     {len(spans)}/{len(spans)} in range; {with_text}/{len(spans)} carry an excerpt, each equal to the document text")
    if fmt == "beir":
        print("  labels:          document level (each evidence span is a whole relevant document)")
    for kind, n in sorted(report.info.items()):
        print(f"  {kind + ':':<26} {n}")
    if report.counts:
        print("  dropped or unresolved: " + ", ".join(f"{k}={v}" for k, v in sorted(report.counts.items())))
        for line in report.problems[:show]:
            print(f"    - {line}")
        if len(report.problems) > show:
            print(f"    ... and {len(report.problems) - show} more")
    else:
        print("  dropped or unresolved: none")
    print(f"  fingerprint:     {ds.fingerprint()}")
    unlocated = report.count("missing") + report.count("ambiguous")
    if fmt in ("excerpts", "folder") and unlocated:
        print(
            f"INVALID: {unlocated} excerpt(s) missing or ambiguous; a run stops on this dataset unless "
            "dataset.allow_unlocated=true (the counts above are what it would drop)",
            file=sys.stderr,
        )
        return 1
    return 0


def _cell(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def audit_labels(path: str, fmt: str | None = None, split: str = "test", k: int = 10, chunk_size: int = 1000, out: str | None = None, width: int = 70) -> int:
    """Audit the labels of the dataset at ``path``: print the candidates per query; write ``out``."""
    import csv
    import json

    from harness.evaluation.audit import AuditRule
    from harness.studies.audit import audit_dataset

    root = Path(path)
    if out is not None and Path(out).suffix.lower() not in (".json", ".csv"):
        print(f"INVALID: --out must end in .json or .csv, got {out!r}", file=sys.stderr)
        return 1
    try:
        rule = AuditRule(k=k)
        fmt = fmt or detect_format(root)
        ds, _ = load_any(root, fmt, split)
        found = audit_dataset(ds, rule, chunk_size=chunk_size)
    except (DatasetError, ValueError) as exc:
        print(f"INVALID: {exc}", file=sys.stderr)
        return 1
    records = [c.record() for cs in found.values() for c in cs]
    flagged = [qid for qid, cs in found.items() if cs]
    print(f"label audit of {ds.name!r}: BM25 top {k} over {chunk_size}-character chunks; {len(records)} candidate(s) in {len(flagged)} of {len(found)} queries")
    for qid in flagged:
        cs = found[qid]
        print(f"\n{qid}: {_cell(cs[0].question, 2 * width)}")
        for c in cs:
            ev = c.evidence
            print(f"  labelled  {ev.doc_id}:{ev.start}-{ev.end}  {_cell(ev.text, width)}")
            print(f"  candidate {c.doc_id}:{c.start}-{c.end} (rank {c.rank})  {_cell(c.text, width)}")
            shared = ", ".join(c.overlap.shared_values) or "-"
            print(f"  shares    values: {shared}; words {c.overlap.word_share:.0%} of the evidence's ({', '.join(c.overlap.shared_words[:8])})")
    if out is not None:
        target = Path(out)
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.suffix.lower() == ".json":
            target.write_text(json.dumps(records, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        else:
            fields = list(records[0]) if records else ["query_id"]
            with target.open("w", encoding="utf-8", newline="") as fh:
                writer = csv.DictWriter(fh, fieldnames=fields)
                writer.writeheader()
                for r in records:
                    writer.writerow({key: ";".join(v) if isinstance(v, list) else v for key, v in r.items()})
        print(f"\nwrote {len(records)} record(s) to {target}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="harness datasets", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    v = sub.add_parser("validate", help="check every evidence span of a dataset")
    v.add_argument("path")
    v.add_argument("--format", choices=list(FORMATS), default=None)
    v.add_argument("--split", default="test", help="BEIR qrels split (qrels/<split>.tsv)")
    v.add_argument("--show", type=int, default=10, help="how many problems to list")
    a = sub.add_parser("audit", help="list retrieved statements that likely state an answer but are not labelled")
    a.add_argument("path")
    a.add_argument("--format", choices=list(FORMATS), default=None)
    a.add_argument("--split", default="test", help="BEIR qrels split (qrels/<split>.tsv)")
    a.add_argument("--k", type=int, default=10, help="ranked chunks searched per query (default 10)")
    a.add_argument("--chunk-size", type=int, default=1000, help="chunk size in characters for the BM25 ranking (default 1000)")
    a.add_argument("--out", default=None, help="also write every candidate to FILE.json or FILE.csv")
    args = parser.parse_args(argv)
    if args.command == "audit":
        return audit_labels(args.path, args.format, split=args.split, k=args.k, chunk_size=args.chunk_size, out=args.out)
    return validate(args.path, args.format, split=args.split, show=args.show)


def run_command(argv: Sequence[str]) -> int:
    """``harness datasets ARGV``: the exit code of :func:`main`."""
    return main(list(argv))
