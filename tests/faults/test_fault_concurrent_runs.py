"""Two runs of one configuration at once (issue 13, class 8).

A job that finds a RUNNING run of its configuration whose process is alive skips, naming
that run, its pid and its host; a RUNNING run whose process is gone is closed as KILLED
(``harness.stale``) and the job runs. The look-up and the creation of the run are one
atomic step per store. Everything is real: ``python -m harness.run`` processes, MLflow
SQLite stores under tmp_path, BM25 on the bundled kestrel_kb dataset, and real processes
(live or exited) standing for the owners of RUNNING runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time

import mlflow
import pytest
from conftest import PROJECT_ROOT, compose, fresh_store

from harness.experiment import build
from harness.experiment.run import EXIT_BUSY, execute
from harness.tracking.tracker import (
    HEARTBEAT_TAG,
    HEARTBEAT_TIMEOUT_S,
    HOST_TAG,
    PID_START_TAG,
    PID_TAG,
    STALE_TAG,
    Owner,
    Tracker,
    process_start,
)
from harness.tracking.worker import RunBusy

BM25 = ["retriever=bm25", "chunker=fixed", "chunker.chunk_size=200", "stats.bootstrap=0", "embedding.show_progress=false"]
HERE = socket.gethostname()


def _env() -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}


def _runs_of(uri: str, chash: str, experiment: str = "kestrel_kb") -> list:
    client = mlflow.MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    return client.search_runs([exp.experiment_id], filter_string=f"tags.config_hash = '{chash}'") if exp else []


def _sleeper() -> subprocess.Popen:
    """A live process of our own standing for the owner of a RUNNING run."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])


def _exited_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _running(tracker: Tracker, chash: str, name: str, tags: dict) -> str:
    """What a job of another process leaves in the store while it works: a RUNNING run of ``chash``."""
    return tracker.client.create_run(tracker.experiment_id, run_name=name, tags={"config_hash": chash, **tags}).info.run_id


def _owner_tags(pid: int, host: str = HERE, start: str | None = None, heartbeat: float | None = None) -> dict:
    return {
        HOST_TAG: host,
        PID_TAG: str(pid),
        PID_START_TAG: process_start(pid) if start is None else start,
        HEARTBEAT_TAG: str(int(time.time() if heartbeat is None else heartbeat)),
    }


# ------------------------------------------------------------------ two real processes at once


@pytest.mark.slow
def test_two_processes_of_one_configuration_started_at_once_give_one_finished_run(tmp_path):
    """Both processes start at the same moment. As soon as one of them has its run in the
    store, that process is paused (SIGSTOP: a slow job, deterministically) until the other
    has ended, then resumed: the other must see a live owner and skip, naming it."""
    uri = fresh_store(tmp_path / "mlflow.db")
    Tracker(uri, "kestrel_kb")  # the store exists (migrated) before both jobs race on it
    chash = build.config_hash(compose([*BM25, f"tracking.uri={uri}"]))
    procs = []
    for i in range(2):
        cmd = [sys.executable, "-m", "harness.run", *BM25, f"tracking.uri={uri}", f"cache.dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / f'out{i}'}"]
        log = open(tmp_path / f"log{i}.txt", "w")
        procs.append(subprocess.Popen(cmd, cwd=PROJECT_ROOT, env=_env(), stdout=log, stderr=subprocess.STDOUT, text=True))
        log.close()
    stopped = None
    try:
        deadline = time.time() + 300
        while time.time() < deadline and stopped is None and all(p.poll() is None for p in procs):
            running = [r for r in _runs_of(uri, chash) if r.info.status == "RUNNING"]
            if running:
                owner = running[0].data.tags.get(PID_TAG)
                assert owner in {str(p.pid) for p in procs}, f"the RUNNING run records no process of ours: {running[0].data.tags}"
                stopped = next(p for p in procs if str(p.pid) == owner)
                os.kill(stopped.pid, signal.SIGSTOP)
            time.sleep(0.05)
        assert stopped is not None, "no run appeared while both processes ran"
        other = next(p for p in procs if p is not stopped)
        other.wait(timeout=300)
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGCONT)
    for p in procs:
        p.wait(timeout=600)
    outs = [(tmp_path / f"log{i}.txt").read_text() for i in range(2)]
    codes = [p.returncode for p in procs]
    logs = "\n".join(f"--- process {i} rc {c}\n{o[-3000:]}" for i, (c, o) in enumerate(zip(codes, outs)))

    runs = _runs_of(uri, chash)
    assert [r.info.status for r in runs] == ["FINISHED"], logs  # one run of the configuration, FINISHED; no stale, no duplicate
    (run,) = runs
    assert STALE_TAG not in run.data.tags, logs
    assert stopped.returncode == 0 and other.returncode == EXIT_BUSY, logs
    # the run records the process that made it
    assert run.data.tags[PID_TAG] == str(stopped.pid) and run.data.tags[HOST_TAG] == HERE
    assert run.data.tags[PID_START_TAG] != ""
    # the other process names the running run, its pid and its host, and did no work
    out = outs[procs.index(other)]
    assert "skip:" in out and run.info.run_id in out, logs
    assert f"pid {stopped.pid}" in out and f"host {HERE}" in out, logs
    assert "MLflow run id:" not in out, logs


