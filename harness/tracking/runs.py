"""Reading logged runs back, and adding to a finished run: the MLflow reads of the project.

Every caller outside :mod:`harness.tracking` that needs something from the tracking store
comes here: the experiment name of a config (:func:`experiment_name`), the runs of an
experiment (:func:`search_runs`, every page), one run (:func:`get_run`,
:func:`find_run_by_name`), a run's ``per_query.csv`` (:func:`load_run`), the listing table
of ``harness compare`` (:func:`list_runs`), every value a run recorded (:func:`run_metrics`:
its MLflow metrics and its ``metrics.json`` table), and tags, metrics and text added to a run that
already ended (:func:`annotate_run`, used by the release gate and the Optuna search).

Runs come back as :class:`RunRecord`, plain data with no MLflow object inside, so the
layers above never touch MLflow's entities. Every client call goes through
:class:`~harness.tracking.tracker.SignalSafeClient`: a Ctrl-C during a write is delivered
when the call returns, so it cannot leave a SQLite store locked for the writes that follow
(the KILLED status of the interrupted run).

Errors: an unknown experiment raises :class:`UnknownExperiment` (it lists the experiments
that exist), an unknown run :class:`UnknownRun`, an invalid search filter
:class:`InvalidFilter` (a ``ValueError``), and any other failure of the store
(unreachable server, broken database) :class:`TrackingStoreError`.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from harness.params import Param, check_all
from harness.tracking.tracker import MAX_PARAMS_PER_BATCH, MAX_TAG_VALUE, PURPOSE_TAG, SWEEP_TAG, SignalSafeClient, store_lock

#: MLflow's page size limit for run searches; :func:`search_runs` follows the pages.
PAGE_SIZE = 1000


class TrackingStoreError(RuntimeError):
    """The tracking store failed (unreachable server, broken database); the message names its URI."""


class UnknownExperiment(LookupError):
    """No experiment of that name in the store.

    Attributes:
        name: the name asked for.
        existing: names of the experiments the store holds, sorted.
    """

    def __init__(self, name: str, existing: Sequence[str]) -> None:
        self.name, self.existing = name, list(existing)
        super().__init__(f"no experiment named {name!r} in the tracking store; experiments there: {self.existing}")


class UnknownRun(LookupError):
    """No run with that id (or id prefix) in the store."""


class AmbiguousRun(UnknownRun):
    """A run id prefix that more than one run's id starts with; the message names them."""


def match_prefix(prefix: str, run_ids: Sequence[str]) -> str:
    """The one id of ``run_ids`` that is ``prefix`` or starts with it.

    An id equal to ``prefix`` wins outright (a whole id is never ambiguous); otherwise the
    prefix must be shared by exactly one id.

    Raises:
        UnknownRun: no id starts with ``prefix``.
        AmbiguousRun: two or more do (one line: their count and up to five of them, sorted).
    """
    if prefix in run_ids:
        return prefix
    matches = sorted({i for i in run_ids if i.startswith(prefix)})
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise UnknownRun(f"no run id starts with {prefix!r}")
    shown = ", ".join(matches[:5]) + (", ..." if len(matches) > 5 else "")
    raise AmbiguousRun(f"run id prefix {prefix!r} is ambiguous: {len(matches)} runs match ({shown}); give more characters")


class InvalidFilter(ValueError):
    """A search filter MLflow rejects.

    Attributes:
        query: the filter string sent to MLflow.
        detail: MLflow's message.
    """

    def __init__(self, query: str, detail: str) -> None:
        self.query, self.detail = query, detail
        super().__init__(f"invalid MLflow search filter {query!r}: {detail}")


@dataclass(frozen=True)
class RunRecord:
    """One logged run as plain data.

    Attributes:
        run_id: MLflow run id (hex).
        name: run name (the id when the run has none).
        experiment_id: id of its experiment.
        status: ``FINISHED``, ``RUNNING``, ``FAILED``, ``KILLED`` or ``SCHEDULED``.
        start_time: start as Unix time in milliseconds (0 when unknown).
        params: logged params, name -> string value.
        metrics: latest value of each logged metric, MLflow key (``recall_at_5``) -> float.
        tags: run tags, name -> string value.
        artifact_uri: where the run's artifacts are stored (``file:///...`` for a local store).
    """

    run_id: str
    name: str
    experiment_id: str
    status: str
    start_time: int
    params: Mapping[str, str] = field(default_factory=dict)
    metrics: Mapping[str, float] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)
    artifact_uri: str = ""


