"""The tracking worker (harness/tracking_worker.py): MLflow in a second process, overlapping
a job's start. Real MLflow SQLite stores in temporary folders, the real model."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pytest
from conftest import PROJECT_ROOT, compose, fresh_store
from hypothesis import given, settings
from hypothesis import strategies as st

BM25 = ["retriever=bm25", "dataset.path=" + str(PROJECT_ROOT / "datasets" / "kestrel_kb"), "stats.bootstrap=0"]


def _runs(uri: str, experiment: str = "kestrel_kb"):
    client = mlflow.MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    return [] if exp is None else client.search_runs([exp.experiment_id])


@pytest.mark.slow
def test_jobs_of_one_process_share_one_worker_and_a_dead_worker_is_replaced(tracking_uri):
    from harness.experiment.run import execute
    from harness.tracking import worker as tracking_worker

    first = execute(compose([f"tracking.uri={tracking_uri}", *BM25, "chunker.chunk_size=120"]))
    pid = tracking_worker.worker().process.pid
    second = execute(compose([f"tracking.uri={tracking_uri}", *BM25, "chunker.chunk_size=140"]))
    assert tracking_worker.worker().process.pid == pid  # the second job paid no MLflow start-up
    old = tracking_worker.worker()
    os.kill(pid, signal.SIGKILL)
    old.process.wait(timeout=10)
    third = execute(compose([f"tracking.uri={tracking_uri}", *BM25, "chunker.chunk_size=160"]))
    assert tracking_worker.worker().process.pid != pid
    runs = {r.info.run_id: r for r in _runs(tracking_uri)}
    assert {first["run_id"], second["run_id"], third["run_id"]} == set(runs)
    assert all(r.info.status == "FINISHED" for r in runs.values())
    # what the worker logged is what the job computed
    for result in (first, second, third):
        logged = runs[result["run_id"]].data.metrics
        assert logged["recall_at_5"] == pytest.approx(result["metrics"]["recall@5"])
        assert logged["time.tracking_wait_s"] >= 0.0


@pytest.mark.slow
def test_a_finished_configuration_is_skipped_before_anything_is_embedded(tracking_uri, tmp_path):
    """resume finds the FINISHED run in the worker; the job waits for that answer before its
    first embedding block, so a skip with an empty embedding cache embeds nothing."""
    from harness.experiment.run import execute

    overrides = [f"tracking.uri={tracking_uri}", "dataset.path=" + str(PROJECT_ROOT / "datasets" / "kestrel_kb"), "stats.bootstrap=0", "chunker.chunk_size=254"]
    done = execute(compose([*overrides, f"cache.dir={tmp_path / 'cache1'}"]))
    assert done["metrics"]["recall@5"] > 0
    empty = tmp_path / "cache2"
    again = execute(compose([*overrides, f"cache.dir={empty}"]))
    assert again["skipped"] is True and again["run_id"] == done["run_id"]
    assert again["metrics"]["recall_at_5"] == pytest.approx(done["metrics"]["recall@5"])
    from harness.cache import Cache

    assert Cache(empty).embeddings.count() == 0  # not one text embedded for the skipped job
    assert len(_runs(tracking_uri)) == 1


@pytest.mark.slow
def test_a_failure_after_the_run_opened_is_recorded_failed_through_the_worker(tracking_uri, tmp_path):
    from harness.experiment.run import execute

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder", encoding="utf-8")  # the chunk cache cannot be created under it
    with pytest.raises(OSError):
        execute(compose([f"tracking.uri={tracking_uri}", *BM25, "chunker.chunk_size=10", f"cache.dir={blocker / 'cache'}"]))
    (run,) = _runs(tracking_uri)
    assert run.info.status == "FAILED"
    assert "a-file" in run.data.tags["error"]
    assert run.data.params["chunker.chunk_size"] == "10"  # the params were logged before the failure


def test_an_unopenable_store_fails_the_job_naming_mlflows_error(tmp_path):
    from harness.experiment.run import execute
    from harness.tracking.worker import TrackingWorkerError

    blocker = tmp_path / "not_a_folder"
    blocker.write_text("x")
    uri = f"sqlite:///{blocker / 'mlflow.db'}"  # a database inside a regular file
    t0 = time.perf_counter()
    with pytest.raises(TrackingWorkerError) as info:
        execute(compose([f"tracking.uri={uri}", *BM25]))
    assert str(info.value)  # MLflow's message, with its traceback from the worker
    assert info.value.worker_traceback
    assert time.perf_counter() - t0 < 60


def test_the_worker_refuses_anything_but_logging_methods(tracking_uri):
    from harness.tracking import worker as tracking_worker

    w = tracking_worker.worker()
    tracker = tracking_worker.WorkerTracker(w, "0")
    with pytest.raises(AttributeError):
        tracker.client  # noqa: B018 - not a logging method: never sent
    with pytest.raises(tracking_worker.TrackingWorkerError, match="without an open run|not a logging method"):
        w.call("call", method="end", args=(), kwargs={})
    assert w.alive and w.pending == 0  # an error reply leaves the worker usable


@pytest.mark.slow
def test_a_sigkilled_job_process_leaves_its_run_killed_not_running(tmp_path):
    """Only the job's process is killed (not its process group): the worker sees the
    connection close, closes the open run as KILLED and exits."""
    uri = fresh_store(tmp_path / "mlflow.db")
    mlflow.MlflowClient(uri).search_experiments()  # the store exists (migrated) before the job and this test both poll it
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONFAULTHANDLER": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness.run",
            f"tracking.uri={uri}",
            f"cache.dir={tmp_path / 'cache'}",
            "stats.bootstrap=0",
            "hydra.run.dir=" + str(tmp_path / "out"),
        ],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 240
        while time.time() < deadline:
            runs = _runs(uri)
            if runs and runs[0].info.status == "RUNNING":
                break
            assert proc.poll() is None, "the run ended before it could be killed"
            time.sleep(0.2)
        else:
            pytest.fail("no RUNNING run appeared")
        workers = _children(proc.pid)
        assert workers, "no tracking worker process"
        proc.kill()
        proc.wait(timeout=10)
        deadline = time.time() + 60
        while time.time() < deadline and _runs(uri)[0].info.status == "RUNNING":
            time.sleep(0.2)
        (run,) = _runs(uri)
        assert run.info.status == "KILLED"
        for pid in workers:
            deadline = time.time() + 30
            while time.time() < deadline and Path(f"/proc/{pid}").exists() and _state(pid) != "Z":
                time.sleep(0.1)
            assert not Path(f"/proc/{pid}").exists() or _state(pid) == "Z", "the tracking worker outlived its job"
    finally:
        if proc.poll() is None:
            proc.kill()


def _children(pid: int) -> list[int]:
    out = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line)
        except OSError:
            continue
        if fields.get("PPid", "").strip() == str(pid):
            out.append(int(status.parent.name))
    return out


def _state(pid: int) -> str:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("State:"):
                return line.split()[1]
    except OSError:
        return ""
    return ""


@pytest.mark.slow
def test_an_error_in_a_pipelined_logging_call_still_fails_the_run(tracking_uri, tmp_path):
    """Logging calls are sent without waiting; the error of one comes back when the run
    closes, and the run is FAILED with it (the calls after it were still carried out)."""
    from harness.tracking.worker import Opening, TrackingWorkerError

    opening = Opening(
        cwd=str(tmp_path),
        uri=tracking_uri,
        experiment="pipelined",
        artifact_location=str(tmp_path / "artifacts"),
        name="n",
        config_hash="ab12",
        resume=False,
        parent=None,
        params={"a": 1},
        config_yaml="a: 1\n",
        start_time=time.time(),
        tags={},
    )
    tracker = opening.result()
    missing = tmp_path / "missing.png"
    with pytest.raises(TrackingWorkerError, match="missing.png"):
        with tracker.closing():
            tracker.log_file(missing)
            tracker.log_text("written after the failed call", "after.txt")
    client = mlflow.MlflowClient(tracking_uri)
    run = client.get_run(tracker.run_id)
    assert run.info.status == "FAILED"
    assert "missing.png" in run.data.tags["error"]
    assert run.data.params == {"a": "1"}
    assert {f.path for f in client.list_artifacts(run.info.run_id)} >= {"after.txt", "config.yaml", "error.txt"}


def test_an_early_started_worker_that_gets_no_request_is_killed_not_waited_for():
    """``harness run`` starts the worker before composing its config; when the command then
    fails (a bad override) or only prints, nothing waits for the worker's MLflow import."""
    from harness.tracking.worker import TrackingWorker

    unused = TrackingWorker()
    unused.close()
    assert unused.process.returncode == -signal.SIGKILL
    used = TrackingWorker()
    used.send("bogus")  # answered with an error; the worker then exits on its own when closed
    with pytest.raises(Exception, match="'bogus' without an open run"):
        used.receive()
    used.close()
    assert used.process.returncode == 0


