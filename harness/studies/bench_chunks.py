"""Benchmark: search over a corpus of N distinct chunks (``harness bench --scale-chunks 1000000``).

Where :mod:`harness.studies.bench_scale` times whole runs on exact copies of a dataset, this
benchmark measures the retrieval components themselves at a size no run on this machine
reaches: an approximate FAISS index (IVF, HNSW) and BM25 over at least ``n_chunks``
*distinct* chunks.

**The corpus** (:func:`distinct_corpus`): the dataset (default ``chroma_general``) scaled by
:func:`harness.datasets.scaled.scale_dataset` with ``perturb`` (default 0.15): copy 0 is the
original, every further copy has that share of its words replaced by other words of the
same length from the dataset's vocabulary (deterministic, length-preserving, so every
evidence span stays exact in every copy), with as many copies as it takes. Every document is
chunked by the ``fixed`` chunker in characters (default 256, no overlap; built from its
config by :mod:`harness.experiment.build`), and a chunk whose text equals an earlier
chunk's is dropped (counted as ``duplicates_dropped``), so the chunk texts are distinct and
their number is at least ``n_chunks`` (whole copies are kept). Exact copies would give
identical vectors (ANN recall among ties is ill-defined) and BM25 document frequencies that
are multiples of the copy count; the perturbed copies are a synthetic corpus *generated from*
the real one, labelled so: its metrics are not those of a real corpus of that size.

**The queries**: ``n_queries`` (default 200) of the dataset's questions, evenly spaced in
file order (all of them when it has fewer).

**Measured**, each retriever in a fresh process (phases timed with ``time.perf_counter``;
peak memory = the process's peak resident set size ``VmHWM``, reset at every phase start via
``/proc/self/clear_refs``, so a phase's peak includes what was resident when it began, whose
size is recorded too):

* ``faiss``: the chunk vectors of the fast static model (``embedding=static``, model2vec
  distilled once from the packaged all-MiniLM-L6-v2, real vectors of every chunk; the
  embedding time and throughput are measured); then, per approximate index, building it
  (``retriever.ann_build_seconds``: k-means training and adding, or graph insertion) and
  searching the queries, where :class:`harness.retrievers.faiss.FaissRetriever` also runs
  exact search (``faiss.knn``, brute force) over the same vectors and reports
  :func:`harness.retrievers.faiss.ann_recall` at 5 and at 10: ANN recall@k against exact
  search. Search seconds per query exclude embedding the queries.
* ``bm25``: :class:`harness.retrievers.bm25.BM25Retriever` (bm25s, Lucene BM25) index build
  and search seconds per query (top 10).
* ``minilm``: the throughput of the default model (all-MiniLM-L6-v2, ``embedding=minilm``)
  on ``minilm_sample`` chunks of the same corpus; the MiniLM embedding time of all chunks is
  **extrapolated** from it (chunks ÷ chunks per second) and labelled so.

Before any corpus is built, :func:`estimate_peak_bytes` estimates the larger process's peak
memory, and :func:`scale_chunks` refuses (one line) when it exceeds ``MemAvailable`` of
``/proc/meminfo``. The result names the CPU (model and SIMD features detected at run time) and
the load average before and after, so numbers taken on a busy machine say so.
"""

from __future__ import annotations

import gc
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from harness.experiment.build import PROJECT_ROOT
from harness.params import Param
from harness.studies.bench_scale import GB, PhaseMeter

#: Defaults of :func:`scale_chunks`.
CHUNK_CHARS = 256
PERTURB = 0.15
N_QUERIES = 200
MINILM_SAMPLE = 1000
#: The approximate indexes measured by default, and the FAISS settings each is built with.
INDEXES = ("ivf", "hnsw")
#: ``ivf_nlist`` is null here: :func:`ann_overrides` sets ``round(sqrt(chunks))`` cells (FAISS's
#: guideline is 4 to 16 times the square root; the square root keeps k-means training, on at
#: most 256 vectors per cell, within minutes on 2 cores at a million chunks).
ANN_SETTINGS = {
    "ivf": {"ivf_nprobe": 32, "ivf_seed": 1234},
    "hnsw": {"hnsw_m": 32, "hnsw_ef_construction": 40, "hnsw_ef_search": 128, "hnsw_build_threads": "null"},
}
#: The cut-offs of ANN recall against exact search.
KS = (5, 10)

