"""Reproduce published results: the configurations of Chroma's chunking evaluation, side by side.

Smith & Troynikov, "Evaluating Chunking Strategies for Retrieval" (Chroma technical report,
2024) evaluate chunkers on their general benchmark with the ``chunking_evaluation``
package. :data:`CHROMA_CONFIGURATIONS` are that evaluation's configurations expressed as
our own options (``compatible=chroma`` chunkers, see :mod:`harness.chunkers.chroma`); each
one is run as an ordinary tracked run (:func:`harness.experiment.run.execute`: cached,
logged to MLflow, skipped when already FINISHED) with ``metrics.convention=chroma``, so both
conventions of precision, IoU and PrecisionΩ are logged (:mod:`harness.evaluation.metrics.chroma`).

As in the reference, every corpus of the dataset is indexed in **one** pooled index (each
corpus is one document of the dataset; a question can retrieve chunks of other corpora),
questions are embedded with the same model as the chunks (all-MiniLM-L6-v2 by default) and
the top ``k = 5`` chunks are scored. :func:`corpus_table` then splits the per-query values
by the corpus that holds each question's evidence.
"""

from __future__ import annotations

import contextlib
import math
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from harness.evaluation.stats import query_mean
from harness.params import Param

#: The reference's separators, as a Hydra override value (escapes decoded by the chunker config).
_SEPARATORS = '["\\n\\n","\\n",".","?","!"," ",""]'

#: The evaluation's configurations (name -> overrides): fixed and recursive token chunkers
#: (size/overlap in cl100k_base tokens), ClusterSemanticChunker (max size, 50-token pieces)
#: and KamradtModifiedChunker (target average size, 50-token pieces).
CHROMA_CONFIGURATIONS: dict[str, tuple[str, ...]] = {
    **{
        f"fixed {size}/{overlap}": (
            "chunker=fixed",
            "chunker.compatible=chroma",
            "chunker.tokenizer=cl100k_base",
            f"chunker.chunk_size={size}",
            f"chunker.chunk_overlap={overlap}",
        )
        for size, overlap in ((800, 400), (400, 200), (400, 0), (200, 0))
    },
    **{
        f"recursive {size}/{overlap}": (
            "chunker=recursive",
            "chunker.compatible=chroma",
            "chunker.tokenizer=cl100k_base",
            f"chunker.chunk_size={size}",
            f"chunker.chunk_overlap={overlap}",
            f"chunker.separators={_SEPARATORS}",
        )
        for size, overlap in ((800, 400), (400, 200), (400, 0), (200, 0))
    },
    **{
        f"cluster {size}": (
            "chunker=cluster_semantic",
            "chunker.compatible=chroma",
            "chunker.tokenizer=cl100k_base",
            f"chunker.max_chunk_size={size}",
            "chunker.piece_size=50",
        )
        for size in (200, 400)
    },
    "kamradt 300": (
        "chunker=semantic",
        "chunker.compatible=chroma",
        "chunker.tokenizer=cl100k_base",
        "chunker.breakpoint=percentile",
        "chunker.target_chunk_size=300",
    ),
}

#: The metric families of the table, ours and the reference's convention: (column, ours, chroma's).
FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("recall", "recall@{k}", "chroma_recall@{k}"),
    ("IoU", "iou@{k}", "chroma_iou@{k}"),
    ("precision", "precision@{k}", "chroma_precision@{k}"),
    ("PrecisionΩ", "precision_omega", "chroma_precision_omega"),
)

#: Row label of the values over every question of the dataset.
ALL = "all"


