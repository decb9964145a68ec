"""MLflow tracking: the client that writes a run (every MLflow call is in :mod:`harness.tracking`).

A job of :func:`harness.experiment.run.execute` calls it through its tracking worker, a second
process (:mod:`harness.tracking.worker`); sweep parents use :class:`Tracker` in their own
process. Reading runs back, and adding to a run that ended (the release gate, the Optuna
search), is :mod:`harness.tracking.runs`, through the same :class:`SignalSafeClient`.

Tracking store resolution (first that is set wins): the ``tracking.uri`` config value, the
``MLFLOW_TRACKING_URI`` environment variable, then a local SQLite store inside the project
directory, ``sqlite:///<project>/mlruns/mlflow.db`` with artifacts under
``<project>/mlruns/artifacts``.

Resume and one run per configuration: :meth:`Tracker.claim` is the one step in which a job
looks at the runs of its config hash (the ``config_hash`` tag) and opens its own. A RUNNING
run of the hash whose process is alive makes the job a skip (:class:`BusyRun` names it); a
RUNNING run whose process is gone (:func:`owner_state`) is closed as KILLED with the tag
``harness.stale=true`` and the reason as ``harness.stale_reason``; with ``resume`` a
FINISHED run makes the job a skip. Every job's run records its process (``harness.host``,
``harness.pid``, ``harness.pid_start``) and a heartbeat (``harness.heartbeat``, Unix
seconds, renewed every :data:`HEARTBEAT_S` by the tracking worker). Atomicity: on a SQLite
store the look-up and the creation hold the store's file lock; on any other store (a
tracking server) the job creates its run, waits :data:`CLAIM_SETTLE_S`, looks again and
yields to a live run created before its own (deleting its own); see :meth:`Tracker.claim`
for what that protocol assumes.

Sweeps: :class:`harness.tracking.callbacks.SweepRunCallback` opens one parent run per multirun
(tag ``harness.sweep=parent``, process facts in ``harness.host``/``harness.pid``/
``harness.pid_start``); every job's run carries MLflow's ``mlflow.parentRunId`` tag and its
1-based job number as ``harness.sweep_job``. :meth:`Tracker.close_dead_sweeps` closes
RUNNING parents whose process on this host is gone (SIGKILL, power loss), with their
RUNNING children.

Interrupts: every MLflow client call of a :class:`Tracker` runs with Ctrl-C (SIGINT) and
SIGTERM held back (:func:`signals_deferred`) and delivered as soon as the call returns. A
``KeyboardInterrupt`` raised inside MLflow's SQLAlchemy session would leave a pooled
connection holding the SQLite write lock, so every later write of the same process (the
FAILED/KILLED status, the sweep's parent) would fail with "database is locked".

Parallel writers: a local SQLite store is opened (schema migration, experiment creation)
under an exclusive file lock beside the database file, so jobs started at the same moment
by a parallel launcher do not race on a fresh database. Writes after that rely on SQLite's
own locking, which MLflow's short transactions keep well under its busy timeout.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import re
import signal
import socket
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from harness.tracking.keys import metric_keys

#: MLflow limits (3.x): param value length, params per batch, metrics per batch, tag length.
MAX_PARAM_VALUE = 6000
MAX_PARAMS_PER_BATCH = 100
MAX_METRICS_PER_BATCH = 1000
MAX_TAG_VALUE = 8000

#: Tag set on a RUNNING run that a later job with the same config hash closed as KILLED.
STALE_TAG = "harness.stale"

#: MLflow's own tag linking a child run to its parent (the UI nests children under it).
PARENT_TAG = "mlflow.parentRunId"
#: Tag ``parent`` on a sweep's parent run.
SWEEP_TAG = "harness.sweep"
#: 1-based job number of a child run within its sweep (as in the ``job 3/12`` progress line).
JOB_TAG = "harness.sweep_job"
#: Prefix of the parent's tags recording a skipped job: ``sweep.skipped.<job>`` = finished run id.
SKIPPED_PREFIX = "sweep.skipped."
#: Prefix of the parent's tags recording a job skipped because its configuration was RUNNING
#: in another live process: ``sweep.busy.<job>`` = that run's id.
BUSY_PREFIX = "sweep.busy."
#: Prefix of the parent's tags recording a job refused for an invalid configuration (no run
#: was created): ``sweep.invalid.<job>`` = ``<run name>: <one-line error>``.
INVALID_PREFIX = "sweep.invalid."
#: Tags on a run naming the process that owns it: host name, pid, and the process's start
#: time in clock ticks since boot (``/proc/<pid>/stat``; empty where unknown). Set on sweep
#: parents and on every job's run.
HOST_TAG, PID_TAG, PID_START_TAG = "harness.host", "harness.pid", "harness.pid_start"
#: Tag on a job's run: Unix time (whole seconds) of its last heartbeat.
HEARTBEAT_TAG = "harness.heartbeat"
#: Tag on a job's run: Unix time in milliseconds just before its creation (the creation
#: order of rival claims on a store without a file lock).
CLAIM_TAG = "harness.claimed_ms"
#: Tag on a run closed as stale: why its process was taken as gone.
STALE_REASON_TAG = "harness.stale_reason"
#: Seconds between two heartbeats of an open job's run (written by its tracking worker).
HEARTBEAT_S = 60.0
#: A RUNNING run whose last heartbeat is older than this many seconds counts as dead: the
#: only check for a run of another host, and on this host the check for a live process
#: whose tracking worker is gone. 15 minutes leave room for clock differences between hosts
#: and for a slow tracking call.
HEARTBEAT_TIMEOUT_S = 900.0
#: Seconds a claim on a store without a file lock waits after creating its run before it
#: looks for rival runs created before its own (plus the time the creation took).
CLAIM_SETTLE_S = 1.0
#: Exit code of ``python -m harness.run`` (and of a sweep) when a job was skipped because
#: its configuration is RUNNING in another live process: nothing failed, but no result was
#: produced; retry once that run has ended (75 is the customary "temporary failure" code).
EXIT_BUSY = 75

#: MLflow run statuses.
RUN_STATUSES = ("FINISHED", "RUNNING", "FAILED", "KILLED", "SCHEDULED")

#: Seconds a job waits for the SQLite store's open lock before giving up.
SQLITE_LOCK_TIMEOUT_S = 300.0

_HASH_RE = re.compile(r"^[0-9a-f]{1,64}$")


def failure_record(exc: BaseException) -> tuple[str, str, str]:
    """``(status, message, traceback text)`` recording ``exc`` on a run: status KILLED for
    ``KeyboardInterrupt``/``SystemExit`` (Ctrl-C, SIGTERM in a sweep), else FAILED."""
    status = "KILLED" if isinstance(exc, (KeyboardInterrupt, SystemExit)) else "FAILED"
    return status, f"{type(exc).__name__}: {exc}", "".join(traceback.format_exception(exc))


def default_tracking_uri(project_root: str | Path) -> str:
    """``sqlite:///<project_root>/mlruns/mlflow.db`` (the folder is created)."""
    folder = Path(project_root).resolve() / "mlruns"
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'mlflow.db'}"


