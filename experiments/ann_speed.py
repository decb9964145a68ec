"""Approximate FAISS indexes against exact search on real MiniLM vectors: recall@10 and speed.

Embeds the chunks of ``chroma_general`` with the run's default embedding (all-MiniLM-L6-v2,
``embedding.precision`` as configured) and its questions, then, over the same vectors, builds
and searches every index of :data:`INDEXES` through :class:`harness.retrievers.faiss.FaissRetriever`
(the class a run uses) and exact search as the default retriever does it (``faiss.IndexFlatIP``).
Two vector sets: the default chunking (``chunker=recursive``, 254 tokens) and a larger set of
overlapping token windows of the same text (64 tokens every 8, and 32 every 4) to have more
vectors than one chunking of this small corpus gives.

Timing: ``--rounds`` rounds, each timing every index once in a rotated order (A B C, B C A,
...), so a change of machine load hits every index alike; the table gives medians and the
median of the per-round ratios to exact search. Build = training + adding the vectors;
search = one FAISS search call for all questions, top 10, query embedding excluded.
recall@10 = ``retriever.ann_recall_at_10`` as a run logs it (deterministic here: the same in
every round). Use ``--threads 1`` on a shared machine (FAISS's OpenMP threads wait for each
other when the cores are busy).

Usage (from the project root)::

    .venv/bin/python experiments/ann_speed.py --cache-dir /tmp/ann/cache --json /tmp/ann/ann_speed.json --threads 1
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from harness.experiment.build import PROJECT_ROOT

#: The vector sets: name -> the chunker overrides whose chunks (pooled, unique texts) are embedded.
SETS = {
    "recursive 254 tokens (the default chunking)": [["chunker=recursive"]],
    "token windows 64/8 + 32/4": [
        ["chunker=fixed", "chunker.chunk_size=64", "chunker.chunk_overlap=56"],
        ["chunker=fixed", "chunker.chunk_size=32", "chunker.chunk_overlap=28"],
    ],
}
#: The approximate indexes timed against exact search: label -> FaissRetriever settings.
INDEXES = {
    "hnsw (defaults: m 32, ef_construction 200, ef_search 128)": {"index": "hnsw"},
    "hnsw, ef_search 16": {"index": "hnsw", "hnsw_ef_search": 16},
    "ivf (defaults: nlist null, nprobe 32)": {"index": "ivf"},
    "ivf, nprobe 4": {"index": "ivf", "ivf_nprobe": 4},
}
EXACT = "flat (exact, the default)"
K = 10


class VectorTable:
    """An encoder over vectors computed once (each text looked up)."""

    def __init__(self, table: dict[str, np.ndarray]):
        self.table = table

    def encode(self, texts, desc: str = "", role: str = "document") -> np.ndarray:
        return np.stack([self.table[t] for t in texts]).astype(np.float32)


def vectors(dataset_path: str, cache_dir: str, overrides: list[list[str]]):
    """``(chunks, queries, encoder, facts)``: the unique chunks of every chunking in
    ``overrides`` and the questions, embedded with the default embedding (disk-cached)."""
    from harness.experiment import build
    from harness.experiment.config import compose
    from harness.types import Chunk

    chunks: dict[str, Chunk] = {}
    for extra in overrides:
        cfg = compose(["dataset=chroma_general", f"dataset.path={dataset_path}", f"cache.dir={cache_dir}", "embedding.show_progress=false", *extra])
        dataset = build.build_dataset(cfg)
        encoder = build.build_encoder(cfg)
        chunker = build.build_chunker(cfg, encoder)
        for doc in dataset.documents:
            for c in chunker.chunk(doc):
                chunks.setdefault(c.text, c)  # one vector per distinct text
    unique = list(chunks.values())
    t0 = time.perf_counter()
    cv = encoder.encode([c.text for c in unique], desc="embed chunks")
    qv = encoder.encode([q.text for q in dataset.queries], desc="embed queries", role="query")
    facts = {"embed_seconds": time.perf_counter() - t0, "precision": getattr(encoder, "run_tags", dict)().get("embedding.precision", "")}
    table = {c.text: v for c, v in zip(unique, cv)} | {q.text: v for q, v in zip(dataset.queries, qv)}
    return unique, dataset.queries, VectorTable(table), facts


def time_exact(vecs: np.ndarray, qvecs: np.ndarray) -> tuple[float, float]:
    """Build and search seconds of ``faiss.IndexFlatIP``, as the default retriever uses it."""
    import faiss

    t0 = time.perf_counter()
    index = faiss.IndexFlatIP(vecs.shape[1])
    index.add(vecs)
    t1 = time.perf_counter()
    index.search(qvecs, K)
    return t1 - t0, time.perf_counter() - t1


def time_ann(encoder: VectorTable, chunks, queries, settings: dict) -> dict[str, float]:
    """Build, search with the run's retriever; its stats (build/search seconds, recall@10)."""
    import warnings

    from harness.retrievers.faiss import FaissRetriever

    r = FaissRetriever(encoder=encoder, on_low_recall="ignore", ann_min_recall=0.0, **settings)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an explicit ivf_nlist reduced: the used value is in the stats
        r.index(chunks)
    r.search(queries, K)
    return r.stats()


