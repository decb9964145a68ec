"""Benchmark: cost as the work grows (``harness bench --scale 1,10,100``).

(Search over a million *distinct* chunks, with approximate indexes and ANN recall against
exact search, is :mod:`harness.studies.bench_chunks`, ``harness bench --scale-chunks``.)

For each factor, :func:`harness.datasets.scaled.load_scaled` builds the dataset (default
``chroma_general``) with every document repeated that many times (the same questions, their
evidence in every copy). One fresh process per (factor, retriever) runs :func:`harness.experiment.run.execute`
(``chunker=recursive`` defaults: 254 model tokens; empty cache folder, so everything is
chunked and embedded; a tracking store in a temporary folder) and records, per phase
(``load``, ``chunk``, ``index``, ``search``, ``score``, ``diagnostics``, ``log``, the
boundaries announced by :mod:`harness.experiment.phases`):

* wall-clock seconds (``time.perf_counter``);
* peak memory: the process's peak resident set size ``VmHWM`` from ``/proc/self/status``,
  reset to the current RSS at the start of every phase by writing ``5`` to
  ``/proc/self/clear_refs`` (Linux); so a phase's peak includes everything resident when it
  started (interpreter, libraries, model, corpus). Where ``/proc`` cannot be reset the
  peak is the process's peak so far (reported as ``memory_is``).
* embedding: seconds in the model (loading it, and its forward passes on chunks and on
  queries, timed around the encoder's ``_prepare`` and ``_embed_batch``), split out of
  ``index`` and ``search`` into ``embed``; ``index`` and ``search`` keep only the rest
  (token counts, FAISS or BM25 work).

FAISS runs at the factors up to :data:`FAISS_UP_TO` (embedding every chunk of 100× the corpus
would take about an hour on 2 cores); BM25 runs at every factor. A FAISS run at a larger
factor is *extrapolated*, and the report says so: embedding = model load + query encoding
(both independent of the corpus size, as measured at the largest FAISS factor) + chunks ÷
the chunk throughput (chunks/s) measured there; the non-embedding phases are the BM25 run's
``load``, ``chunk``, ``score``, ``diagnostics`` and ``log`` at that factor plus FAISS
``index`` and ``search`` (their non-embedding part) scaled linearly from the largest FAISS factor.
The copies' chunks share their texts, and the encoder embeds (and counts) each distinct text
once, so a measured FAISS run past 1× embeds only the 1× texts: the throughput is per text
embedded, and the extrapolation counts every chunk as a new text, as in a real corpus.

Targets (issue 17): every non-embedding phase linear (time at 10× the data ≤ 11× the time;
checked between consecutive factors, for BM25 and FAISS; a phase taking under
:data:`RESOLUTION_S` at both sizes passes as below resolution); the non-embedding share of a
FAISS run at the largest factor ≤ 0.05 (embedding extrapolated); peak memory at the largest
factor ≤ 2 GB + 4 × the corpus text (UTF-8 bytes).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

from harness.experiment.build import PROJECT_ROOT

#: The largest factor at which a FAISS run is measured (larger ones are extrapolated).
FAISS_UP_TO = 10
#: Phases in run order; ``embed`` is split out of ``index`` and ``search``.
PHASES = ("load", "chunk", "embed", "index", "search", "score", "diagnostics", "log")
#: Phases whose time does not depend on the embedding model.
NON_EMBEDDING = ("load", "chunk", "index", "search", "score", "diagnostics", "log")
#: Limits from the issue.
LIMITS = {"linear": 11.0, "non_embedding_share": 0.05, "memory_base_bytes": 2 * 1024**3, "memory_per_corpus_byte": 4.0}
#: Phases shorter than this (seconds) at both sizes are not judged for linearity.
RESOLUTION_S = 0.1
GB = 1024**3

_CLEAR_REFS = Path("/proc/self/clear_refs")
_STATUS = Path("/proc/self/status")


def _status_kb(field: str) -> int | None:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak() -> bool:
    try:
        _CLEAR_REFS.write_text("5")
        return True
    except OSError:
        return False


class PhaseMeter:
    """Listener of :func:`harness.experiment.phases.mark`: seconds and peak RSS (bytes) per phase.

    Attributes:
        seconds: phase -> wall-clock seconds.
        peak_bytes: phase -> peak resident set size during the phase (``VmHWM``), bytes.
        start_bytes: phase -> resident set size when the phase started (``VmRSS``), bytes.
        resets: whether the peak could be reset at each phase start (``/proc/self/clear_refs``).
    """

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.peak_bytes: dict[str, int] = {}
        self.start_bytes: dict[str, int] = {}
        self.resets = True
        self._current: str | None = None
        self._t0 = 0.0

    def __call__(self, phase: str) -> None:
        now = time.perf_counter()
        if self._current is not None:
            self.seconds[self._current] = self.seconds.get(self._current, 0.0) + now - self._t0
            peak = (_status_kb("VmHWM") or 0) * 1024
            self.peak_bytes[self._current] = max(self.peak_bytes.get(self._current, 0), peak)
        if phase == "end":
            self._current = None
            return
        self.resets = _reset_peak() and self.resets
        self.start_bytes[phase] = (_status_kb("VmRSS") or 0) * 1024
        self._current = phase
        self._t0 = time.perf_counter()


class EmbedTimer:
    """Seconds spent in the embedding model (load + forward passes), per phase, and texts embedded.

    Wraps ``_prepare`` and ``_embed_batch`` of :class:`harness.embeddings.model.Encoder`
    (in the measuring process only) and asks ``meter`` which phase is running.
    """

    def __init__(self, meter: PhaseMeter) -> None:
        self.meter = meter
        self.seconds: dict[str, float] = {}
        self.texts: dict[str, int] = {}
        self.model_load = 0.0

    def install(self) -> None:
        from harness.embeddings.model import Encoder

        prepare, embed_batch = Encoder._prepare, Encoder._embed_batch
        timer = self

        def timed_prepare(enc):
            t0 = time.perf_counter()
            try:
                return prepare(enc)
            finally:
                timer._add(time.perf_counter() - t0, 0, load=True)

        def timed_embed_batch(enc, texts):
            t0 = time.perf_counter()
            try:
                return embed_batch(enc, texts)
            finally:
                timer._add(time.perf_counter() - t0, len(texts))

        Encoder._prepare, Encoder._embed_batch = timed_prepare, timed_embed_batch

    def _add(self, seconds: float, n: int, load: bool = False) -> None:
        phase = self.meter._current or "outside"
        self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds
        if load:
            self.model_load += seconds
        else:
            self.texts[phase] = self.texts.get(phase, 0) + n


def scaled_config(overrides: Sequence[str], factor: int, one_document: bool = False):
    """The composed config of ``overrides`` with its dataset wrapped in
    :func:`harness.datasets.scaled.load_scaled` (``factor`` copies of every document)."""
    from omegaconf import OmegaConf, open_dict

    from harness.experiment.config import compose

    cfg = compose(list(overrides))
    base = OmegaConf.to_container(cfg.dataset, resolve=True)
    with open_dict(cfg):
        cfg.dataset = OmegaConf.create(
            {
                "_target_": "harness.datasets.scaled.load_scaled",
                "factor": factor,
                "one_document": one_document,
                "name": f"{base.get('name') or 'dataset'}-x{factor}",
                "base": base,
            }
        )
    return cfg


def measure_run(overrides: Sequence[str], factor: int = 1, one_document: bool = False) -> dict:
    """Run :func:`harness.experiment.run.execute` on :func:`scaled_config` in this process and
    return its phase seconds (``embed`` split out), peak memory per phase, chunk count and
    embedding throughput. Meant for a fresh process (see :func:`scale`)."""
    from harness.experiment.phases import listening
    from harness.experiment.run import execute

    cfg = scaled_config(overrides, factor, one_document)
    meter = PhaseMeter()
    timer = EmbedTimer(meter)
    timer.install()
    t0 = time.perf_counter()
    with listening(meter):
        out = execute(cfg)
    wall = time.perf_counter() - t0
    seconds = dict(meter.seconds)
    for phase, spent in timer.seconds.items():
        if phase in seconds:
            seconds[phase] -= spent
    seconds["embed"] = sum(timer.seconds.values())
    ev = out["evaluation"]
    chunk_texts = timer.texts.get("index", 0)
    chunk_embed_s = timer.seconds.get("index", 0.0) - timer.model_load
    return {
        "seconds": {p: seconds.get(p, 0.0) for p in PHASES},
        "execute_s": wall,
        "peak_bytes": {p: meter.peak_bytes.get(p, 0) for p in PHASES if p != "embed"},
        "start_bytes": {p: meter.start_bytes.get(p, 0) for p in PHASES if p != "embed"},
        "peak_bytes_max": max(meter.peak_bytes.values(), default=0),
        "peak_reset_per_phase": meter.resets,
        "n_chunks": len(ev.chunks),
        "model_load_s": timer.model_load,
        "chunk_texts_embedded": chunk_texts,
        "chunks_per_s": chunk_texts / chunk_embed_s if chunk_texts and chunk_embed_s > 0 else None,
        "query_embed_s": timer.seconds.get("search", 0.0),
        "recall@5": ev.metrics.get("recall@5"),
    }


_DRIVER = """
import json, sys
from harness.studies.bench_scale import measure_run
print("BENCH-SCALE " + json.dumps(measure_run(sys.argv[3:], int(sys.argv[1]), sys.argv[2] == "1")), flush=True)
"""


def _child(overrides: list[str], factor: int, one_document: bool) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")]))}
    proc = subprocess.run(
        [sys.executable, "-c", _DRIVER, str(factor), str(int(one_document)), *overrides], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(f"scale run {' '.join(overrides)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    line = next(x for x in proc.stdout.splitlines() if x.startswith("BENCH-SCALE "))
    return json.loads(line[len("BENCH-SCALE ") :])


def parse_factors(text: str) -> list[int]:
    """``"1,10,100"`` -> ``[1, 10, 100]``.

    Raises:
        ValueError: naming ``--scale`` when an item is not an int >= 1 or the list is not increasing.
    """
    try:
        factors = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--scale expects comma-separated integers >= 1 such as 1,10,100, got {text!r}") from None
    if not factors or min(factors) < 1 or factors != sorted(set(factors)):
        raise ValueError(f"--scale expects increasing integers >= 1 such as 1,10,100, got {text!r}")
    return factors


def scale(factors: Sequence[int] = (1, 10, 100), dataset: str = "chroma_general", faiss_up_to: int = FAISS_UP_TO, work: Path | None = None, log=print) -> dict:
    """Measure the runs (BM25 at every factor, FAISS up to ``faiss_up_to``) on ``dataset`` (a
    config name or folder, as ``harness bench --dataset``) and judge the targets.

    Raises:
        ValueError: an unknown ``dataset`` or a dataset that cannot be loaded (before any run).

    Returns:
        ``{"factors", "corpus_bytes": {factor: bytes}, "runs": {"bm25"|"faiss": {factor: measure_run(...)}},
        "extrapolated": {...}, "targets": [...], "memory_is", "embed_is"}``.
    """
    from harness.datasets.scaled import scale_dataset
    from harness.experiment.build import build_dataset
    from harness.experiment.config import compose
    from harness.studies.bench import dataset_overrides

    base_overrides = dataset_overrides(dataset)
    base = build_dataset(compose(base_overrides))
    own = work is None
    work = Path(tempfile.mkdtemp(prefix="harness-bench-scale-")) if own else Path(work)
    uri = f"sqlite:///{work / 'mlflow.db'}"
    result: dict = {"dataset": base.name, "n_queries": len(base.queries), "factors": list(factors), "corpus_bytes": {}, "runs": {"bm25": {}, "faiss": {}}}
    for factor in factors:
        result["corpus_bytes"][str(factor)] = sum(len(d.text.encode("utf-8")) for d in scale_dataset(base, factor).documents)
        for retriever in ("bm25", "faiss"):
            if retriever == "faiss" and factor > faiss_up_to:
                continue
            folder = work / f"{retriever}-x{factor}"
            overrides = [
                *base_overrides,
                f"retriever={retriever}",
                f"tracking.uri={uri}",
                "tracking.experiment=bench-scale",
                f"tracking.run_name={retriever}-x{factor}",
                f"paths.cache_dir={folder / 'cache'}",
                f"cache.dir={folder / 'cache'}",
                "embedding.show_progress=false",
                "resume=false",
            ]
            log(f"scale: {retriever} at {factor}x ({result['corpus_bytes'][str(factor)] / 1e6:.1f} MB)")
            result["runs"][retriever][str(factor)] = _child(overrides, factor, False)
    if own:
        shutil.rmtree(work, ignore_errors=True)
    result["extrapolated"] = extrapolate(result, faiss_up_to)
    result["targets"] = targets(result)
    result["memory_is"] = "peak resident set size (VmHWM, /proc/self/status) of the run's process, reset at each phase start via /proc/self/clear_refs"
    result["embed_is"] = "seconds in the model: loading it and its forward passes (chunks in index, queries in search); index and search hold the rest"
    return result


def extrapolate(result: dict, faiss_up_to: int = FAISS_UP_TO) -> dict:
    """FAISS runs at factors past the largest measured one (see the module docstring); ``{}`` when none."""
    faiss = result["runs"]["faiss"]
    if not faiss:
        return {}
    base_factor = max(int(f) for f in faiss)
    base = faiss[str(base_factor)]
    out = {}
    for f, bm25 in result["runs"]["bm25"].items():
        factor = int(f)
        if factor <= base_factor or not base.get("chunks_per_s"):
            continue
        grow = factor / base_factor
        n_chunks = bm25["n_chunks"]
        embed = base["model_load_s"] + base["query_embed_s"] + n_chunks / base["chunks_per_s"]
        seconds = {p: bm25["seconds"][p] for p in ("load", "chunk", "score", "diagnostics", "log")}
        seconds["index"] = base["seconds"]["index"] * grow
        seconds["search"] = base["seconds"]["search"] * grow
        seconds["embed"] = embed
        non_embedding = sum(v for p, v in seconds.items() if p != "embed")
        out[f] = {
            "seconds": {p: seconds[p] for p in PHASES},
            "n_chunks": n_chunks,
            "non_embedding_share": non_embedding / (non_embedding + embed),
            "how": (
                f"embed = model load {base['model_load_s']:.1f} s + queries {base['query_embed_s']:.1f} s (as at {base_factor}x) + {n_chunks} chunks / "
                f"{base['chunks_per_s']:.1f} chunks/s (measured at {base_factor}x); load, chunk, score, diagnostics, log from the BM25 run at {factor}x; "
                f"FAISS index and search (without embedding) = {base_factor}x times {grow:g}"
            ),
        }
    return out


def targets(result: dict) -> list[dict]:
    """The issue's targets with measured value, limit and verdict (``pass``/``fail``)."""
    rows = []
    factors = [int(f) for f in result["factors"]]
    for retriever, runs in result["runs"].items():
        measured = sorted(int(f) for f in runs)
        for small, large in zip(measured, measured[1:]):
            data_ratio = large / small
            for phase in NON_EMBEDDING:
                a, b = runs[str(small)]["seconds"][phase], runs[str(large)]["seconds"][phase]
                limit = LIMITS["linear"] * data_ratio / 10
                tiny = a < RESOLUTION_S and b < RESOLUTION_S
                ratio = b / a if a > 0 else None
                ok = tiny or (ratio is not None and ratio <= limit)
                rows.append(
                    {
                        "target": f"{retriever} {phase}: time {large}x / {small}x",
                        "measured": ratio,
                        "limit": limit,
                        "result": "pass" if ok else "fail",
                        "note": f"{a:.3f} s -> {b:.3f} s" + (" (both below resolution)" if tiny else ""),
                    }
                )
    top = str(max(factors))
    extra = result.get("extrapolated", {}).get(top)
    faiss_top = result["runs"]["faiss"].get(top)
    if faiss_top is not None:
        s = faiss_top["seconds"]
        non = sum(s[p] for p in NON_EMBEDDING)
        share, note = non / (non + s["embed"]), f"measured FAISS run at {top}x: {non:.1f} s of {non + s['embed']:.1f} s"
    elif extra is not None:
        share, note = extra["non_embedding_share"], f"FAISS run at {top}x, embedding extrapolated: {extra['how']}"
    else:
        share, note = None, "no FAISS measurement"
    if share is not None:
        ok = share <= LIMITS["non_embedding_share"]
        rows.append(
            {
                "target": f"non-embedding share of a FAISS run at {top}x",
                "measured": share,
                "limit": LIMITS["non_embedding_share"],
                "result": "pass" if ok else "fail",
                "note": note,
            }
        )
    corpus = result["corpus_bytes"][top]
    limit_bytes = LIMITS["memory_base_bytes"] + LIMITS["memory_per_corpus_byte"] * corpus
    for retriever, runs in result["runs"].items():
        if top in runs:
            peak = runs[top]["peak_bytes_max"]
            rows.append(
                {
                    "target": f"{retriever} peak memory at {top}x (GB)",
                    "measured": peak / GB,
                    "limit": limit_bytes / GB,
                    "result": "pass" if peak <= limit_bytes else "fail",
                    "note": f"2 GB + 4 x {corpus / 1e6:.1f} MB of corpus text",
                }
            )
    return rows


