"""Reproduce the configurations of Chroma's chunking evaluation and print one table.

Runs fixed 800/400, 400/200, 400/0, 200/0; recursive 800/400, 400/200, 400/0, 200/0;
cluster 200 and 400; Kamradt 300 (sizes in cl100k_base tokens) with all-MiniLM-L6-v2 and
FAISS on a chroma-format dataset, every corpus pooled into one index as the reference does,
and prints per configuration and corpus: chunks, recall, IoU, precision and PrecisionΩ in
our convention and in the reference's (``metrics.convention=chroma``). Every configuration
is an ordinary tracked run: caches are reused, and a configuration that already has a
FINISHED run is read back instead of recomputed (so an interrupted call resumes).

Usage (from the project root)::

    .venv/bin/python experiments/reproduce/chroma.py                      # ../shared/datasets/chroma_general
    .venv/bin/python experiments/reproduce/chroma.py --dataset /data/chroma_full --json out.json
    .venv/bin/python experiments/reproduce/chroma.py --only "fixed 400/0" --only "kamradt 300"
    .venv/bin/python experiments/reproduce/chroma.py tracking.uri=sqlite:////tmp/m.db cache.dir=/tmp/c

Trailing ``key=value`` arguments are Hydra overrides applied to every run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.experiment.build import PROJECT_ROOT
from harness.studies.reproduce import CHROMA_CONFIGURATIONS, Result, corpus_table, reproduce

DEFAULT_DATASET = PROJECT_ROOT.parent / "shared" / "datasets" / "chroma_general"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default=str(DEFAULT_DATASET), help="chroma-format folder: questions.csv + corpora/*.md (default: %(default)s)")
    parser.add_argument("--k", type=int, default=5, help="rank cut-off of the table (the reference retrieves 5)")
    parser.add_argument(
        "--only",
        action="append",
        metavar="NAME",
        help=f"a configuration to run (repeat the option for several), of: {', '.join(repr(n) for n in CHROMA_CONFIGURATIONS)}",
    )
    parser.add_argument("--rerun", action="store_true", help="run again even where a FINISHED run exists")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--markdown", metavar="FILE", help="also write the table as markdown")
    parser.add_argument("--from-json", metavar="FILE", help="print the table of an earlier --json file; runs nothing")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every run, e.g. tracking.uri=... cache.dir=...")
    args = parser.parse_args(argv)
    if args.from_json:
        if args.only or args.overrides or args.rerun:
            parser.error("--from-json prints a stored table: it takes no --only, --rerun or overrides")
        try:
            data = json.loads(Path(args.from_json).read_text(encoding="utf-8"))
            results = [Result.from_json(r) for r in data["results"]]
            k = int(data["k"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"error: --from-json {args.from_json}: not a results file of this script ({type(exc).__name__}: {exc})", file=sys.stderr)
            return 2
        print(corpus_table(results, k))
        return 0

    def progress(res: Result) -> None:
        how = "read back (FINISHED before)" if res.skipped else "ran"
        print(f"{res.name}: {how} run {res.run_name} ({res.run_id}); recall@{args.k} {res.values['all'][f'recall@{args.k}']:.4f}", file=sys.stderr, flush=True)

    try:
        results = reproduce(args.dataset, args.k, args.only, args.overrides, args.rerun, on_result=progress)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    table = corpus_table(results, args.k)
    print(table)
    if args.json:
        payload = {"dataset": Path(args.dataset).name, "k": args.k, "results": [r.to_json() for r in results]}
        Path(args.json).write_text(json.dumps(payload, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    if args.markdown:
        Path(args.markdown).write_text(table + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