@dataclass
class Result:
    """One configuration's numbers.

    Attributes:
        name: configuration name (a key of :data:`CHROMA_CONFIGURATIONS`).
        run_id: the MLflow run the numbers come from.
        run_name: that run's name.
        skipped: True when the run was FINISHED before (nothing recomputed).
        chunks: chunks per corpus (document id) and under :data:`ALL`.
        values: ``{corpus or ALL: {metric name: mean over that corpus's questions}}``, the
            metric names as logged (``recall@5``, ``chroma_precision_omega``, ...).
        questions: questions per corpus and under :data:`ALL`.
    """

    name: str
    run_id: str
    run_name: str
    skipped: bool
    chunks: dict[str, int] = field(default_factory=dict)
    values: dict[str, dict[str, float]] = field(default_factory=dict)
    questions: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Plain data for ``json.dump``."""
        return {"name": self.name, "run_id": self.run_id, "run_name": self.run_name, "chunks": self.chunks, "questions": self.questions, "values": self.values}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Result:
        """The inverse of :meth:`to_json`."""
        return cls(
            data["name"], data["run_id"], data["run_name"], True, dict(data["chunks"]), {c: dict(v) for c, v in data["values"].items()}, dict(data["questions"])
        )


def base_overrides(dataset_path: str | Path, k: int = 5) -> list[str]:
    """Overrides shared by every configuration: the chroma-format dataset at ``dataset_path``
    (never downloaded), FAISS over all-MiniLM-L6-v2, both metric conventions, cut-off ``k``.

    Raises:
        ValueError: ``k`` is not an integer >= 1, or ``dataset_path`` has no ``questions.csv``
            and ``corpora/`` (the message names the path).
    """
    Param("k", "int", low=1).check(k)
    path = Path(dataset_path).expanduser().resolve()
    if not path.exists():
        raise ValueError(f"dataset path {path} does not exist: pass --dataset PATH, a chroma-format folder (questions.csv and corpora/*.md)")
    missing = [name for name, ok in (("questions.csv", (path / "questions.csv").is_file()), ("corpora/", (path / "corpora").is_dir())) if not ok]
    if missing:
        raise ValueError(f"dataset path {path} has no {' and no '.join(missing)}: expected a chroma-format folder (questions.csv and corpora/*.md)")
    ks = sorted({1, 3, 5, 10, k})
    return [
        "dataset=chroma_general",
        f"dataset.path={path}",
        f"dataset.name={path.name}",
        "dataset.download=false",
        "embedding=minilm",
        "retriever=faiss",
        "metrics.convention=chroma",
        f"metrics.ks=[{','.join(map(str, ks))}]",
        f"metrics.objective=recall@{k}",
    ]


#: Settings each configuration fixes: an extra override of one of them would change what is
#: reproduced without the table saying so, so :func:`check_extra` refuses it.
FIXED_SETTINGS = ("chunker", "dataset", "retriever", "metrics.convention", "metrics.ks", "metrics.objective", "resume")


def check_extra(extra: Sequence[str]) -> None:
    """Refuse extra overrides that are not ``key=value`` or that touch a setting the
    reproduction fixes (:data:`FIXED_SETTINGS`: the chunker, dataset, retriever, metric
    convention and cut-offs; use ``--dataset``, ``--k``, ``--only``, ``--rerun``). Tracking,
    cache, embedding and other settings pass through.

    Raises:
        ValueError: naming the override.
    """
    for item in extra:
        key = item.split("=", 1)[0].lstrip("+~")
        if "=" not in item or not key:
            raise ValueError(f"override {item!r}: expected key=value (e.g. tracking.uri=sqlite:////tmp/m.db)")
        if any(key == f or key.startswith(f + ".") for f in FIXED_SETTINGS):
            raise ValueError(
                f"override {item!r}: {key} is set by each reproduced configuration (the chunker, dataset, retriever and metric "
                "convention are the reference's); use --dataset, --k, --only or --rerun, or run harness run for other settings"
            )


def select(only: Sequence[str] | None) -> dict[str, tuple[str, ...]]:
    """The configurations named in ``only`` (all when None or empty), in table order.

    Raises:
        ValueError: a name that is not a configuration (with the closest one).
    """
    if not only:
        return dict(CHROMA_CONFIGURATIONS)
    import difflib

    for name in only:
        if name not in CHROMA_CONFIGURATIONS:
            close = difflib.get_close_matches(name, list(CHROMA_CONFIGURATIONS), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"unknown configuration {name!r}{hint} (known: {', '.join(CHROMA_CONFIGURATIONS)})")
    return {n: o for n, o in CHROMA_CONFIGURATIONS.items() if n in only}


def corpus_of(dataset) -> dict[str, str]:
    """Query id -> the document (corpus) that holds its evidence (the first evidence span's)."""
    return {q.query_id: q.evidence[0].doc_id for q in dataset.queries if q.evidence}


def split_by_corpus(per_query, corpora: dict[str, str], metrics: Sequence[str]) -> tuple[dict[str, dict[str, float]], dict[str, int]]:
    """Means of ``metrics`` over all questions and per corpus.

    Args:
        per_query: the run's per-query table (``query_id`` column plus one column per metric).
        corpora: query id -> corpus (:func:`corpus_of`).
        metrics: metric columns to average.

    Returns:
        ``(values, questions)``: ``{ALL or corpus: {metric: mean}}`` and the number of
        questions in each group.

    Raises:
        ValueError: a metric column is missing, or a query of the table has no corpus.
    """
    missing = [m for m in metrics if m not in per_query.columns]
    if missing:
        raise ValueError(f"per-query table has no column {missing[0]!r} (was the run made with metrics.convention=chroma?)")
    ids = per_query["query_id"].astype(str)
    unknown = [q for q in ids if q not in corpora]
    if unknown:
        raise ValueError(f"query {unknown[0]!r} of the run is not a question of the dataset")
    groups = ids.map(corpora)
    values = {ALL: {m: query_mean(per_query[m], m)[0] for m in metrics}}
    questions = {ALL: len(per_query)}
    for corpus in sorted(set(groups)):
        rows = per_query[groups == corpus]
        values[corpus] = {m: query_mean(rows[m], m)[0] for m in metrics}
        questions[corpus] = len(rows)
    return values, questions


def metric_columns(k: int) -> list[str]:
    """The per-query columns the table reads, ours then the reference's convention."""
    return [name.format(k=k) for _, ours, theirs in FAMILIES for name in (ours, theirs)]


def run_configuration(name: str, overrides: Sequence[str], base: Sequence[str], k: int, rerun: bool = False) -> Result:
    """Run (or find, when FINISHED before) one configuration and split its numbers by corpus.

    The run is an ordinary ``harness run`` (caches, MLflow, resume); the per-query table is
    read back from its ``per_query.csv`` artifact, so a skipped run gives the same numbers as
    a fresh one. Chunks per corpus come from the chunk set (read from the chunk cache when
    the run cached it).

    Raises:
        ValueError: the run FAILED before it could be scored, or its table lacks a metric.
    """
    from harness.evaluation.compare import CompareError
    from harness.experiment import build
    from harness.experiment.config import compose
    from harness.experiment.pipeline import chunk_corpus
    from harness.experiment.run import build_components, execute
    from harness.experiment.settings import metric_settings
    from harness.tracking.runs import load_run

    cfg = compose([*base, *overrides, *(["resume=false"] if rerun else [])])
    with contextlib.redirect_stdout(sys.stderr):  # each run's own summary: standard output keeps the one table
        result = execute(cfg)
    if result is None or "run_id" not in result or result.get("failed"):
        raise ValueError(f"{name}: the run did not finish: {result!r}")
    run_id = result["run_id"]
    ev = result.get("evaluation")
    dataset = build.build_dataset(cfg)
    if ev is not None:
        chunks = ev.chunks
    else:  # skipped: the chunk set from the cache (or chunked again; embeddings come from their cache)
        from harness.cache import Cache

        parts = build_components(cfg, metric_settings(cfg))
        cache_root = build.cache_dir(cfg)
        chunks, _ = chunk_corpus(dataset, parts.chunker, False, Cache(cache_root).chunks if cache_root else None, build.chunk_key_config(cfg, parts.encoder))
    counts: dict[str, int] = {ALL: len(chunks)}
    for c in chunks:
        counts[c.doc_id] = counts.get(c.doc_id, 0) + 1
    uri = _tracking_uri(cfg)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            logged = load_run(uri, run_id, tmp)
        except CompareError as exc:
            raise ValueError(f"{name}: {exc}") from exc
    values, questions = split_by_corpus(logged.per_query, corpus_of(dataset), metric_columns(k))
    return Result(name, run_id, logged.name, bool(result.get("skipped")), counts, values, questions)


def check_configuration(name: str, overrides: Sequence[str], base: Sequence[str]) -> None:
    """Compose one configuration and build its settings, chunker and retriever (cheap: no
    model, no data), so a misspelt override or a bad value fails before any run.

    Raises:
        ValueError: one line naming the configuration and the config layer's message.
    """
    from harness.experiment.config import compose
    from harness.experiment.run import build_components, prepare

    try:
        cfg = compose([*base, *overrides])
        settings = prepare(cfg)
        build_components(cfg, settings.metrics)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from exc
    except Exception as exc:  # Hydra's composition errors (a misspelt key or group) carry their own message
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{name}: {message}") from exc


def _tracking_uri(cfg) -> str:
    from harness.experiment.settings import RunSettings

    return RunSettings.from_config(cfg).tracking_uri


def reproduce(
    dataset_path: str | Path,
    k: int = 5,
    only: Sequence[str] | None = None,
    extra: Sequence[str] = (),
    rerun: bool = False,
    on_result: Callable[[Result], None] | None = None,
) -> list[Result]:
    """Run every selected configuration (:data:`CHROMA_CONFIGURATIONS`) on one dataset.

    Args:
        dataset_path: a chroma-format folder (``questions.csv`` + ``corpora/*.md``).
        k: rank cut-off of the table (the reference's default: 5).
        only: configuration names to run (None: all).
        extra: more Hydra overrides for every run (``tracking.uri=...``, ``cache.dir=...``).
        rerun: run again even when a FINISHED run exists (``resume=false``).
        on_result: called with each result as soon as it is known (progress, partial output).

    Returns:
        One :class:`Result` per configuration, in table order.

    Raises:
        ValueError: bad arguments, an override that touches a fixed setting
            (:func:`check_extra`) or a configuration that does not compose or build
            (:func:`check_configuration`), all before anything runs; or a failed run (runs
            finished before it stay logged and are skipped by the next call).
    """
    chosen = select(only)
    check_extra(extra)
    base = [*base_overrides(dataset_path, k), *extra]
    for name, overrides in chosen.items():  # every configuration composes and builds before anything runs
        check_configuration(name, overrides, base)
    out = []
    for name, overrides in chosen.items():
        res = run_configuration(name, overrides, base, k, rerun)
        out.append(res)
        if on_result is not None:
            on_result(res)
    return out


def _fmt(x: float | None) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.4f}"


def corpus_table(results: Sequence[Result], k: int = 5) -> str:
    """Markdown table: per configuration and corpus (:data:`ALL` first), chunks, questions
    and each family of :data:`FAMILIES` in our convention and the reference's."""
    head = ["configuration", "corpus", "chunks", "questions"]
    for label, _, _ in FAMILIES:
        head += [f"{label}", f"{label} (chroma)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 2 + "---:|" * (len(head) - 2)]
    for r in results:
        corpora = [ALL] + sorted(c for c in r.values if c != ALL)
        for i, corpus in enumerate(corpora):
            v = r.values[corpus]
            cells = [r.name if i == 0 else "", corpus, str(r.chunks.get(corpus, "")), str(r.questions.get(corpus, ""))]
            for _, ours, theirs in FAMILIES:
                cells += [_fmt(v.get(ours.format(k=k))), _fmt(v.get(theirs.format(k=k)))]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