#: The arguments of :func:`scale_chunks`, checked before any work (``--scale-chunks`` ...).
PARAMS = {
    "n_chunks": Param("scale-chunks", "int", low=1, note="distinct chunks"),
    "chunk_chars": Param("chunk-chars", "int", low=16, note="characters per chunk"),
    "perturb": Param("perturb", "number", low=0, high=1, low_open=True, note="share of words replaced in every copy after the first"),
    "n_queries": Param("queries", "int", low=1),
    "minilm_sample": Param("minilm-sample", "int", low=0, note="chunks embedded by MiniLM to measure its throughput; 0 = skip"),
}


@dataclass(frozen=True)
class Corpus:
    """What :func:`distinct_corpus` builds.

    Attributes:
        dataset: the scaled, perturbed dataset (``copies`` copies of every document; spans verified).
        chunks: the distinct chunks in document order (``len(chunks) >= n_chunks``).
        copies: copies of every document (the scale factor).
        duplicates_dropped: chunks dropped because an earlier chunk had the same text.
    """

    dataset: object
    chunks: list
    copies: int
    duplicates_dropped: int


def chunker_overrides(chunk_chars: int = CHUNK_CHARS) -> list[str]:
    """The config overrides of the benchmark's chunker: ``fixed``, ``chunk_chars`` characters, no overlap."""
    return ["chunker=fixed", "chunker.unit=chars", f"chunker.chunk_size={chunk_chars}", "chunker.chunk_overlap=0"]


def distinct_corpus(base, n_chunks: int, chunk_chars: int = CHUNK_CHARS, perturb: float = PERTURB, seed: int = 0) -> Corpus:
    """At least ``n_chunks`` chunks with distinct texts from perturbed copies of ``base`` (module docstring).

    Args:
        base: a loaded :class:`harness.types.Dataset` with at least one letter in its corpus.
        n_chunks: chunks wanted, >= 1.
        chunk_chars: chunk size in characters (the ``fixed`` chunker, no overlap), >= 16.
        perturb: share of the words replaced in copies >= 1, in (0, 1].
        seed: seed of the replacements.

    Returns:
        A :class:`Corpus`; deterministic in its arguments.

    Raises:
        ValueError: an argument out of range, or a dataset whose chunks cannot be made distinct
            (no growth after adding copies: e.g. a corpus without letters).
    """
    from harness.datasets.scaled import scale_dataset
    from harness.experiment.build import build_chunker
    from harness.experiment.config import compose

    PARAMS["n_chunks"].check(n_chunks)
    PARAMS["chunk_chars"].check(chunk_chars)
    PARAMS["perturb"].check(perturb)
    chunker = build_chunker(compose(chunker_overrides(chunk_chars)))
    per_copy = sum(len(chunker.chunk(d)) for d in base.documents)
    if per_copy == 0:
        raise ValueError(f"dataset {base.name!r} gives no chunks: nothing to scale")
    copies = max(1, math.ceil(n_chunks / per_copy))
    last = -1
    while True:
        dataset = scale_dataset(base, copies, name=f"{base.name}-distinct-x{copies}", perturb=perturb, seed=seed)
        seen: set[str] = set()
        chunks, dropped = [], 0
        for doc in dataset.documents:
            for c in chunker.chunk(doc):
                if c.text in seen:
                    dropped += 1
                    continue
                seen.add(c.text)
                chunks.append(c)
        if len(chunks) >= n_chunks:
            return Corpus(dataset, chunks, copies, dropped)
        if len(chunks) <= last:
            raise ValueError(f"dataset {base.name!r}: {copies} perturbed copies give only {len(chunks)} distinct chunks of the {n_chunks} asked")
        last = len(chunks)
        copies += math.ceil((n_chunks - len(chunks)) / max(1, len(chunks) / copies)) + 1