# ------------------------------------------------------------------ the look-up and the creation are one step


_CLAIMER = textwrap.dedent(
    """
    import json, os, sys, time
    from harness.tracking.tracker import Owner, Tracker
    uri, chash, folder, name, lock = sys.argv[1:6]
    tracker = Tracker(uri, "claims")
    open(os.path.join(folder, name + ".ready"), "w").close()
    while not os.path.exists(os.path.join(folder, "go")):
        time.sleep(0.001)
    claim = tracker.claim(chash, "claimer", owner=Owner.current(), lock={"auto": None, "off": False}[lock])
    result = {"run_id": claim.run_id, "busy": None if claim.busy is None else claim.busy.run_id, "message": claim.busy.message() if claim.busy else ""}
    with open(os.path.join(folder, name + ".json.tmp"), "w") as fh:
        json.dump(result, fh)
    os.replace(os.path.join(folder, name + ".json.tmp"), os.path.join(folder, name + ".json"))
    deadline = time.time() + 300  # stay alive: the owner of a claimed run must look alive to the others
    while not os.path.exists(os.path.join(folder, "release")) and time.time() < deadline:
        time.sleep(0.05)
    """
)


def _wait_for(paths, timeout: float, procs) -> None:
    deadline = time.time() + timeout
    while not all(p.exists() for p in paths):
        if time.time() > deadline or any(p.poll() is not None for p in procs):
            pytest.fail("claimers: " + "; ".join(p.stderr.read()[-1500:] if p.poll() is not None else "running" for p in procs))
        time.sleep(0.02)


@pytest.mark.slow
@pytest.mark.parametrize("lock", ["auto", "off"], ids=["file-lock", "create-then-check"])
def test_claims_at_the_same_moment_create_exactly_one_run(tmp_path, lock):
    """Three processes claim one configuration at the same instant: with the store's file
    lock (SQLite), and with the lock-free protocol used for tracking servers (create, then
    yield to an earlier live claim and delete one's own)."""
    uri = fresh_store(tmp_path / "mlflow.db")
    Tracker(uri, "claims")
    chash = "c0ffee" * 2
    names = ["a", "b", "c"]
    procs = [
        subprocess.Popen([sys.executable, "-c", _CLAIMER, uri, chash, str(tmp_path), n, lock], cwd=PROJECT_ROOT, env=_env(), stderr=subprocess.PIPE, text=True)
        for n in names
    ]
    try:
        _wait_for([tmp_path / f"{n}.ready" for n in names], 240, procs)  # all have imported MLflow and opened the store
        (tmp_path / "go").touch()
        _wait_for([tmp_path / f"{n}.json" for n in names], 120, procs)
        results = [json.loads((tmp_path / f"{n}.json").read_text()) for n in names]
        runs = _runs_of(uri, chash, "claims")  # deleted runs (yielded claims) are not listed
    finally:
        (tmp_path / "release").touch()
        for p in procs:
            p.wait(timeout=60)
    made = [r["run_id"] for r in results if r["run_id"]]
    assert len(made) == 1, results
    (winner_run,) = made
    winner_pid = next(p.pid for p, r in zip(procs, results) if r["run_id"])
    for r in results:
        if not r["run_id"]:
            assert r["busy"] == winner_run, results
            assert f"pid {winner_pid}" in r["message"] and f"host {HERE}" in r["message"], r
    assert [(r.info.run_id, r.info.status) for r in runs] == [(winner_run, "RUNNING")]