def resolve_tracking_uri(configured: str | None, project_root: str | Path) -> str:
    """Tracking URI from config, then ``MLFLOW_TRACKING_URI``, then the project-local default."""
    if configured:
        return str(configured)
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    return default_tracking_uri(project_root)


def artifact_root_for(uri: str, project_root: str | Path) -> str | None:
    """Artifact location for new experiments in a local SQLite store; None lets the server decide."""
    db = sqlite_path(uri)
    if db is not None:
        return (db.parent / "artifacts").resolve().as_uri()
    return None


def sqlite_path(uri: str) -> Path | None:
    """Database file of a ``sqlite:///`` URI, or None for any other store."""
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///") :])
    return None


@contextlib.contextmanager
def store_lock(uri: str) -> Iterator[None]:
    """Exclusive inter-process lock ``<db>.lock`` for a SQLite store; no-op for other stores.

    Raises:
        filelock.Timeout: the lock was not acquired within :data:`SQLITE_LOCK_TIMEOUT_S`.
    """
    db = sqlite_path(uri)
    if db is None:
        yield
        return
    from filelock import FileLock

    db.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(db) + ".lock", timeout=SQLITE_LOCK_TIMEOUT_S):
        yield


def flatten(cfg: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Flatten nested mappings to dotted keys; lists become JSON strings."""
    out: dict[str, Any] = {}
    for key, value in cfg.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, name + "."))
        elif isinstance(value, (list, tuple)):
            out[name] = json.dumps(list(value), default=str)
        else:
            out[name] = value
    return out


#: Flattened config keys not logged as params (they stay in the run's ``config.yaml``): where
#: caches and the store live, how the run is recorded and shown, and the ``_target_`` class
#: paths (the ``chunker``/``retriever``/``embedding`` tags name them). Left out so that MLflow's
#: compare page, which opens its parallel-coordinates plot on the first three differing
#: params in alphabetical order, opens on settings that change results.
NOISE_PARAM_PREFIXES = ("cache.", "tracking.")
NOISE_PARAMS = ("resume", "embedding.show_progress")
#: Tag set on runs made by the release gate (``gate``) or the benchmark (``bench``) from
#: ``tracking.purpose``; ``harness compare`` leaves such runs out of its listing.
PURPOSE_TAG = "harness.purpose"
#: Tags naming a run's chunking (``chunk_size``, ``chunk_overlap`` in ``chunk_unit``), for the
#: UI's *Group by*: the first chunker param present of each tuple (as ``harness compare``'s columns).
CHUNKING_TAGS = {
    "chunk_size": ("chunker.chunk_size", "chunker.max_chunk_size", "chunker.child_size"),
    "chunk_overlap": ("chunker.chunk_overlap", "chunker.overlap_sentences", "chunker.overlap_paragraphs", "chunker.child_overlap"),
    "chunk_unit": ("chunker.unit",),
}


def logged_params(flat: Mapping[str, Any]) -> dict[str, Any]:
    """The flattened config without :data:`NOISE_PARAMS`, keys under :data:`NOISE_PARAM_PREFIXES`
    and ``_target_`` keys: the params a run logs."""
    return {
        k: v for k, v in flat.items() if k not in NOISE_PARAMS and not k.startswith(NOISE_PARAM_PREFIXES) and k != "_target_" and not k.endswith("._target_")
    }


def chunking_tags(flat: Mapping[str, Any]) -> dict[str, str]:
    """``chunk_size``, ``chunk_overlap`` and ``chunk_unit`` tags from a flattened config
    (:data:`CHUNKING_TAGS`; a tag is left out when its chunker has none of the params, or it is null)."""
    out = {}
    for tag, keys in CHUNKING_TAGS.items():
        for key in keys:
            if flat.get(key) is not None and str(flat[key]) not in ("", "None"):
                out[tag] = str(flat[key])
                break
    return out


def safe_param_value(value: Any) -> str:
    """String value within MLflow's limit; longer values are cut and tagged with their sha256."""
    text = "None" if value is None else str(value)
    if len(text) <= MAX_PARAM_VALUE:
        return text
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
    suffix = f"...[truncated sha256:{digest}]"
    return text[: MAX_PARAM_VALUE - len(suffix)] + suffix


#: Signals held back during a tracking-store call.
_DEFERRED_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_defer_state: dict[str, Any] = {"depth": 0, "saved": {}, "pending": []}


def _record_signal(signum, frame) -> None:  # noqa: ARG001 - signal handler signature
    _defer_state["pending"].append(signum)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM while the body runs; deliver them to the handlers that were in
    place once it ends.

    Only the main thread receives signals in Python, so elsewhere this is a no-op. Nested uses
    deliver at the outermost exit. Each held signal is delivered once: a Python handler is
    called (``signal.default_int_handler`` raises ``KeyboardInterrupt``), a default
    disposition is re-raised with ``os.kill`` after the handler is restored, an ignored one
    is dropped. The price is that Ctrl-C waits for the current MLflow call (one batch, one
    artifact upload) to return.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    state = _defer_state
    if state["depth"] == 0:
        state["pending"] = []
        state["saved"] = {signum: signal.getsignal(signum) for signum in _DEFERRED_SIGNALS}
        for signum in _DEFERRED_SIGNALS:
            signal.signal(signum, _record_signal)
    state["depth"] += 1
    try:
        yield
    finally:
        state["depth"] -= 1
        if state["depth"] == 0:
            saved, pending = state["saved"], list(dict.fromkeys(state["pending"]))
            state["saved"], state["pending"] = {}, []
            for signum, handler in saved.items():
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
            for signum in pending:
                handler = saved.get(signum)
                if callable(handler):
                    handler(signum, None)
                elif handler != signal.SIG_IGN:
                    os.kill(os.getpid(), signum)


class SignalSafeClient:
    """An ``mlflow.MlflowClient`` whose method calls run under :func:`signals_deferred`.

    Attribute access is passed through; callables are wrapped so that Ctrl-C or SIGTERM never
    interrupts MLflow half-way through a database transaction.

    Args:
        client: the ``mlflow.MlflowClient`` to wrap.
    """

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        @functools.wraps(attr)
        def call(*args: Any, **kwargs: Any) -> Any:
            with signals_deferred():
                return attr(*args, **kwargs)

        return call


class Tracker:
    """Logs one run: params, metrics, tags and artifacts, in MLflow-sized batches.

    Args:
        tracking_uri: MLflow tracking URI.
        experiment: experiment name (created when missing).
        artifact_location: artifact root for a newly created experiment; None: beside a
            local SQLite store's database (:func:`artifact_root_for`, never the working
            folder's ``mlruns/``), or the server's choice for any other store.
    """

    def __init__(self, tracking_uri: str, experiment: str, artifact_location: str | None = None) -> None:
        if artifact_location is None:
            artifact_location = artifact_root_for(tracking_uri, ".")
        from harness.runtime import long_lived

        with long_lived("mlflow"):  # MLflow's modules and the store's engine stay for the whole process
            import mlflow

            self.mlflow = mlflow
            self.tracking_uri = tracking_uri
            mlflow.set_tracking_uri(tracking_uri)
            with store_lock(tracking_uri):  # first use migrates a SQLite DB: one process at a time
                client = SignalSafeClient(mlflow.MlflowClient(tracking_uri))
                exp = client.get_experiment_by_name(experiment)
                if exp is None:
                    try:
                        exp_id = client.create_experiment(experiment, artifact_location=artifact_location)
                    except Exception:  # noqa: BLE001 - another process (on a shared server) created it first
                        exp = client.get_experiment_by_name(experiment)
                        if exp is None:
                            raise
                        exp_id = exp.experiment_id
                else:
                    exp_id = exp.experiment_id
        self.client = client
        self.experiment_id = exp_id
        self.run_id: str | None = None

    def runs_with_hash(self, config_hash: str, status: str) -> list:
        """Runs of this experiment tagged ``config_hash`` with MLflow status ``status``, newest first.

        Args:
            config_hash: hex digest from :func:`harness.experiment.build.config_hash`.
            status: ``FINISHED``, ``RUNNING``, ``FAILED``, ``KILLED`` or ``SCHEDULED``.

        Raises:
            ValueError: ``config_hash`` is not lowercase hex, or ``status`` is not an MLflow status.
        """
        if not _HASH_RE.match(config_hash):
            raise ValueError(f"config_hash must be lowercase hex, got {config_hash!r}")
        if status not in RUN_STATUSES:
            raise ValueError(f"status must be an MLflow run status, got {status!r}")
        from mlflow.entities import ViewType

        return self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.config_hash = '{config_hash}' and attributes.status = '{status}'",
            run_view_type=ViewType.ACTIVE_ONLY,
            order_by=["attributes.start_time DESC"],
        )

    def finished_run(self, config_hash: str):
        """The newest FINISHED run of ``config_hash`` in this experiment, or None."""
        runs = self.runs_with_hash(config_hash, "FINISHED")
        return runs[0] if runs else None

    def mark_stale(self, config_hash: str, owner: "Owner | None" = None) -> list[str]:
        """Close every RUNNING run of ``config_hash`` whose process is gone as KILLED, with the
        tags ``harness.stale=true`` and ``harness.stale_reason``; runs of live processes are
        left alone (see :func:`owner_state`; ``owner`` is the calling job's process).

        Returns:
            The ids of the runs closed.
        """
        stale: list[tuple[str, str]] = []
        self._live_runs(config_hash, owner, stale)
        return [run_id for run_id, _ in stale]

    def _close_stale(self, run_id: str, reason: str) -> None:
        self.client.set_tag(run_id, STALE_TAG, "true")
        self.client.set_tag(run_id, STALE_REASON_TAG, reason[:MAX_TAG_VALUE])
        self.client.set_terminated(run_id, status="KILLED")

    def _live_runs(self, config_hash: str, owner: "Owner | None", stale: list[tuple[str, str]], skip: str | None = None) -> list["BusyRun"]:
        """RUNNING runs of ``config_hash`` (other than ``skip``) whose process is alive, in
        creation order (:data:`CLAIM_TAG`, else start time; ties by run id). The others are
        closed as stale and appended to ``stale`` as ``(run id, reason)``."""
        now = time.time()
        live = []
        for run in self.runs_with_hash(config_hash, "RUNNING"):
            if run.info.run_id == skip:
                continue
            tags = run.data.tags
            alive, reason = owner_state(tags, run.info.start_time, owner, now=now)
            if not alive:
                self._close_stale(run.info.run_id, reason)
                stale.append((run.info.run_id, reason))
                continue
            live.append(BusyRun.of(run, config_hash, reason, now))
        return sorted(live, key=lambda b: b.order)

    def claim(
        self,
        config_hash: str,
        run_name: str,
        *,
        owner: "Owner",
        tags: Mapping[str, Any] | None = None,
        start_time: float | None = None,
        resume: bool = True,
        lock: bool | None = None,
    ) -> "Claim":
        """Open the run of a job unless its configuration is running or (with ``resume``) done.

        In order: RUNNING runs of ``config_hash`` whose process is gone are closed as stale;
        if one whose process is alive remains, nothing is opened (``Claim.busy`` names the
        oldest); else with ``resume`` the newest FINISHED run makes the job a skip
        (``Claim.finished``); else the run is created (:meth:`start`) with ``tags``, the
        ``config_hash`` tag, ``owner``'s process tags, a first heartbeat and the claim time,
        and becomes the tracker's current run (``Claim.run_id``). RUNNING is looked up
        before FINISHED, so a rival that finishes in between is still seen.

        Atomicity, so that two jobs of one configuration started at the same moment never
        both run: with ``lock`` (the default for a SQLite store) the look-up and the
        creation hold the store's file lock (:func:`store_lock`). Without it (any other
        store: a tracking server cannot be locked from here) the job creates its run, waits
        :data:`CLAIM_SETTLE_S` plus the time the creation took, lists the RUNNING runs
        again and yields to a live run created before its own (by :data:`CLAIM_TAG`, ties
        by run id), deleting its own run; the oldest live claim never yields, so one job
        runs. This holds when every claim's creation takes less than the settle time plus
        the others' creation time and the hosts' clocks agree to within that: with clocks
        further apart, two jobs can still both run (the later one's run is then an
        ordinary duplicate, never closed while alive).

        Args:
            config_hash: hex digest from :func:`harness.experiment.build.config_hash`.
            run_name: the run's name.
            owner: the job's process (:meth:`Owner.current` in the job's process).
            tags: further tags for the run (values cut to MLflow's tag limit).
            start_time: the run's start as Unix seconds (default: now).
            resume: skip when a FINISHED run of ``config_hash`` exists.
            lock: hold the store's file lock (True needs a SQLite store); None = for SQLite.

        Raises:
            ValueError: ``config_hash`` not lowercase hex; ``lock=True`` on a store other
                than SQLite.
            filelock.Timeout: the store's lock was not acquired within :data:`SQLITE_LOCK_TIMEOUT_S`.
        """
        locked = sqlite_path(self.tracking_uri) is not None if lock is None else bool(lock)
        if locked and sqlite_path(self.tracking_uri) is None:
            raise ValueError(f"lock=True needs a sqlite:/// tracking store, got {self.tracking_uri!r}")
        stale: list[tuple[str, str]] = []
        with store_lock(self.tracking_uri) if locked else contextlib.nullcontext():
            live = self._live_runs(config_hash, owner, stale)
            if live:
                return Claim(busy=live[0], stale=stale)
            if resume:
                done = self.finished_run(config_hash)
                if done is not None:
                    return Claim(finished=done, stale=stale)
            t0 = time.time()
            claimed_ms = int(t0 * 1000)
            run_tags = {**(tags or {}), "config_hash": config_hash, **owner.tags(), HEARTBEAT_TAG: str(int(t0)), CLAIM_TAG: str(claimed_ms)}
            run_id = self.start(run_name, tags=run_tags, start_time=start_time)
            if not locked:
                time.sleep(CLAIM_SETTLE_S + (time.time() - t0))
            mine = (claimed_ms, run_id)
            earlier = [b for b in self._live_runs(config_hash, owner, stale, skip=run_id) if b.order < mine]
            done = self.finished_run(config_hash) if resume and not earlier and not locked else None
            if earlier or done is not None:
                self.client.set_terminated(run_id, status="KILLED")
                self.client.delete_run(run_id)  # an empty run (no params yet): it never happened
                self.run_id = None
                return Claim(busy=earlier[0] if earlier else None, finished=done, stale=stale)
        return Claim(run_id=run_id, stale=stale)

    def heartbeat(self, run_id: str | None = None) -> None:
        """Set ``harness.heartbeat`` of ``run_id`` (default: the current run) to now (Unix seconds)."""
        self.client.set_tag(run_id or self.run_id, HEARTBEAT_TAG, str(int(time.time())))

    @contextlib.contextmanager
    def run(self, run_name: str, tags: Mapping[str, str] | None = None) -> Iterator["Tracker"]:
        """Open a run (:meth:`start`) and close it when the block ends (:meth:`closing`)."""
        self.start(run_name, tags)
        with self.closing():
            yield self

    @contextlib.contextmanager
    def closing(self) -> Iterator["Tracker"]:
        """Close the current run when the block ends: FINISHED, or on an exception FAILED
        (KILLED for Ctrl-C or ``SystemExit``, e.g. SIGTERM during a sweep) with the error
        recorded by :meth:`fail`, then re-raise."""
        try:
            yield self
        except BaseException as exc:  # noqa: BLE001 - we re-raise after recording
            self.fail(exc)
            raise
        else:
            self.client.set_terminated(self.run_id, status="FINISHED")

    def flush(self) -> None:
        """Nothing to wait for: this tracker's calls return once MLflow has stored them (the
        tracking worker's :class:`~harness.tracking.worker.WorkerTracker` sends without waiting)."""

    def fail(self, exc: BaseException) -> None:
        """Close the current run as KILLED (``KeyboardInterrupt``/``SystemExit``) or FAILED with
        the error (see :meth:`record_failure`)."""
        self.record_failure(*failure_record(exc))

    def record_failure(self, status: str, message: str, traceback_text: str) -> None:
        """Close the current run with ``status`` (FAILED or KILLED), the error ``message`` as the
        ``error`` tag (cut to MLflow's tag limit) and ``traceback_text`` as the ``error.txt``
        artifact (both best effort: the status is always set)."""
        with contextlib.suppress(Exception):
            self.client.set_tag(self.run_id, "error", message[:MAX_TAG_VALUE])
            self.log_text(traceback_text, "error.txt")
        self.end(status)

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Log params (values cut to MLflow's length limit with a hash), 100 per batch."""
        from mlflow.entities import Param

        items = [Param(str(k)[:250], safe_param_value(v)) for k, v in params.items()]
        for i in range(0, len(items), MAX_PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=items[i : i + MAX_PARAMS_PER_BATCH])

    def log_metrics(self, metrics: Mapping[str, float], step: int = 0) -> None:
        """Log metrics under MLflow-safe keys (``recall@5`` -> ``recall_at_5``), 1000 per batch."""
        self.log_metric_groups([(metrics, step)])

    def log_metric_groups(self, groups: Iterable[tuple[Mapping[str, float], int]]) -> None:
        """Log several ``(metrics, step)`` groups together: one MLflow ``log_batch`` call
        (one database transaction) per 1000 values instead of one call per group. Keys as in
        :meth:`log_metrics`.

        Raises:
            NonFiniteError, MetricNameCollision: a value is not finite, or two names map to
                one key (:func:`harness.tracking.keys.metric_keys`); nothing is logged then.
        """
        import time

        from mlflow.entities import Metric

        groups = [(dict(metrics), step) for metrics, step in groups]
        keys = metric_keys(groups)
        now = int(time.time() * 1000)
        items = [Metric(keys[k], float(v), now, step) for metrics, step in groups for k, v in metrics.items()]
        for i in range(0, len(items), MAX_METRICS_PER_BATCH):
            self.client.log_batch(self.run_id, metrics=items[i : i + MAX_METRICS_PER_BATCH])

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        """Set tags (values cut to MLflow's tag limit)."""
        from mlflow.entities import RunTag

        items = [RunTag(str(k), str(v)[:MAX_TAG_VALUE]) for k, v in tags.items()]
        for i in range(0, len(items), MAX_PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, tags=items[i : i + MAX_PARAMS_PER_BATCH])

    def log_text(self, text: str, artifact_file: str) -> None:
        """Store ``text`` as an artifact file."""
        self.client.log_text(self.run_id, text, artifact_file)

    def log_bytes(self, data: bytes, artifact_file: str) -> None:
        """Store ``data`` as the artifact file ``artifact_file`` (e.g. ``chunks.jsonl.gz``)."""
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / Path(artifact_file).name
            path.write_bytes(data)
            parent = str(Path(artifact_file).parent)
            self.client.log_artifact(self.run_id, str(path), None if parent == "." else parent)

    def log_file(self, path: str | Path, artifact_path: str | None = None) -> None:
        """Store a local file as an artifact."""
        self.client.log_artifact(self.run_id, str(path), artifact_path)

    def log_rendered(self, render: Callable[[], Mapping[str, bytes | str]], seconds_metric: str | None = None) -> None:
        """Store what ``render()`` returns, ``{artifact_file: bytes or text}``, in its order.

        The tracker draws nothing itself: the caller hands it the rendering step (a
        module-level function or a ``functools.partial`` of one, so that it pickles by
        reference; e.g. :func:`harness.reporting.charts.run_figures`). Through the tracking
        worker it runs in the worker's process, off the job's critical path.

        Args:
            render: called once, without arguments.
            seconds_metric: when given, the seconds ``render`` and the writes took are
                logged as this metric (e.g. ``time.report_render_s``).
        """
        t0 = time.perf_counter()
        for artifact_file, data in render().items():
            if isinstance(data, str):
                self.log_text(data, artifact_file)
            else:
                self.log_bytes(data, artifact_file)
        if seconds_metric:
            self.log_metrics({seconds_metric: time.perf_counter() - t0})

    def log_dataframe_csv(self, df, artifact_file: str) -> None:
        """Store a pandas DataFrame as a CSV artifact."""
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / Path(artifact_file).name
            df.to_csv(path, index=False)
            parent = str(Path(artifact_file).parent)
            self.client.log_artifact(self.run_id, str(path), None if parent == "." else parent)

    # ------------------------------------------------------------------ runs without a context manager

    def start(self, run_name: str, tags: Mapping[str, str] | None = None, start_time: float | None = None) -> str:
        """Open a run in this experiment and make it the tracker's current run; returns its id.

        The caller closes it with :meth:`end` (a sweep's parent run, which spans the Hydra
        callbacks ``on_multirun_start`` .. ``on_multirun_end``) or :meth:`closing`.

        Args:
            run_name: the run's name.
            tags: tags set at creation (values cut to MLflow's tag limit).
            start_time: the run's start as a Unix time in seconds (default: now), for a run
                whose work began before its record was created.
        """
        run = self.client.create_run(
            self.experiment_id,
            run_name=run_name,
            tags={k: str(v)[:MAX_TAG_VALUE] for k, v in (tags or {}).items()},
            start_time=None if start_time is None else int(start_time * 1000),
        )
        self.run_id = run.info.run_id
        return self.run_id

    def end(self, status: str = "FINISHED", run_id: str | None = None) -> None:
        """Close ``run_id`` (default: the current run) with an MLflow status.

        Raises:
            ValueError: ``status`` is not FINISHED, FAILED or KILLED.
        """
        if status not in ("FINISHED", "FAILED", "KILLED"):
            raise ValueError(f"status must be FINISHED, FAILED or KILLED, got {status!r}")
        self.client.set_terminated(run_id or self.run_id, status=status)

    def get_run(self, run_id: str):
        """The MLflow run ``run_id`` (raises MLflow's exception when it does not exist)."""
        return self.client.get_run(run_id)

    def child_runs(self, parent_run_id: str) -> list:
        """Every active run, in any experiment of the store, whose ``mlflow.parentRunId`` is ``parent_run_id``."""
        from mlflow.entities import ViewType

        if not _RUN_ID_RE.match(parent_run_id):
            raise ValueError(f"parent_run_id must be an MLflow run id (hex), got {parent_run_id!r}")
        experiments, token = [], None
        while True:
            page = self.client.search_experiments(view_type=ViewType.ACTIVE_ONLY, max_results=1000, page_token=token)
            experiments += [e.experiment_id for e in page]
            token = page.token
            if not token:
                break
        runs = []
        for i in range(0, len(experiments), 100):
            runs += self.client.search_runs(
                experiments[i : i + 100],
                filter_string=f"tags.`{PARENT_TAG}` = '{parent_run_id}'",
                run_view_type=ViewType.ACTIVE_ONLY,
                max_results=50000,
            )
        return runs

    def note_skipped(self, parent_run_id: str, job: int, finished_run_id: str) -> None:
        """Record on a sweep's parent that job ``job`` was skipped (its config already FINISHED as ``finished_run_id``)."""
        self.client.set_tag(parent_run_id, f"{SKIPPED_PREFIX}{int(job)}", finished_run_id)

    def note_busy(self, parent_run_id: str, job: int, running_run_id: str) -> None:
        """Record on a sweep's parent that job ``job`` was skipped because its configuration
        is RUNNING as ``running_run_id`` in another live process."""
        self.client.set_tag(parent_run_id, f"{BUSY_PREFIX}{int(job)}", running_run_id)

    def note_invalid(self, parent_run_id: str, job: int, run_name: str, message: str) -> None:
        """Record on a sweep's parent that job ``job`` (``run_name``) was refused for an invalid
        configuration (``message``, one line; the tag value is cut to :data:`MAX_TAG_VALUE`)."""
        self.client.set_tag(parent_run_id, f"{INVALID_PREFIX}{int(job)}", f"{run_name}: {message}"[:MAX_TAG_VALUE])

    def close_dead_sweeps(self) -> list[tuple[str, list[str]]]:
        """Close this experiment's RUNNING sweep parents whose process is gone, and their RUNNING children.

        A parent counts as dead when its ``harness.host`` tag is this machine and no process
        with its ``harness.pid`` runs, or one does but started at another time than
        ``harness.pid_start`` records (the id was reused). Parents from other machines are
        left alone (their liveness cannot be checked from here). Closed runs get status
        KILLED and the ``harness.stale=true`` tag.

        Returns:
            ``[(parent run id, [closed child run ids]), ...]``.
        """
        from mlflow.entities import ViewType

        parents = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.`{SWEEP_TAG}` = 'parent' and attributes.status = 'RUNNING'",
            run_view_type=ViewType.ACTIVE_ONLY,
        )
        closed = []
        for parent in parents:
            tags = parent.data.tags
            if not _process_is_dead(tags.get(HOST_TAG), tags.get(PID_TAG), tags.get(PID_START_TAG)):
                continue
            children = [c.info.run_id for c in self.child_runs(parent.info.run_id) if c.info.status == "RUNNING"]
            for run_id in [*children, parent.info.run_id]:
                self.client.set_tag(run_id, STALE_TAG, "true")
                self.client.set_terminated(run_id, status="KILLED")
            closed.append((parent.info.run_id, children))
        return closed

    # ------------------------------------------------------------------ richer artifacts

    def log_table(self, df, artifact_file: str) -> None:
        """Store a DataFrame as an MLflow table: ``artifact_file`` (``.json``, pandas "split"
        orient; NaN becomes null) readable with ``mlflow.load_table`` and listed in the run's
        ``mlflow.loggedArtifacts`` tag, so the UI's evaluation view can show it."""
        import warnings

        with warnings.catch_warnings():  # MLflow's image-column probe trips a pandas 3 deprecation notice
            warnings.filterwarnings("ignore", message=".*'str' dtypes are included by select_dtypes")
            self.client.log_table(self.run_id, data=df, artifact_file=artifact_file)

    def log_dataset(self, df, name: str, digest: str, source: str, context: str = "evaluation") -> None:
        """Record a dataset as a run input with MLflow's dataset tracking (UI: Datasets column).

        Args:
            df: the rows to describe (schema and row count are stored, not the data).
            name: dataset name.
            digest: content fingerprint (at most 36 characters: MLflow's limit).
            source: where it was loaded from (a local path).
            context: the ``mlflow.data.context`` input tag (``evaluation``).

        Raises:
            ValueError: ``digest`` empty or longer than 36 characters.
        """
        import warnings

        import mlflow.data
        from mlflow.entities import DatasetInput, InputTag
        from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

        if not digest or len(digest) > 36:
            raise ValueError(f"dataset digest must be 1..36 characters, got {digest!r}")
        with warnings.catch_warnings():  # a local path matches two equivalent registered source types
            warnings.filterwarnings("ignore", message="The specified dataset source can be interpreted in multiple ways")
            dataset = mlflow.data.from_pandas(df, source=source, name=name, digest=digest)
        entity = DatasetInput(dataset=dataset._to_mlflow_entity(), tags=[InputTag(key=MLFLOW_DATASET_CONTEXT, value=context)])
        # MLflow's SQL store looks the dataset up, then inserts it: two jobs of a parallel sweep
        # logging the same dataset at once can both miss it, and the later insert fails on the
        # unique (experiment, name, digest) key. The row then exists, so a retry links to it.
        for attempt in range(5):
            try:
                self.client.log_inputs(self.run_id, datasets=[entity])
                return
            except Exception as exc:  # MlflowException wrapping sqlite3/psycopg IntegrityError
                if attempt == 4 or "UNIQUE constraint" not in str(exc) and "IntegrityError" not in str(exc):
                    raise
                time.sleep(0.05 * (attempt + 1))