def experiment_name(cfg: Any) -> str:
    """The MLflow experiment a config's runs are logged to: ``tracking.experiment`` when set
    (not null, not empty), else ``dataset.name``.

    The one statement of this rule; the run, a sweep's parent, the release gate, the Optuna
    search and ``harness compare`` all call it.

    Args:
        cfg: the composed project config (anything with ``cfg.tracking.experiment`` and
            ``cfg.dataset.name`` attributes, e.g. an OmegaConf ``DictConfig``).
    """
    return str(cfg.tracking.experiment or cfg.dataset.name)


def open_client(uri: str) -> SignalSafeClient:
    """An MLflow client of the store ``uri`` whose calls hold back Ctrl-C and SIGTERM
    (:class:`~harness.tracking.tracker.SignalSafeClient`)."""
    from harness.runtime import long_lived

    with long_lived("mlflow"):  # as in Tracker: MLflow's modules stay for the whole process
        import mlflow

    return SignalSafeClient(mlflow.MlflowClient(uri))


@contextlib.contextmanager
def _store_errors(uri: str) -> Iterator[None]:
    """Turn an ``MlflowException`` of the body into :class:`TrackingStoreError` (filter errors
    into :class:`InvalidFilter` where the caller raised them)."""
    from mlflow.exceptions import MlflowException

    try:
        yield
    except MlflowException as exc:
        raise TrackingStoreError(f"tracking store {uri}: {exc.message}") from exc


def prepare_store(uri: str) -> None:
    """Create (and on first use migrate) the store ``uri`` now, one process at a time for a
    SQLite store, so that a later timed step does not pay for it.

    Raises:
        TrackingStoreError: the store cannot be opened.
    """
    with store_lock(uri), _store_errors(uri):
        open_client(uri).search_experiments(max_results=1)


def _record(run: Any) -> RunRecord:
    info, data = run.info, run.data
    return RunRecord(
        run_id=info.run_id,
        name=info.run_name or info.run_id,
        experiment_id=info.experiment_id,
        status=info.status,
        start_time=int(info.start_time or 0),
        params=dict(data.params),
        metrics=dict(data.metrics),
        tags=dict(data.tags),
        artifact_uri=str(info.artifact_uri or ""),
    )


def experiment_id(uri: str, experiment: str) -> str:
    """Id of the experiment called ``experiment``.

    Raises:
        UnknownExperiment: no such experiment (the message lists those that exist).
        TrackingStoreError: the store failed.
    """
    client = open_client(uri)
    with _store_errors(uri):
        exp = client.get_experiment_by_name(experiment)
        if exp is None:
            raise UnknownExperiment(experiment, sorted(e.name for e in client.search_experiments()))
    return exp.experiment_id


def search_runs(
    uri: str,
    experiment: str,
    filter_string: str = "",
    order_by: Sequence[str] | None = None,
    max_results: int | None = None,
) -> list[RunRecord]:
    """Active (not deleted) runs of ``experiment`` matching ``filter_string``, following
    MLflow's pages until ``max_results`` runs (None: all of them).

    Args:
        uri: tracking URI.
        experiment: experiment name.
        filter_string: MLflow search syntax, e.g. ``"tags.chunker = 'fixed' and
            attributes.status = 'FINISHED'"``; empty for every run.
        order_by: MLflow order clauses, e.g. ``["attributes.start_time DESC"]`` (default:
            MLflow's, newest first).
        max_results: at most this many runs (>= 1), or None.

    Raises:
        UnknownExperiment: no experiment of that name.
        InvalidFilter: MLflow rejects the filter or an order clause.
        TrackingStoreError: the store failed.
        ValueError: ``max_results`` < 1.
    """
    from mlflow.entities import ViewType
    from mlflow.exceptions import MlflowException

    Param("max_results", "int", low=1, allow_none=True, none="{} or None").check(max_results)
    exp_id = experiment_id(uri, experiment)
    client = open_client(uri)
    runs: list[RunRecord] = []
    token = None
    with _store_errors(uri):
        while max_results is None or len(runs) < max_results:
            size = PAGE_SIZE if max_results is None else min(PAGE_SIZE, max_results - len(runs))
            try:
                page = client.search_runs(
                    [exp_id],
                    filter_string=filter_string,
                    run_view_type=ViewType.ACTIVE_ONLY,
                    max_results=size,
                    order_by=list(order_by or []) or None,
                    page_token=token,
                )
            except MlflowException as exc:
                if exc.error_code == "INVALID_PARAMETER_VALUE":  # bad filter syntax, unknown attribute
                    raise InvalidFilter(filter_string, exc.message) from exc
                raise
            runs.extend(_record(r) for r in page)
            token = page.token
            if not token:
                break
    return runs