def sample_queries(queries: Sequence, n: int) -> list:
    """``n`` of ``queries`` evenly spaced in their order (all of them when there are at most ``n``)."""
    queries = list(queries)
    if len(queries) <= n:
        return queries
    return [queries[(i * len(queries)) // n] for i in range(n)]


def ann_overrides(index: str, n_chunks: int) -> list[str]:
    """The FAISS retriever's config overrides for ``index`` (``ivf`` | ``hnsw``) over ``n_chunks`` chunks:
    :data:`ANN_SETTINGS`, IVF with ``round(sqrt(n_chunks))`` cells, low recall reported, never refused."""
    settings = dict(ANN_SETTINGS[index])
    if index == "ivf":
        settings["ivf_nlist"] = max(1, round(math.sqrt(n_chunks)))
    return ["retriever=faiss", f"retriever.index={index}", "retriever.on_low_recall=ignore", *(f"retriever.{k}={v}" for k, v in settings.items())]


def mem_available_bytes() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes; None where it cannot be read."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def estimate_peak_bytes(n_chunks: int, chunk_chars: int = CHUNK_CHARS, dim: int = 384, indexes: Sequence[str] = INDEXES, hnsw_m: int = 32) -> dict[str, int]:
    """Estimated peak resident bytes of each measuring process, for the refusal before any work.

    Deliberately on the high side (``dim`` 384 is MiniLM's, the static model has 256), from the
    peaks measured at a million chunks:

    * corpus (every process): documents and chunk texts (``2 * chunk_chars`` bytes per chunk,
      ASCII) plus ~1,300 bytes of objects per chunk (chunk, ids, spans, evidence, the set of
      texts seen) and 0.5 GB of interpreter, libraries and model (2.3 GB of 1024³ bytes measured
      at a million 256-character chunks);
    * ``faiss``: ``24 * dim + 4000`` bytes per chunk: three float32 copies of the vectors (the
      encoder's memory cache, the retriever's matrix, the index's own) and as much again in
      temporaries, the cache entries, token counts and labels (10.9 GB of 1024³ bytes peak measured
      at a million 256-dimensional chunks, 11.9 estimated with HNSW), plus the HNSW graph ``2 * hnsw_m * 4`` bytes
      per chunk when built;
    * ``bm25``: per token (about ``chunk_chars / 5``), ~120 bytes: the Python string and list
      slot of every token while tokenising, bm25s's own token ids and its sparse score matrix
      (6.75 GB of 1024³ bytes peak measured at a million 256-character chunks, 7.9 estimated).

    Returns:
        ``{"faiss": bytes, "bm25": bytes}``.
    """
    corpus = n_chunks * (2 * chunk_chars + 1300) + GB // 2
    faiss = corpus + n_chunks * (24 * dim + 4000) + (n_chunks * 8 * hnsw_m if "hnsw" in indexes else 0)
    bm25 = corpus + n_chunks * (chunk_chars // 5) * 120
    return {"faiss": int(faiss), "bm25": int(bm25)}


def check_memory(n_chunks: int, chunk_chars: int, indexes: Sequence[str], available: int | None) -> dict[str, int]:
    """:func:`estimate_peak_bytes`, refused when the larger one exceeds ``available`` bytes.

    Raises:
        ValueError: one line naming ``--scale-chunks``, the estimate and ``MemAvailable``.
    """
    estimate = estimate_peak_bytes(n_chunks, chunk_chars, indexes=indexes)
    need = max(estimate.values())
    if available is not None and need > available:
        raise ValueError(
            f"--scale-chunks {n_chunks}: the estimated peak memory {need / GB:.1f} GB exceeds MemAvailable {available / GB:.1f} GB "
            f"(/proc/meminfo); ask for fewer chunks (about {int(n_chunks * available / need):,} fit) or smaller --chunk-chars"
        )
    return estimate


def _phase_numbers(meter: PhaseMeter) -> dict:
    return {
        "seconds": dict(meter.seconds),
        "peak_bytes": dict(meter.peak_bytes),
        "start_bytes": dict(meter.start_bytes),
        "peak_reset_per_phase": meter.resets,
    }


def measure(kind: str, spec: dict) -> dict:
    """One measuring process's work (``kind``: ``faiss`` | ``bm25`` | ``minilm``) on the corpus of
    ``spec`` (the arguments of :func:`distinct_corpus` plus ``dataset_overrides``, ``n_queries``,
    ``indexes``, ``static_path``, ``minilm_sample``). Meant for a fresh process (:func:`scale_chunks`)."""
    from harness.experiment.build import build_dataset, build_encoder, build_retriever
    from harness.experiment.config import compose

    meter = PhaseMeter()
    meter("corpus")
    base = build_dataset(compose(list(spec["dataset_overrides"])))
    n_wanted = spec["minilm_sample"] if kind == "minilm" else spec["n_chunks"]
    corpus = distinct_corpus(base, n_wanted, spec["chunk_chars"], spec["perturb"], spec.get("seed", 0))
    queries = sample_queries(base.queries, spec["n_queries"])
    chunks = corpus.chunks
    out: dict = {
        "n_chunks": len(chunks),
        "copies": corpus.copies,
        "duplicates_dropped": corpus.duplicates_dropped,
        "corpus_chars": sum(len(c.text) for c in chunks),
        "n_queries": len(queries),
    }
    del corpus
    if kind == "bm25":
        import bm25s

        retriever = build_retriever(compose(["retriever=bm25"]))
        meter("bm25 build")
        retriever.index(chunks)
        meter("bm25 search")
        t0 = time.perf_counter()
        retriever.search(queries, max(KS))
        out["bm25"] = {"build_s": None, "search_s_per_query": (time.perf_counter() - t0) / len(queries), "backend": f"bm25s {bm25s.__version__}"}
        meter("end")
        out["bm25"]["build_s"] = meter.seconds["bm25 build"]
    elif kind == "minilm":
        encoder = build_encoder(compose(["embedding=minilm", "cache.enabled=false", "embedding.show_progress=false"]))
        meter("minilm load")
        encoder.encode(["warm up"])
        meter("minilm embed")
        texts = [c.text for c in chunks[: spec["minilm_sample"]]]
        t0 = time.perf_counter()
        encoder.encode(texts)
        seconds = time.perf_counter() - t0
        meter("end")
        out["minilm"] = {"texts": len(texts), "seconds": seconds, "chunks_per_s": len(texts) / seconds, "precision": encoder.precision_used}
    else:
        import faiss

        encoder = build_encoder(compose(["embedding=static", f"embedding.path={spec['static_path']}", "cache.enabled=false", "embedding.show_progress=false"]))
        meter("static embed")
        t0 = time.perf_counter()
        encoder.encode([c.text for c in chunks])
        seconds = time.perf_counter() - t0
        encoder.encode([q.text for q in queries], role="query")
        out["static"] = {"seconds": seconds, "chunks_per_s": len(chunks) / seconds, "dim": encoder.dim}
        out["faiss_version"] = faiss.__version__
        out["indexes"] = {}
        for index in spec["indexes"]:
            overrides = ann_overrides(index, len(chunks))
            retriever = build_retriever(compose(overrides), encoder)
            meter(f"{index} build")
            retriever.index(chunks)
            meter(f"{index} search")
            retriever.search(queries, min(KS))  # depth max(k + 1, 10): recall at 5 and at 10 from one search
            meter("end")
            stats = retriever.stats()
            out["indexes"][index] = {
                "settings": overrides,
                "build_s": stats["retriever.ann_build_seconds"],
                "search_s_per_query": stats["retriever.ann_search_seconds"] / len(queries),
                "exact_search_s_per_query": stats["retriever.exact_search_seconds"] / len(queries),
                "ann_recall": {"5": stats["retriever.ann_recall_at_depth"], "10": stats["retriever.ann_recall_at_10"]},
                **{key: stats[f"retriever.{key}"] for key in ("ivf_nlist", "ivf_nprobe", "hnsw_m", "hnsw_ef_search") if f"retriever.{key}" in stats},
            }
            del retriever
            gc.collect()
            if spec.get("partial"):  # what is measured survives a process stopped during the next index
                Path(spec["partial"]).write_text(json.dumps(out | _phase_numbers(meter)), encoding="utf-8")
    out |= _phase_numbers(meter)
    return out


_DRIVER = """
import json, sys
from harness.studies.bench_chunks import measure
print("BENCH-CHUNKS " + json.dumps(measure(sys.argv[1], json.loads(sys.argv[2]))), flush=True)
"""


def _child(kind: str, spec: dict) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")]))}
    proc = subprocess.run([sys.executable, "-c", _DRIVER, kind, json.dumps(spec)], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"scale-chunks {kind} process failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    line = next(x for x in proc.stdout.splitlines() if x.startswith("BENCH-CHUNKS "))
    return json.loads(line[len("BENCH-CHUNKS ") :])


#: What :func:`scale_chunks` can measure, each in its own process, in the order they run
#: (the longest last).
MEASURES = ("bm25", "minilm", "faiss")


def parse_measures(text: str) -> list[str]:
    """``"bm25,faiss"`` -> ``["bm25", "faiss"]``, in :data:`MEASURES` order.

    Raises:
        ValueError: naming ``--measure`` for an unknown item (with a did-you-mean) or an empty list.
    """
    items = [x.strip() for x in text.split(",") if x.strip()]
    for item in items:
        Param("measure", "choice", choices=MEASURES).check(item)
    if not items:
        raise ValueError(f"--measure must name at least one of {', '.join(MEASURES)}, got {text!r}")
    return [m for m in MEASURES if m in items]


def parse_indexes(text: str) -> list[str]:
    """``"ivf,hnsw"`` -> ``["ivf", "hnsw"]``; ``""`` -> ``[]`` (BM25 and embedding only).

    Raises:
        ValueError: naming ``--ann`` for an item other than ``ivf`` or ``hnsw`` (with a did-you-mean).
    """
    items = [x.strip() for x in text.split(",") if x.strip()]
    for item in items:
        Param("ann", "choice", choices=INDEXES).check(item)
    return list(dict.fromkeys(items))


def scale_chunks(
    n_chunks: int = 1_000_000,
    dataset: str = "chroma_general",
    chunk_chars: int = CHUNK_CHARS,
    perturb: float = PERTURB,
    n_queries: int = N_QUERIES,
    indexes: Sequence[str] = INDEXES,
    minilm_sample: int = MINILM_SAMPLE,
    measures: Sequence[str] = MEASURES,
    work: Path | None = None,
    log=print,
    checkpoint=None,
) -> dict:
    """Measure FAISS (static vectors; ``indexes``), BM25 and the MiniLM throughput over at least
    ``n_chunks`` distinct chunks of ``dataset`` (module docstring), each in a fresh process.

    Args:
        n_chunks: distinct chunks, >= 1.
        dataset: a config name or dataset folder, as ``harness bench --dataset``.
        chunk_chars: characters per chunk (``fixed`` chunker), >= 16.
        perturb: share of the words of every copy after the first replaced, in (0, 1].
        n_queries: questions searched (evenly spaced sample), >= 1.
        indexes: approximate indexes built (``ivf``, ``hnsw``); empty: embedding and BM25 only.
        minilm_sample: chunks MiniLM embeds to measure its throughput (0: skip; the MiniLM
            time for every chunk is extrapolated from it).
        measures: which processes run (:data:`MEASURES`); ``faiss`` needs ``indexes``,
            ``minilm`` a ``minilm_sample`` > 0 (otherwise skipped).
        work: folder for the distilled static model, kept for the next run (default: a
            temporary folder, removed).
        checkpoint: called with the result so far after each process (e.g. to write it).

    Raises:
        ValueError: an argument out of range, an unknown dataset or index, or an estimated peak
            memory above MemAvailable, all before anything expensive runs.

    Returns:
        ``{"n_chunks_asked", "dataset", "cpu", "cpu_after", "memory_estimate_bytes",
        "mem_available_bytes", "runs": {"faiss"|"bm25"|"minilm": measure(...)}, "minilm_extrapolated", ...}``.
    """
    from harness.experiment.build import build_dataset, build_encoder
    from harness.experiment.config import compose
    from harness.runtime import cpu_summary
    from harness.studies.bench import dataset_overrides

    for key, value in {"n_chunks": n_chunks, "chunk_chars": chunk_chars, "perturb": perturb, "n_queries": n_queries, "minilm_sample": minilm_sample}.items():
        PARAMS[key].check(value)
    indexes = [Param("ann", "choice", choices=INDEXES).check(ix) for ix in indexes]
    measures = [Param("measure", "choice", choices=MEASURES).check(m) for m in measures]
    available = mem_available_bytes()
    estimate = check_memory(n_chunks, chunk_chars, indexes, available)
    overrides = dataset_overrides(dataset)
    base = build_dataset(compose(overrides))
    result: dict = {
        "n_chunks_asked": n_chunks,
        "dataset": base.name,
        "chunker": chunker_overrides(chunk_chars),
        "perturb": perturb,
        "cpu": cpu_summary(),
        "memory_estimate_bytes": estimate,
        "mem_available_bytes": available,
        "runs": {},
    }
    own = work is None
    work = Path(tempfile.mkdtemp(prefix="harness-bench-chunks-")) if own else Path(work)
    try:
        static_path = ""
        if indexes and "faiss" in measures:
            log("scale-chunks: preparing the static model (distilled once from all-MiniLM-L6-v2)")
            encoder = build_encoder(compose(["embedding=static", f"cache.dir={work / 'cache'}", "embedding.show_progress=false"]))
            static_path = str(encoder.model_path)
        spec = {
            "dataset_overrides": overrides,
            "n_chunks": n_chunks,
            "chunk_chars": chunk_chars,
            "perturb": perturb,
            "n_queries": n_queries,
            "indexes": list(indexes),
            "static_path": static_path,
            "minilm_sample": minilm_sample,
            "partial": str(work / "faiss-partial.json"),
        }
        kinds = [m for m in measures if (m != "faiss" or indexes) and (m != "minilm" or minilm_sample)]
        for kind in kinds:
            log(f"scale-chunks: {kind} over {n_chunks:,} distinct chunks" if kind != "minilm" else f"scale-chunks: MiniLM throughput on {minilm_sample} chunks")
            result["runs"][kind] = _child(kind, spec)
            result["cpu_after"] = cpu_summary()
            if checkpoint is not None:
                checkpoint(result)
    finally:
        if own:
            shutil.rmtree(work, ignore_errors=True)
    result["cpu_after"] = cpu_summary()
    return summarise(result)


def summarise(result: dict) -> dict:
    """``result`` with its derived entries set from its runs: ``minilm_extrapolated`` (the MiniLM
    seconds for every chunk = chunks ÷ the measured MiniLM chunks per second, labelled
    ``extrapolated``; None without a MiniLM measurement) and ``memory_is``. Returns ``result``."""
    minilm = result["runs"].get("minilm", {}).get("minilm")
    n = next((run["n_chunks"] for kind, run in result["runs"].items() if kind != "minilm"), result["n_chunks_asked"])
    result["minilm_extrapolated"] = (
        {
            "n_chunks": n,
            "seconds": n / minilm["chunks_per_s"],
            "how": f"extrapolated: {n:,} chunks / {minilm['chunks_per_s']:.1f} chunks/s measured on {minilm['texts']} chunks",
        }
        if minilm
        else None
    )
    result["memory_is"] = "peak resident set size (VmHWM) of the measuring process, reset at each phase start via /proc/self/clear_refs"
    return result


#: The block of ``docs/benchmark.md`` that holds :func:`tables` of the committed result.
MARKERS = ("<!-- scale-chunks:start -->", "<!-- scale-chunks:end -->")


def update_docs(result: dict, root: str | os.PathLike = PROJECT_ROOT) -> Path:
    """Write :func:`tables` of ``result`` into ``docs/benchmark.md`` under ``root`` between
    :data:`MARKERS`; returns the file written.

    Raises:
        ValueError: the file has no marker block.
    """
    path = Path(root) / "docs" / "benchmark.md"
    text = path.read_text(encoding="utf-8")
    from harness.studies.bench import replace_marked

    path.write_text(replace_marked(text, MARKERS, tables(result), str(path)), encoding="utf-8")
    return path


def _gb(value) -> str:
    return "—" if value is None else f"{value / GB:.2f}"


def tables(result: dict) -> str:
    """Markdown tables of ``result`` (:func:`scale_chunks`): the machine, then seconds and peak
    memory per phase, ANN recall and search times, and the MiniLM extrapolation (labelled)."""
    cpu, after = result["cpu"], result.get("cpu_after", {})
    bm25 = result["runs"].get("bm25")
    first = next(run for kind, run in result["runs"].items() if kind != "minilm")
    lines = [
        f"{first['n_chunks']:,} distinct chunks ({first['corpus_chars'] / 1e6:.0f} M characters; {first['copies']} perturbed copies of "
        f"{result['dataset']}, {first['duplicates_dropped']} duplicate chunks dropped), {first['n_queries']} queries; "
        f"CPU {cpu['model']} ({cpu['usable_cores']} cores usable; {', '.join(cpu['simd']) or 'no SIMD flags read'}); "
        f"load average {cpu['load_average']} before, {after.get('load_average')} after.",
        "",
        "| process | phase | seconds | peak GB | resident at start GB |",
        "|---|---|---:|---:|---:|",
    ]
    for kind, run in result["runs"].items():
        for phase, seconds in run["seconds"].items():
            lines.append(f"| {kind} | {phase} | {seconds:.2f} | {_gb(run['peak_bytes'].get(phase))} | {_gb(run['start_bytes'].get(phase))} |")
    faiss = result["runs"].get("faiss")
    lines += [
        "",
        "| search | build s | search ms/query | exact search ms/query | recall@5 vs exact | recall@10 vs exact | settings |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    if faiss:
        for index, r in faiss["indexes"].items():
            settings = " ".join(s.removeprefix("retriever.") for s in r["settings"][1:])
            lines.append(
                f"| faiss {index} | {r['build_s']:.1f} | {1000 * r['search_s_per_query']:.3f} | {1000 * r['exact_search_s_per_query']:.2f} | "
                f"{r['ann_recall']['5']:.4f} | {r['ann_recall']['10']:.4f} | {settings} |"
            )
    b = bm25["bm25"] if bm25 else None
    if b:
        lines.append(f"| bm25 ({b['backend']}) | {b['build_s']:.1f} | {1000 * b['search_s_per_query']:.3f} | — | — | — | k1=1.5 b=0.75 |")
    lines += ["", "| embedding all chunks | chunks/s | seconds | how |", "|---|---:|---:|---|"]
    if faiss:
        s = faiss["static"]
        lines.append(f"| static (model2vec from MiniLM, {s['dim']} dims) | {s['chunks_per_s']:.0f} | {s['seconds']:.1f} | measured |")
    ex = result.get("minilm_extrapolated")
    if ex:
        lines.append(f"| all-MiniLM-L6-v2 (384 dims) | {result['runs']['minilm']['minilm']['chunks_per_s']:.1f} | {ex['seconds']:.0f} | {ex['how']} |")
    return "\n".join(lines)