def _num(value, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def tables(result: dict) -> str:
    """Markdown tables of ``result`` (:func:`scale`): seconds and peak memory per phase and run
    (extrapolated rows marked), then the targets with verdicts."""
    head = "| run | corpus MB | chunks | " + " | ".join(PHASES) + " | peak GB |"
    lines = [head, "|---|---:|---:|" + "---:|" * len(PHASES) + "---:|"]
    for f in result["factors"]:
        for retriever in ("bm25", "faiss"):
            run = result["runs"][retriever].get(str(f))
            mb = result["corpus_bytes"][str(f)] / 1e6
            if run is not None:
                secs = " | ".join(_num(run["seconds"][p]) for p in PHASES)
                lines.append(f"| {retriever} {f}x | {mb:.1f} | {run['n_chunks']} | {secs} | {run['peak_bytes_max'] / GB:.2f} |")
            elif retriever == "faiss" and str(f) in result.get("extrapolated", {}):
                ex = result["extrapolated"][str(f)]
                secs = " | ".join(_num(ex["seconds"][p]) for p in PHASES)
                lines.append(f"| faiss {f}x (extrapolated) | {mb:.1f} | {ex['n_chunks']} | {secs} | — |")
    lines += ["", "| phase peak memory (GB) | " + " | ".join(p for p in PHASES if p != "embed") + " |", "|---|" + "---:|" * (len(PHASES) - 1)]
    for f in result["factors"]:
        for retriever in ("bm25", "faiss"):
            run = result["runs"][retriever].get(str(f))
            if run is not None:
                lines.append(f"| {retriever} {f}x | " + " | ".join(f"{run['peak_bytes'][p] / GB:.2f}" for p in PHASES if p != "embed") + " |")
    lines += ["", "| target | measured | limit | result |", "|---|---:|---:|---|"]
    for t in result["targets"]:
        lines.append(f"| {t['target']} | {_num(t['measured'], 3)} | ≤ {t['limit']:.3g} | {t['result']} ({t['note']}) |")
    return "\n".join(lines)