_RUN_ID_RE = re.compile(r"^[0-9a-f]{8,64}$")


def process_start(pid: int) -> str | None:
    """Start time of a live process in clock ticks since boot (``/proc/<pid>/stat`` field 22).

    None where ``/proc`` is not available, when no such process exists, or when it is a
    zombie (exited, not yet reaped).
    """
    try:
        with open(f"/proc/{int(pid)}/stat", encoding="utf-8") as fh:
            stat = fh.read()
    except (OSError, ValueError):
        return None
    # the command name (field 2) is in parentheses and may hold spaces: split after it
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else fields[19]


def _process_is_dead(host: str | None, pid: str | None, start: str | None) -> bool:
    """True only when the process is known to be gone: same host, and no such pid, a zombie,
    or a pid now held by a process that started at another time."""
    import socket

    if not host or not pid or host != socket.gethostname():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, ValueError, OverflowError):
        return False
    if not Path(f"/proc/{int(pid)}").is_dir():
        return False  # no /proc (not Linux): a live pid is all we can tell
    now = process_start(int(pid))
    return now is None or (bool(start) and now != start)


def _process_started_at(pid: int) -> float | None:
    """Start of a live process as Unix seconds (boot time from ``/proc/stat`` plus its start
    ticks), or None where that cannot be read."""
    ticks = process_start(pid)
    if ticks is None:
        return None
    try:
        with open("/proc/stat", encoding="utf-8") as fh:
            boot = next(float(line.split()[1]) for line in fh if line.startswith("btime "))
        return boot + int(ticks) / os.sysconf("SC_CLK_TCK")
    except (OSError, StopIteration, ValueError, IndexError):
        return None