def get_run(uri: str, run_id: str) -> RunRecord:
    """The run ``run_id``: a whole MLflow run id (32 hex characters) or any prefix of one
    that no other active run's id (in any experiment of the store) starts with, such as the
    8-character ids the sweep table and ``harness compare`` show. Every command that takes
    a run id from a user reads it here; callers use the returned record's full ``run_id``.

    Raises:
        UnknownRun: no run with that id and none whose id starts with it.
        AmbiguousRun: a prefix shared by several runs (the message names them).
        TrackingStoreError: the store failed otherwise.
    """
    return _record(_fetch(open_client(uri), uri, run_id))


def _fetch(client: Any, uri: str, run_id: str) -> Any:
    """The MLflow run ``run_id`` (a whole id or a unique prefix of one): the one place a run
    id from a user is looked up (:func:`get_run`, :func:`run_metrics`)."""
    from mlflow.exceptions import MlflowException

    if not str(run_id).strip():
        raise UnknownRun("a run id must not be empty; give an MLflow run id or a unique prefix of one")
    try:
        return client.get_run(run_id)
    except MlflowException as exc:
        if exc.error_code not in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            raise TrackingStoreError(f"tracking store {uri}: {exc.message}") from exc
        not_found = exc.message
    try:
        full = match_prefix(str(run_id), _all_run_ids(client, uri))
    except AmbiguousRun as exc:
        raise AmbiguousRun(f"{exc} in the tracking store {uri}") from None
    except UnknownRun:
        raise UnknownRun(f"run {run_id!r} not found in the tracking store {uri}: {not_found}; no run id starts with it either") from None
    with _store_errors(uri):
        return client.get_run(full)


def _all_run_ids(client: Any, uri: str) -> list[str]:
    """Ids of the active runs of every experiment in the store (deleted experiments included), all pages."""
    from mlflow.entities import ViewType

    ids: list[str] = []
    with _store_errors(uri):
        exp_ids = [e.experiment_id for e in client.search_experiments(view_type=ViewType.ALL)]
        token = None
        while exp_ids:
            page = client.search_runs(exp_ids, run_view_type=ViewType.ACTIVE_ONLY, max_results=PAGE_SIZE, page_token=token)
            ids.extend(r.info.run_id for r in page)
            token = page.token
            if not token:
                break
    return ids


def find_run_by_name(uri: str, experiment: str, run_name: str) -> RunRecord | None:
    """The newest active run called ``run_name`` in ``experiment``, or None (also when the
    experiment does not exist).

    Raises:
        ValueError: ``run_name`` holds a single quote (not expressible in the filter used).
        TrackingStoreError: the store failed.
    """
    if "'" in run_name:
        raise ValueError(f"run_name must not contain a single quote, got {run_name!r}")
    try:
        runs = search_runs(uri, experiment, f"tags.`mlflow.runName` = '{run_name}'", order_by=["attributes.start_time DESC"], max_results=1)
    except UnknownExperiment:
        return None
    return runs[0] if runs else None


def download_artifact(uri: str, run_id: str, artifact_path: str, dest_dir: str | Path) -> Path:
    """Copy the artifact ``artifact_path`` of run ``run_id`` into ``dest_dir``; returns the local path.

    Raises:
        TrackingStoreError: the run has no such artifact, or the store failed (MLflow's message kept).
    """
    Path(dest_dir).mkdir(parents=True, exist_ok=True)
    try:
        return Path(open_client(uri).download_artifacts(run_id, artifact_path, str(dest_dir)))
    except Exception as exc:  # MlflowException, or OSError from a file store
        raise TrackingStoreError(f"run {run_id}: artifact {artifact_path!r} not available from {uri}: {exc}") from exc