def test_harness_run_starts_the_worker_early_unless_it_only_prints(monkeypatch):
    from harness import cli
    from harness.tracking import worker as tracking_worker

    started = []
    monkeypatch.setattr(tracking_worker, "start_early", lambda uri=None: started.append(uri))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    for argv in (["--cfg", "job"], ["--help"], ["-c", "all"], ["--info=config"]):
        cli.start_tracking_early(argv)
    assert started == []
    cli.start_tracking_early(["chunker.chunk_size=100"])
    assert started == [None]  # the tracking URI as known before composing: the default store
    cli.start_tracking_early(["tracking.uri=http://127.0.0.1:5000", "chunker.chunk_size=100", "tracking.uri=sqlite:////tmp/x/mlflow.db"])
    assert started[-1] == "sqlite:////tmp/x/mlflow.db"  # the last one given wins, as in Hydra
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    cli.start_tracking_early(["chunker.chunk_size=100"])
    assert started[-1] == "http://127.0.0.1:5000"


@settings(max_examples=60, deadline=None)
@given(
    scheme=st.sampled_from(["sqlite", "SQLite", "postgresql", "mysql", "mssql", "http", "https", "file", "databricks", "sqlitex", "mlflow-artifacts"]),
    driver=st.sampled_from(["", "+psycopg2", "+pymysql"]),
    rest=st.text(alphabet="/abc.:@-_", max_size=20),
    quote=st.sampled_from(["", "'", '"']),
)
def test_store_hint_names_exactly_the_sqlalchemy_stores(scheme, driver, rest, quote):
    """Only a URI whose scheme (before ``+driver``, any case, quoted or not) is one MLflow opens
    with SQLAlchemy gets the worker to import that store ahead of its first request."""
    from harness.tracking.worker import store_hint

    uri = f"{quote}{scheme}{driver}://{rest}{quote}"
    assert store_hint(uri) == ("sql" if scheme.lower() in {"sqlite", "postgresql", "mysql", "mssql"} else None)


def test_store_hint_of_the_default_store_is_sql():
    from harness.tracking.worker import store_hint

    assert [store_hint(u) for u in (None, "", "null")] == ["sql", "sql", "sql"]