@dataclasses.dataclass(frozen=True)
class Owner:
    """The process that owns a job's run.

    Attributes:
        host: host name (``socket.gethostname()``).
        pid: process id on that host.
        pid_start: the process's start in clock ticks since boot (``/proc/<pid>/stat`` field
            22), ``""`` where unknown; with the pid it tells a reused pid apart.
    """

    host: str
    pid: int
    pid_start: str = ""

    @classmethod
    def current(cls) -> "Owner":
        """This process."""
        return cls(socket.gethostname(), os.getpid(), process_start(os.getpid()) or "")

    def tags(self) -> dict[str, str]:
        """``harness.host``, ``harness.pid``, ``harness.pid_start`` tags naming this process."""
        return {HOST_TAG: self.host, PID_TAG: str(self.pid), PID_START_TAG: self.pid_start}


def owner_state(tags: Mapping[str, str], start_time_ms: int | None, me: Owner | None = None, now: float | None = None) -> tuple[bool, str]:
    """Whether the process behind a RUNNING run is alive, and why: ``(alive, reason)``.

    Rules, in order:

    * no ``harness.host``/``harness.pid`` tags (a run made by an older version): dead, as
      such runs always were;
    * on this host: the run was left open by ``me`` itself (same pid and start; a process
      runs one job at a time), no process has the pid, it is a zombie, or the pid now
      belongs to a process that started at another time than ``harness.pid_start`` (when
      that tag is empty: after the run's start) — dead; a live process whose run has had
      no heartbeat for :data:`HEARTBEAT_TIMEOUT_S` (its tracking worker is gone) — dead;
      otherwise alive;
    * on another host the process cannot be checked: alive while the last heartbeat (else
      the run's start) is at most :data:`HEARTBEAT_TIMEOUT_S` old, dead after that.

    Args:
        tags: the run's tags.
        start_time_ms: the run's start (MLflow ``start_time``, Unix milliseconds) or None.
        me: the calling job's process.
        now: the current Unix time (default: now).
    """
    now = time.time() if now is None else now
    host, pid, start = tags.get(HOST_TAG), tags.get(PID_TAG), tags.get(PID_START_TAG) or ""
    if not host or not pid:
        return False, "it records no process (harness.host/harness.pid tags: made by an older version)"
    try:
        pid_n = int(pid)
    except ValueError:
        return False, f"its harness.pid tag {pid!r} is not a process id"
    beat = tags.get(HEARTBEAT_TAG)
    try:
        last = float(beat) if beat else (start_time_ms / 1000 if start_time_ms else None)
    except ValueError:
        last = start_time_ms / 1000 if start_time_ms else None
    age = None if last is None else max(0.0, now - last)
    limit = f"{HEARTBEAT_TIMEOUT_S:.0f} s"
    if host != socket.gethostname():
        if age is not None and age > HEARTBEAT_TIMEOUT_S:
            return False, f"pid {pid} on host {host} (another machine) has sent no heartbeat for {age:.0f} s (more than {limit})"
        heard = "no heartbeat recorded" if age is None else f"last heartbeat {age:.0f} s ago"
        return True, f"on another machine its process cannot be checked from here: it counts as running until its heartbeat is over {limit} old ({heard})"
    if me is not None and me.host == host and me.pid == pid_n and (not start or not me.pid_start or start == me.pid_start):
        return False, f"it was left open by this very process (pid {pid}), which runs one job at a time"
    if _process_is_dead(host, pid, start):
        now_start = process_start(pid_n)
        if now_start is None:
            return False, f"pid {pid} is no longer running on this host"
        return False, f"pid {pid} now belongs to another process (started at tick {now_start}, the run's owner at tick {start})"
    if not start and start_time_ms:
        began = _process_started_at(pid_n)
        if began is not None and began > start_time_ms / 1000 + 2.0:
            return False, f"pid {pid} now belongs to a process that started after the run did"
    if age is not None and age > HEARTBEAT_TIMEOUT_S:
        return False, f"pid {pid} runs, but the run has had no heartbeat for {age:.0f} s (more than {limit}): its tracking worker is gone"
    return True, f"pid {pid} is alive on this host"


