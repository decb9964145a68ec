"""The effect of ``embedding.precision=bf16`` on every metric, against fp32, query by query.

For each dataset the default configuration runs twice in a fresh temporary tracking store
and cache folder, once with ``embedding.precision=fp32`` and once with ``=bf16`` (everything
else equal); the two runs are then compared with the project's own paired comparison
(:func:`harness.evaluation.compare.compare_runs`: mean of per-query differences
``bf16 - fp32``, percentile-bootstrap CI over queries, two-sided sign-flip permutation p)
on every metric family at the headline cut-offs (:data:`METRICS`). The vectors of both runs
are read back from the embedding cache and compared text by text (cosine, largest absolute
component difference).

Writes ``experiments/precision_effect.json`` and prints the Markdown table that
``docs/embeddings.md`` ("Precision") shows; ``--from-json`` reprints the table of a JSON
without running anything::

    python experiments/precision_effect.py                       # both datasets, ~2 min on 2 cores
    python experiments/precision_effect.py --from-json experiments/precision_effect.json
    python experiments/precision_effect.py --datasets kestrel_kb --update  # re-measure one, keep the other

``--update`` replaces the entries of the datasets run in the existing ``--out`` JSON and
keeps every other entry as it was (see :func:`merge_results`).
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DATASETS = ("kestrel_kb", "chroma_general")
PRECISIONS = ("fp32", "bf16")
#: Per-query metrics compared: every family at the headline cut-offs 5 and 10, the
#: 1024-token budget, and precision_omega (k-free).
FAMILIES = ("recall", "precision", "iou", "context_precision", "mrr", "ndcg", "map", "hit_rate", "item_recall", "chunk_precision")
METRICS = tuple(f"{f}@{k}" for k in (5, 10) for f in FAMILIES) + ("recall@1024tok", "precision_omega")
N_RESAMPLES = 10000
SEED = 0
ALPHA = 0.05
#: Where the docs table sits in docs/embeddings.md.
DOCS_MARKERS = ("<!-- precision-effect:start -->", "<!-- precision-effect:end -->")


def run_once(dataset: str, precision: str, work: Path) -> str:
    """Run the default configuration on ``dataset`` with ``embedding.precision=precision``
    in a new process; return the MLflow run id. Store and cache live under ``work``."""
    overrides = [
        f"dataset={dataset}",
        f"embedding.precision={precision}",
        "embedding.show_progress=false",
        "resume=false",
        f"tracking.uri=sqlite:///{work / 'mlflow.db'}",
        f"cache.dir={work / 'cache'}",
        f"hydra.run.dir={work / ('out-' + precision)}",
    ]
    proc = subprocess.run([sys.executable, "-m", "harness.run", *overrides], cwd=PROJECT_ROOT, capture_output=True, text=True)
    found = re.search(r"MLflow run id: ([0-9a-f]{32})", proc.stdout)
    if proc.returncode != 0 or found is None:
        raise SystemExit(f"harness.run {' '.join(overrides)} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return found.group(1)


def vector_differences(cache_dir: Path) -> dict:
    """Compare, text by text, the fp32 and bf16 vectors of the texts both runs embedded.

    Returns ``{"n_texts", "min_cosine", "max_abs_cosine_diff", "max_abs_component_diff"}``;
    cosine of unit-normalised vectors, differences in vector components.
    """
    from harness.cache import EmbeddingCache
    from harness.embeddings.model import Encoder

    keys = {p: Encoder(precision=p, show_progress=False).embedding_key for p in PRECISIONS}
    store = EmbeddingCache(cache_dir / "embeddings")
    with sqlite3.connect(store.path) as conn:
        listed = {p: {row[0] for row in conn.execute("SELECT text_key FROM vectors WHERE model_key = ?", (k,))} for p, k in keys.items()}
    common = sorted(set.intersection(*listed.values()))
    if not common:
        raise SystemExit(f"no text embedded at both precisions in {store.path}")
    vecs = {p: store.get(keys[p], common) for p in PRECISIONS}
    a = np.stack([vecs["fp32"][t] for t in common]).astype(np.float64)
    b = np.stack([vecs["bf16"][t] for t in common]).astype(np.float64)
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return {
        "n_texts": len(common),
        "min_cosine": float(cos.min()),
        "max_abs_cosine_diff": float(np.abs(1.0 - cos).max()),
        "max_abs_component_diff": float(np.abs(a - b).max()),
    }


def compare(dataset: str, work: Path) -> dict:
    """Both runs on ``dataset`` (under ``work``), their paired comparison and vector differences."""
    from harness.evaluation.compare import check_comparable, compare_runs
    from harness.tracking.runs import load_run

    run_ids, seconds = {}, {}
    for precision in PRECISIONS:
        start = time.perf_counter()
        run_ids[precision] = run_once(dataset, precision, work)
        seconds[precision] = round(time.perf_counter() - start, 1)
        print(f"{dataset} {precision}: run {run_ids[precision]} ({seconds[precision]} s)", file=sys.stderr)
    uri = f"sqlite:///{work / 'mlflow.db'}"
    runs = [load_run(uri, run_ids[p], work / "artifacts") for p in PRECISIONS]
    check_comparable(runs)
    tables = compare_runs(runs, METRICS, n_resamples=N_RESAMPLES, seed=SEED, alpha=ALPHA)
    rows = []
    for metric, table in tables.items():
        row = table.iloc[0]
        rows.append(
            {
                "metric": metric,
                "fp32": float(row["baseline"]),
                "bf16": float(row["mean"]),
                "diff": float(row["diff"]),
                "ci_low": float(row["ci_low"]),
                "ci_high": float(row["ci_high"]),
                "p": float(row["p"]),
                "changed": int(row["W"] + row["L"]),
                "higher": int(row["W"]),
                "lower": int(row["L"]),
            }
        )
    changed_rankings = int((runs[0].per_query.set_index("query_id")["retrieved"] != runs[1].per_query.set_index("query_id")["retrieved"]).sum())
    return {
        "dataset": dataset,
        "n_queries": int(len(runs[0].per_query)),
        "queries_with_changed_ranking": changed_rankings,
        "wall_seconds": seconds,
        "vectors": vector_differences(work / "cache"),
        "metrics": rows,
    }


def _num(v: float) -> str:
    return f"{v:.4f}"


def _signed(v: float) -> str:
    if v == 0:
        return "0"
    return f"{v:+.4f}" if abs(v) >= 5e-5 else f"{v:+.0e}"


def render_markdown(data: dict) -> str:
    """The docs table of a result JSON (one table, datasets one after the other)."""
    lines = [
        "| dataset | metric | fp32 | bf16 | bf16 − fp32 | 95% CI | p | queries changed (↑/↓) |",
        "|---|---|---:|---:|---:|---|---:|---:|",
    ]
    for ds in data["datasets"]:
        for r in ds["metrics"]:
            ci = f"[{_signed(r['ci_low'])}, {_signed(r['ci_high'])}]"
            lines.append(
                f"| {ds['dataset']} | {r['metric']} | {_num(r['fp32'])} | {_num(r['bf16'])} | {_signed(r['diff'])} | {ci} | {r['p']:.3f} | "
                f"{r['changed']} ({r['higher']}/{r['lower']}) |"
            )
    lines.append("")
    lines.append("| dataset | queries | rankings changed | texts embedded | min cosine bf16 vs fp32 | max \\|1 − cosine\\| | max \\|component diff\\| |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|")
    for ds in data["datasets"]:
        v = ds["vectors"]
        lines.append(
            f"| {ds['dataset']} | {ds['n_queries']} | {ds['queries_with_changed_ranking']} | {v['n_texts']} | {v['min_cosine']:.6f} | "
            f"{v['max_abs_cosine_diff']:.2e} | {v['max_abs_component_diff']:.2e} |"
        )
    return "\n".join(lines)


def merge_results(previous: dict, fresh: dict) -> dict:
    """``fresh`` (a result of some datasets) merged into ``previous`` (a committed result).

    Entries of the datasets in ``fresh`` replace theirs; the others are kept unchanged; the
    order is that of :data:`DATASETS`; the top-level fields (settings, environment) are
    ``fresh``'s. Raises ``SystemExit`` (one line) when the two were computed with different
    metrics, resamples, seed or confidence, since their rows could not be read as one table.
    """
    for key in ("metrics", "n_resamples", "seed", "confidence"):
        if previous.get(key) != fresh.get(key):
            raise SystemExit(f"--update: the previous result has {key}={previous.get(key)!r}, this run {fresh.get(key)!r}; re-run every dataset instead")
    by_name = {d["dataset"]: d for d in previous["datasets"]} | {d["dataset"]: d for d in fresh["datasets"]}
    return {**fresh, "datasets": [by_name[name] for name in DATASETS if name in by_name]}


def environment() -> dict:
    """Versions and the CPU facts that decide bf16 speed (not its results)."""
    import sentence_transformers
    import torch

    from harness.runtime import fast_bf16_cpu

    flags = set()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "sentence_transformers": sentence_transformers.__version__,
        "cpu_avx512_bf16": "avx512_bf16" in flags,
        "cpu_amx": fast_bf16_cpu(),
        "torch_threads": torch.get_num_threads(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    parser.add_argument("--out", type=Path, default=PROJECT_ROOT / "experiments" / "precision_effect.json", help="result JSON")
    parser.add_argument("--work", type=Path, default=None, help="folder for the tracking stores and caches (default: a temporary one)")
    parser.add_argument("--from-json", type=Path, default=None, help="print the table of this JSON and exit")
    parser.add_argument("--update", action="store_true", help="keep the entries of the datasets not run from the existing --out JSON")
    args = parser.parse_args(argv)
    if args.from_json is not None:
        print(render_markdown(json.loads(args.from_json.read_text(encoding="utf-8"))))
        return 0
    with tempfile.TemporaryDirectory(prefix="precision-effect-") as tmp:
        work = args.work or Path(tmp)
        data = {
            "config": "default configuration (chunker=recursive, embedding=minilm, retriever=faiss), embedding.precision fp32 vs bf16",
            "metrics": list(METRICS),
            "n_resamples": N_RESAMPLES,
            "seed": SEED,
            "confidence": 1 - ALPHA,
            "environment": environment(),
            "datasets": [compare(ds, work / ds) for ds in args.datasets],
        }
    if args.update and args.out.is_file():
        data = merge_results(json.loads(args.out.read_text(encoding="utf-8")), data)
    args.out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(render_markdown(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