def artifact_text(uri: str, run_id: str, artifact_path: str) -> str | None:
    """The text (UTF-8) of run ``run_id``'s artifact ``artifact_path``; None when the run has
    no such artifact or it cannot be read (e.g. a run logged with ``tracking.report=false``
    has no ``report.html``)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        try:
            return download_artifact(uri, run_id, artifact_path, tmp).read_text(encoding="utf-8")
        except (TrackingStoreError, OSError, UnicodeDecodeError):
            return None


def _has_table(tags: Mapping[str, str], artifact_file: str) -> bool:
    """Whether the run's ``mlflow.loggedArtifacts`` tag (set by ``log_table``) lists ``artifact_file``."""
    import json

    try:
        return any(isinstance(a, dict) and a.get("path") == artifact_file for a in json.loads(tags.get("mlflow.loggedArtifacts") or "[]"))
    except ValueError:
        return False


@contextlib.contextmanager
def _quiet_download() -> Iterator[None]:
    """No MLflow download progress bar on stderr for the body (unless the user's environment sets one)."""
    import os

    name = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"
    if name in os.environ:
        yield
        return
    os.environ[name] = "false"
    try:
        yield
    finally:
        os.environ.pop(name, None)


def metrics_of(client: Any, run: Any) -> dict[str, float]:
    """Every value of an MLflow run (an ``mlflow.entities.Run`` read with ``client``): its MLflow
    metrics merged with its :data:`harness.tracking.headline.METRICS_TABLE` table, under
    MLflow keys. See :func:`run_metrics`; this form serves callers that hold a client and a
    run already (the tracking worker, a sweep's parent).

    Raises:
        TrackingStoreError: the run lists the table but it cannot be read.
    """
    import tempfile

    import pandas as pd

    from harness.tracking.headline import METRICS_CSV, METRICS_TABLE, table_values

    metrics = dict(run.data.metrics)
    if not _has_table(run.data.tags, METRICS_TABLE):
        return metrics  # a run logged before the table existed logged every value as a metric
    try:  # the CSV copy: MLflow writes tables' JSON with 10 decimals, the CSV keeps every digit
        with tempfile.TemporaryDirectory() as tmp, _quiet_download():
            local = client.download_artifacts(run.info.run_id, METRICS_CSV, tmp)
            stored = pd.read_csv(local, keep_default_na=False, na_values=[""])
        values = table_values(list(stored.columns), stored.astype(object).where(stored.notna(), None).to_numpy().tolist())
    except Exception as exc:  # MlflowException, OSError, a damaged file
        raise TrackingStoreError(f"run {run.info.run_id}: cannot read its {METRICS_CSV} table: {type(exc).__name__}: {exc}") from exc
    return {**values, **metrics}


def run_metrics(uri: str, run_id: str) -> dict[str, float]:
    """Every value run ``run_id`` recorded, under MLflow keys: the one reader of a run's numbers.

    A run logs a short list of headline metrics as MLflow metrics and every value (headline
    ones included, with bootstrap CI bounds) in the table ``metrics.json``
    (:mod:`harness.tracking.headline`). This returns the union, keyed as MLflow keys:
    ``recall_at_5``, ``map_at_10``, ``recall_at_5_ci_low`` / ``_ci_high``, ``chunks.n_chunks``,
    ``diagnostics.missed_at_5``, ``time.total_s``, ``recall_curve`` (its value at the last
    step) and any metric added to the run later (``gate.*``). For a run logged before the
    table existed (or with ``tracking.metrics=all``) the MLflow metrics alone already hold
    every value. Where both hold a key, the MLflow metric wins (they are equal when logged
    by a run).

    Raises:
        UnknownRun: no run with that id (or unique id prefix, as :func:`get_run`).
        TrackingStoreError: the store failed, or the run lists its table but it cannot be read.
    """
    client = open_client(uri)
    return metrics_of(client, _fetch(client, uri, run_id))


