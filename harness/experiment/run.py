"""Entry point: ``python -m harness.run [overrides]`` runs one experiment and logs it to MLflow.

Examples::

    python -m harness.run                                   # defaults: kestrel_kb, recursive, faiss
    python -m harness.run chunker=semantic chunker.threshold=0.8
    python -m harness.run -m chunker=fixed,recursive chunker.chunk_size=200,400 retriever=faiss,bm25

Returns the objective metric (``metrics.objective``, default ``recall@5``) so Hydra
sweepers can optimise it. A run that raises is recorded in MLflow as FAILED with its error;
in a multirun the remaining jobs still run.

Resume (``resume: true``, the default): a job whose config hash already has a FINISHED run
in the experiment does no work; it prints ``skip: finished as run <id>`` and returns that
run's logged objective. ``resume=false`` runs it again. A configuration is never run twice
at once: a job whose config hash has a RUNNING run of a live process (same host and pid, or
on another host a heartbeat under 15 minutes old) does no work, prints ``skip: this
configuration ... is already RUNNING as run <id> (...; pid <pid> on host <host>, ...)`` and
exits with code 75 (:data:`EXIT_BUSY`; in a multirun the sweep goes on, records the job on
its parent and exits 75 at the end). RUNNING runs of the hash whose process is gone are
closed as KILLED with the tag ``harness.stale=true`` (see
:meth:`harness.tracking.tracker.Tracker.claim`). In a multirun each job prints its place, e.g.
``job 3/12: recursive-400-0-faiss``.

MLflow: every run logs params, metrics, tags and artifacts (see :func:`execute`). A multirun
gets one parent run with each job's run nested under it (:mod:`harness.tracking.callbacks`); a
single run has no parent.

Parallel and cluster sweeps use Hydra launchers::

    python -m harness.run -m hydra/launcher=joblib hydra.launcher.n_jobs=2 chunker.chunk_size=200,400
    python -m harness.run -m hydra/launcher=ray_local chunker.chunk_size=200,400
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

from omegaconf import DictConfig, OmegaConf  # noqa: E402

from harness.experiment.build import register_resolvers  # noqa: E402
from harness.tracking.tracker import EXIT_BUSY  # noqa: E402, F401 - the exit code of a busy skip, documented here

register_resolvers()

#: Packages whose versions are recorded as tags on every run.
TRACKED_PACKAGES = (
    "harness",
    "torch",
    "sentence-transformers",
    "transformers",
    "faiss-cpu",
    "rank-bm25",
    "bm25s",
    "langchain-text-splitters",
    "hydra-core",
    "mlflow",
    "numpy",
    "pandas",
    "tiktoken",
    "blingfire",
)


def package_versions() -> dict[str, str]:
    """Installed versions of :data:`TRACKED_PACKAGES` (``"missing"`` when absent)."""
    from harness.tracking.tracker import package_versions as versions

    return versions(TRACKED_PACKAGES)


def check_metrics_config(
    ks,
    relevance_fraction: float,
    objective: str,
    context_tokenizer: str,
    relevance: str = "overlap_fraction",
    budgets=(),
    level: str = "chunk",
    budget_depth=None,
) -> None:
    """Validate the ``metrics`` config group before any work.

    Raises:
        ValueError: ``metrics.ks`` empty or with a value < 1; ``metrics.relevance_fraction``
            outside [0, 1]; ``metrics.relevance`` not a known rule; ``metrics.budgets`` with
            a value < 1; ``metrics.budget_depth`` < 1; ``metrics.level`` not chunk/document;
            ``metrics.objective`` not a registered metric name, its k not in
            ``metrics.ks``, its budget not in ``metrics.budgets`` or a ``doc_*`` metric
            without ``metrics.level=document``; ``metrics.context_tokenizer`` unknown.
    """
    from harness.text.units import TIKTOKEN_OFFLINE
    from harness.evaluation.metrics import parse_name
    from harness.evaluation.metrics.ranking import check_relevance

    if not ks or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in ks):
        raise ValueError(f"metrics.ks must be a non-empty list of integers >= 1, got {list(ks)!r}")
    if not 0.0 <= relevance_fraction <= 1.0:
        raise ValueError(f"metrics.relevance_fraction must be in [0, 1], got {relevance_fraction!r}")
    check_relevance(relevance, relevance_fraction)
    if any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in budgets):
        raise ValueError(f"metrics.budgets must be a list of integers >= 1, got {list(budgets)!r}")
    if budget_depth is not None and (isinstance(budget_depth, bool) or not isinstance(budget_depth, int) or budget_depth < 1):
        raise ValueError(f"metrics.budget_depth must be an integer >= 1 or null, got {budget_depth!r}")
    if level not in ("chunk", "document"):
        raise ValueError(f"metrics.level must be 'chunk' or 'document', got {level!r}")
    try:
        parsed = parse_name(objective)
    except ValueError as exc:
        raise ValueError(f"metrics.objective: {exc}") from exc
    if parsed.k is not None and parsed.k not in ks:
        raise ValueError(f"metrics.objective={objective!r} needs k={parsed.k} in metrics.ks={list(ks)}")
    if parsed.budget is not None and parsed.budget not in budgets:
        raise ValueError(f"metrics.objective={objective!r} needs {parsed.budget} in metrics.budgets={list(budgets)}")
    if parsed.family.level == "document" and level != "document":
        raise ValueError(f"metrics.objective={objective!r} needs metrics.level=document")
    allowed = ["model", *TIKTOKEN_OFFLINE]
    if context_tokenizer not in allowed:
        raise ValueError(f"metrics.context_tokenizer must be one of {allowed}, got {context_tokenizer!r}")


def execute(cfg: DictConfig) -> dict:
    """Run one configured experiment and log it; returns ``{"run_id", "metrics", "evaluation", "objective"}``.

    Order: send the tracking side of the job's start to this process's tracking worker
    (:mod:`harness.tracking.worker`: look up the experiment; with ``resume`` true find a
    FINISHED run with this config hash; close stale RUNNING runs of this hash; open the
    MLflow run, a child of the sweep's parent run inside a multirun, see
    :func:`harness.tracking.callbacks.parent_for_job`). While the worker does that on the other core,
    validate and build the chunker and retriever (cheap; bad parameters fail here, before
    any model or dataset is loaded), load and verify the dataset, chunk, and import and
    load the embedding model. Nothing is embedded (and for runs without embeddings nothing
    is chunked) before the worker has answered: a FINISHED run of the same configuration
    makes the job a skip (``"skipped": True``, see :func:`_skipped`; in a sweep the parent
    run records it). Then embed, index, search, score and log. Any exception marks the
    MLflow run FAILED (KILLED for Ctrl-C / SIGTERM) with the error and is re-raised.

    Logged: params (flattened config), metrics (every metric at every k, ``recall_curve``
    with ``step=k``, CIs, ``chunks.*``, ``diagnostics.*``, ``time.*_s``), tags (config hash,
    dataset, versions) and the dataset as an MLflow dataset input (name, digest = the
    dataset fingerprint, source = its path). Artifacts: ``config.yaml``, ``per_query.csv``
    and the MLflow table ``per_query.json``, ``chunk_stats.json``, ``miss_reasons.json``,
    ``results.txt``, ``chunk_sizes.png`` + ``chunk_sizes.json`` (histogram of characters
    and model tokens per chunk), ``recall_at_k.png`` (recall, precision, IoU against k)
    and ``chunks_sample.jsonl`` (:data:`SAMPLE_CHUNKS` chunks drawn with ``stats.seed``).
    ``time.tracking_wait_s`` is how long the job waited for the worker's answer.

    Raises:
        harness.tracking.worker.RunBusy: the configuration is RUNNING in another live process
            (its run, pid and host are named; ``skip: <message>`` is printed first); nothing
            was run or logged.
        ValueError: ``resume`` is not a boolean; any config error (see the builders).
        harness.tracking.worker.TrackingWorkerError: the tracking store could not be opened
            or written (e.g. an unreachable tracking server); the message is MLflow's.
    """
    from harness.experiment import build
    from harness.tracking.callbacks import parent_for_job
    from harness.text.units import HFTokenCounter, get_counter
    from harness.evaluation.diagnostics import reason_counts
    from harness.experiment.pipeline import evaluate
    from harness.tracking.tracker import artifact_root_for, flatten, resolve_tracking_uri
    from harness.tracking.worker import Opening, RunBusy, RunSkipped

    t_start = time.perf_counter()
    wall_start = time.time()
    resolved = build.to_container(cfg)
    ks = list(cfg.metrics.ks)
    objective = str(cfg.metrics.objective)

    uri = resolve_tracking_uri(cfg.tracking.uri, build.PROJECT_ROOT)
    experiment = cfg.tracking.experiment or cfg.dataset.name
    name = cfg.tracking.run_name or build.run_name(cfg)
    resume = cfg.get("resume", True)
    if not isinstance(resume, bool):
        raise ValueError(f"resume must be true or false, got {resume!r}")
    # Everything the worker logs at the start is plain data made here.
    opening = Opening(
        cwd=os.getcwd(),
        uri=uri,
        experiment=experiment,
        artifact_location=artifact_root_for(uri, build.PROJECT_ROOT),
        name=name,
        config_hash=build.config_hash(cfg),
        resume=resume,
        parent=parent_for_job(uri),
        params=flatten({k: v for k, v in resolved.items() if k != "paths"}),
        config_yaml=OmegaConf.to_yaml(cfg, resolve=True),
        start_time=wall_start,
        tags={f"version.{k}": v for k, v in package_versions().items()},
    )
    encoder = None
    timings: dict[str, float] = {}
    known_tags: dict[str, object] = {}  # tags known so far, set on a FAILED run too
    try:
        # Fail fast on bad parameters, before any model or dataset is loaded; the error
        # is still recorded on this job's (FAILED) run.
        budgets = [int(b) for b in cfg.metrics.get("budgets", [])]
        check_metrics_config(
            ks,
            float(cfg.metrics.relevance_fraction),
            objective,
            str(cfg.metrics.context_tokenizer),
            relevance=str(cfg.metrics.get("relevance", "overlap_fraction")),
            budgets=budgets,
            level=str(cfg.metrics.get("level", "chunk")),
            budget_depth=cfg.metrics.get("budget_depth"),
        )
        n_boot = int(cfg.stats.bootstrap)
        if n_boot < 0:
            raise ValueError(f"stats.bootstrap must be an integer >= 0 (0 = no confidence intervals), got {n_boot}")
        if not 0.0 < float(cfg.stats.confidence) < 1.0:
            raise ValueError(f"stats.confidence must be in (0, 1), got {cfg.stats.confidence}")
        encoder = build.build_encoder(cfg)
        chunker = build.build_chunker(cfg, encoder)
        retriever = build.build_retriever(cfg, encoder)
        from harness.evaluation.compression import from_config as compressor_from_config

        # contextual compression after retrieval (None when off); bad settings fail here
        compressor = compressor_from_config(build.to_container(cfg.compression) if "compression" in cfg else None, encoder)
        context_counter = get_counter("tokens", str(cfg.metrics.context_tokenizer))
        known_tags = {"chunker": chunker.name, "retriever": retriever.name}
        # the first block the model embeds waits for the worker (a skip stops the job there)
        encoder.checkpoint = opening.wait
        t0 = time.perf_counter()
        dataset = build.build_dataset(cfg)
        timings["load"] = time.perf_counter() - t0
        known_tags.update(
            {
                "dataset": dataset.name,
                "dataset_fingerprint": dataset.fingerprint(),
                "dataset_source": dataset.source,
                "n_documents": len(dataset.documents),
                "n_queries": len(dataset.queries),
            }
        )
        opening.check()
        if not (retriever.needs_encoder or chunker.needs_encoder or compressor is not None):
            opening.wait()  # nothing to overlap with: learn about a skip before any chunking
        model_tokens = HFTokenCounter(str(encoder.model_path / "tokenizer.json"))
        from harness.cache import Cache

        cache_root = build.cache_dir(cfg)
        ev = evaluate(
            dataset,
            chunker,
            retriever,
            ks=ks,
            relevance_fraction=float(cfg.metrics.relevance_fraction),
            context_token_counter=context_counter.count,
            chunk_token_counter=encoder.count_tokens,
            max_seq_length=encoder.max_seq_length if retriever.needs_encoder or chunker.needs_encoder else None,
            progress=bool(cfg.embedding.show_progress),
            relevance=str(cfg.metrics.get("relevance", "overlap_fraction")),
            budgets=budgets,
            context_tokenizer=context_counter,
            budget_depth=cfg.metrics.get("budget_depth"),
            level=str(cfg.metrics.get("level", "chunk")),
            token_spans=lambda text: model_tokens.atoms(text).spans,
            chunk_cache=Cache(cache_root).chunks if cache_root else None,
            chunker_config=build.chunker_config(cfg),  # escapes decoded: keyed by what the chunker does
            compressor=compressor,
        )
        tracker = opening.result()
    except RunSkipped as skip:
        return _skipped(skip.finished, objective)
    except RunBusy as busy:  # the configuration runs in another live process: nothing was opened
        print(f"skip: {busy}")
        sys.stdout.flush()
        raise
    except BaseException as exc:
        try:
            tracker = opening.result()
        except RunSkipped as skip:
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            return _skipped(skip.finished, objective)  # resume wins, as when the lookup came first
        except BaseException:  # noqa: BLE001 - the store could not be opened either: the job's error stands
            raise exc from None
        if known_tags:
            with contextlib.suppress(Exception):
                tracker.set_tags(known_tags)
        tracker.fail(exc)
        raise
    finally:
        if encoder is not None:
            encoder.checkpoint = None
    with tracker.closing():
        timings.update(ev.timings)
        timings["tracking_wait"] = opening.waited
        t0 = time.perf_counter()
        tracker.set_tags({**known_tags, "degenerate_chunking": str(ev.degenerate).lower()})
        report = getattr(dataset, "load_report", None)
        if report is not None:  # what the loader dropped: skipped files, queries without evidence, unlocated excerpts
            tracker.log_text(report.summary(50), "load_report.txt")
        tracker.log_dataset(_queries_frame(dataset), name=dataset.name, digest=dataset.fingerprint(), source=dataset.source)
        groups: list[tuple[dict, int]] = [  # one MLflow batch for all of them
            (ev.metrics, 0),
            (
                {
                    "cache.embedded_texts": encoder.n_encoded,
                    "cache.embedding_hits": encoder.n_cache_hits,
                    "cache.chunks_cached": ev.cache.get("chunks_cached", 0.0),
                },
                0,
            ),
            ({f"chunks.{k}": v for k, v in ev.chunk_stats.items()}, 0),
        ]
        if report is not None:  # every dropped-record count, e.g. dataset.queries_without_evidence (0 when none)
            dropped = {"skipped_files": 0, "queries_without_evidence": 0, **report.counts}
            groups.append(({f"dataset.{k}": v for k, v in dropped.items()}, 0))
        if hasattr(chunker, "stats"):  # strategy counters, e.g. llm.calls / llm.rejected_replies
            groups.append((chunker.stats(), 0))
        if n_boot > 0:  # bootstrap confidence intervals of every mean metric, e.g. recall_at_5_ci_low
            from pandas.api.types import is_numeric_dtype

            from harness.evaluation.stats import metric_cis

            means = [m for m in ev.metrics if m in ev.per_query.columns and is_numeric_dtype(ev.per_query[m])]
            groups.append((metric_cis(ev.per_query, means, n_resamples=n_boot, confidence=float(cfg.stats.confidence), seed=int(cfg.stats.seed)), 0))
        groups += [({"recall_curve": ev.metrics[f"recall@{k}"]}, k) for k in ks]  # the recall@k curve: one series against step=k
        tracker.log_metric_groups(groups)
        tracker.log_text(_json({str(k): v for k, v in reason_counts(ev.miss_reasons, ks).items()}), "miss_reasons.json")
        tracker.log_dataframe_csv(ev.per_query, "per_query.csv")
        tracker.log_table(ev.per_query, "per_query.json")
        _log_figures(tracker, ev, ks, encoder, name)
        tracker.log_text(chunk_sample(ev.chunks, SAMPLE_CHUNKS, int(cfg.stats.seed)), "chunks_sample.jsonl")
        tracker.log_text(_json(ev.chunk_stats), "chunk_stats.json")
        tracker.log_text(_results_text(ev), "results.txt")
        tracker.flush()  # the worker has written everything above: the log phase includes its writes
        timings["log"] = time.perf_counter() - t0
        timings["total"] = time.perf_counter() - t_start
        tracker.log_metrics({f"time.{k}_s": v for k, v in timings.items()})
        run_id = tracker.run_id
    _print_summary(name, experiment, uri, run_id, ev)
    return {"run_id": run_id, "metrics": ev.metrics, "evaluation": ev, "objective": ev.metrics[objective]}


#: Chunks stored per run in ``chunks_sample.jsonl``.
SAMPLE_CHUNKS = 20


def _queries_frame(dataset):
    """The labelled queries as a DataFrame (query_id, text, evidence as JSON ``[[doc_id, start, end], ...]``)
    for MLflow's dataset tracking."""
    import json

    import pandas as pd

    return pd.DataFrame(
        {
            "query_id": [q.query_id for q in dataset.queries],
            "text": [q.text for q in dataset.queries],
            "evidence": [json.dumps([[e.doc_id, e.start, e.end] for e in q.evidence]) for q in dataset.queries],
        }
    )