@dataclasses.dataclass(frozen=True)
class BusyRun:
    """A RUNNING run of a configuration whose process is alive (see :meth:`Tracker.claim`).

    Attributes:
        run_id, run_name: the run.
        config_hash: its configuration.
        host, pid: its process (tags ``harness.host``, ``harness.pid``).
        started_ms: its MLflow start time (Unix milliseconds; 0 when unknown).
        claimed_ms: its creation time (tag ``harness.claimed_ms``; else ``started_ms``).
        reason: why it counts as alive (:func:`owner_state`).
        same_host: True when its process runs on this host (and was checked).
    """

    run_id: str
    run_name: str
    config_hash: str
    host: str
    pid: str
    started_ms: int
    claimed_ms: int
    reason: str
    same_host: bool

    @classmethod
    def of(cls, run: Any, config_hash: str, reason: str, now: float | None = None) -> "BusyRun":
        """From an MLflow run and the reason :func:`owner_state` gave."""
        tags = run.data.tags
        started = int(run.info.start_time or 0)
        try:
            claimed = int(tags.get(CLAIM_TAG) or started)
        except ValueError:
            claimed = started
        host = tags.get(HOST_TAG, "")
        return cls(run.info.run_id, run.info.run_name or "", config_hash, host, tags.get(PID_TAG, ""), started, claimed, reason, host == socket.gethostname())

    @property
    def order(self) -> tuple[int, str]:
        """Creation order: ``(claimed_ms, run_id)``."""
        return (self.claimed_ms, self.run_id)

    def message(self) -> str:
        """One line naming the run, its process and why it counts as alive."""
        import datetime

        when = (
            datetime.datetime.fromtimestamp(self.started_ms / 1000, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC") if self.started_ms else "unknown"
        )
        return (
            f"this configuration (config_hash {self.config_hash}) is already RUNNING as run {self.run_id}"
            f" ({self.run_name or 'unnamed'}; pid {self.pid} on host {self.host}, started {when}); {self.reason}."
            " A configuration is never run twice at once: rerun when that run has ended to reuse its result"
        )


@dataclasses.dataclass
class Claim:
    """Outcome of :meth:`Tracker.claim`: exactly one of ``run_id`` (the run was opened),
    ``busy`` (a live RUNNING run of the configuration) or ``finished`` (its newest FINISHED
    MLflow run) is set; ``stale`` lists the RUNNING runs closed on the way as ``(run id, reason)``."""

    run_id: str | None = None
    busy: BusyRun | None = None
    finished: Any = None
    stale: list[tuple[str, str]] = dataclasses.field(default_factory=list)