def with_all_metrics(uri: str, record: RunRecord) -> RunRecord:
    """``record`` with ``metrics`` replaced by :func:`run_metrics` (read only when the run has a
    metrics table; otherwise ``record`` itself)."""
    import dataclasses

    from harness.tracking.headline import METRICS_TABLE

    if not _has_table(record.tags, METRICS_TABLE):
        return record
    return dataclasses.replace(record, metrics={**run_metrics(uri, record.run_id), **record.metrics})


def load_run(uri: str, run_id: str, workdir: str | Path):
    """A run's tags and its ``per_query.csv`` artifact as a
    :class:`harness.evaluation.compare.LoggedRun` (``query_id`` read as text).

    Args:
        uri: tracking URI.
        run_id: MLflow run id.
        workdir: folder the artifact is downloaded into (``<workdir>/<run_id>/``).

    Raises:
        harness.evaluation.compare.CompareError: unknown run id, the run has no
            ``per_query.csv`` (e.g. it FAILED before scoring), or the table has no
            ``query_id`` column.
    """
    import pandas as pd

    from harness.evaluation.compare import PER_QUERY_ARTIFACT, CompareError, LoggedRun

    try:
        run = get_run(uri, run_id)
    except (UnknownRun, TrackingStoreError) as exc:
        raise CompareError(f"run {run_id!r} not found in the tracking store: {exc}") from exc
    run_id = run.run_id  # a prefix given by the user, resolved
    try:
        local = download_artifact(uri, run_id, PER_QUERY_ARTIFACT, Path(workdir) / run_id)
    except TrackingStoreError as exc:
        raise CompareError(
            f"run {run.name} ({run_id}) has no {PER_QUERY_ARTIFACT} artifact (status {run.status}); only finished runs can be compared: {exc}"
        ) from exc
    table = pd.read_csv(local, dtype={"query_id": str}, keep_default_na=False, na_values=[""])
    if "query_id" not in table.columns:
        raise CompareError(f"run {run.name} ({run_id}): {PER_QUERY_ARTIFACT} has no query_id column")
    return LoggedRun(run_id, run.name, run.tags.get("dataset_fingerprint"), table)


def tag_filter(tags: Sequence[str]) -> str:
    """MLflow filter clauses for ``KEY=VALUE`` strings, joined with ``and``.

    ``["chunker=fixed", "mlflow.user=ana"]`` -> ``"tags.`chunker` = 'fixed' and tags.`mlflow.user` = 'ana'"``.

    Raises:
        ValueError: an item has no ``=`` or an empty key, a key holds a backtick, or a
            value holds both quote characters (MLflow's filter grammar cannot express it).
    """
    clauses = []
    for item in tags:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--tag must look like KEY=VALUE (e.g. chunker=fixed), got {item!r}")
        if "`" in key:
            raise ValueError(f"--tag key must not contain a backtick, got {key!r}")
        if "'" in value and '"' in value:
            raise ValueError(f"--tag value cannot contain both ' and \", got {value!r}")
        quote = '"' if "'" in value else "'"
        clauses.append(f"tags.`{key}` = {quote}{value}{quote}")
    return " and ".join(clauses)


