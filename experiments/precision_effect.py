"""The effect of ``embedding.precision=bf16`` and ``=int8`` on every metric, against fp32,
query by query, and their encoding speed side by side.

For each dataset the default configuration runs once per precision (:data:`PRECISIONS`) in
a fresh temporary tracking store and cache folder (everything else equal); each run at
another precision is then compared with the fp32 run by the project's own paired comparison
(:func:`harness.evaluation.compare.compare_runs`: mean of per-query differences
``other - fp32``, percentile-bootstrap CI over queries, two-sided sign-flip permutation p)
on every metric family at the headline cut-offs (:data:`METRICS`). The vectors of the runs
are read back from the embedding cache and compared text by text with fp32's (cosine,
largest absolute component difference).

Speed (:func:`measure_speed`): the packaged MiniLM is loaded once per precision and encodes
the same texts (150-word passages of the kestrel_kb corpus) in alternating rounds in this
one process, so the ratios compare like with like; the CPU model and its relevant flags are
recorded.

Writes ``experiments/precision_effect.json`` and prints the Markdown tables that
``docs/embeddings.md`` ("Precision") shows; ``--from-json`` reprints the tables of a JSON
without running anything::

    python experiments/precision_effect.py                       # both datasets, ~6 min on 2 cores
    python experiments/precision_effect.py --from-json experiments/precision_effect.json
    python experiments/precision_effect.py --datasets kestrel_kb --update  # re-measure one, keep the other
    python experiments/precision_effect.py --speed-only --rounds 3 --update  # re-measure the speed only

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
#: fp32 (the reference) first, then every precision compared with it.
PRECISIONS = ("fp32", "bf16", "int8")
OTHERS = PRECISIONS[1:]
#: Per-query metrics compared: every family at the headline cut-offs 5 and 10, the
#: 1024-token budget, and precision_omega (k-free).
FAMILIES = ("recall", "precision", "iou", "context_precision", "mrr", "ndcg", "map", "hit_rate", "item_recall", "chunk_precision")
METRICS = tuple(f"{f}@{k}" for k in (5, 10) for f in FAMILIES) + ("recall@1024tok", "precision_omega")
N_RESAMPLES = 10000
SEED = 0
ALPHA = 0.05
#: Largest |difference| either end of a 95% CI may reach for ``auto`` to pick a precision
#: (:func:`auto_eligible`): a change this large must be ruled out, not merely not shown.
AUTO_MARGIN = 0.02
#: Where the docs table sits in docs/embeddings.md.
DOCS_MARKERS = ("<!-- precision-effect:start -->", "<!-- precision-effect:end -->")
#: ``dataset.path`` per dataset name, from ``--dataset-path NAME=FOLDER`` (else the config's default).
DATASET_PATHS: dict[str, str] = {}


def run_once(dataset: str, precision: str, work: Path) -> str:
    """Run the default configuration on ``dataset`` with ``embedding.precision=precision``
    in a new process; return the MLflow run id. Store and cache live under ``work``."""
    overrides = [f"dataset={dataset}"] + ([f"dataset.path={DATASET_PATHS[dataset]}", "dataset.download=false"] if dataset in DATASET_PATHS else [])
    overrides += [
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


def vector_differences(cache_dir: Path, other: str) -> dict:
    """Compare, text by text, the fp32 and ``other`` vectors of the texts both runs embedded.

    Returns ``{"n_texts", "min_cosine", "max_abs_cosine_diff", "max_abs_component_diff"}``;
    cosine of unit-normalised vectors, differences in vector components.
    """
    from harness.cache import EmbeddingCache
    from harness.embeddings.model import Encoder

    keys = {p: Encoder(precision=p, show_progress=False).embedding_key for p in ("fp32", other)}
    store = EmbeddingCache(cache_dir / "embeddings")
    with sqlite3.connect(store.path) as conn:
        listed = {p: {row[0] for row in conn.execute("SELECT text_key FROM vectors WHERE model_key = ?", (k,))} for p, k in keys.items()}
    common = sorted(set.intersection(*listed.values()))
    if not common:
        raise SystemExit(f"no text embedded at both fp32 and {other} in {store.path}")
    vecs = {p: store.get(k, common) for p, k in keys.items()}
    a = np.stack([vecs["fp32"][t] for t in common]).astype(np.float64)
    b = np.stack([vecs[other][t] for t in common]).astype(np.float64)
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return {
        "n_texts": len(common),
        "min_cosine": float(cos.min()),
        "max_abs_cosine_diff": float(np.abs(1.0 - cos).max()),
        "max_abs_component_diff": float(np.abs(a - b).max()),
        "mean_cosine": float(cos.mean()),
    }


def compare(dataset: str, work: Path) -> dict:
    """The runs on ``dataset`` (under ``work``), each precision's paired comparison with fp32
    and the vector differences: ``{"dataset", "n_queries", "wall_seconds", "against_fp32":
    {precision: {"queries_with_changed_ranking", "vectors", "metrics": [row, ...]}}}``."""
    from harness.evaluation.compare import check_comparable, compare_runs
    from harness.tracking.runs import load_run

    run_ids, seconds = {}, {}
    for precision in PRECISIONS:
        start = time.perf_counter()
        run_ids[precision] = run_once(dataset, precision, work)
        seconds[precision] = round(time.perf_counter() - start, 1)
        print(f"{dataset} {precision}: run {run_ids[precision]} ({seconds[precision]} s)", file=sys.stderr)
    uri = f"sqlite:///{work / 'mlflow.db'}"
    runs = {p: load_run(uri, run_ids[p], work / f"artifacts-{p}") for p in PRECISIONS}
    against = {}
    for other in OTHERS:
        pair = [runs["fp32"], runs[other]]
        check_comparable(pair)
        tables = compare_runs(pair, METRICS, n_resamples=N_RESAMPLES, seed=SEED, alpha=ALPHA)
        rows = []
        for metric, table in tables.items():
            row = table.iloc[0]
            rows.append(
                {
                    "metric": metric,
                    "fp32": float(row["baseline"]),
                    other: float(row["mean"]),
                    "diff": float(row["diff"]),
                    "ci_low": float(row["ci_low"]),
                    "ci_high": float(row["ci_high"]),
                    "p": float(row["p"]),
                    "changed": int(row["W"] + row["L"]),
                    "higher": int(row["W"]),
                    "lower": int(row["L"]),
                }
            )
        retrieved = [r.per_query.set_index("query_id")["retrieved"] for r in pair]
        against[other] = {
            "queries_with_changed_ranking": int((retrieved[0] != retrieved[1]).sum()),
            "vectors": vector_differences(work / "cache", other),
            "metrics": rows,
        }
    return {
        "dataset": dataset,
        "n_queries": int(len(runs["fp32"].per_query)),
        "wall_seconds": seconds,
        "against_fp32": against,
    }


def speed_texts(n: int, words: int = 150) -> list[str]:
    """Up to ``n`` passages of ``words`` words of the kestrel_kb corpus (its files in name
    order, cut into consecutive windows; ~200 word pieces each, inside MiniLM's window)."""
    texts: list[str] = []
    for path in sorted((PROJECT_ROOT / "datasets" / "kestrel_kb" / "corpus").rglob("*")):
        if path.is_file():
            tokens = path.read_text(encoding="utf-8").split()
            texts += [" ".join(tokens[i : i + words]) for i in range(0, len(tokens) - words // 2, words)]
    return texts[:n]


def measure_speed(texts: list[str], rounds: int, batch_size: int = 64) -> dict:
    """Encoding time of ``texts`` by the packaged MiniLM at each precision this machine can
    run, in this process, in ``rounds`` rounds whose precision order alternates.

    Each precision's model is loaded (and, for int8, quantised) once before the timing; a
    round encodes all texts in one ``encode`` call of the :class:`Encoder` without caches.
    Returns ``{"n_texts", "rounds", "batch_size", "seconds": {precision: [s, ...]},
    "median_s", "texts_per_s", "speedup_vs_fp32"}`` (medians over rounds).
    """
    import statistics

    from harness.embeddings.model import Encoder
    from harness.runtime import resolve_precision

    encoders = {}
    for p in PRECISIONS:
        try:
            resolve_precision(p)
        except ValueError as exc:
            print(f"speed: {p} skipped: {exc}", file=sys.stderr)
            continue
        enc = Encoder(precision=p, show_progress=False, batch_size=batch_size, on_truncate="ignore")
        enc.model  # noqa: B018 - loaded (and quantised) before any timing
        enc._prepare()
        encoders[p] = enc
    seconds: dict[str, list[float]] = {p: [] for p in encoders}
    for r in range(rounds):
        order = list(encoders) if r % 2 == 0 else list(reversed(encoders))
        for p in order:
            enc = encoders[p]
            enc.forget()  # nothing in memory: every round embeds all texts
            start = time.perf_counter()
            enc.encode(texts)
            seconds[p].append(round(time.perf_counter() - start, 3))
            print(f"speed round {r + 1}: {p} {seconds[p][-1]} s", file=sys.stderr)
    median = {p: statistics.median(v) for p, v in seconds.items()}
    return {
        "n_texts": len(texts),
        "rounds": rounds,
        "batch_size": batch_size,
        "seconds": seconds,
        "median_s": median,
        "texts_per_s": {p: round(len(texts) / m, 1) for p, m in median.items()},
        "speedup_vs_fp32": {p: round(median["fp32"] / m, 3) for p, m in median.items()},
    }


def _num(v: float) -> str:
    return f"{v:.4f}"


def _signed(v: float) -> str:
    if v == 0:
        return "0"
    return f"{v:+.4f}" if abs(v) >= 5e-5 else f"{v:+.0e}"


def auto_eligible(data: dict) -> dict[str, bool]:
    """The rule ``embedding.precision=auto`` follows, applied to a result JSON: a precision
    may be picked by ``auto`` (where it is faster) only if, on every dataset, no metric of
    :data:`METRICS` differs from fp32 significantly (p >= :data:`ALPHA`) and every 95% CI
    lies within +-:data:`AUTO_MARGIN` (so that a change of that size is ruled out; a p above
    ALPHA alone can come from too few queries). Returns ``{precision: eligible}``."""
    out = {}
    for other in OTHERS:
        rows = [r for ds in data["datasets"] for r in ds["against_fp32"][other]["metrics"]]
        out[other] = bool(rows) and all(r["p"] >= ALPHA and -AUTO_MARGIN <= r["ci_low"] and r["ci_high"] <= AUTO_MARGIN for r in rows)
    return out


def render_markdown(data: dict) -> str:
    """The docs tables of a result JSON: one metrics table per precision against fp32
    (datasets one after the other), the vector differences, and the speed when measured."""
    lines: list[str] = []
    for other in OTHERS:
        lines.append(f"| dataset | metric | fp32 | {other} | {other} − fp32 | 95% CI | p | queries changed (↑/↓) |")
        lines.append("|---|---|---:|---:|---:|---|---:|---:|")
        for ds in data["datasets"]:
            for r in ds["against_fp32"][other]["metrics"]:
                ci = f"[{_signed(r['ci_low'])}, {_signed(r['ci_high'])}]"
                bold = "**" if r["p"] < ALPHA else ""
                lines.append(
                    f"| {ds['dataset']} | {r['metric']} | {_num(r['fp32'])} | {_num(r[other])} | {_signed(r['diff'])} | {ci} | "
                    f"{bold}{r['p']:.3f}{bold} | {r['changed']} ({r['higher']}/{r['lower']}) |"
                )
        lines.append("")
    lines.append(
        "| dataset | precision | queries | rankings changed | texts embedded | min cosine to fp32 | mean cosine | max \\|1 − cosine\\| | max \\|component diff\\| |"
    )
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for ds in data["datasets"]:
        for other in OTHERS:
            side = ds["against_fp32"][other]
            v = side["vectors"]
            lines.append(
                f"| {ds['dataset']} | {other} | {ds['n_queries']} | {side['queries_with_changed_ranking']} | {v['n_texts']} | {v['min_cosine']:.6f} | "
                f"{v['mean_cosine']:.6f} | {v['max_abs_cosine_diff']:.2e} | {v['max_abs_component_diff']:.2e} |"
            )
    verdict = auto_eligible(data)
    lines.append("")
    lines.append(
        "May `auto` pick it (no p < 0.05 and every 95% CI within ±"
        f"{AUTO_MARGIN}, on every dataset): " + ", ".join(f"{p} {'yes' if ok else 'no'}" for p, ok in verdict.items()) + "."
    )
    speed = data.get("speed")
    if speed:
        env = data["environment"]
        lines.append("")
        lines.append(
            f"Speed on {env.get('cpu_model', 'an unnamed CPU')} ({env.get('torch_threads')} torch threads; flags: "
            f"{', '.join(env.get('cpu_flags_relevant', [])) or 'none of note'}): {speed['n_texts']} passages of 150 words of kestrel_kb, batch "
            f"{speed['batch_size']}, median of {speed['rounds']} alternating rounds in one process."
        )
        if data.get("load_note"):
            lines.append("")
            lines.append(f"Load: {data['load_note']}.")
        lines.append("")
        lines.append("| precision | median s | texts/s | speed-up vs fp32 |")
        lines.append("|---|---:|---:|---:|")
        for p, m in speed["median_s"].items():
            lines.append(f"| {p} | {m:.2f} | {speed['texts_per_s'][p]:.1f} | {speed['speedup_vs_fp32'][p]:.2f}x |")
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
    merged = {**fresh, "datasets": [by_name[name] for name in DATASETS if name in by_name]}
    if fresh.get("speed") is None and previous.get("speed") is not None:
        merged["speed"] = previous["speed"]
        merged["environment"] = previous["environment"]  # the speed was measured there
    return merged


#: CPU flags that decide bf16 and int8 speed (never their results), recorded when present.
RELEVANT_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8", "amx_tile")


def environment() -> dict:
    """Versions, the CPU model and the CPU facts that decide bf16 and int8 speed (not their results)."""
    import sentence_transformers
    import torch

    from harness.runtime import choose_quantized_engine, cpu_flags, fast_bf16_cpu, quantized_engines

    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    flags = cpu_flags()
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "sentence_transformers": sentence_transformers.__version__,
        "cpu_model": model,
        "cpu_flags_relevant": [f for f in RELEVANT_FLAGS if f in flags],
        "cpu_avx512_bf16": "avx512_bf16" in flags,
        "cpu_amx": fast_bf16_cpu(),
        "quantized_engine": choose_quantized_engine(quantized_engines(), torch.backends.quantized.engine),
        "torch_threads": torch.get_num_threads(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    parser.add_argument("--out", type=Path, default=PROJECT_ROOT / "experiments" / "precision_effect.json", help="result JSON")
    parser.add_argument("--work", type=Path, default=None, help="folder for the tracking stores and caches (default: a temporary one)")
    parser.add_argument("--from-json", type=Path, default=None, help="print the tables of this JSON and exit")
    parser.add_argument("--update", action="store_true", help="keep the entries not measured from the existing --out JSON")
    parser.add_argument("--rounds", type=int, default=3, help="speed rounds per precision (0: no speed measurement)")
    parser.add_argument("--speed-texts", type=int, default=300, help="chunk texts encoded per speed round")
    parser.add_argument("--speed-only", action="store_true", help="measure the speed only (with --update: keep the metric entries)")
    parser.add_argument("--dataset-path", action="append", default=[], metavar="NAME=FOLDER", help="dataset.path of a dataset (repeatable)")
    args = parser.parse_args(argv)
    for item in args.dataset_path:
        name, sep, folder = item.partition("=")
        if not sep or name not in DATASETS or not Path(folder).is_dir():
            raise SystemExit(f"--dataset-path must be NAME=FOLDER with NAME one of {', '.join(DATASETS)} and an existing folder, got {item!r}")
        DATASET_PATHS[name] = str(Path(folder).resolve())
    if args.from_json is not None:
        print(render_markdown(json.loads(args.from_json.read_text(encoding="utf-8"))))
        return 0
    if args.rounds < 0 or args.speed_texts < 1:
        raise SystemExit("--rounds must be >= 0 and --speed-texts >= 1")
    with tempfile.TemporaryDirectory(prefix="precision-effect-") as tmp:
        work = args.work or Path(tmp)
        data = {
            "config": "default configuration (chunker=recursive, embedding=minilm, retriever=faiss), embedding.precision fp32 vs " + " and ".join(OTHERS),
            "metrics": list(METRICS),
            "n_resamples": N_RESAMPLES,
            "seed": SEED,
            "confidence": 1 - ALPHA,
            "environment": environment(),
            "datasets": [] if args.speed_only else [compare(ds, work / ds) for ds in args.datasets],
        }
        data["speed"] = measure_speed(speed_texts(args.speed_texts), args.rounds) if args.rounds else None
    if args.update and args.out.is_file():
        data = merge_results(json.loads(args.out.read_text(encoding="utf-8")), data)
    args.out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(render_markdown(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
