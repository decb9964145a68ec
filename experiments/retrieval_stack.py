"""Chunkers x retrievers x embedding backends on both datasets, and the README's table.

Runs ``experiment=retrieval_stack`` (fixed and recursive chunks; FAISS, BM25 and hybrid
retrieval; the all-MiniLM-L6-v2 and static model2vec embeddings) on ``kestrel_kb`` and on
``chroma_general``, then the same grid with ``retriever=rerank`` over a cross-encoder, and
prints recall@5 per chunker, embedding and retriever as one markdown table. Every job is an
ordinary tracked run, so a second call only reads the runs back.

The cross-encoder: ``--cross-encoder FOLDER`` (any sentence-transformers CrossEncoder
folder). Without it, one is built locally from the packaged MiniLM weights with an
untrained scoring head: it exercises the plumbing, and its rerank column says nothing about
what a trained reranker does.

Usage (from the project root)::

    .venv/bin/python experiments/retrieval_stack.py tracking.uri=sqlite:////tmp/stack/mlflow.db cache.dir=/tmp/stack/cache

``--dataset NAME`` (repeatable) runs and reads only those datasets; the columns of the others
are copied from ``--previous`` (default the committed ``experiments/retrieval_stack.md``), so
re-measuring one dataset after its labels change leaves the other's numbers as published.
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


PREVIOUS = PROJECT_ROOT / "experiments" / "retrieval_stack.md"


def previous_cells(text: str, datasets: set[str]) -> dict[tuple[str, str, str, str], float]:
    """The recall@5 cells of ``datasets`` in a table this script printed (``text``, Markdown).

    Returns ``{(dataset, chunking, embedding label, retriever): recall@5}`` (empty cells are
    left out). Raises ``SystemExit`` (one line) when the table lacks a column of ``datasets``.
    """
    lines = [line for line in text.splitlines() if line.startswith("|")]
    if len(lines) < 2:
        raise SystemExit(f"--previous: no table found (expected the Markdown table of {Path(__file__).name})")
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    wanted = {f"{d} {r}": (d, r) for d in datasets for r in RETRIEVERS}
    missing = sorted(set(wanted) - set(head))
    if missing:
        raise SystemExit(f"--previous: the table has no column {missing[0]!r} (columns: {', '.join(head)})")
    cells: dict[tuple[str, str, str, str], float] = {}
    for line in lines[2:]:
        row = [c.strip() for c in line.strip("|").split("|")]
        chunking, emb = row[0].strip("`"), row[1]
        for name, value in zip(head[2:], row[2:]):
            if name in wanted and value.strip("*"):
                d, r = wanted[name]
                cells[(d, chunking, emb, r)] = float(value.strip("*"))
    return cells


def table(uri: str, datasets: tuple[str, ...] = tuple(DATASETS), previous: str = "") -> str:
    """recall@5 per dataset, chunking, embedding and retriever as one Markdown table.

    Cells of ``datasets`` come from the FINISHED runs in ``uri``; those of every other dataset
    of :data:`DATASETS` from ``previous`` (a table this function printed, see
    :func:`previous_cells`). Bold: the best retriever per dataset and row.
    """
    from harness.tracking.runs import search_runs

    cells = previous_cells(previous, set(DATASETS) - set(datasets)) if set(DATASETS) - set(datasets) else {}
    for dataset in datasets:
        for r in search_runs(uri, dataset, "attributes.status = 'FINISHED'"):
            retriever, embedding = r.tags.get("retriever", ""), r.tags.get("embedding", "")
            if retriever not in RETRIEVERS or "recall_at_5" not in r.metrics:
                continue
            chunking = r.name.rsplit("-" + retriever, 1)[0]  # the name without retriever and embedding suffixes
            label = next((k for k, v in EMBEDDINGS.items() if embedding.split("/")[0] == v), embedding)
            cells.setdefault((dataset, chunking, label, retriever), r.metrics["recall_at_5"])
    rows = sorted({(c, e) for _, c, e, _ in cells})
    head = ["chunking", "embedding"] + [f"{d} {r}" for d in DATASETS for r in RETRIEVERS]
    lines = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(head) - 2)]
    for chunking, emb in rows:
        values = []
        for d in DATASETS:
            scored = {r: cells.get((d, chunking, emb, r)) for r in RETRIEVERS}
            best = max((v for v in scored.values() if v is not None), default=None)
            values += ["" if v is None else (f"**{v:.4f}**" if v == best else f"{v:.4f}") for v in scored.values()]
        lines.append(f"| `{chunking}` | {emb} | " + " | ".join(values) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cross-encoder", metavar="FOLDER", help="a CrossEncoder folder for retriever=rerank (default: a plumbing model built locally)")
    parser.add_argument("--table-only", action="store_true", help="print the table of the runs already in the store")
    parser.add_argument("--candidates", type=int, default=20, help="first-stage candidates the reranker re-scores per query")
    parser.add_argument("--dataset", action="append", choices=list(DATASETS), help="run and read only this dataset (repeatable; default: all)")
    parser.add_argument("--previous", type=Path, default=PREVIOUS, help="table whose columns are kept for the datasets not given (default: %(default)s)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every job, e.g. tracking.uri=... cache.dir=...")
    args = parser.parse_args(argv)
    datasets = tuple(d for d in DATASETS if d in (args.dataset or DATASETS))
    previous = args.previous.read_text(encoding="utf-8") if set(datasets) != set(DATASETS) else ""
    uri = next((o.split("=", 1)[1] for o in args.overrides if o.startswith("tracking.uri=")), None)
    if uri is None:
        from harness.tracking.tracker import resolve_tracking_uri

        uri = resolve_tracking_uri(None, PROJECT_ROOT)
    if not args.table_only:
        cache = next((Path(o.split("=", 1)[1]) for o in args.overrides if o.startswith("cache.dir=")), PROJECT_ROOT / ".cache")
        model = Path(args.cross_encoder) if args.cross_encoder else plumbing_cross_encoder(cache / "models" / "plumbing-cross-encoder")
        for dataset in datasets:
            extra = DATASETS[dataset]
            run(["experiment=retrieval_stack", *extra, *args.overrides])
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
    print(table(uri, datasets, previous))
    return 0


if __name__ == "__main__":
    sys.exit(main())