def list_runs(
    uri: str,
    experiment: str,
    k: int = 5,
    filter_string: str | None = None,
    tags: Sequence[str] = (),
    sort: str | None = None,
    ascending: bool = False,
    limit: int | None = None,
    all_statuses: bool = False,
):
    """The evaluation runs of one experiment as the table of ``harness compare`` (columns and
    order: :func:`harness.evaluation.compare.runs_table`).

    Runs listed: active (not deleted) runs matching ``filter_string`` (MLflow search
    syntax, e.g. ``"tags.chunker = 'fixed' and params.chunker.chunk_size = '200'"``) and
    every ``KEY=VALUE`` of ``tags``; only FINISHED ones unless ``all_statuses``. A sweep's
    parent run (tag ``harness.sweep=parent``) and runs without ``recall@k`` (failed before
    scoring) are left out unless ``all_statuses``; so are runs of the release gate and the
    benchmark (tag ``harness.purpose``), unless ``all_statuses`` or the filter or ``tags``
    name ``harness.purpose``. Sorting by a metric that no listed run logged as an MLflow
    metric reads the runs' metrics tables (:func:`run_metrics`).

    Raises:
        UnknownExperiment: no experiment named ``experiment`` (the message lists those that exist).
        harness.evaluation.compare.CompareError: ``sort`` names neither a column nor a
            metric any listed run logged.
        ValueError: ``k`` < 1, ``limit`` < 1, a malformed ``tags`` item, or an invalid
            ``filter_string`` (MLflow's message is kept).
        TrackingStoreError: the store failed.
    """
    from harness.evaluation.compare import runs_table
    from harness.evaluation.metrics import mlflow_key

    check_all((Param("k", "int", low=1), Param("limit", "int", low=1, allow_none=True, need="an integer >= 1")), {"k": k, "limit": limit})
    clauses = [c for c in (filter_string, tag_filter(tags)) if c and c.strip()]
    if not all_statuses:
        clauses.append("attributes.status = 'FINISHED'")
    query = " and ".join(clauses)
    try:
        runs = search_runs(uri, experiment, query)
    except InvalidFilter as exc:
        raise ValueError(f"invalid --filter {filter_string!r} (search string sent: {query!r}): {exc.detail}") from exc
    if not all_statuses:
        recall_key = mlflow_key(f"recall@{k}")
        runs = [r for r in runs if r.tags.get(SWEEP_TAG) != "parent" and recall_key in r.metrics]
        if PURPOSE_TAG not in query:  # gate and benchmark runs, unless asked for by tag or filter
            runs = [r for r in runs if not r.tags.get(PURPOSE_TAG)]
    if sort and sort not in _TEXT_COLUMNS:  # a metric a run may keep in its metrics table only
        runs = [r if sort in r.metrics or mlflow_key(sort) in r.metrics else with_all_metrics(uri, r) for r in runs]
    return runs_table(runs, k=k, sort=sort, ascending=ascending, limit=limit, with_status=all_statuses)


#: Columns of the listing that are not metrics (sorting by one never reads metrics tables).
_TEXT_COLUMNS = ("chunker", "size", "cut", "overlap", "unit", "retriever", "time_s", "run", "run_id", "status")


def annotate_run(
    uri: str,
    run_id: str,
    tags: Mapping[str, Any] | None = None,
    metrics: Mapping[str, float] | None = None,
    texts: Mapping[str, str] | None = None,
) -> None:
    """Add tags, metrics and text artifacts to the existing run ``run_id`` (which may have
    ended), through the signal-safe client.

    Args:
        uri: tracking URI.
        run_id: MLflow run id.
        tags: name -> value (values as ``str``, cut to MLflow's tag limit).
        metrics: name -> value, logged at step 0 under MLflow-safe keys (``recall@5.p`` ->
            ``recall_at_5.p``, :func:`harness.evaluation.metrics.mlflow_key`).
        texts: artifact file name (e.g. ``gate_report.md``) -> its text.

    Raises:
        UnknownRun: no run with that id.
        TrackingStoreError: the store failed.
    """
    from mlflow.entities import Metric, RunTag
    from mlflow.exceptions import MlflowException

    from harness.evaluation.metrics import mlflow_key

    client = open_client(uri)
    now = int(time.time() * 1000)
    metric_items = [Metric(mlflow_key(k), float(v), now, 0) for k, v in (metrics or {}).items()]
    tag_items = [RunTag(str(k), str(v)[:MAX_TAG_VALUE]) for k, v in (tags or {}).items()]
    try:
        for i in range(0, max(len(metric_items), len(tag_items)), MAX_PARAMS_PER_BATCH):
            client.log_batch(run_id, metrics=metric_items[i : i + MAX_PARAMS_PER_BATCH], tags=tag_items[i : i + MAX_PARAMS_PER_BATCH])
        for artifact_file, text in (texts or {}).items():
            client.log_text(run_id, text, artifact_file)
    except MlflowException as exc:
        if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
            raise UnknownRun(f"run {run_id!r} not found in the tracking store {uri}: {exc.message}") from exc
        raise TrackingStoreError(f"tracking store {uri}: {exc.message}") from exc


