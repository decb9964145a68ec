"""Resumable sweeps and parallel launchers, through the real CLI against real MLflow SQLite
stores under temporary folders (BM25 runs on the bundled kestrel_kb dataset, for speed)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import mlflow
import pytest
from conftest import _SESSION_CACHE, PROJECT_ROOT, compose, fresh_store

from harness.experiment.run import execute
from harness.tracking.tracker import JOB_TAG, PARENT_TAG, STALE_TAG, SWEEP_TAG

#: Four BM25 jobs: fixed-size chunks of 100, 150, 200 and 250 tokens.
SIZES = (100, 150, 200, 250)
SWEEP = ["retriever=bm25", "chunker=fixed", f"chunker.chunk_size={','.join(map(str, SIZES))}", "stats.bootstrap=0", "embedding.show_progress=false"]


def _cli(args: list[str], sweep_dir) -> list[str]:
    return [sys.executable, "-m", "harness.run", "-m", *args, f"hydra.sweep.dir={sweep_dir}", f"cache.dir={_SESSION_CACHE}"]


def _env(uri: str) -> dict:
    return {**os.environ, "MLFLOW_TRACKING_URI": uri, "RAY_USAGE_STATS_ENABLED": "0"}


def _all_runs(uri: str, experiment: str = "kestrel_kb"):
    client = mlflow.MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    return client.search_runs([exp.experiment_id]) if exp else []


def _runs(uri: str, experiment: str = "kestrel_kb"):
    """The job runs (a sweep's parent run left out)."""
    return [r for r in _all_runs(uri, experiment) if r.data.tags.get(SWEEP_TAG) != "parent"]


def _parents(uri: str, experiment: str = "kestrel_kb"):
    return [r for r in _all_runs(uri, experiment) if r.data.tags.get(SWEEP_TAG) == "parent"]


def _quality(run) -> dict:
    """Logged metrics without wall-clock timings and cache bookkeeping (which differ between runs by nature)."""
    return {k: v for k, v in run.data.metrics.items() if not k.startswith(("time.", "cache."))}


def _statuses(runs) -> list[str]:
    return sorted(r.info.status for r in runs)


# ------------------------------------------------------------------ resume, in process


def _bm25(uri: str, *overrides: str):
    return compose(
        ["retriever=bm25", "chunker=fixed", "chunker.chunk_size=200", "stats.bootstrap=0", f"tracking.uri={uri}", "embedding.show_progress=false", *overrides]
    )


@pytest.mark.slow
def test_finished_config_is_skipped_and_resume_false_forces(tracking_uri, capsys):
    first = execute(_bm25(tracking_uri))
    assert "skipped" not in first
    second = execute(_bm25(tracking_uri))
    out = capsys.readouterr().out
    assert f"skip: finished as run {first['run_id']}" in out
    # the skipped job reports the finished run and its logged objective (recall@5)
    assert second["skipped"] is True and second["run_id"] == first["run_id"] and second["evaluation"] is None
    assert second["objective"] == pytest.approx(first["metrics"]["recall@5"])
    assert second["metrics"]["recall_at_5"] == second["objective"]
    assert _statuses(_runs(tracking_uri)) == ["FINISHED"]  # nothing new was logged

    forced = execute(_bm25(tracking_uri, "resume=false"))
    runs = _runs(tracking_uri)
    assert _statuses(runs) == ["FINISHED", "FINISHED"] and forced["run_id"] != first["run_id"]
    # resume is not part of the configuration's identity: both runs carry the same hash
    assert len({r.data.tags["config_hash"] for r in runs}) == 1
    assert forced["metrics"] == first["metrics"]


@pytest.mark.slow
def test_running_run_of_the_same_config_is_closed_as_stale(tracking_uri):
    from harness.experiment import build
    from harness.tracking.tracker import Tracker

    cfg = _bm25(tracking_uri)
    chash = build.config_hash(cfg)
    tracker = Tracker(tracking_uri, "kestrel_kb")
    # what a SIGKILLed job leaves: a RUNNING run with its config hash, and one of another config
    dead = tracker.client.create_run(tracker.experiment_id, run_name="dead", tags={"config_hash": chash}).info.run_id
    other = tracker.client.create_run(tracker.experiment_id, run_name="other", tags={"config_hash": "0123456789abcdef"}).info.run_id
    result = execute(cfg)
    client = mlflow.MlflowClient(tracking_uri)
    stale = client.get_run(dead)
    assert stale.info.status == "KILLED" and stale.data.tags[STALE_TAG] == "true"
    assert client.get_run(other).info.status == "RUNNING"  # another configuration is left alone
    assert client.get_run(result["run_id"]).info.status == "FINISHED"
    assert STALE_TAG not in client.get_run(result["run_id"]).data.tags


def test_resume_must_be_a_boolean(tracking_uri):
    with pytest.raises(ValueError, match="resume must be true or false, got 'maybe'"):
        execute(_bm25(tracking_uri, "resume=maybe"))


def test_runs_with_hash_rejects_a_non_hex_hash(tracking_uri):
    from harness.tracking.tracker import Tracker

    tracker = Tracker(tracking_uri, "kestrel_kb")
    with pytest.raises(ValueError, match="config_hash must be lowercase hex"):
        tracker.runs_with_hash("x' or '1'='1", "FINISHED")
    with pytest.raises(ValueError, match="status must be an MLflow run status"):
        tracker.runs_with_hash("abc", "DONE")


# ------------------------------------------------------------------ a killed sweep, rerun


def _db_statuses(db) -> list[str]:
    """Run statuses read straight from the SQLite file, read-only: an MLflow client here would
    migrate a fresh database while the sweep's first job is creating it."""
    import sqlite3

    if not db.exists():
        return []
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as con:
            return sorted(row[0] for row in con.execute("SELECT status FROM runs"))
    except sqlite3.OperationalError:  # tables not created yet, or briefly locked
        return []


def _wait_for_kill_point(proc, db, log, timeout: float = 600.0) -> None:
    """Poll the store until two jobs are FINISHED and the third is RUNNING (with the sweep's parent run)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the sweep ended (rc {proc.returncode}) before it could be killed mid-way:\n{log.read_text()[-3000:]}")
        statuses = _db_statuses(db)
        if statuses.count("FINISHED") >= 2 and statuses.count("RUNNING") >= 2:
            return
        time.sleep(0.1)
    pytest.fail("the sweep did not reach its third job in time")


@pytest.mark.slow
def test_killed_sweep_resumes_without_redoing_finished_jobs(tmp_path):
    ref_uri = fresh_store(tmp_path / "reference.db")
    uri = fresh_store(tmp_path / "killed.db")

    # the reference: the same 4-job sweep, uninterrupted
    ref = subprocess.run(_cli(SWEEP, tmp_path / "ref"), cwd=PROJECT_ROOT, env=_env(ref_uri), capture_output=True, text=True, timeout=900)
    assert ref.returncode == 0, ref.stderr[-3000:]
    for i, size in enumerate(SIZES, start=1):
        assert f"job {i}/4: fixed-{size}-0-bm25" in ref.stdout
    reference = {r.data.tags["config_hash"]: r for r in _runs(ref_uri)}
    assert len(reference) == 4 and all(r.info.status == "FINISHED" for r in reference.values())

    # the same sweep, SIGKILLed (no chance to close its run) while its third job runs
    log = tmp_path / "killed.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(_cli(SWEEP, tmp_path / "first"), cwd=PROJECT_ROOT, env=_env(uri), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_for_kill_point(proc, tmp_path / "killed.db", log)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    before = _runs(uri)
    assert _statuses(before) == ["FINISHED", "FINISHED", "RUNNING"]
    (dead_parent,) = _parents(uri)
    assert dead_parent.info.status == "RUNNING"  # SIGKILL gave nobody a chance to close it
    finished_before = {r.info.run_id for r in before if r.info.status == "FINISHED"}
    left_running = next(r.info.run_id for r in before if r.info.status == "RUNNING")

    # rerun: the two finished jobs are skipped, the dead run is closed, jobs 3 and 4 run
    again = subprocess.run(_cli(SWEEP, tmp_path / "second"), cwd=PROJECT_ROOT, env=_env(uri), capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    skipped = set(re.findall(r"skip: finished as run ([0-9a-f]{32})", again.stdout))
    assert skipped == finished_before
    # the rerun's sweep sees the first sweep's process gone: it closes that parent and its RUNNING job run
    assert f"closed the parent run of a dead sweep as KILLED: {dead_parent.info.run_id}" in again.stdout
    assert f"as KILLED: {left_running}" in again.stdout
    assert {r.info.run_id: r.info.status for r in _parents(uri)}[dead_parent.info.run_id] == "KILLED"

    after = _runs(uri)
    client = mlflow.MlflowClient(uri)
    assert "RUNNING" not in _statuses(after) + _statuses(_all_runs(uri))
    assert _statuses(after) == ["FINISHED"] * 4 + ["KILLED"]
    stale = client.get_run(left_running)
    assert stale.info.status == "KILLED" and stale.data.tags[STALE_TAG] == "true"
    finished = [r for r in after if r.info.status == "FINISHED"]
    by_hash = {}
    for r in finished:
        by_hash.setdefault(r.data.tags["config_hash"], []).append(r)
    assert sorted(len(v) for v in by_hash.values()) == [1, 1, 1, 1]  # one FINISHED run per configuration
    assert finished_before <= {r.info.run_id for r in finished}  # the finished jobs were not redone
    # results equal the uninterrupted sweep's, configuration by configuration, every metric
    assert set(by_hash) == set(reference)
    for chash, (run,) in by_hash.items():
        assert run.info.run_name == reference[chash].info.run_name
        assert _quality(run) == _quality(reference[chash])


# ------------------------------------------------------------------ parallel launchers


def _two_job_sweep(tmp_path, launcher_args: list[str]):
    uri = fresh_store(tmp_path / "mlflow.db")
    args = [*launcher_args, "retriever=bm25", "chunker=fixed", "chunker.chunk_size=100,150", "stats.bootstrap=0", "embedding.show_progress=false"]
    proc = subprocess.run(_cli(args, tmp_path / "sweep"), cwd=PROJECT_ROOT, env=_env(uri), capture_output=True, text=True, timeout=900, start_new_session=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = _runs(uri)
    assert _statuses(runs) == ["FINISHED", "FINISHED"]
    assert sorted(r.info.run_name for r in runs) == ["fixed-100-0-bm25", "fixed-150-0-bm25"]
    # the jobs ran in other processes, yet each found the sweep's parent run
    (parent,) = _parents(uri)
    assert parent.info.status == "FINISHED" and parent.data.tags["sweep.jobs_finished"] == "2"
    assert {r.data.tags[PARENT_TAG] for r in runs} == {parent.info.run_id}
    assert sorted(r.data.tags[JOB_TAG] for r in runs) == ["1", "2"]
    return proc, runs


@pytest.mark.slow
def test_two_job_sweep_with_the_joblib_launcher(tmp_path):
    proc, runs = _two_job_sweep(tmp_path, ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"])
    assert "Joblib.Parallel(n_jobs=2" in proc.stderr + proc.stdout  # Hydra's joblib launcher ran it
    # the two jobs ran at the same time, writing to one fresh SQLite store
    (a, b) = sorted(runs, key=lambda r: r.info.start_time)
    assert b.info.start_time < a.info.end_time


def _processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that contain ``text`` (read from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if text in cmd:
            found.append(f"{entry}: {cmd[:200]}")
    return found


@pytest.mark.slow
def test_two_job_sweep_on_a_local_ray_head(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_ray_launcher")
    # a short folder: Ray's unix sockets live under its temp dir and must stay < 108 bytes
    ray_tmp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    try:
        proc, _ = _two_job_sweep(tmp_path, ["hydra/launcher=ray_local", "hydra.launcher.ray.init.num_cpus=2", f"+hydra.launcher.ray.init._temp_dir={ray_tmp}"])
        assert "_run_job pid=" in proc.stdout + proc.stderr  # the jobs ran in Ray workers
        assert "job 1/2: fixed-100-0-bm25" in proc.stdout and "job 2/2: fixed-150-0-bm25" in proc.stdout
        # the head, raylet and workers are gone once the sweep returns
        deadline = time.monotonic() + 30
        while _processes_mentioning(ray_tmp) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _processes_mentioning(ray_tmp) == []
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
