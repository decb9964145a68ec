"""``harness bench``: speed benchmarks, ratios measured side by side.

The library is :mod:`harness.studies.bench` (:func:`~harness.studies.bench.run_benchmarks`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Sequence

from harness.cli import prepare_process
from harness.studies.bench import PARTS, run_benchmarks, tables


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit code (0 even when a target fails, 2 for a bad argument)."""
    parser = argparse.ArgumentParser(prog="harness bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="chroma_general", help="chroma_general, kestrel_kb or a dataset folder (default: %(default)s)")
    parser.add_argument("--out", default="bench.json", help="JSON output file (default: %(default)s)")
    parser.add_argument("--quick", action="store_true", help="sweep BM25 over character chunks instead of FAISS over token chunks; 1 timing repeat")
    parser.add_argument("--tiny", action="store_true", help="smoke-test settings: 2-config sweep, 2 thresholds")
    parser.add_argument("--parts", default=",".join(PARTS), help="comma-separated subset to run (default: %(default)s)")
    parser.add_argument(
        "--vs-reference", action="store_true", help="time the harness against a reference-style pipeline and the encoding floor (docs/benchmark.md)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="--vs-reference: interleaved rounds, median of per-round ratios (default: %(default)s)")
    parser.add_argument(
        "--from-json",
        metavar="FILE",
        help="print the --vs-reference (or, with --sweep-cost, comma-separated --sweep-cost) tables of JSON written by --out, without running anything",
    )
    parser.add_argument(
        "--update-docs", action="store_true", help="with --vs-reference, --sweep-cost, --scale-chunks or --from-json: write the tables into docs/benchmark.md"
    )
    parser.add_argument(
        "--sweep-cost",
        action="store_true",
        help="whole sweeps against the reference-style pipeline per configuration and the encoding floor (docs/benchmark.md)",
    )
    parser.add_argument("--sweep-parts", default="reference,floor", help="--sweep-cost: comma-separated subset of reference,floor (default: %(default)s)")
    parser.add_argument("--scale", metavar="FACTORS", help="instead: cost as the work grows, --dataset repeated e.g. 1,10,100 times (docs/benchmark.md)")
    chunks = parser.add_argument_group("--scale-chunks: search over N distinct chunks (docs/benchmark.md)")
    chunks.add_argument("--scale-chunks", metavar="N", type=int, help="instead: FAISS IVF/HNSW and BM25 over >= N distinct chunks, e.g. 1000000")
    chunks.add_argument("--chunk-chars", type=int, default=256, help="characters per chunk (default: %(default)s)")
    chunks.add_argument("--perturb", type=float, default=0.15, help="share of words replaced in every copy after the first (default: %(default)s)")
    chunks.add_argument("--queries", type=int, default=200, help="questions searched (default: %(default)s)")
    chunks.add_argument("--ann", default="ivf,hnsw", help="approximate indexes, comma-separated: ivf, hnsw, or '' (default: %(default)s)")
    chunks.add_argument("--measure", default="bm25,faiss,minilm", help="processes to run: bm25, faiss, minilm (default: %(default)s)")
    chunks.add_argument("--work", metavar="DIR", help="keep the distilled static model here for the next run (default: a temporary folder)")
    chunks.add_argument("--minilm-sample", type=int, default=1000, help="chunks MiniLM embeds to extrapolate its time (0: skip; default: %(default)s)")
    parser.add_argument(
        "--screen",
        action="store_true",
        help="instead: a screening sweep (proxy over the grid, best 3 confirmed) against the full exact sweep (docs/benchmark.md)",
    )
    parser.add_argument("--screen-datasets", default="kestrel_kb,chroma_general", help="--screen: comma-separated datasets or folders (default: %(default)s)")
    parser.add_argument("--screen-proxies", default="bm25,static", help="--screen: comma-separated proxies (default: %(default)s)")
    parser.add_argument(
        "--screen-static-dir", metavar="DIR", help="--screen: keep the distilled static model in DIR between runs (default: a temporary folder)"
    )
    args = parser.parse_args(argv)
    if args.scale_chunks is not None:
        return _scale_chunks(args)
    if args.screen:
        return _screen(args)
    if args.scale:
        return _scale(args)
    if args.sweep_cost:
        return _sweep_cost(args)
    if args.vs_reference or args.from_json:
        return _vs_reference(args)
    prepare_process()
    try:
        result = run_benchmarks(args.dataset, quick=args.quick, tiny=args.tiny, parts=args.parts.split(","))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(result, indent=2, default=float)
    with contextlib.suppress(FileNotFoundError):
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(text)
    print()
    print(tables(result))
    return 0


def _vs_reference(args: argparse.Namespace) -> int:
    """``--vs-reference`` / ``--from-json``: run (or read) the side-by-side benchmark, write JSON, print the tables."""
    from harness.studies import bench_reference

    try:
        if args.from_json:
            result = bench_reference.load(args.from_json)
        else:
            prepare_process()
            result = bench_reference.run_vs_reference(args.dataset, rounds=args.rounds)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not args.from_json:
        _write_json(args.out, result)
        print(f"wrote {args.out}", file=sys.stderr)
    print(bench_reference.tables(result))
    if args.update_docs:
        for path in bench_reference.update_docs(result):
            print(f"wrote the table into {path}", file=sys.stderr)
    return 0


def _screen(args: argparse.Namespace) -> int:
    """``--screen``: screen + confirm against the full exact sweep on each dataset; JSON to ``--out``, the table to stdout."""
    from harness.studies import bench_screen

    prepare_process()
    try:
        result = bench_screen.run_screen_bench(
            [d for d in args.screen_datasets.split(",") if d],
            tiny=args.tiny,
            proxies=[p for p in args.screen_proxies.split(",") if p],
            static_dir=Path(args.screen_static_dir) if args.screen_static_dir else None,
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    _write_json(args.out, result)
    print(f"wrote {args.out}", file=sys.stderr)
    print(bench_screen.tables(result))
    return 0


def _scale(args: argparse.Namespace) -> int:
    """``--scale FACTORS``: time and peak memory per phase on scaled copies of ``--dataset``; JSON to ``--out``, tables to stdout."""
    from harness.studies import bench_scale

    try:
        factors = bench_scale.parse_factors(args.scale)
        prepare_process()
        result = bench_scale.scale(factors, args.dataset)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    _write_json(args.out, result)
    print(f"wrote {args.out}", file=sys.stderr)
    print(bench_scale.tables(result))
    return 0


def _scale_chunks(args: argparse.Namespace) -> int:
    """``--scale-chunks N``: FAISS and BM25 over >= N distinct chunks; JSON to ``--out``, tables to stdout."""
    from harness.studies import bench_chunks

    try:
        indexes = bench_chunks.parse_indexes(args.ann)
        measures = bench_chunks.parse_measures(args.measure)
        prepare_process()
        result = bench_chunks.scale_chunks(
            args.scale_chunks,
            args.dataset,
            args.chunk_chars,
            args.perturb,
            args.queries,
            indexes,
            args.minilm_sample,
            measures,
            Path(args.work) if args.work else None,
            log=lambda m: print(m, file=sys.stderr),
            checkpoint=lambda partial: _write_json(args.out, partial),
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    _write_json(args.out, result)
    print(f"wrote {args.out}", file=sys.stderr)
    print(bench_chunks.tables(result))
    if args.update_docs:
        print(f"wrote the tables into {bench_chunks.update_docs(result)}", file=sys.stderr)
    return 0


def _write_json(path: str, result: dict) -> None:
    """Write a benchmark result as indented JSON to ``path`` (its folder made if missing)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(result, indent=2, default=float) + "\n", encoding="utf-8")


def _sweep_cost(args: argparse.Namespace) -> int:
    """``--sweep-cost``: whole sweeps against what they replace; JSON to ``--out``, tables to stdout."""
    from harness.studies import bench_sweep

    try:
        if args.from_json:
            result = bench_sweep.load(args.from_json.split(","))
        else:
            prepare_process()
            result = bench_sweep.run_sweep_cost(args.dataset, [p for p in args.sweep_parts.split(",") if p], tiny=args.tiny)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.from_json:
        if args.out != "bench.json":  # --out given: the combined result is written there
            _write_json(args.out, result)
    else:
        _write_json(args.out, result)
        print(f"wrote {args.out}", file=sys.stderr)
    print(bench_sweep.tables(result))
    if args.update_docs:
        print(f"wrote the table into {bench_sweep.update_docs(result)}", file=sys.stderr)
    return 0


def run_command(argv: Sequence[str]) -> int:
    """``harness bench ARGV``: the exit code of :func:`main`."""
    return main(list(argv))