def metric_values(run: RunRecord, uri: str | None = None) -> dict[str, float]:
    """A run's recorded values under their metric names: MLflow keys turned back, ``recall_at_5``
    -> ``recall@5``, ``recall_at_5_ci_low`` -> ``recall@5_ci_low``, ``recall_at_512tok`` ->
    ``recall@512tok``; keys without ``_at_`` (``time.total_s``) unchanged.

    With ``uri`` (the run's tracking URI) the values kept only in the run's metrics table
    (CIs, the metrics outside the headline list: :func:`with_all_metrics`) are included;
    without it only ``run.metrics``. The one place that knows how metrics are logged: the
    reports read metric values here.

    Raises:
        TrackingStoreError: ``uri`` given and the run's metrics table cannot be read.
    """
    metrics = with_all_metrics(uri, run).metrics if uri is not None else run.metrics
    return {key.replace("_at_", "@", 1): float(value) for key, value in metrics.items()}


def download_artifacts(uri: str, run_id: str, names: Sequence[str], dest_dir: str | Path) -> dict[str, Path | None]:
    """Copy the artifacts ``names`` of run ``run_id`` into ``dest_dir``; name -> local path,
    None for an artifact the run does not have.

    Raises:
        TrackingStoreError: the store failed (a missing artifact is not an error).
    """
    client = open_client(uri)
    try:
        present = {f.path for f in client.list_artifacts(run_id)}
    except Exception as exc:  # MlflowException, or OSError from a file store
        raise TrackingStoreError(f"run {run_id}: cannot list artifacts in {uri}: {exc}") from exc
    return {name: download_artifact(uri, run_id, name, dest_dir) if name in present else None for name in names}


def sweep_jobs(uri: str, parent_run_id: str) -> tuple[RunRecord, list[tuple[int, str, RunRecord]]]:
    """A sweep's parent run and its jobs: ``(parent, [(job number, status, run), ...])`` in job
    order; a job skipped by resume is its earlier FINISHED run with status ``SKIPPED``.

    Raises:
        UnknownRun: no run ``parent_run_id``.
        ValueError: that run is not a sweep's parent (tag ``harness.sweep=parent``).
        TrackingStoreError: the store failed.
    """
    from harness.tracking.tracker import JOB_TAG, PARENT_TAG, SKIPPED_PREFIX

    parent = get_run(uri, parent_run_id)
    parent_run_id = parent.run_id  # a prefix given by the user, resolved
    if parent.tags.get(SWEEP_TAG) != "parent":
        raise ValueError(f"run {parent.name} ({parent_run_id}) is not a sweep's parent run (no tag {SWEEP_TAG}=parent); give a sweep's parent run id")
    from mlflow.entities import ViewType

    client = open_client(uri)
    with _store_errors(uri):
        found = client.search_runs(
            [parent.experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{parent_run_id}'", run_view_type=ViewType.ACTIVE_ONLY, max_results=PAGE_SIZE
        )
    jobs = []
    for run in found:
        record = _record(run)
        try:
            job = int(record.tags.get(JOB_TAG, 0))
        except ValueError:
            job = 0
        jobs.append((job, record.status, record))
    for tag, run_id in parent.tags.items():
        if tag.startswith(SKIPPED_PREFIX):
            with contextlib.suppress(UnknownRun, TrackingStoreError):
                jobs.append((int(tag[len(SKIPPED_PREFIX) :]), "SKIPPED", get_run(uri, run_id)))
    return parent, sorted(jobs, key=lambda j: (j[0], j[2].name))


def report_link(uri: str, run: RunRecord, artifact: str = "report.html") -> str | None:
    """A link to a run's report: the artifact file itself for a local store (``file://``, opens
    from disk), the run's artifact page in the MLflow UI for a tracking server; None otherwise."""
    if run.artifact_uri.startswith("file://"):
        return run.artifact_uri.rstrip("/") + "/" + artifact
    if run.artifact_uri.startswith("/"):
        return Path(run.artifact_uri, artifact).as_uri()
    if uri.startswith(("http://", "https://")):
        return f"{uri.rstrip('/')}/#/experiments/{run.experiment_id}/runs/{run.run_id}/artifacts/{artifact}"
    return None
