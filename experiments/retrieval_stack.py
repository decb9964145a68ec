"""Chunkers x retrievers x embedding backends on both datasets, and the table of docs/retrievers.md.

Runs ``experiment=retrieval_stack`` (fixed and recursive chunks; FAISS, BM25 and hybrid
retrieval; the all-MiniLM-L6-v2 and static model2vec embeddings) on ``kestrel_kb`` and on
``chroma_general``, then the same grid with ``retriever=rerank`` over a cross-encoder, and
prints recall@5 per chunker, embedding and retriever as one markdown table. Every job is an
ordinary tracked run, so a second call only reads the runs back.

The cross-encoder: ``--cross-encoder FOLDER`` (a trained sentence-transformers CrossEncoder
folder, e.g. a download of ``cross-encoder/ms-marco-MiniLM-L6-v2``). Without it the rerank
grid runs only with ``--plumbing``, over a cross-encoder built locally from the packaged
MiniLM weights with an untrained scoring head: that exercises the plumbing, and the table
never shows its numbers (they say nothing about what a trained reranker does). A retriever
that no listed run used has no column.

Usage (from the project root)::

    .venv/bin/python experiments/retrieval_stack.py tracking.uri=sqlite:////tmp/stack/mlflow.db cache.dir=/tmp/stack/cache
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from harness.experiment.build import PROJECT_ROOT

DATASETS = {"kestrel_kb": [], "chroma_general": ["dataset=chroma_general", f"dataset.path={PROJECT_ROOT.parent / 'shared' / 'datasets' / 'chroma_general'}"]}
RETRIEVERS = ("faiss", "bm25", "hybrid", "rerank")
EMBEDDINGS = {"minilm": "sentence_transformers", "static": "model2vec"}  # run tag "embedding" = <backend>/<model>


#: Folder name of the plumbing cross-encoder (under ``<cache.dir>/models/``); runs over it are left out of the table.
PLUMBING_FOLDER = "plumbing-cross-encoder"


def plumbing_cross_encoder(folder: Path) -> Path:
    """A CrossEncoder built from the packaged MiniLM weights with a new, untrained head (for plumbing only)."""
    if (folder / "config.json").is_file():
        return folder
    from sentence_transformers import CrossEncoder

    from harness.embeddings.model import default_model_path

    folder.mkdir(parents=True, exist_ok=True)
    CrossEncoder(str(default_model_path()), num_labels=1, device="cpu").save(str(folder))
    return folder


def run(overrides: list[str]) -> None:
    cmd = [sys.executable, "-m", "harness.run", "-m", *overrides]
    print("$", " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, cwd=PROJECT_ROOT, stdout=sys.stderr)  # the jobs' own tables: standard output keeps the one table


def table(uri: str) -> str:
    """recall@5 per dataset, chunking, embedding and retriever from the FINISHED runs in ``uri``."""
    from harness.tracking.runs import UnknownExperiment, search_runs

    cells: dict[tuple[str, str, str, str], float] = {}
    for dataset in DATASETS:
        try:
            found = search_runs(uri, dataset, "attributes.status = 'FINISHED'")
        except UnknownExperiment:  # that dataset was not run: its cells stay empty
            found = []
        for r in found:
            retriever, embedding = r.tags.get("retriever", ""), r.tags.get("embedding", "")
            if retriever not in RETRIEVERS or "recall_at_5" not in r.metrics:
                continue
            if retriever == "rerank" and Path(r.params.get("retriever.model", "")).name == PLUMBING_FOLDER:
                continue  # an untrained scoring head: its numbers are not a rerank result
            chunking = r.name.rsplit("-" + retriever, 1)[0]  # the name without retriever and embedding suffixes
            label = next((k for k, v in EMBEDDINGS.items() if embedding.split("/")[0] == v), embedding)
            cells.setdefault((dataset, chunking, label, retriever), r.metrics["recall_at_5"])
    rows = sorted({(c, e) for _, c, e, _ in cells})
    used = [r for r in RETRIEVERS if any(key[3] == r for key in cells)]
    head = ["chunking", "embedding"] + [f"{d} {r}" for d in DATASETS for r in used]
    lines = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(head) - 2)]
    for chunking, emb in rows:
        values = []
        for d in DATASETS:
            scored = {r: cells.get((d, chunking, emb, r)) for r in used}
            best = max((v for v in scored.values() if v is not None), default=None)
            values += ["" if v is None else (f"**{v:.4f}**" if v == best else f"{v:.4f}") for v in scored.values()]
        lines.append(f"| `{chunking}` | {emb} | " + " | ".join(values) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cross-encoder", metavar="FOLDER", help="a trained CrossEncoder folder for retriever=rerank (default: no rerank grid)")
    parser.add_argument("--plumbing", action="store_true", help="without --cross-encoder: run the rerank grid over an untrained head (left out of the table)")
    parser.add_argument("--table-only", action="store_true", help="print the table of the runs already in the store")
    parser.add_argument("--candidates", type=int, default=20, help="first-stage candidates the reranker re-scores per query")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every job, e.g. tracking.uri=... cache.dir=...")
    args = parser.parse_args(argv)
    uri = next((o.split("=", 1)[1] for o in args.overrides if o.startswith("tracking.uri=")), None)
    if uri is None:
        from harness.tracking.tracker import resolve_tracking_uri

        uri = resolve_tracking_uri(None, PROJECT_ROOT)
    if not args.table_only:
        cache = next((Path(o.split("=", 1)[1]) for o in args.overrides if o.startswith("cache.dir=")), PROJECT_ROOT / ".cache")
        model = Path(args.cross_encoder) if args.cross_encoder else plumbing_cross_encoder(cache / "models" / PLUMBING_FOLDER) if args.plumbing else None
        for dataset, extra in DATASETS.items():
            run(["experiment=retrieval_stack", *extra, *args.overrides])
            if model is None:
                continue
            run(
                [
                    "chunker=fixed,recursive",
                    "embedding=minilm,static",
                    "retriever=rerank",
                    f"retriever.model={model}",
                    f"retriever.candidates={args.candidates}",
                    "retriever.show_progress=false",
                    *extra,
                    *args.overrides,
                ]
            )
    print(table(uri))
    return 0


if __name__ == "__main__":
    sys.exit(main())