def chunk_sample(chunks, n: int = SAMPLE_CHUNKS, seed: int = 0) -> str:
    """JSON Lines of ``n`` chunks drawn without replacement with ``random.Random(seed)``, in
    their original order (all chunks when there are at most ``n``).

    Each line: ``index`` (position in the chunk list), ``chunk_id``, ``doc_id``, ``spans``
    (``[[start, end], ...]``, half-open code points), ``n_chars``, ``parent_id``,
    ``metadata`` and ``text`` (the embedded text).

    Raises:
        ValueError: ``n`` < 0.
    """
    import json
    import random

    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    picked = sorted(random.Random(seed).sample(range(len(chunks)), min(n, len(chunks))))
    lines = []
    for i in picked:
        c = chunks[i]
        record = {
            "index": i,
            "chunk_id": c.chunk_id,
            "doc_id": c.doc_id,
            "spans": [list(span) for span in c.spans],
            "n_chars": c.n_chars,
            "parent_id": c.parent_id,
            "metadata": dict(c.metadata or {}),
            "text": c.text,
        }
        lines.append(json.dumps(record, ensure_ascii=False, default=str))
    return "".join(line + "\n" for line in lines)


def _log_figures(tracker, ev, ks, encoder, title: str) -> None:
    """Log ``chunk_sizes.png`` + ``chunk_sizes.json`` and ``recall_at_k.png`` (drawn by the
    tracker, see :meth:`harness.tracking.tracker.Tracker.log_run_figures`)."""
    chars = [c.n_chars for c in ev.chunks]
    tokens = ev.chunk_tokens if ev.chunk_tokens is not None else (encoder.count_tokens([c.text for c in ev.chunks]) if ev.chunks else [])
    metrics = {k: float(v) for k, v in ev.metrics.items() if isinstance(v, (int, float))}
    tracker.log_run_figures(chars, [int(t) for t in tokens], encoder.max_seq_length, metrics, list(ks), title)