def measure(name: str, chunks, queries, encoder: VectorTable, rounds: int) -> list[dict]:
    vecs = encoder.encode([c.text for c in chunks])
    qvecs = encoder.encode([q.text for q in queries])
    labels = [EXACT, *INDEXES]
    samples: dict[str, list[tuple[float, float]]] = {label: [] for label in labels}
    stats: dict[str, dict] = {}
    for rnd in range(rounds):
        order = labels[rnd % len(labels) :] + labels[: rnd % len(labels)]
        for label in order:
            if label == EXACT:
                samples[label].append(time_exact(vecs, qvecs))
            else:
                s = time_ann(encoder, chunks, queries, INDEXES[label])
                stats[label] = s
                samples[label].append((s["retriever.ann_build_seconds"], s["retriever.ann_search_seconds"]))
        print(f"{name}: round {rnd + 1}/{rounds} done", file=sys.stderr, flush=True)
    rows = []
    for label in labels:
        build = [b for b, _ in samples[label]]
        search = [s for _, s in samples[label]]
        ratio_b = [b / e[0] for b, e in zip(build, samples[EXACT])]
        ratio_s = [s / e[1] for s, e in zip(search, samples[EXACT])]
        st = stats.get(label, {})
        used = ""
        if "retriever.ivf_nlist" in st:
            used = f"nlist {int(st['retriever.ivf_nlist'])}, nprobe {int(st['retriever.ivf_nprobe'])}"
        rows.append(
            {
                "set": name,
                "vectors": len(chunks),
                "queries": len(queries),
                "index": label,
                "used": used,
                "recall_at_10": st.get("retriever.ann_recall_at_10", 1.0),
                "build_seconds": statistics.median(build),
                "search_seconds": statistics.median(search),
                "build_ratio": statistics.median(ratio_b),
                "search_ratio": statistics.median(ratio_s),
            }
        )
    return rows


def markdown(rows: list[dict]) -> str:
    out = [
        "| vectors | index | recall@10 vs exact | build s | search s (all queries) | build / exact | search / exact |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        index = r["index"] + (f" [{r['used']}]" if r["used"] else "")
        out.append(
            f"| {r['set']}: {r['vectors']} × {r['queries']} queries | {index} | {r['recall_at_10']:.3f} | {r['build_seconds']:.4f} | "
            f"{r['search_seconds']:.4f} | {r['build_ratio']:.1f}× | {r['search_ratio']:.2f}× |"
        )
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset-path", default=str(PROJECT_ROOT.parent / "shared" / "datasets" / "chroma_general"))
    parser.add_argument("--cache-dir", required=True, help="embedding cache folder (a second call embeds nothing)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="FAISS threads (default: FAISS's own, all cores)")
    parser.add_argument("--json", default=None, help="also write the rows and the machine facts here")
    args = parser.parse_args()
    import faiss

    if args.threads:
        faiss.omp_set_num_threads(args.threads)
    rows, facts = [], {}
    for name, overrides in SETS.items():
        chunks, queries, encoder, facts[name] = vectors(args.dataset_path, args.cache_dir, overrides)
        rows += measure(name, chunks, queries, encoder, args.rounds)
    table = markdown(rows)
    print(table)
    if args.json:
        info = {"faiss": faiss.__version__, "threads": faiss.omp_get_max_threads(), "python": platform.python_version(), "rounds": args.rounds, "sets": facts}
        Path(args.json).write_text(json.dumps({"machine": info, "rows": rows, "table": table}, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