# ------------------------------------------------------------------ dead owners are closed, live ones are not


@pytest.mark.slow
def test_runs_of_dead_processes_are_closed_and_the_new_run_proceeds_recording_its_process(tmp_path):
    uri = fresh_store(tmp_path / "mlflow.db")
    cfg = compose([*BM25, f"tracking.uri={uri}"])
    chash = build.config_hash(cfg)
    tracker = Tracker(uri, "kestrel_kb")
    sleeper = _sleeper()
    try:
        exited = _running(tracker, chash, "exited", _owner_tags(_exited_pid(), start="12345"))
        # the pid is in use again, by a process that started at another time than the run's owner
        reused = _running(tracker, chash, "reused", _owner_tags(sleeper.pid, start="1"))
        older = _running(tracker, chash, "older-version", {})  # no process recorded: as before, taken as dead
        away = _running(
            tracker, chash, "silent-elsewhere", _owner_tags(4242, host="other-host.invalid", start="7", heartbeat=time.time() - HEARTBEAT_TIMEOUT_S - 60)
        )
        result = execute(cfg)
    finally:
        sleeper.kill()
        sleeper.wait()
    client = mlflow.MlflowClient(uri)
    for run_id in (exited, reused, older, away):
        run = client.get_run(run_id)
        assert run.info.status == "KILLED" and run.data.tags[STALE_TAG] == "true", run_id
    new = client.get_run(result["run_id"])
    assert new.info.status == "FINISHED" and STALE_TAG not in new.data.tags
    assert new.data.tags[HOST_TAG] == HERE and new.data.tags[PID_TAG] == str(os.getpid())
    assert new.data.tags[PID_START_TAG] == process_start(os.getpid())
    assert abs(int(new.data.tags[HEARTBEAT_TAG]) - time.time()) < 600


@pytest.mark.slow
def test_a_run_whose_process_is_alive_is_named_and_left_alone(tmp_path, capsys):
    uri = fresh_store(tmp_path / "mlflow.db")
    cfg = compose([*BM25, f"tracking.uri={uri}"])
    chash = build.config_hash(cfg)
    tracker = Tracker(uri, "kestrel_kb")
    sleeper = _sleeper()
    try:
        live = _running(tracker, chash, "live", _owner_tags(sleeper.pid))
        with pytest.raises(RunBusy) as info:
            execute(cfg)
        with pytest.raises(RunBusy):  # resume=false reruns FINISHED configurations, never beside a live run
            execute(compose([*BM25, f"tracking.uri={uri}", "resume=false"]))
    finally:
        sleeper.kill()
        sleeper.wait()
    message = str(info.value)
    assert live in message and f"pid {sleeper.pid}" in message and f"host {HERE}" in message
    assert info.value.busy["run_id"] == live
    assert f"skip: {message}" in capsys.readouterr().out
    runs = _runs_of(uri, chash)
    assert [(r.info.run_id, r.info.status) for r in runs] == [(live, "RUNNING")]  # not closed, nothing new
    assert STALE_TAG not in runs[0].data.tags


def test_a_run_on_another_host_counts_as_alive_while_its_heartbeat_is_fresh(tmp_path):
    uri = fresh_store(tmp_path / "mlflow.db")
    cfg = compose([*BM25, f"tracking.uri={uri}"])
    chash = build.config_hash(cfg)
    tracker = Tracker(uri, "kestrel_kb")
    remote = _running(tracker, chash, "remote", _owner_tags(4242, host="other-host.invalid", start="7", heartbeat=time.time() - 30))
    with pytest.raises(RunBusy) as info:
        execute(cfg)
    message = str(info.value)
    assert remote in message and "pid 4242" in message and "host other-host.invalid" in message
    assert "cannot be checked from here" in message and f"{int(HEARTBEAT_TIMEOUT_S)} s" in message
    assert [r.info.status for r in _runs_of(uri, chash)] == ["RUNNING"]