def _skipped(finished: dict, objective: str) -> dict:
    """Result of a job skipped because a FINISHED MLflow run has its config hash.

    Args:
        finished: ``{"run_id": str, "metrics": {MLflow key: value}}`` of that run (see
            :class:`harness.tracking.worker.RunSkipped`).
        objective: ``metrics.objective`` (e.g. ``recall@5``).

    Returns:
        ``{"run_id", "metrics", "evaluation": None, "objective", "skipped": True}``, with
        ``metrics`` the run's logged metrics under their MLflow keys (``recall_at_5``).

    Raises:
        ValueError: the finished run has no logged value for ``metrics.objective``.
    """
    from harness.evaluation.metrics import mlflow_key

    run_id = finished["run_id"]
    print(f"skip: finished as run {run_id}")
    sys.stdout.flush()
    logged = dict(finished["metrics"])
    key = mlflow_key(objective)
    if key not in logged:
        raise ValueError(f"metrics.objective={objective!r}: finished run {run_id} logged no {key!r}; rerun with resume=false")
    return {"run_id": run_id, "metrics": logged, "evaluation": None, "objective": logged[key], "skipped": True}


def sweep_position() -> tuple[int, int | None] | None:
    """``(job number from 1, sweep size or None)`` inside a Hydra multirun job, else None.

    The size is counted from the sweep's ``multirun.yaml`` (written by Hydra's basic
    sweeper in ``hydra.sweep.dir`` before any job starts) as the product of the lengths of
    its discrete sweeps; it is None under another sweeper, when that file is not readable
    (a Ray worker on another machine) or when an override cannot be parsed without the
    config loader (``glob(...)``).
    """
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return None
    hc = HydraConfig.get()
    if hc.mode != RunMode.MULTIRUN:
        return None
    num = int(hc.job.num) + 1
    try:
        from harness.tracking.callbacks import count_jobs

        saved = OmegaConf.load(os.path.join(hc.sweep.dir, "multirun.yaml"))
        return num, count_jobs(saved.hydra)
    except Exception:  # noqa: BLE001 - the progress line must never fail a job
        return num, None


