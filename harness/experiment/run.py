"""Entry point: ``python -m harness.run [overrides]`` runs one experiment and logs it to MLflow.

Examples::

    python -m harness.run                                   # defaults: kestrel_kb, recursive, faiss
    python -m harness.run chunker=semantic chunker.threshold=0.8
    python -m harness.run -m chunker=fixed,recursive chunker.chunk_size=200,400 retriever=faiss,bm25

Returns the objective metric (``metrics.objective``, default ``recall@5``) so Hydra
sweepers can optimise it. A configuration error is found before any MLflow run exists
(:func:`validate`; :class:`harness.experiment.errors.ConfigError`, one line); a run that
raises later is recorded in MLflow as FAILED with its error; in a multirun the remaining
jobs still run.

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
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from harness.evaluation.metrics import families as metric_families
from harness.evaluation.settings import MetricSettings, StatsSettings
from harness.experiment.settings import RunSettings, metric_settings, stats_settings
from harness.params import is_int
from harness.tracking.tracker import EXIT_BUSY  # noqa: E402, F401 - the exit code of a busy skip, documented here

if TYPE_CHECKING:  # annotations only: a run imports each component package when it builds it
    from harness.chunkers.base import Chunker
    from harness.embeddings.base import CachedEncoder
    from harness.evaluation.compression import Compressor
    from harness.retrievers.base import Retriever
    from harness.text.units import SizeCounter


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
    from harness.runtime import package_versions as versions

    return versions(TRACKED_PACKAGES)


@dataclass(frozen=True)
class Components:
    """The built parts of one run (:func:`build_components`).

    Attributes:
        encoder: the shared embedding backend, a :class:`harness.embeddings.base.CachedEncoder`
            (:class:`harness.embeddings.model.Encoder` by default; the model loads lazily).
        chunker: the :class:`harness.chunkers.base.Chunker`.
        retriever: the :class:`harness.retrievers.base.Retriever` (empty).
        compressor: the enabled :class:`harness.evaluation.compression.Compressor`, or None.
        context_counter: the :class:`harness.text.units.SizeCounter` of ``metrics.context_tokenizer``.

    The builders (:mod:`harness.experiment.build`) verify each class against its base, so
    the stages call the bases' declared contracts (``stats()``, ``run_tags()``,
    ``fetch_multiplier``, ...) directly.
    """

    encoder: CachedEncoder
    chunker: Chunker
    retriever: Retriever
    compressor: Compressor | None
    context_counter: SizeCounter

    @property
    def embeds(self) -> bool:
        """True when the retriever, the chunker or the compressor embeds text."""
        return bool(self.retriever.needs_encoder or self.chunker.needs_encoder or self.compressor is not None)


def execute(cfg: DictConfig) -> dict:
    """Run one configured experiment and log it; returns ``{"run_id", "metrics", "evaluation", "objective"}``.

    Stages (one function each): the tracking worker (:mod:`harness.tracking.worker`) is
    started first, so it imports MLflow on the other core meanwhile. :func:`validate` checks
    the whole configuration before any run exists: :func:`prepare` reads the settings,
    :func:`build_components` builds the chunker and retriever (cheap; the model loads
    later) and :func:`load_dataset` loads and verifies the dataset; whatever they refuse is
    raised as a one-line :class:`~harness.experiment.errors.ConfigError` and nothing is
    opened or logged. Then :func:`open_tracking` sends the tracking side of the job's start
    to the worker (look up the experiment; with ``resume`` true find a FINISHED run with
    this config hash; close stale RUNNING runs of this hash; open the MLflow run, a child of
    the sweep's parent run inside a multirun, see
    :func:`harness.tracking.callbacks.parent_for_job`). While the worker does that,
    :func:`run_pipeline` chunks, imports and loads the embedding model, embeds, indexes,
    searches and scores (:func:`harness.experiment.pipeline.evaluate`). Nothing is embedded
    (and for runs without embeddings nothing is chunked) before the worker has answered: a
    FINISHED run of the same configuration makes the job a skip (``"skipped": True``, see
    :func:`_skipped`, which prints the earlier run's results; in a sweep the parent run
    records it). Then :func:`log_run` logs and :func:`_print_summary` prints (inside a sweep
    one line per job). An exception after the run was opened marks it FAILED (KILLED for
    Ctrl-C / SIGTERM) with the error and is re-raised (:func:`_stopped`).

    Logged: params (flattened config without noise), metrics (the headline metrics, or every
    value with ``tracking.metrics=all``; ``recall_curve`` with ``step=k``; ``time.*_s``), the
    table ``metrics.json`` + ``metrics.csv`` with every value (every metric at every k, CIs,
    ``chunks.*``, ``diagnostics.*``, counters; see :func:`log_metrics`), tags (config hash,
    dataset, versions, chunking, ``harness.purpose``) and the dataset as an MLflow dataset input (name, digest = the
    dataset fingerprint, source = its path). Artifacts: ``config.yaml``, ``per_query.csv``
    and the MLflow table ``per_query.json``, ``chunk_stats.json``, ``miss_reasons.json``,
    ``results.txt``, ``chunk_sizes.png`` + ``chunk_sizes.json`` (histogram of characters
    and model tokens per chunk), ``recall_at_k.png`` (recall, precision, IoU against k)
    and ``chunks_sample.jsonl`` (:data:`SAMPLE_CHUNKS` chunks drawn with ``stats.seed``);
    with ``tracking.report`` also ``report.html``, ``chunks.jsonl.gz`` and ``ranking.jsonl.gz``.
    ``time.tracking_wait_s`` is how long the job waited for the worker's answer.

    Raises:
        harness.tracking.worker.RunBusy: the configuration is RUNNING in another live process
            (its run, pid and host are named; ``skip: <message>`` is printed first); nothing
            was run or logged.
        harness.experiment.errors.ConfigError: a ValueError naming the invalid setting
            (``resume`` not a boolean, see :mod:`harness.experiment.settings` and the
            builders); no run was opened.
        harness.tracking.worker.TrackingWorkerError: the tracking store could not be opened
            or written (e.g. an unreachable tracking server); the message is MLflow's.
    """
    t_start = time.perf_counter()
    from harness.experiment.errors import ConfigError
    from harness.tracking.worker import stop_unused_worker, worker

    worker()  # start the tracking worker now: it imports MLflow on the other core while the config is checked
    timings: dict[str, float] = {}
    try:
        run, settings, parts, dataset = validate(cfg, timings)
    except ConfigError:  # nothing opened, nothing logged: no need to wait for the worker at exit
        stop_unused_worker()
        raise
    opening = open_tracking(cfg, run)
    known_tags = component_tags(parts)  # tags known so far, set on a FAILED run too
    try:
        known_tags.update(encoder_tags(parts))
        known_tags.update(dataset_tags(dataset))
        # the first block the model embeds waits for the worker (a skip stops the job there);
        # with every vector cached the job goes on and learns about a skip at the latest when it logs
        parts.encoder.checkpoint = opening.wait
        parts.encoder.poll = opening.check
        opening.check()
        if not parts.embeds:
            opening.wait()  # nothing to overlap with: learn about a skip before any chunking
        ev = run_pipeline(cfg, dataset, parts, settings.metrics)
        tracker = opening.result()
    except BaseException as exc:
        return _stopped(exc, opening, known_tags, settings, run)
    finally:
        parts.encoder.checkpoint = parts.encoder.poll = None
    with tracker.closing():
        timings.update(ev.timings)
        timings["tracking_wait"] = opening.waited
        run_id = log_run(tracker, run, settings, parts, dataset, ev, known_tags, timings, t_start)
    embedding = embedding_line(parts.encoder.run_metrics()) if parts.embeds else None
    _print_summary(run.run_name, run.experiment, run.tracking_uri, run_id, ev, timings["total"], settings.metrics.objective, run.report, embedding)
    return {"run_id": run_id, "metrics": ev.metrics, "evaluation": ev, "objective": ev.metrics[settings.metrics.objective]}


def component_tags(parts: Components) -> dict[str, object]:
    """The run tags naming its components: ``chunker`` and ``retriever`` (their ``name``) and
    ``embedding`` (``<backend>/<model>``, e.g. ``sentence_transformers/all-MiniLM-L6-v2``;
    ``none`` for a run that embeds nothing: BM25 with a chunker without a model)."""
    return {
        "chunker": parts.chunker.name,
        "retriever": parts.retriever.name,
        "embedding": f"{parts.encoder.backend}/{parts.encoder.model_name}" if parts.embeds else "none",
    }


def encoder_tags(parts: Components) -> dict[str, str]:
    """The encoder's own run tags as resolved at run time (:meth:`CachedEncoder.run_tags
    <harness.embeddings.base.CachedEncoder.run_tags>`, e.g. ``embedding.precision``); ``{}``
    for a run that embeds nothing."""
    return parts.encoder.run_tags() if parts.embeds else {}


def validate(cfg: DictConfig, timings: dict[str, float]) -> tuple[RunSettings, "Settings", Components, Any]:
    """Check the whole configuration before any MLflow run is opened: the run, ``metrics`` and
    ``stats`` settings (:func:`prepare`), the chunker, retriever, embedding and compression
    constructors (:func:`build_components`; the model itself loads later), the embedding
    model or endpoint (the encoder's ``preflight``: resolved to a local folder, downloaded
    when it is not cached and the hub is reachable; an endpoint answering) and the dataset
    (:func:`load_dataset`: read and verified, ``timings["load"]`` in seconds).

    Returns:
        ``(run settings, settings, components, dataset)``.

    Raises:
        harness.experiment.errors.ConfigError: one line naming the setting, its value, what is
            allowed and, for a misspelt name, the closest known one; the original error is
            its ``__cause__``. Nothing was opened or logged.
    """
    with config_errors("config"):
        run = RunSettings.from_config(cfg)
        settings = prepare(cfg)
    parts = build_components(cfg, settings.metrics)
    if parts.embeds:  # model available offline, endpoint reachable, key set: before the dataset loads
        with config_errors("embedding", cfg.get("embedding")):
            parts.encoder.preflight()
    with config_errors("dataset", cfg.get("dataset")):
        dataset = load_dataset(cfg, timings)
    return run, settings, parts, dataset


@contextlib.contextmanager
def config_errors(group: str, node: Any = None):
    """Turn what building config group ``group`` raises (ValueError and its subclasses such as
    ``DatasetError``, TypeError, OSError, ImportError, OmegaConf and Hydra instantiation
    errors) into a one-line :class:`harness.experiment.errors.ConfigError`
    (:func:`harness.experiment.errors.from_exception`); other exceptions pass unchanged."""
    from hydra.errors import InstantiationException
    from omegaconf.errors import OmegaConfBaseException

    from harness.experiment.errors import ConfigError, from_exception

    try:
        yield
    except ConfigError:
        raise
    except (ValueError, TypeError, OSError, ImportError, OmegaConfBaseException, InstantiationException) as exc:
        raise from_exception(exc, group, node) from exc


@dataclass(frozen=True)
class Settings:
    """The settings of one run read from its config (:func:`prepare`)."""

    metrics: MetricSettings
    stats: StatsSettings


def prepare(cfg: DictConfig) -> Settings:
    """Read and validate the ``metrics`` and ``stats`` settings (nothing is built or loaded).

    Raises:
        ValueError: as :func:`harness.experiment.settings.metric_settings` / :func:`~harness.experiment.settings.stats_settings`.
    """
    return Settings(metrics=metric_settings(cfg), stats=stats_settings(cfg))


def open_tracking(cfg: DictConfig, run: RunSettings):
    """Send the job's ``open`` request to the tracking worker; returns the pending
    :class:`harness.tracking.worker.Opening` (everything it logs is plain data made here:
    the flattened params without ``paths`` and the noise of
    :func:`harness.tracking.tracker.logged_params`, the resolved YAML, the config hash, and
    the tags: package versions, ``chunk_size``/``chunk_overlap``/``chunk_unit``
    (:func:`harness.tracking.tracker.chunking_tags`) and ``harness.purpose`` when
    ``tracking.purpose`` is set). Its ``warm`` step, run by the worker once it has answered,
    imports what the run's figures and report need (:func:`harness.reporting.html.preload`)
    while the job computes."""
    from harness.experiment import build
    from harness.reporting.html import preload
    from harness.tracking.callbacks import parent_for_job
    from harness.tracking.tracker import PURPOSE_TAG, artifact_root_for, chunking_tags, flatten, logged_params
    from harness.tracking.worker import Opening

    wall_start = time.time()
    resolved = build.to_container(cfg)
    flat = flatten({k: v for k, v in resolved.items() if k != "paths"})
    tags = {f"version.{k}": v for k, v in package_versions().items()}
    tags.update(chunking_tags(flat))
    if run.purpose:
        tags[PURPOSE_TAG] = run.purpose
    return Opening(
        cwd=os.getcwd(),
        uri=run.tracking_uri,
        experiment=run.experiment,
        artifact_location=artifact_root_for(run.tracking_uri, build.PROJECT_ROOT),
        name=run.run_name,
        config_hash=build.config_hash(cfg),
        resume=run.resume,
        parent=parent_for_job(run.tracking_uri),
        params=logged_params(flat),
        config_yaml=OmegaConf.to_yaml(cfg, resolve=True),
        start_time=wall_start,
        tags=tags,
        warm=preload,
    )


def build_components(cfg: DictConfig, metrics: MetricSettings) -> Components:
    """Build the encoder (lazy), chunker, retriever, compressor and context-token counter.

    Raises:
        harness.experiment.errors.ConfigError: invalid chunker, retriever, embedding or
            compression parameters (the constructors name them; an unknown keyword gets the
            closest setting the constructor takes).
    """
    from harness.evaluation.compression import from_config as compressor_from_config
    from harness.experiment import build
    from harness.text.units import get_counter

    with config_errors("embedding", cfg.get("embedding")):
        encoder = build.build_encoder(cfg)
    with config_errors("chunker", cfg.get("chunker")):
        chunker = build.build_chunker(cfg, encoder)
    with config_errors("retriever", cfg.get("retriever")):
        retriever = build.build_retriever(cfg, encoder)
        check_retriever_depth(retriever, metrics)
    with config_errors("compression", cfg.get("compression")):
        # contextual compression after retrieval (None when off); bad settings fail here
        compressor = compressor_from_config(build.to_container(cfg.compression) if "compression" in cfg else None, encoder)
    with config_errors("metrics"):
        counter = get_counter("tokens", metrics.context_tokenizer)
    return Components(encoder, chunker, retriever, compressor, counter)


def check_retriever_depth(retriever, metrics: MetricSettings) -> None:
    """Refuse a retriever whose candidate count is below the deepest cut-off, before any data
    is loaded (``retriever.depth`` of hybrid, ``retriever.candidates`` of rerank; the run
    fetches at least ``max(metrics.ks)`` results per query, more for the token budgets, which
    the retriever itself checks when it searches).

    Raises:
        ValueError: naming the setting, its value and ``metrics.ks``.
    """
    for setting, value in (("depth", retriever.depth), ("candidates", retriever.candidates)):
        if is_int(value) and value < max(metrics.ks):
            raise ValueError(
                f"retriever.{setting}={value} is below the deepest cut-off max(metrics.ks)={max(metrics.ks)}: every query needs at least that many "
                f"results (more with metrics.budgets); raise retriever.{setting} or set it to null"
            )


def load_dataset(cfg: DictConfig, timings: dict[str, float]):
    """Load and verify ``cfg.dataset``; records ``timings["load"]`` (seconds)."""
    from harness.experiment import build
    from harness.experiment.phases import mark

    mark("load")
    t0 = time.perf_counter()
    dataset = build.build_dataset(cfg)
    timings["load"] = time.perf_counter() - t0
    return dataset


def dataset_tags(dataset) -> dict[str, object]:
    """The run tags that describe the dataset (name, fingerprint, source, sizes)."""
    return {
        "dataset": dataset.name,
        "dataset_fingerprint": dataset.fingerprint(),
        "dataset_source": dataset.source,
        "n_documents": len(dataset.documents),
        "n_queries": len(dataset.queries),
    }


def run_pipeline(cfg: DictConfig, dataset, parts: Components, metrics: MetricSettings):
    """Chunk (through the chunk cache), index, retrieve and score: :func:`harness.experiment.pipeline.evaluate`
    with the run's counters and caches; returns its :class:`~harness.experiment.pipeline.Evaluation`."""
    from harness.cache import Cache
    from harness.experiment import build
    from harness.experiment.pipeline import EvaluationTools, evaluate

    encoder, chunker, retriever = parts.encoder, parts.chunker, parts.retriever
    cache_root = build.cache_dir(cfg)
    tools = EvaluationTools(
        context_tokenizer=parts.context_counter,
        context_token_counter=parts.context_counter.count,
        chunk_token_counter=encoder.count_tokens,
        max_seq_length=encoder.max_seq_length if retriever.needs_encoder or chunker.needs_encoder else None,
        token_spans=encoder.token_spans,
        special_tokens=int(encoder.special_tokens),
        chunk_cache=Cache(cache_root).chunks if cache_root else None,
        chunker_config=build.chunk_key_config(cfg, encoder),  # escapes decoded: keyed by what the chunker does
        compressor=parts.compressor,
    )
    return evaluate(dataset, chunker, retriever, metrics, tools, progress=bool(cfg.embedding.show_progress))


def _stopped(exc: BaseException, opening, known_tags: dict[str, object], settings: Settings, run: RunSettings) -> dict:
    """Handle an exception raised after the run was requested, before it could be logged;
    returns a skip result or raises.

    A skip (a FINISHED run of this configuration) returns :func:`_skipped`'s result, also
    when the job failed meanwhile (resume wins, as when the lookup came first; not for
    Ctrl-C / SIGTERM). A busy configuration prints ``skip: <message>`` and re-raises.
    Otherwise the error is recorded on the job's run (FAILED, or KILLED for Ctrl-C /
    SIGTERM, with the tags known so far) and re-raised; when the store could not be opened
    either, the job's error stands.
    """
    from harness.tracking.worker import RunBusy, RunSkipped

    if isinstance(exc, RunSkipped):
        return _skipped(exc.finished, settings.metrics.objective, run)
    if isinstance(exc, RunBusy):  # the configuration runs in another live process: nothing was opened
        print(f"skip: {exc}")
        sys.stdout.flush()
        raise exc
    try:
        tracker = opening.result()
    except RunSkipped as skip:
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise exc from None
        return _skipped(skip.finished, settings.metrics.objective, run)
    except BaseException:  # noqa: BLE001 - the store could not be opened either: the job's error stands
        raise exc from None
    if known_tags:
        with contextlib.suppress(Exception):
            tracker.set_tags(known_tags)
    tracker.fail(exc)
    raise exc


def log_run(tracker, run: RunSettings, settings: Settings, parts: Components, dataset, ev, known_tags, timings, t_start: float) -> str:
    """Log tags, the dataset input, every metric group, the artifacts and ``time.*_s``; returns the run id.

    With ``tracking.report`` (default true) also ``report.html``, ``chunks.jsonl.gz`` and
    ``ranking.jsonl.gz`` (:func:`harness.experiment.report.log_report`). ``timings``
    (seconds per phase) gets ``report`` (building the report in this process; its upload
    is in ``log``), ``log`` (this function, the worker's writes included) and ``total``
    (since ``t_start``, a ``time.perf_counter()`` value).
    """
    from harness.experiment.phases import mark

    mark("log")
    t0 = time.perf_counter()
    tracker.set_tags({**known_tags, "degenerate_chunking": str(ev.degenerate).lower()})
    report = getattr(dataset, "load_report", None)
    if report is not None:  # what the loader dropped: skipped files, queries without evidence, unlocated excerpts
        tracker.log_text(report.summary(50), "load_report.txt")
    tracker.log_dataset(_queries_frame(dataset), name=dataset.name, digest=dataset.fingerprint(), source=dataset.source)
    cis = confidence_intervals(ev, settings.stats) if settings.stats.bootstrap > 0 else {}
    log_metrics(tracker, metric_groups(ev, parts, report, settings, cis), run, settings)
    log_artifacts(tracker, ev, parts.encoder, settings, run.run_name)
    if run.report:  # report.html with chunks.jsonl.gz and ranking.jsonl.gz (harness.experiment.report)
        from harness.experiment.report import log_report

        t_report = time.perf_counter()
        log_report(tracker, run.run_name, run.experiment, ev, dataset, parts, {**known_tags, **dataset_tags(dataset)}, cis, settings.stats.confidence)
        timings["report"] = time.perf_counter() - t_report
    tracker.flush()  # the worker has written everything above: the log phase includes its writes
    timings["log"] = time.perf_counter() - t0
    timings["total"] = time.perf_counter() - t_start
    mark("end")
    tracker.log_metrics({f"time.{k}_s": v for k, v in timings.items()})
    return tracker.run_id


def log_metrics(tracker, groups: list[tuple[dict, int]], run: RunSettings, settings: Settings) -> None:
    """Log the step-0 values of ``groups`` (:func:`metric_groups`) as the table
    ``metrics.json`` (+ ``metrics.csv``, every digit) and, as MLflow metrics, the headline ones (``tracking.metrics=headline``)
    or all of them (``all``), with the series of the later steps (``recall_curve``) in the
    same batch; see :mod:`harness.tracking.headline`."""
    from harness.tracking.headline import METRICS_CSV, METRICS_TABLE, metrics_table, split

    values: dict[str, float] = {}
    for group, step in groups:
        if step == 0:
            values.update(group)
    check_ranges(values)
    m = settings.metrics
    to_log, headline = split(values, run.metrics_mode, m.ks, m.budgets, m.objective)
    tracker.log_metric_groups([(to_log, 0), *[(g, step) for g, step in groups if step != 0]])
    table = metrics_table(values, headline)
    tracker.log_table(table, METRICS_TABLE)
    tracker.log_dataframe_csv(table, METRICS_CSV)


#: Slack allowed at a documented bound for floating-point rounding (a mean of ones may be 1 + 2e-16).
RANGE_SLACK = 1e-9


def check_ranges(values: dict[str, float]) -> None:
    """Refuse to log a value outside its documented range (docs/metrics.md; the bounds are
    :func:`harness.evaluation.metrics.value_bounds`): such a value is a bug, never a result.

    Args:
        values: ``{name: value}`` as the run is about to log them (names as the metric
            registry writes them, ``recall@5``, or MLflow keys). A name with no documented
            range is left to the test suite, which requires every name a run logs to be documented.

    Raises:
        harness.types.NonFiniteError: one line naming the value, its range and what to do;
            raised before anything of the run's metrics is logged (the run ends FAILED).
    """
    from harness.evaluation.metrics import value_bounds
    from harness.types import NonFiniteError

    for name, value in values.items():
        try:
            lo, hi = value_bounds(name)
        except ValueError:
            continue
        if not (lo - RANGE_SLACK <= value <= hi + RANGE_SLACK):
            raise NonFiniteError(
                f"metric {name} = {value!r} is outside its documented range [{lo}, {hi}] (docs/metrics.md): refused, not logged; please report it"
            )


def metric_groups(ev, parts: Components, report, settings: Settings, cis: dict[str, float] | None = None) -> list[tuple[dict, int]]:
    """Every metric of the run as ``(metrics, step)`` groups for one MLflow batch.

    Step 0: the mean metrics, ``cache.*`` (embedded texts, embedding-cache hits, chunk-set
    hit), ``chunks.*``, ``ties.crossing_at_<k>`` (queries whose top-k set the tie rule
    decides, :func:`harness.evaluation.diagnostics.crossing_ties`), ``dataset.*`` dropped-record counts (with a load report), the
    strategy's own counters (``chunker.stats()``, e.g. ``llm.calls``) and the bootstrap CIs
    (``cis`` when given, else :func:`confidence_intervals`); then ``recall_curve`` at ``step=k`` for each k.
    """
    encoder = parts.encoder
    groups: list[tuple[dict, int]] = [
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
        (dict(getattr(ev, "ties", {})), 0),  # ties.crossing_at_<k>: queries whose top-k set the tie rule decides
    ]
    groups.append((encoder.run_metrics(), 0))  # embedding.*: texts embedded, cache hits, over the window (+ tokens, cost for APIs)
    if report is not None:  # every dropped-record count, e.g. dataset.queries_without_evidence (0 when none)
        dropped = {"skipped_files": 0, "queries_without_evidence": 0, **report.counts}
        groups.append(({f"dataset.{k}": v for k, v in dropped.items()}, 0))
    groups.append((parts.chunker.stats(), 0))  # strategy counters, e.g. llm.calls / llm.rejected_replies ({} for most)
    groups.append((parts.retriever.stats(), 0))  # retriever counters, e.g. rerank.pairs_scored / rerank.pairs_over_limit
    if settings.stats.bootstrap > 0:
        groups.append((confidence_intervals(ev, settings.stats) if cis is None else cis, 0))
    groups += [({"recall_curve": ev.metrics[f"recall@{k}"]}, k) for k in settings.metrics.ks]  # one series against step=k
    return groups


def confidence_intervals(ev, stats: StatsSettings) -> dict[str, float]:
    """Bootstrap confidence intervals of every mean metric with a numeric per-query column
    (``recall_at_5_ci_low`` / ``_ci_high``; see :func:`harness.evaluation.stats.metric_cis`)."""
    from pandas.api.types import is_numeric_dtype

    from harness.evaluation.stats import metric_cis

    means = [m for m in ev.metrics if m in ev.per_query.columns and is_numeric_dtype(ev.per_query[m])]
    return metric_cis(ev.per_query, means, n_resamples=stats.bootstrap, confidence=stats.confidence, seed=stats.seed)


def log_artifacts(tracker, ev, encoder, settings: Settings, title: str) -> None:
    """Log ``miss_reasons.json``, ``per_query.csv``, the table ``per_query.json``, the figures,
    ``chunks_sample.jsonl`` (drawn with ``stats.seed``), ``chunk_stats.json`` and ``results.txt``."""
    from harness.evaluation.diagnostics import reason_counts

    ks = list(settings.metrics.ks)
    tracker.log_text(_json({str(k): v for k, v in reason_counts(ev.miss_reasons, ks).items()}), "miss_reasons.json")
    tracker.log_dataframe_csv(ev.per_query, "per_query.csv")
    tracker.log_table(ev.per_query, "per_query.json")
    _log_figures(tracker, ev, ks, encoder, title)
    tracker.log_text(chunk_sample(ev.chunks, SAMPLE_CHUNKS, settings.stats.seed), "chunks_sample.jsonl")
    tracker.log_text(_json(ev.chunk_stats), "chunk_stats.json")
    tracker.log_text(_results_text(ev), "results.txt")


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
    """Log ``chunk_sizes.png`` + ``chunk_sizes.json`` and ``recall_at_k.png``, drawn by
    :func:`harness.reporting.charts.run_figures` (handed to the tracker, which runs it in the
    tracking worker: :meth:`harness.tracking.tracker.Tracker.log_rendered`)."""
    import functools

    from harness.reporting.charts import run_figures

    chars = [c.n_chars for c in ev.chunks]
    tokens = ev.chunk_tokens if ev.chunk_tokens is not None else (encoder.count_tokens([c.text for c in ev.chunks]) if ev.chunks else [])
    metrics = {k: float(v) for k, v in ev.metrics.items() if isinstance(v, (int, float))}
    tracker.log_rendered(functools.partial(run_figures, chars, [int(t) for t in tokens], encoder.max_seq_length, metrics, list(ks), title))


def _skipped(finished: dict, objective: str, run: RunSettings) -> dict:
    """Result of a job skipped because a FINISHED MLflow run has its config hash.

    Prints ``skip: finished as run <id>``, then, on its own, the earlier run's results as it
    printed them (its logged ``results.txt``; the headline metrics when it has none) or,
    inside a sweep, one line with the job's headline metrics (:func:`job_line`).

    Args:
        finished: ``{"run_id", "run_name", "metrics": {MLflow key: value}, "results": text or
            None}`` of that run (see :class:`harness.tracking.worker.RunSkipped`).
        objective: ``metrics.objective`` (e.g. ``recall@5``).
        run: the job's run settings (experiment, tracking URI, run name).

    Returns:
        ``{"run_id", "metrics", "evaluation": None, "objective", "skipped": True}``, with
        ``metrics`` every value the run recorded under MLflow keys (``recall_at_5``,
        ``map_at_5``: its MLflow metrics and its ``metrics.json`` table,
        :func:`harness.tracking.runs.metrics_of`).

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
    name = finished.get("run_name") or run.run_name
    position = sweep_position()
    if position is not None:
        print(job_line(position, name, logged, objective, logged.get("time.total_s"), status="skipped", run_id=run_id))
    else:
        stats = {k[len("chunks.") :]: v for k, v in logged.items() if k.startswith("chunks.")}
        print(f"\nrun {name}  (experiment {run.experiment!r}): the results it logged; resume=false runs it again")
        if "n_chunks" in stats and "chars_mean" in stats:
            print(_chunk_line(stats))
        print(finished.get("results") or headline(logged, objective))
        print(f"MLflow run id: {run_id}")
        print(f"tracking URI:  {run.tracking_uri}\n")
    sys.stdout.flush()
    return {"run_id": run_id, "metrics": logged, "evaluation": None, "objective": logged[key], "skipped": True}


def headline_names(objective: str) -> list[str]:
    """The metrics a one-line summary shows: the objective, then recall, precision, context
    precision and IoU at the objective's cut-off (the registry's ``listed`` families; k = 5
    when it has none), each once."""
    k = objective.rsplit("@", 1)[1] if "@" in objective and objective.rsplit("@", 1)[1].isdigit() else "5"
    names = [objective] + [f"{family}@{k}" for family in metric_families("listed")]
    return list(dict.fromkeys(names))


def headline(metrics: dict, objective: str) -> str:
    """``"recall@5 0.7219  precision@5 0.0277 ..."``: :func:`headline_names` found in ``metrics``,
    whose keys are metric names (``recall@5``) or their MLflow keys (``recall_at_5``)."""
    from harness.evaluation.metrics import mlflow_key

    parts = []
    for name in headline_names(objective):
        value = metrics.get(name, metrics.get(mlflow_key(name)))
        if isinstance(value, (int, float)):
            parts.append(f"{name} {value:.4f}")
    return "  ".join(parts)


def job_line(position: tuple[int, int | None], name: str, metrics: dict, objective: str, seconds, status: str = "done", run_id: str = "") -> str:
    """One line for a sweep job that ended: ``job 2/4 done: fixed-128-0-bm25  recall@5 0.6459
    precision@5 0.0390 ...  15.7 s  run 1fe76a79`` (``status`` ``done`` or ``skipped``;
    ``seconds`` the job's time, omitted when None; the run id cut to 8 characters)."""
    num, total = position
    tail = [f"{float(seconds):.1f} s"] if isinstance(seconds, (int, float)) else []
    if run_id:
        tail.append(f"run {run_id[:8]}")
    return f"job {num}/{total or '?'} {status}: {name}  {headline(metrics, objective)}" + (f"  ({', '.join(tail)})" if tail else "")


def note_invalid_job(cfg: DictConfig, run_name: str, message: str) -> None:
    """Record a sweep job refused for an invalid configuration on the sweep's parent run
    (tag ``sweep.invalid.<job>``; the sweep summary lists it as INVALID). Best effort: a
    job outside a sweep, or a store that cannot be written, records nothing (a line on
    stderr says why for the latter)."""
    from harness.tracking.callbacks import parent_for_job
    from harness.tracking.tracker import artifact_root_for
    from harness.tracking.worker import TrackingWorkerError, note_invalid

    try:
        run = RunSettings.from_config(cfg)
    except Exception:  # noqa: BLE001 - the tracking settings themselves are invalid: nowhere to record
        return
    parent = parent_for_job(run.tracking_uri)
    if parent is None:
        return
    from harness.experiment import build

    try:
        note_invalid(
            cwd=os.getcwd(),
            uri=run.tracking_uri,
            experiment=run.experiment,
            artifact_location=artifact_root_for(run.tracking_uri, build.PROJECT_ROOT),
            parent=parent[0],
            job=parent[1],
            run_name=run_name,
            message=message,
        )
    except TrackingWorkerError as exc:
        print(f"could not record the invalid job on sweep parent run {parent[0]}: {exc}", file=sys.stderr)


def sweep_position() -> tuple[int, int | None] | None:
    """``(job number from 1, sweep size or None)`` inside a Hydra multirun job, else None.

    The size is the sweep plan's job count (:func:`harness.tracking.callbacks.plan_sweep`),
    which the sweep's parent wrote to ``<hydra.sweep.dir>/mlflow_sweep.json`` before any job
    started; without that file it is planned again from the sweep's ``multirun.yaml``
    (:func:`harness.tracking.callbacks.count_jobs`). None under another sweeper, when
    neither file is readable (a Ray worker on another machine) or when the plan could not
    enumerate an override (``glob(...)`` without Hydra's config loader): unknown, never a guess.
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
        from harness.tracking.callbacks import PARENT_FILE, count_jobs

        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            with open(os.path.join(hc.sweep.dir, PARENT_FILE), encoding="utf-8") as fh:
                planned = json.load(fh)["jobs"]
            return num, None if planned is None else int(planned)
        saved = OmegaConf.load(os.path.join(hc.sweep.dir, "multirun.yaml"))
        return num, count_jobs(saved.hydra)
    except Exception:  # noqa: BLE001 - the progress line must never fail a job
        return num, None


def _results_text(ev) -> str:
    """Mean metrics as text: the rank cut-off table, the budget table, PrecisionΩ and, when
    the run computed them (``metrics.convention=chroma``), Chroma's conventions below ours."""
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
    chroma = ev.table(families=metric_families("table", convention="chroma"))
    if not chroma.empty:
        parts.append(chroma.to_string(float_format=fmt))
    if "chroma_precision_omega" in ev.metrics:
        parts.append(f"chroma_precision_omega  {ev.metrics['chroma_precision_omega']:.4f}")
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


def _chunk_line(stats: dict) -> str:
    """``chunks: 170, mean 742 chars / 199 model tokens; 0 exceed the model's 256-token window``
    from chunk statistics (``n_chunks``, ``chars_mean``, optionally ``tokens_mean``, ``n_truncated``, ``max_seq_length``)."""
    return (
        f"chunks: {int(stats['n_chunks'])}, mean {stats['chars_mean']:.0f} chars"
        + (f" / {stats['tokens_mean']:.0f} model tokens" if "tokens_mean" in stats else "")
        + (
            f"; {int(stats['n_truncated'])} exceed the model's {int(stats['max_seq_length'])}-token window"
            if "n_truncated" in stats and "max_seq_length" in stats
            else ""
        )
    )


def embedding_line(counters: dict[str, float]) -> str:
    """``embedding: 12 texts embedded, 30 from the cache, 2 shared (same model input after truncation)``
    from the encoder's ``embedding.*`` counters (:meth:`harness.embeddings.base.CachedEncoder.run_metrics`)."""
    return (
        f"embedding: {int(counters.get('embedding.texts_embedded', 0))} texts embedded, {int(counters.get('embedding.cache_hits', 0))} from the cache, "
        f"{int(counters.get('embedding.texts_shared', 0))} shared (same model input after truncation)"
    )


def ties_warning(ties: dict[str, float]) -> str | None:
    """One warning line when some query's top-k set is decided by the tie rule, else None.

    ``WARNING ties.crossing_at_5=3, ties.crossing_at_10=1: queries whose chunks at ranks k
    and k+1 score exactly alike; which of them is inside the top k (and so the metrics at k)
    is decided by the tie rule (document id, then start and end offset), not by the retriever``
    """
    crossing = {name: int(n) for name, n in ties.items() if n}
    if not crossing:
        return None
    counts = ", ".join(f"{name}={n}" for name, n in crossing.items())
    return (
        f"WARNING {counts}: queries whose chunks at ranks k and k+1 score exactly alike; which of them is inside the top k "
        "(and so the metrics at k) is decided by the tie rule (document id, then start and end offset), not by the retriever"
    )


def _print_summary(name, experiment, uri, run_id, ev, seconds: float, objective: str = "recall@5", report: bool = False, embedding: str | None = None) -> None:
    """Print the run's results: the whole table (after the chunk line and ``embedding``, the
    :func:`embedding_line` of a run that embeds), or inside a sweep one line (:func:`job_line`)."""
    position = sweep_position()
    if position is not None:
        print(job_line(position, name, ev.metrics, objective, seconds, run_id=run_id))
        if ev.degenerate:
            print("WARNING degenerate_chunking=true: every document fits in one chunk; this run compares whole documents")
        tie_line = ties_warning(getattr(ev, "ties", {}))
        if tie_line:
            print(tie_line)
        sys.stdout.flush()
        return
    print(f"\nrun {name}  (experiment {experiment!r})")
    print(_chunk_line(ev.chunk_stats))
    if embedding:
        print(embedding)
    print(_results_text(ev))
    if ev.degenerate:
        print("WARNING degenerate_chunking=true: every document fits in one chunk; this run compares whole documents")
    tie_line = ties_warning(getattr(ev, "ties", {}))
    if tie_line:
        print(tie_line)
    print(f"MLflow run id: {run_id}")
    print(f"tracking URI:  {uri}")
    if report:
        print(f"report:        artifact report.html of the run (or: harness report {run_id})")
    print()
    sys.stdout.flush()
