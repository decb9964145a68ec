"""``harness bench`` (also ``python -m harness.bench``): speed benchmarks, ratios measured side by side.

The library is :mod:`harness.experiment.bench`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import tempfile
from pathlib import Path
from typing import Sequence
from harness.experiment.bench import dataset_overrides, phases, chunkers, sweep_vs_cold, semantic_sweep, targets, tables  # noqa: F401




def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit code (0 even when a target fails)."""
    parser = argparse.ArgumentParser(prog="python -m harness.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="chroma_general", help="chroma_general, kestrel_kb or a dataset folder (default: %(default)s)")
    parser.add_argument("--out", default="bench.json", help="JSON output file (default: %(default)s)")
    parser.add_argument("--quick", action="store_true", help="sweep BM25 over character chunks instead of FAISS over token chunks; 1 timing repeat")
    parser.add_argument("--tiny", action="store_true", help="smoke-test settings: 2-config sweep, 2 thresholds")
    parser.add_argument("--parts", default="phases,chunkers,sweep,semantic", help="comma-separated subset to run (default: %(default)s)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    parts = set(args.parts.split(","))
    try:
        dsel = dataset_overrides(args.dataset)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    import mlflow

    from harness.experiment import build
    from harness.experiment.config import compose

    with tempfile.TemporaryDirectory(prefix="harness-bench-") as tmp:
        work = Path(tmp)
        uri = f"sqlite:///{work / 'mlflow.db'}"
        mlflow.MlflowClient(uri).search_experiments()  # create/migrate the store before timing anything
        base = [*dsel, f"tracking.uri={uri}", "embedding.show_progress=false"]
        if "resume" in compose([]):  # a rerun of a finished configuration must run, not be skipped
            base.append("resume=false")
        dataset = build.build_dataset(compose(base))
        result: dict = {
            "dataset": dataset.name,
            "source": dataset.source,
            "mb": sum(len(d.text.encode("utf-8")) for d in dataset.documents) / 1e6,
            "n_documents": len(dataset.documents),
            "n_queries": len(dataset.queries),
            "mode": "tiny" if args.tiny else ("quick" if args.quick else "full"),
            "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        }
        if "phases" in parts:
            result["phases"] = phases(base, uri, work)
        if "chunkers" in parts:
            result["chunkers"] = chunkers(base, repeats=1 if (args.quick or args.tiny) else 5, min_total=1.0 if (args.quick or args.tiny) else 30.0)
        if "sweep" in parts:
            if args.tiny:
                grid = {"retriever": ["bm25"], "chunker": ["fixed"], "chunker.unit": ["chars"], "chunker.chunk_size": [400, 800]}
            elif args.quick:
                grid = {"retriever": ["bm25"], "chunker": ["fixed", "recursive"], "chunker.unit": ["chars"], "chunker.chunk_size": [400, 800, 1200], "chunker.chunk_overlap": [0, 100]}
            else:
                grid = {"retriever": ["faiss"], "chunker": ["fixed", "recursive"], "chunker.chunk_size": [128, 192, 254], "chunker.chunk_overlap": [0, 32]}
            result["sweep"] = sweep_vs_cold(base, grid, work, "bench-sweep")
        if "semantic" in parts:
            result["semantic_sweep"] = semantic_sweep(base, [0.5, 0.7] if args.tiny else [0.3, 0.4, 0.5, 0.6, 0.7], work)
        result["targets"] = targets(result)
    text = json.dumps(result, indent=2, default=float)
    with contextlib.suppress(FileNotFoundError):
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(text)
    print()
    print(tables(result))
    return 0


def run_command(argv: Sequence[str]) -> int:
    """``harness bench ARGV``: the exit code of :func:`main`."""
    return main(list(argv))
