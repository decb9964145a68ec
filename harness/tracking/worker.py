"""A tracking worker: MLflow in a second process, so a job's start-up overlaps its own work.

Opening a job's run costs about 2 s of CPU in a fresh process: importing MLflow (~1.4 s),
opening the SQLite store (~0.8 s: SQLAlchemy engine, Alembic schema check), the resume
lookup and the run's creation. In the job's own process that is 2 s of pure Python on the
critical path, and a thread would not help: it holds the GIL as much as the imports of
torch and sentence-transformers it would run beside. A second process runs it on the
second core while the job loads its dataset, chunks and loads the embedding model (the
docs/benchmark.md gives the measured effect).

One worker serves a process (:func:`worker`; started on first use, reused by every job of a
sweep, restarted if it died): ``python -m harness.tracking.worker FD`` with one end of a
socket pair, speaking :mod:`multiprocessing.connection` messages (pickle between this
process and its own child; nothing from elsewhere is unpickled). Requests are answered in
order: ``("open", {...})`` claims and opens a job's run (:func:`_open`), ``("note_invalid", {...})``
records a sweep job with an invalid configuration on the parent run, ``("call", {...})`` calls one
:class:`harness.tracking.tracker.Tracker` logging method on it, ``("fail", {...})`` closes it as
FAILED/KILLED with the error, ``("end", {...})`` closes it. The job's side is
:class:`Opening` (the pending ``open`` request) and :class:`WorkerTracker` (the run, with
the methods of :class:`~harness.tracking.tracker.Tracker` that a job logs with).

Heartbeat: while a job's run is open the worker renews its ``harness.heartbeat`` tag every
:data:`harness.tracking.tracker.HEARTBEAT_S` seconds between requests, so another job of the same
configuration, on this host or another, can tell a live run from one whose processes are
gone (:func:`harness.tracking.tracker.owner_state`).

Signals: the worker ignores SIGINT and SIGTERM (Ctrl-C reaches the whole process group);
the job records the interrupt on its run through the worker. When the job's process ends
(normally: the worker is closed at exit and waited for; killed: the socket closes) the
worker closes a run left open as KILLED and exits. The job never waits on the worker with
Ctrl-C held back, except while reading one reply that has already arrived.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Iterator, Mapping

#: Tracker methods a job may call through the worker.
CALLS = frozenset(
    {
        "set_tags",
        "log_params",
        "log_metrics",
        "log_metric_groups",
        "log_text",
        "log_bytes",
        "log_file",
        "log_dataframe_csv",
        "log_table",
        "log_dataset",
        "log_rendered",
    }
)
#: Seconds the job's process waits at exit for the worker to finish its last writes.
EXIT_WAIT_S = 60.0
#: Poll interval (seconds) while waiting for a reply: Ctrl-C is seen between polls.
_POLL_S = 0.05


class TrackingWorkerError(RuntimeError):
    """An error raised by MLflow in the tracking worker, re-raised in the job's process.

    The message is ``<exception type>: <message>`` of the worker's exception; the worker's
    traceback is in :attr:`worker_traceback`.
    """

    def __init__(self, message: str, worker_traceback: str = "") -> None:
        super().__init__(message)
        self.worker_traceback = worker_traceback


class RunBusy(Exception):
    """Raised in the job by :meth:`Opening.check` when its configuration is RUNNING in another
    live process (:meth:`harness.tracking.tracker.Tracker.claim`): nothing was opened.

    The message is one line naming that run, its pid and host, and why it counts as alive.

    Attributes:
        busy: the fields of :class:`harness.tracking.tracker.BusyRun` (``run_id``, ``pid``,
            ``host``, ``started_ms``, ``reason``, ...).
    """

    def __init__(self, busy: Mapping[str, Any]) -> None:
        from harness.tracking.tracker import BusyRun

        self.busy = dict(busy)
        super().__init__(BusyRun(**self.busy).message())


class RunSkipped(Exception):
    """Raised in the job by :meth:`Opening.check` when the resume lookup found a FINISHED run
    of the job's configuration.

    Attributes:
        finished: ``{"run_id": str, "run_name": str, "metrics": {mlflow key: value},
            "results": str | None}`` of that run (``metrics``: every value it recorded,
            :func:`harness.tracking.runs.metrics_of`; ``results`` is its ``results.txt``, the
            table the run printed; None when it has none).
    """

    def __init__(self, finished: Mapping[str, Any]) -> None:
        super().__init__(f"finished as run {finished['run_id']}")
        self.finished = dict(finished)


# ---------------------------------------------------------------------------------------- job side


class TrackingWorker:
    """The job process's handle on one worker process (use :func:`worker`).

    Raises:
        TrackingWorkerError: from :meth:`receive` when the worker answered with an error or
            exited without answering.
    """

    def __init__(self, store_hint: str | None = None) -> None:
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])  # the worker imports this copy of harness
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "harness.tracking.worker", str(theirs.fileno()), *([store_hint] if store_hint else [])],
                pass_fds=[theirs.fileno()],
                env=env,
                stdin=subprocess.DEVNULL,
            )
        finally:
            theirs.close()
        self.conn = Connection(ours.detach())
        self.pending = 0  # requests sent, replies not yet read
        self.sent = 0  # requests sent in all (until the first the worker has nothing to write)

    @property
    def alive(self) -> bool:
        """True while the worker process runs and the connection is open."""
        return not self.conn.closed and self.process.poll() is None

    def send(self, op: str, **kwargs: Any) -> None:
        """Send one request (its reply is read later with :meth:`receive`, in order)."""
        from harness.tracking.tracker import signals_deferred

        with signals_deferred():  # a message is written whole or not at all
            self.conn.send((op, kwargs))
            self.pending += 1
            self.sent += 1

    def ready(self) -> bool:
        """True when the next reply can be read without waiting (or the worker is gone)."""
        return self.conn.closed or self.conn.poll(0) or self.process.poll() is not None

    def receive(self) -> Any:
        """Wait for the next reply and return its value (Ctrl-C is seen while waiting).

        Raises:
            TrackingWorkerError: the request failed in the worker, or the worker exited.
        """
        from harness.tracking.tracker import signals_deferred

        while not self.conn.poll(_POLL_S):
            if self.process.poll() is not None and not self.conn.poll(0):
                raise TrackingWorkerError(f"the tracking worker exited (code {self.process.returncode}) without answering")
        with signals_deferred():
            try:
                kind, value = self.conn.recv()
            except EOFError:
                raise TrackingWorkerError(f"the tracking worker exited (code {self.process.wait()}) without answering") from None
            self.pending -= 1
        if kind == "error":
            raise TrackingWorkerError(value["message"], value["traceback"])
        return value

    def call(self, op: str, **kwargs: Any) -> Any:
        """:meth:`send`, then read every pending reply (:meth:`drain`) and return the last one's
        value.

        Raises:
            TrackingWorkerError: the first error among those replies.
        """
        self.send(op, **kwargs)
        replies = self.drain()
        errors = [value for ok, value in replies if not ok]
        if errors:
            raise errors[0]
        return replies[-1][1]

    def drain(self) -> list[tuple[bool, Any]]:
        """Read every pending reply, in order: ``(True, value)`` or ``(False, TrackingWorkerError)``.

        Raises:
            TrackingWorkerError: the worker exited with replies pending.
        """
        out = []
        while self.pending > 0:
            try:
                out.append((True, self.receive()))
            except TrackingWorkerError as exc:
                if not self.alive and self.pending > 0:
                    raise
                out.append((False, exc))
        return out

    def close(self, timeout: float = EXIT_WAIT_S) -> None:
        """Close the connection and wait up to ``timeout`` seconds for the worker to finish
        its last writes and exit (then terminate it). A worker that was never sent a request
        (started early by :func:`start_early` for a command that then failed or logged
        nothing) has nothing to write and is killed at once."""
        with contextlib.suppress(OSError):
            self.conn.close()
        if not self.sent:  # it ignores SIGTERM (see the module docstring); nothing to lose
            with contextlib.suppress(OSError):
                self.process.kill()
            self.process.wait()
            return
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=5)


_worker: TrackingWorker | None = None
_worker_lock = threading.Lock()


def worker(store_hint: str | None = None) -> TrackingWorker:
    """This process's tracking worker, started on first use (or again after it died) and
    closed at interpreter exit (waiting for its last writes, see :meth:`TrackingWorker.close`).
    ``store_hint`` (:func:`store_hint`) is handed to a worker started now."""
    global _worker
    with _worker_lock:
        if _worker is not None and _worker.alive and _worker.pending == 0:
            return _worker
        if _worker is not None:  # dead, or left with unread replies by an interrupted job
            _worker.close(timeout=5)
        else:
            atexit.register(_close_worker)
        _worker = TrackingWorker(store_hint)
        return _worker


#: URI schemes (before any ``+driver``) of the stores MLflow opens with SQLAlchemy.
SQL_SCHEMES = frozenset({"sqlite", "postgresql", "mysql", "mssql"})


def store_hint(uri: str | None) -> str | None:
    """``"sql"`` when tracking ``uri`` is a database store MLflow opens with SQLAlchemy
    (``sqlite:///...``, ``postgresql+psycopg2://...``, ...) or None (the project's default
    store, a SQLite file); else None. A hint only: a wrong one costs the worker the import
    of a module it does not use, never a different result."""
    if uri is None or uri.strip() in ("", "null", "None"):
        return "sql"
    scheme = uri.strip().strip("'\"").partition(":")[0].partition("+")[0].lower()
    return "sql" if scheme in SQL_SCHEMES else None


def start_early(uri: str | None = None) -> None:
    """Start this process's tracking worker now, before the caller composes its config and
    imports the run's libraries, so that the worker's MLflow import (~1.4 s) overlaps that
    work instead of the job's first wait for it (a run whose vectors are all cached reaches
    that wait about a second after its config is composed). ``uri`` is the tracking URI as
    far as the caller knows it before composing (None: the default store): for a database
    store the worker also imports MLflow's SQLAlchemy store while no request has arrived
    yet (:func:`serve`). Idempotent; a worker that is then never used is terminated at exit
    without waiting (:meth:`TrackingWorker.close`)."""
    worker(store_hint(uri))


def stop_unused_worker() -> None:
    """Stop this process's worker at once if it was never sent a request (e.g. a job refused
    for its configuration before it asked for a run): nothing is open, nothing to wait for."""
    global _worker
    with _worker_lock:
        if _worker is not None and _worker.sent == 0:
            with contextlib.suppress(OSError):
                _worker.conn.close()
            _worker.process.kill()  # it ignores SIGTERM; it holds no run and has written nothing
            with contextlib.suppress(subprocess.TimeoutExpired):
                _worker.process.wait(timeout=5)
            _worker = None


def _close_worker() -> None:
    if _worker is not None:
        _worker.close()


class WorkerTracker:
    """A job's open run in the tracking worker, with :class:`~harness.tracking.tracker.Tracker`'s
    logging methods (:data:`CALLS`; same arguments, same effects).

    Logging calls are sent without waiting for their replies (the job goes on while the
    worker writes); :meth:`flush` reads them all, and :meth:`closing` flushes before it
    closes the run, so an error in any logging call still fails the run.

    Attributes:
        run_id: the MLflow run id.
    """

    def __init__(self, conn: TrackingWorker, run_id: str) -> None:
        self._worker = conn
        self.run_id = run_id

    def __getattr__(self, name: str) -> Any:
        if name not in CALLS:
            raise AttributeError(name)

        def call(*args: Any, **kwargs: Any) -> None:
            self._worker.send("call", method=name, args=args, kwargs=kwargs)

        return call

    def log_metrics(self, metrics: Mapping[str, float], step: int = 0) -> None:
        """As :meth:`log_metric_groups` with one group."""
        self.log_metric_groups([(metrics, step)])

    def log_metric_groups(self, groups) -> None:
        """Check the metrics here (:func:`harness.tracking.keys.metric_keys`: finite values,
        one name per MLflow key), then send them to the worker without waiting.

        Raises:
            NonFiniteError, MetricNameCollision: before anything is sent.
        """
        from harness.tracking.keys import metric_keys

        groups = [(dict(metrics), step) for metrics, step in groups]
        metric_keys(groups)
        self._worker.send("call", method="log_metric_groups", args=(groups,), kwargs={})

    def flush(self) -> None:
        """Wait until the worker has done every logging call sent so far.

        Raises:
            TrackingWorkerError: the first of those calls that failed in the worker.
        """
        errors = [value for ok, value in self._worker.drain() if not ok]
        if errors:
            raise errors[0]

    def fail(self, exc: BaseException) -> None:
        """Close the run as KILLED (``KeyboardInterrupt``/``SystemExit``) or FAILED with the
        error; replies of logging calls still pending are read and dropped first. Best
        effort: when the worker cannot record it (it died), a line on stderr says so and
        the run is left RUNNING, to be closed as stale by a later job of its configuration
        (once this process has ended, or its heartbeat is older than
        :data:`harness.tracking.tracker.HEARTBEAT_TIMEOUT_S`)."""
        from harness.tracking.tracker import failure_record

        status, message, text = failure_record(exc)
        try:
            self._worker.drain()
            self._worker.call("fail", status=status, message=message, traceback_text=text)
        except TrackingWorkerError as err:  # the job's own error is the one to raise
            print(
                f"could not record {status} on run {self.run_id}: {err}; it stays RUNNING until a later job of its configuration closes it as stale",
                file=sys.stderr,
            )

    @contextlib.contextmanager
    def closing(self) -> Iterator["WorkerTracker"]:
        """As :meth:`harness.tracking.tracker.Tracker.closing`: FINISHED once every logging call has
        succeeded (:meth:`flush`), or FAILED/KILLED with the error."""
        try:
            yield self
            self.flush()
        except BaseException as exc:  # noqa: BLE001 - re-raised after recording
            self.fail(exc)
            raise
        self._worker.call("end", status="FINISHED")


class Opening:
    """A job's pending ``open`` request: sent at construction, answered while the job works.

    Args:
        **request: the ``open`` request's fields (see :func:`_open`); the job's ``MLFLOW_*``
            environment variables are added as ``env`` and this process as ``owner`` (the
            run's ``harness.host``/``harness.pid``/``harness.pid_start`` tags). An optional
            ``warm`` (a callable without arguments, pickled by reference) is run by the
            worker once, after its first answer, while the job computes (e.g. the imports
            the run's figures need); its errors are ignored.

    The job polls with :meth:`check`, blocks with :meth:`wait` and collects the run with
    :meth:`result`. :attr:`waited` is the time in seconds the job spent blocked in them.
    """

    def __init__(self, **request: Any) -> None:
        from harness.tracking.tracker import Owner

        request.setdefault("env", {k: v for k, v in os.environ.items() if k.startswith("MLFLOW_")})
        request.setdefault("owner", dataclasses.asdict(Owner.current()))
        self._worker = worker()
        self._worker.send("open", **request)
        self._reply: dict | None = None
        self._error: BaseException | None = None
        self.waited = 0.0

    def _read(self) -> None:
        if self._reply is None and self._error is None:
            import time

            t0 = time.perf_counter()
            try:
                self._reply = self._worker.receive()
            except TrackingWorkerError as exc:
                self._error = exc
            finally:
                self.waited += time.perf_counter() - t0
            if self._reply is not None and self._reply.get("stale"):
                stale = self._reply["stale"]
                named = ", ".join(f"{run_id} ({reason})" for run_id, reason in stale)
                print(f"closed {len(stale)} stale RUNNING run(s) of this configuration as KILLED: {named}")
                sys.stdout.flush()

    def check(self) -> None:
        """Return at once unless the worker has answered with a skip or an error.

        Raises:
            RunSkipped: the resume lookup found a FINISHED run.
            RunBusy: the configuration is RUNNING in another live process.
            TrackingWorkerError: the run could not be opened (e.g. an unreachable tracking server).
        """
        if self._reply is None and self._error is None and not self._worker.ready():
            return
        self.wait()

    def wait(self) -> None:
        """Wait for the worker's answer (Ctrl-C is seen while waiting).

        Raises:
            RunSkipped, RunBusy, TrackingWorkerError: as :meth:`check`.
        """
        self._read()
        if self._error is not None:
            raise self._error
        assert self._reply is not None
        if self._reply.get("busy") is not None:
            raise RunBusy(self._reply["busy"])
        if self._reply["finished"] is not None:
            raise RunSkipped(self._reply["finished"])

    def result(self) -> WorkerTracker:
        """Wait for the answer and return the job's open run.

        Raises:
            RunSkipped, RunBusy, TrackingWorkerError: as :meth:`check`.
        """
        self.wait()
        assert self._reply is not None
        return WorkerTracker(self._worker, self._reply["run_id"])


# ---------------------------------------------------------------------------------------- worker side


def _open(
    state: dict, *, cwd, env, uri, experiment, artifact_location, name, config_hash, resume, parent, params, config_yaml, start_time, tags, owner=None
) -> dict:
    """Claim and open a job's run (:meth:`harness.tracking.tracker.Tracker.claim`): the experiment
    (created when missing); RUNNING runs of ``config_hash`` whose process is gone closed as
    stale; a RUNNING run whose process is alive, or with ``resume`` the newest FINISHED run,
    makes the job a skip (nothing is opened; in a sweep the parent run ``parent = (run id,
    job)`` records it); else the run dated ``start_time`` (Unix seconds) is opened as a
    child of ``parent`` when that run is RUNNING, with ``tags``, the process tags of
    ``owner`` (the job's process, ``{"host", "pid", "pid_start"}``; default the worker's
    parent process), ``params`` and ``config.yaml``. ``cwd`` and ``env`` (the job's
    ``MLFLOW_*`` variables) are applied first, so relative paths and MLflow settings mean
    what they mean in the job's process.

    Returns:
        ``{"run_id": str | None, "finished": {"run_id", "metrics"} | None, "busy": BusyRun
        fields | None, "stale": [(run id, reason)]}``.
    """
    from harness.tracking.tracker import JOB_TAG, PARENT_TAG, Owner, process_start

    tracker = _tracker(state, cwd, env, uri, experiment, artifact_location)
    if parent is not None:
        try:
            if tracker.get_run(parent[0]).info.status != "RUNNING":
                parent = None  # a sweep folder reused after its sweep ended must not adopt new runs
        except Exception:  # noqa: BLE001 - a deleted or foreign parent: log the run on its own
            parent = None
    if owner is None:
        owner = {"host": socket.gethostname(), "pid": os.getppid(), "pid_start": process_start(os.getppid()) or ""}
    tags = dict(tags)
    if parent is not None:
        tags.update({PARENT_TAG: parent[0], JOB_TAG: str(parent[1])})
    claim = tracker.claim(config_hash, name, owner=Owner(**owner), tags=tags, start_time=start_time, resume=resume)
    if claim.busy is not None:
        if parent is not None:
            tracker.note_busy(parent[0], parent[1], claim.busy.run_id)
        return {"run_id": None, "finished": None, "busy": dataclasses.asdict(claim.busy), "stale": claim.stale}
    if claim.finished is not None:
        done = claim.finished
        if parent is not None:
            tracker.note_skipped(parent[0], parent[1], done.info.run_id)
        from harness.tracking.runs import TrackingStoreError, metrics_of

        try:
            values = metrics_of(tracker.client, done)  # MLflow metrics + the metrics.json table
        except TrackingStoreError:  # an unreadable table: the headline metrics (the objective among them) remain
            values = dict(done.data.metrics)
        finished = {
            "run_id": done.info.run_id,
            "run_name": done.info.run_name or "",
            "metrics": values,
            "results": logged_text(tracker, done.info.run_id, "results.txt"),
        }
        return {"run_id": None, "finished": finished, "busy": None, "stale": claim.stale}
    state["open"] = tracker
    state["beat"] = time.monotonic()
    tracker.log_params(params)
    tracker.log_text(config_yaml, "config.yaml")
    return {"run_id": tracker.run_id, "finished": None, "busy": None, "stale": claim.stale}


def _tracker(state: dict, cwd: str, env: Mapping[str, str], uri: str, experiment: str, artifact_location: str | None):
    """The worker's :class:`~harness.tracking.tracker.Tracker` of ``(uri, experiment)`` (made once),
    after applying the job's working folder ``cwd`` and its ``MLFLOW_*`` variables ``env``."""
    from harness.tracking.tracker import Tracker

    os.chdir(cwd)
    for key in [k for k in os.environ if k.startswith("MLFLOW_") and k not in env]:
        del os.environ[key]
    os.environ.update(env)
    key = (uri, experiment, artifact_location)
    tracker = state["trackers"].get(key)
    if tracker is None:
        tracker = state["trackers"][key] = Tracker(uri, experiment, artifact_location)
    return tracker


def logged_text(tracker, run_id: str, artifact_file: str) -> str | None:
    """The text artifact ``artifact_file`` of run ``run_id`` (e.g. a finished run's
    ``results.txt``), or None when it is missing or cannot be read (best effort)."""
    import tempfile

    bar = os.environ.get("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR")
    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"  # one small file: no progress bar on the job's terminal
    try:
        with tempfile.TemporaryDirectory() as tmp:
            return Path(tracker.client.download_artifacts(run_id, artifact_file, tmp)).read_text(encoding="utf-8")
    except Exception:  # noqa: BLE001 - a run logged before the artifact existed, or a store that lost it
        return None
    finally:
        if bar is None:
            os.environ.pop("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", None)
        else:
            os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = bar


def _note_invalid(state: dict, *, cwd, env, uri, experiment, artifact_location, parent, job, run_name, message) -> None:
    """Record on a sweep's parent run ``parent`` that job ``job`` (``run_name``) has an invalid
    configuration (``message``, one line); no run is created for it."""
    tracker = _tracker(state, cwd, env, uri, experiment, artifact_location)
    tracker.note_invalid(parent, job, run_name, message)


def note_invalid(**request: Any) -> None:
    """Ask this process's worker to record an invalid sweep job on its parent run (see
    :func:`_note_invalid` for the fields; ``env`` defaults to this process's ``MLFLOW_*``
    variables). Waits for the answer.

    Raises:
        TrackingWorkerError: the store could not be written.
    """
    request.setdefault("env", {k: v for k, v in os.environ.items() if k.startswith("MLFLOW_")})
    worker().call("note_invalid", **request)


def _heartbeat(state: dict) -> float:
    """Renew the open run's heartbeat when :data:`harness.tracking.tracker.HEARTBEAT_S` has passed
    (best effort: a failed write is retried at the next beat); returns the seconds until the
    next beat is due (:data:`~harness.tracking.tracker.HEARTBEAT_S` when no run is open)."""
    from harness.tracking.tracker import HEARTBEAT_S

    tracker = state.get("open")
    if tracker is None:
        return HEARTBEAT_S
    due = state.get("beat", 0.0) + HEARTBEAT_S - time.monotonic()
    if due > 0:
        return due
    state["beat"] = time.monotonic()
    with contextlib.suppress(Exception):
        tracker.heartbeat()
    return HEARTBEAT_S


def _handle(state: dict, op: str, kwargs: dict) -> Any:
    if op == "open":
        return _open(state, **kwargs)
    if op == "note_invalid":
        return _note_invalid(state, **kwargs)
    tracker = state.get("open")
    if tracker is None:
        raise RuntimeError(f"tracking worker: {op!r} without an open run")
    if op == "call":
        if kwargs["method"] not in CALLS:
            raise ValueError(f"tracking worker: {kwargs['method']!r} is not a logging method")
        return getattr(tracker, kwargs["method"])(*kwargs["args"], **kwargs["kwargs"])
    if op == "fail":
        state["open"] = None
        return tracker.record_failure(kwargs["status"], kwargs["message"], kwargs["traceback_text"])
    if op == "end":
        state["open"] = None
        return tracker.end(kwargs["status"])
    raise ValueError(f"tracking worker: unknown request {op!r}")


def serve(fd: int, store_hint: str | None = None) -> int:
    """The worker's loop on connection ``fd``: answer requests in order until the job's
    process closes its end; then close a run left open as KILLED. Returns the exit code.

    With ``store_hint="sql"`` (:func:`store_hint`) MLflow's SQLAlchemy store module (SQLAlchemy,
    Alembic, the table models; ~0.7 s) is imported after MLflow when no request is waiting yet,
    so that opening a SQLite store for the job's first request costs less."""
    import traceback

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    conn = Connection(fd)
    from harness.runtime import long_lived

    with long_lived("mlflow"):  # import MLflow now, while the job's first request is on its way
        import mlflow  # noqa: F401
        import mlflow.entities  # noqa: F401

        if store_hint == "sql" and not conn.poll(0):
            with contextlib.suppress(Exception):  # only an import ahead of time: opening the store reports any error
                import mlflow.store.tracking.sqlalchemy_store  # noqa: F401
    state: dict = {"trackers": {}, "open": None}
    while True:
        try:
            while not conn.poll(_heartbeat(state)):
                pass
            op, kwargs = conn.recv()
        except (EOFError, OSError):
            break
        warm = kwargs.pop("warm", None) if op == "open" else None
        try:
            reply = ("ok", _handle(state, op, kwargs))
        except Exception as exc:  # noqa: BLE001 - every error goes back to the job
            reply = ("error", {"message": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})
        try:
            conn.send(reply)
        except (OSError, EOFError):
            break
        if warm is not None and not state.get("preloaded"):
            state["preloaded"] = True  # the job now embeds for a while: run its warm step (e.g. import what its figures need)
            with contextlib.suppress(Exception):
                warm()
    if state["open"] is not None:  # the job's process ended (or was killed) with its run open
        with contextlib.suppress(Exception):
            state["open"].record_failure("KILLED", "the job's process ended without closing its run", "")
    return 0


if __name__ == "__main__":
    sys.exit(serve(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None))