def _results_text(ev) -> str:
    """Mean metrics as text: the rank cut-off table, the budget table, PrecisionΩ."""
    fmt = lambda v: f"{v:.4f}"  # noqa: E731
    parts = [ev.table().to_string(float_format=fmt)]
    budget = ev.budget_table()
    if not budget.empty:
        parts.append(budget.to_string(float_format=fmt))
    compressed = _compression_table(ev.metrics)
    if compressed:
        parts.append(compressed)
    if "precision_omega" in ev.metrics:
        parts.append(f"precision_omega  {ev.metrics['precision_omega']:.4f}")
    return "\n\n".join(parts)


def _compression_table(metrics: dict) -> str:
    """Contextual-compression metrics (``compressed.recall@5``, ...) as a k-by-metric text table, or ``""``."""
    import re

    rows: dict[str, dict[int, float]] = {}
    for name, value in metrics.items():
        m = re.fullmatch(r"(compressed\.\w+|compression\.\w+)@(\d+)", name)
        if m:
            rows.setdefault(m.group(1), {})[int(m.group(2))] = value
    if not rows:
        return ""
    ks = sorted({k for r in rows.values() for k in r})
    width = max(len(r) for r in rows)
    lines = [" " * width + "".join(f"{'@' + str(k):>11}" for k in ks)]
    for row, values in rows.items():
        lines.append(row.ljust(width) + "".join(f"{values[k]:>11.4f}" if k in values else " " * 11 for k in ks))
    return "\n".join(lines)


def _json(obj) -> str:
    import json

    return json.dumps(obj, indent=2, sort_keys=True, default=float)


def _print_summary(name, experiment, uri, run_id, ev) -> None:
    table = _results_text(ev)
    stats = ev.chunk_stats
    print(f"\nrun {name}  (experiment {experiment!r})")
    print(
        f"chunks: {int(stats['n_chunks'])}, mean {stats['chars_mean']:.0f} chars"
        + (f" / {stats['tokens_mean']:.0f} model tokens" if "tokens_mean" in stats else "")
        + (f"; {int(stats['n_truncated'])} exceed the model's {int(stats['max_seq_length'])}-token window" if "n_truncated" in stats else "")
    )
    print(table)
    if ev.degenerate:
        print("WARNING degenerate_chunking=true: every document fits in one chunk; this run compares whole documents")
    print(f"MLflow run id: {run_id}")
    print(f"tracking URI:  {uri}\n")
    sys.stdout.flush()