def test_a_run_left_open_by_this_very_process_is_stale(tmp_path):
    """A process runs one job at a time: its own earlier RUNNING run (its tracking worker
    died before closing it) is not a rival."""
    uri = fresh_store(tmp_path / "mlflow.db")
    tracker = Tracker(uri, "claims")
    chash = "abcdef12"
    me = Owner.current()
    mine = _running(tracker, chash, "mine", _owner_tags(os.getpid()))
    claim = tracker.claim(chash, "again", owner=me)
    assert claim.busy is None and claim.run_id not in (None, mine)
    assert [rid for rid, _ in claim.stale] == [mine]
    assert tracker.client.get_run(mine).info.status == "KILLED"


def test_the_worker_renews_the_heartbeat_of_its_open_run_only_when_due(tmp_path):
    from harness.tracking.tracker import HEARTBEAT_S
    from harness.tracking.worker import _heartbeat

    tracker = Tracker(fresh_store(tmp_path / "mlflow.db"), "claims")
    claim = tracker.claim("beef01", "beating", owner=Owner.current())
    first = int(tracker.get_run(claim.run_id).data.tags[HEARTBEAT_TAG])
    state = {"open": tracker, "beat": time.monotonic()}
    assert 0 < _heartbeat(state) <= HEARTBEAT_S  # not due yet: nothing written
    time.sleep(1.1)
    assert int(tracker.get_run(claim.run_id).data.tags[HEARTBEAT_TAG]) == first
    state["beat"] = time.monotonic() - HEARTBEAT_S - 1  # a beat is due
    assert _heartbeat(state) == HEARTBEAT_S
    assert int(tracker.get_run(claim.run_id).data.tags[HEARTBEAT_TAG]) > first
    assert _heartbeat({"open": None}) == HEARTBEAT_S  # no open run: nothing to renew


# ------------------------------------------------------------------ in a sweep


@pytest.mark.slow
def test_a_sweep_records_a_job_running_elsewhere_and_exits_busy(tmp_path):
    uri = fresh_store(tmp_path / "mlflow.db")
    tracker = Tracker(uri, "kestrel_kb")
    base = ["retriever=bm25", "chunker=fixed", "stats.bootstrap=0", "embedding.show_progress=false"]
    busy_hash = build.config_hash(compose([*base, "chunker.chunk_size=150", f"tracking.uri={uri}"]))
    free_hash = build.config_hash(compose([*base, "chunker.chunk_size=250", f"tracking.uri={uri}"]))
    sleeper = _sleeper()
    try:
        live = _running(tracker, busy_hash, "live", _owner_tags(sleeper.pid))
        cmd = [
            sys.executable,
            "-m",
            "harness.run",
            "-m",
            *base,
            "chunker.chunk_size=150,250",
            f"cache.dir={tmp_path / 'cache'}",
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
        ]
        proc = subprocess.run(cmd, cwd=PROJECT_ROOT, env={**_env(), "MLFLOW_TRACKING_URI": uri}, capture_output=True, text=True, timeout=600)
    finally:
        sleeper.kill()
        sleeper.wait()
    logs = proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.returncode == EXIT_BUSY, logs
    assert re.search(rf"skip: .*{live}.*pid {sleeper.pid}.*host {re.escape(HERE)}", proc.stdout), logs
    assert [r.info.status for r in _runs_of(uri, busy_hash)] == ["RUNNING"]  # the live run is left alone
    assert [r.info.status for r in _runs_of(uri, free_hash)] == ["FINISHED"]  # the other job ran
    client = mlflow.MlflowClient(uri)
    (parent,) = [r for r in client.search_runs([tracker.experiment_id]) if r.data.tags.get("harness.sweep") == "parent"]
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["sweep.busy.1"] == live
    assert parent.data.tags["sweep.jobs_busy"] == "1" and parent.data.tags["sweep.jobs_finished"] == "1"
