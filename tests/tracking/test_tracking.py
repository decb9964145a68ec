"""MLflow run structure: one parent run per sweep with nested job runs, their life cycle
(failure in the middle, Ctrl-C, a SIGKILLed sweep), and the per-run artifacts (PNG plots,
histogram data, chunk sample, per-query table, dataset input). Sweeps go through the real
CLI against real MLflow SQLite stores under tmp_path (BM25 on the bundled kestrel_kb)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import signal
import socket
import sqlite3
import struct
import subprocess
import sys
import time

import mlflow
import pandas as pd
import pytest
from conftest import _SESSION_CACHE, KESTREL_PATH, PROJECT_ROOT, compose, fresh_store
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from harness.experiment.run import chunk_sample, execute
from harness.reporting.charts import chunk_size_figure, histogram, rank_curve_figure
from harness.tracking.callbacks import PARENT_FILE, count_jobs, sweep_name
from harness.tracking.tracker import HOST_TAG, JOB_TAG, PARENT_TAG, PID_START_TAG, PID_TAG, STALE_TAG, SWEEP_TAG, Tracker

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
BM25 = ["retriever=bm25", "chunker=fixed", "stats.bootstrap=0", "embedding.show_progress=false", f"cache.dir={_SESSION_CACHE}"]
N_QUERIES = sum(1 for line in (KESTREL_PATH / "questions.jsonl").read_text(encoding="utf-8").splitlines() if line.strip())


def _sweep(tmp_path, uri: str, args: list[str], name: str = "sweep", check_rc: int | None = 0, timeout: float = 900):
    cmd = [sys.executable, "-m", "harness.run", "-m", *BM25, *args, f"hydra.sweep.dir={tmp_path / name}"]
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(cmd, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if check_rc is not None:
        assert proc.returncode == check_rc, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


def _all_runs(uri: str, experiment: str = "kestrel_kb"):
    client = mlflow.MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], order_by=["attributes.start_time ASC"]) if exp else []
    parents = [r for r in runs if r.data.tags.get(SWEEP_TAG) == "parent"]
    children = [r for r in runs if r.data.tags.get(SWEEP_TAG) != "parent"]
    return client, parents, children


def _table(uri: str, run_id: str, path: str) -> pd.DataFrame:
    """An MLflow table artifact, read back with ``mlflow.load_table`` (which searches the active experiment)."""
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment(experiment_id=mlflow.MlflowClient(uri).get_run(run_id).info.experiment_id)
    return mlflow.load_table(path, run_ids=[run_id])


def _by_job(children) -> list:
    return sorted(children, key=lambda r: int(r.data.tags[JOB_TAG]))


def _png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk, after checking the signature."""
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def _artifact(client, run_id: str, path: str, tmp_path) -> bytes:
    local = client.download_artifacts(run_id, path, str(tmp_path))
    with open(local, "rb") as fh:
        return fh.read()


# ------------------------------------------------------------------ a 2-job sweep, then the same sweep resumed


@pytest.mark.slow
def test_two_job_sweep_has_one_parent_two_children_and_their_artifacts(tmp_path, kestrel):
    uri = fresh_store(tmp_path / "mlflow.db")
    proc = _sweep(tmp_path, uri, ["chunker.chunk_size=100,150"])
    client, parents, children = _all_runs(uri)

    assert len(parents) == 1 and len(children) == 2
    parent = parents[0]
    pid = parent.info.run_id
    assert parent.info.status == "FINISHED"
    assert parent.info.run_name == "sweep chunker.chunk_size=100,150 | retriever=bm25 chunker=fixed stats.bootstrap=0"  # _sweep's fixed overrides
    assert f"sweep parent run {pid}: FINISHED (2 finished)" in proc.stdout
    tags = parent.data.tags
    assert tags["sweep.jobs"] == "2" and tags["sweep.dir"] == str((tmp_path / "sweep").resolve())
    assert (tags["sweep.jobs_finished"], tags["sweep.jobs_failed"], tags["sweep.jobs_killed"], tags["sweep.jobs_skipped"]) == ("2", "0", "0", "0")
    assert tags[HOST_TAG] == socket.gethostname() and int(tags[PID_TAG]) > 0
    # the sweep folder names the parent, so workers of any launcher on this machine find it
    assert json.loads((tmp_path / "sweep" / PARENT_FILE).read_text())["run_id"] == pid

    first, second = _by_job(children)
    assert [r.info.run_name for r in (first, second)] == ["fixed-100-0-bm25", "fixed-150-0-bm25"]
    assert [r.info.status for r in (first, second)] == ["FINISHED", "FINISHED"]
    assert all(r.data.tags[PARENT_TAG] == pid for r in children)
    assert [r.data.params["chunker.chunk_size"] for r in (first, second)] == ["100", "150"]

    # the parent's summary: the best job by recall@5, and one row per job
    recalls = {r.info.run_id: r.data.metrics["recall_at_5"] for r in children}
    best_id = max(recalls, key=recalls.get)
    assert parent.data.metrics["sweep.best_recall_at_5"] == pytest.approx(recalls[best_id])
    assert tags["sweep.best_run_id"] == best_id
    summary = _table(uri, pid, "sweep_summary.json")
    assert list(summary["job"]) == [1, 2] and list(summary["status"]) == ["FINISHED", "FINISHED"]
    assert list(summary["run_id"]) == [first.info.run_id, second.info.run_id]
    assert list(summary["recall_at_5"]) == pytest.approx([recalls[first.info.run_id], recalls[second.info.run_id]])
    # mrr@3 is no MLflow metric of a job (only mrr@10 is): the summary reads it from the job's metrics table
    assert "mrr_at_3" not in first.data.metrics and list(summary["mrr_at_3"]) == pytest.approx(
        [_table(uri, r.info.run_id, "per_query.json")["mrr@3"].mean() for r in (first, second)]
    )
    assert _png_size(_artifact(client, pid, "sweep_objective.png", tmp_path))[0] > 100

    # per-run artifacts of the first job
    run = first
    rid = run.info.run_id
    names = {a.path for a in client.list_artifacts(rid)}
    assert {"chunk_sizes.png", "chunk_sizes.json", "recall_at_k.png", "chunks_sample.jsonl", "per_query.json", "per_query.csv", "config.yaml"} <= names
    for png in ("chunk_sizes.png", "recall_at_k.png"):
        width, height = _png_size(_artifact(client, rid, png, tmp_path))
        assert width >= 300 and height >= 200
    sizes = json.loads(_artifact(client, rid, "chunk_sizes.json", tmp_path))
    n_chunks = int(run.data.metrics["chunks.n_chunks"])  # a headline metric: an MLflow metric
    assert sizes["n_chunks"] == n_chunks
    assert sum(sizes["chars"]["counts"]) == n_chunks == sum(sizes["tokens"]["counts"])
    # fixed 100-token windows: no chunk has more than 100 tokens of text + [CLS] + [SEP]
    assert sizes["tokens"]["edges"][-1] <= 102

    sample = [json.loads(line) for line in _artifact(client, rid, "chunks_sample.jsonl", tmp_path).decode("utf-8").splitlines()]
    assert len(sample) == 20 and len({c["chunk_id"] for c in sample}) == 20
    assert [c["index"] for c in sample] == sorted(c["index"] for c in sample)
    texts = {d.doc_id: d.text for d in kestrel.documents}
    for c in sample:
        assert c["text"] == "".join(texts[c["doc_id"]][s:e] for s, e in c["spans"])

    table = _table(uri, rid, "per_query.json")
    assert len(table) == N_QUERIES
    assert table["recall@5"].mean() == pytest.approx(run.data.metrics["recall_at_5"])

    (dataset_input,) = run.inputs.dataset_inputs
    ds = dataset_input.dataset
    assert ds.name == "kestrel_kb" and ds.digest == kestrel.fingerprint() == run.data.tags["dataset_fingerprint"]
    assert json.loads(ds.source) == {"uri": str(KESTREL_PATH)}
    assert json.loads(ds.profile)["num_rows"] == N_QUERIES
    assert {t.key: t.value for t in dataset_input.tags}["mlflow.data.context"] == "evaluation"

    # the same sweep again: both jobs are skipped; the new parent records them, no empty runs
    again = _sweep(tmp_path, uri, ["chunker.chunk_size=100,150"], name="again")
    client, parents, children_after = _all_runs(uri)
    assert len(children_after) == 2 and len(parents) == 2
    new = next(p for p in parents if p.info.run_id != pid)
    assert new.info.status == "FINISHED"
    assert (new.data.tags["sweep.jobs_finished"], new.data.tags["sweep.jobs_skipped"]) == ("0", "2")
    assert new.data.tags["sweep.skipped.1"] == first.info.run_id and new.data.tags["sweep.skipped.2"] == second.info.run_id
    assert new.data.metrics["sweep.best_recall_at_5"] == pytest.approx(recalls[best_id])
    assert "skip: finished as run" in again.stdout
    skipped = _table(uri, new.info.run_id, "sweep_summary.json")
    assert list(skipped["status"]) == ["SKIPPED", "SKIPPED"]


# ------------------------------------------------------------------ a failure in the middle


@pytest.mark.slow
def test_three_job_sweep_with_an_invalid_middle_job(tmp_path):
    uri = fresh_store(tmp_path / "mlflow.db")
    proc = _sweep(tmp_path, uri, ["chunker.chunk_size=100,0,150"], check_rc=2)  # an invalid job makes the sweep exit 2
    client, parents, children = _all_runs(uri)
    assert len(parents) == 1 and len(children) == 2  # no run for the invalid job
    jobs = _by_job(children)
    assert [r.info.run_name for r in jobs] == ["fixed-100-0-bm25", "fixed-150-0-bm25"]
    assert all(r.info.status == "FINISHED" for r in jobs)
    (line,) = [ln for ln in proc.stderr.splitlines() if "invalid:" in ln]
    assert line.startswith("job 2/3 invalid: fixed-0-0-bm25: chunker.chunk_size must be an integer >= 4 for unit=tokens") and "got 0" in line
    assert "Traceback" not in proc.stderr

    parent = parents[0]
    assert parent.info.status == "FINISHED"  # every job returned; the exit code reports the invalid one
    tags = parent.data.tags
    assert (tags["sweep.jobs"], tags["sweep.jobs_finished"], tags["sweep.jobs_invalid"]) == ("3", "2", "1")
    assert f"sweep parent run {parent.info.run_id}: FINISHED (2 finished, 1 invalid)" in proc.stdout
    best = max(jobs[0].data.metrics["recall_at_5"], jobs[1].data.metrics["recall_at_5"])
    assert parent.data.metrics["sweep.best_recall_at_5"] == pytest.approx(best)
    summary = _table(uri, parent.info.run_id, "sweep_summary.json")
    assert list(summary["status"]) == ["FINISHED", "INVALID", "FINISHED"]
    assert math.isnan(summary["recall_at_5"][1]) and "chunk_size" in summary["error"][1] and summary["run_name"][1] == "fixed-0-0-bm25"


# ------------------------------------------------------------------ Ctrl-C


def _db_statuses(db) -> list[str]:
    """Run statuses read straight from the SQLite file, read-only (no MLflow client: it would
    migrate a database the sweep may be creating)."""
    if not db.exists():
        return []
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as con:
            return [row[0] for row in con.execute("SELECT status FROM runs")]
    except sqlite3.OperationalError:
        return []


@pytest.mark.slow
def test_ctrl_c_leaves_nothing_running(tmp_path):
    db = tmp_path / "mlflow.db"
    uri = f"sqlite:///{db}"
    log = tmp_path / "sweep.log"
    cmd = [sys.executable, "-m", "harness.run", "-m", *BM25, "chunker.chunk_size=100,150,200", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "PYTHONFAULTHANDLER": "1"}
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=PROJECT_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while _db_statuses(db).count("RUNNING") < 2:  # the parent and the first job's run
            if proc.poll() is not None:
                pytest.fail(f"the sweep ended (rc {proc.returncode}) before it could be interrupted:\n{log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail("the first job never started")
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends to the foreground group
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGABRT)  # PYTHONFAULTHANDLER: every thread's stack into the log
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
            pytest.fail(f"the sweep did not end within 120 s of Ctrl-C:\n{log.read_text()[-6000:]}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
    output = log.read_text()
    assert proc.returncode == 130, output[-3000:]  # the shell convention for Ctrl-C
    assert "interrupted (Ctrl-C)" in output and "Traceback" not in output, output[-3000:]
    client, parents, children = _all_runs(uri)
    assert len(parents) == 1 and len(children) == 1, output[-3000:]  # jobs 2 and 3 never started
    assert parents[0].info.status == "KILLED" and children[0].info.status == "KILLED"
    assert parents[0].data.tags["sweep.jobs_killed"] == "1"
    assert "RUNNING" not in _db_statuses(db)


# ------------------------------------------------------------------ Ctrl-C in the middle of an MLflow write


def test_ctrl_c_during_mlflow_writes_leaves_the_store_writable(tracking_uri):
    """Ctrl-C arriving at random moments while runs are being logged: the interrupt still
    arrives, and the same process can then close every run (before signals were held back
    during MLflow calls, an interrupted transaction kept the SQLite write lock and the
    closing write failed with "database is locked")."""
    import random

    from mlflow.entities import Metric

    tracker = Tracker(tracking_uri, "interrupts")
    client = tracker.client
    rng = random.Random(7)
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: os.kill(os.getpid(), signal.SIGINT))
    interrupted = 0
    try:
        for i in range(25):
            run_id = client.create_run(tracker.experiment_id, run_name=f"r{i}").info.run_id
            signal.setitimer(signal.ITIMER_REAL, rng.uniform(0.005, 0.15))
            try:
                for j in range(10_000):
                    client.log_batch(run_id, metrics=[Metric(f"m{j % 50}", float(j), 0, j)])
                    client.set_tag(run_id, f"t{j % 50}", str(j))
            except KeyboardInterrupt:
                interrupted += 1
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            client.set_tag(run_id, "error", "KeyboardInterrupt")
            client.set_terminated(run_id, status="KILLED")
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert interrupted == 25  # every Ctrl-C arrived (after the call it hit, not never)
    runs = mlflow.MlflowClient(tracking_uri).search_runs([tracker.experiment_id], max_results=100)
    assert len(runs) == 25
    assert {r.info.status for r in runs} == {"KILLED"}
    assert all(r.data.tags["error"] == "KeyboardInterrupt" for r in runs)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handlers restored


def test_ctrl_c_while_the_sweep_summary_is_written_still_closes_the_parent(tracking_uri, monkeypatch):
    """Ctrl-C that lands after the last job, while the parent's summary is being written:
    the summary finishes, the parent is closed, then the interrupt arrives (before, the
    parent stayed RUNNING)."""
    import harness.tracking.callbacks as callbacks

    tracker = Tracker(tracking_uri, "kestrel_kb")
    parent = tracker.start("sweep", {SWEEP_TAG: "parent"})
    real = callbacks.finish_sweep
    reached_end = []

    def interrupted_summary(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C in the middle of the summary
        time.sleep(0.05)  # Python runs signal handlers between bytecodes: here, unless held back
        counts = real(*args, **kwargs)
        reached_end.append(True)
        return counts

    monkeypatch.setattr(callbacks, "finish_sweep", interrupted_summary)
    callback = callbacks.SweepRunCallback()
    callback._tracker, callback._parent = tracker, parent
    with pytest.raises(KeyboardInterrupt):
        callback.on_multirun_end(OmegaConf.create({}))
    assert reached_end == [True]
    assert mlflow.MlflowClient(tracking_uri).get_run(parent).info.status == "FINISHED"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


# ------------------------------------------------------------------ a SIGKILLed sweep, closed by the next one


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_parents_of_dead_sweeps_are_closed_with_their_running_children(tracking_uri):
    tracker = Tracker(tracking_uri, "kestrel_kb")
    client = tracker.client
    here = socket.gethostname()

    def parent(name, host, pid, start=""):
        tags = {SWEEP_TAG: "parent", HOST_TAG: host, PID_TAG: str(pid), PID_START_TAG: start}
        return client.create_run(tracker.experiment_id, run_name=name, tags=tags).info.run_id

    def child(parent_id, name):
        return client.create_run(tracker.experiment_id, run_name=name, tags={PARENT_TAG: parent_id, JOB_TAG: "1"}).info.run_id

    from harness.tracking.tracker import process_start

    dead = parent("dead", here, _dead_pid())
    dead_running, dead_done = child(dead, "a"), child(dead, "b")
    client.set_terminated(dead_done, status="FINISHED")
    reused = parent("reused", here, os.getpid(), start="1")  # this pid, but a process that started at tick 1
    alive = parent("alive", here, os.getpid(), start=process_start(os.getpid()))
    alive_child = child(alive, "c")
    remote = parent("remote", "some-other-host", _dead_pid())

    closed = dict(tracker.close_dead_sweeps())
    assert set(closed) == {dead, reused}
    assert closed[dead] == [dead_running] and closed[reused] == []
    status = {rid: client.get_run(rid).info.status for rid in (dead, dead_running, dead_done, reused, alive, alive_child, remote)}
    assert status == {
        dead: "KILLED",
        dead_running: "KILLED",
        dead_done: "FINISHED",
        reused: "KILLED",
        alive: "RUNNING",
        alive_child: "RUNNING",
        remote: "RUNNING",
    }
    assert client.get_run(dead).data.tags[STALE_TAG] == "true" and client.get_run(dead_running).data.tags[STALE_TAG] == "true"


def test_sigterm_style_exit_marks_a_run_killed(tracking_uri):
    tracker = Tracker(tracking_uri, "kestrel_kb")
    with pytest.raises(SystemExit):
        with tracker.run("terminated"):
            raise SystemExit(143)
    run = tracker.client.get_run(tracker.run_id)
    assert run.info.status == "KILLED" and run.data.tags["error"] == "SystemExit: 143"


# ------------------------------------------------------------------ single runs


@pytest.mark.slow
def test_single_run_has_no_parent_and_goes_to_the_configured_experiment(tracking_uri):
    result = execute(compose([*BM25, "chunker.chunk_size=200", f"tracking.uri={tracking_uri}", "tracking.experiment=chunking-lab"]))
    client = mlflow.MlflowClient(tracking_uri)
    assert client.get_experiment_by_name("kestrel_kb") is None  # not the dataset name: it was configured
    exp = client.get_experiment_by_name("chunking-lab")
    (run,) = client.search_runs([exp.experiment_id])
    assert run.info.run_id == result["run_id"] and run.info.run_name == "fixed-200-0-bm25"
    assert PARENT_TAG not in run.data.tags and JOB_TAG not in run.data.tags


# ------------------------------------------------------------------ pieces


def _hydra(task: list[str], sweeper: str = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper", params=None):
    return OmegaConf.create(
        {"sweeper": {"_target_": sweeper, "params": params}, "overrides": {"task": task}, "sweep": {"dir": "/x/multirun/2026-12-01/10-00-00"}}
    )


def test_sweep_size_and_name_from_the_overrides():
    h = _hydra(["retriever=bm25", "chunker=fixed,recursive", "chunker.chunk_size=100,200,300"])
    assert count_jobs(h) == 6
    # the swept overrides, then the fixed ones: two sweeps of one grid on other settings get other names
    assert sweep_name(h) == "sweep chunker=fixed,recursive chunker.chunk_size=100,200,300 | retriever=bm25"
    h = _hydra(["retriever=bm25", "tracking.uri=sqlite:///x.db", "cache.dir=/c", "embedding.show_progress=false"], params={"chunker.chunk_overlap": "0,20"})
    assert count_jobs(h) == 2 and sweep_name(h) == "sweep chunker.chunk_overlap=0,20 | retriever=bm25"  # where it is logged: not in the name
    assert sweep_name(_hydra(["chunker.chunk_size=100,200"])) == "sweep chunker.chunk_size=100,200"
    assert sweep_name(_hydra(["retriever=bm25"])) == "sweep 2026-12-01/10-00-00 | retriever=bm25"
    assert count_jobs(_hydra(["a=1,2"], sweeper="hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper")) is None
    values = ",".join(str(i) for i in range(100, 400))
    long = sweep_name(_hydra([f"chunker.chunk_size={values}"]))
    other = sweep_name(_hydra([f"chunker.chunk_size={values},401"]))
    # cut to 250 characters, ending in a hash of the whole name: two long sweeps never share a name
    assert len(long) == len(other) == 250 and long[:200] == other[:200] and long != other
    assert long.endswith("... " + hashlib.sha256(f"sweep chunker.chunk_size={values}".encode()).hexdigest()[:8])


def test_the_overrides_left_out_of_sweep_names_are_the_hash_neutral_groups():
    from harness.experiment.build import DROP, HASH_NEUTRAL
    from harness.tracking.callbacks import NAME_NEUTRAL

    assert {k for k, v in HASH_NEUTRAL.items() if v == DROP} <= set(NAME_NEUTRAL)
    assert set(NAME_NEUTRAL) <= set(HASH_NEUTRAL)  # nothing that changes a result is left out


_KEY = st.sampled_from(["chunker.chunk_size", "chunker.chunk_overlap", "retriever", "chunker", "metrics.ks", "stats.bootstrap"])
_NEUTRAL = st.sampled_from(["tracking.uri=sqlite:///a.db", "cache.dir=/tmp/c", "embedding.show_progress=false", "hydra.job.chdir=true"])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(_KEY, st.lists(st.integers(1, 10**6), min_size=2, max_size=60, unique=True)), max_size=3, unique_by=lambda t: t[0]),
    st.lists(st.tuples(_KEY, st.integers(1, 999)), max_size=3, unique_by=lambda t: t[0]),
    st.lists(_NEUTRAL, max_size=3),
)
def test_sweep_name_property_swept_then_fixed_never_neutral_at_most_250(swept, fixed, neutral):
    fixed = [(k, v) for k, v in fixed if k not in {s for s, _ in swept}]
    swept_lines = [f"{k}={','.join(map(str, vs))}" for k, vs in swept]
    fixed_lines = [f"{k}={v}" for k, v in fixed]
    name = sweep_name(_hydra([*swept_lines, *fixed_lines, *neutral]))
    assert name.startswith("sweep ") and len(name) <= 250
    head = "sweep " + (" ".join(swept_lines) or "2026-12-01/10-00-00")
    full = head + (" | " + " ".join(fixed_lines) if fixed_lines else "")
    if len(full) <= 250:
        assert name == full  # worked out here from the parts
    else:
        assert name == full[:238] + "... " + hashlib.sha256(full.encode()).hexdigest()[:8]
    assert not any(n.split("=")[0] in name for n in neutral)


def test_histogram_by_hand():
    # 2 bins over [0, 4]: [0, 2) holds 0, 1, 1; the last bin [2, 4] includes its right edge
    assert histogram([0, 1, 1, 2, 4], max_bins=2) == {"n": 5, "edges": [0.0, 2.0, 4.0], "counts": [3, 2]}
    assert histogram([]) == {"n": 0, "edges": [], "counts": []}
    h = histogram(list(range(1000)))
    assert sum(h["counts"]) == 1000 and len(h["counts"]) <= 40
    with pytest.raises(ValueError, match="max_bins must be >= 1"):
        histogram([1], max_bins=0)


def test_figures_are_pngs_and_bad_input_is_named(tmp_path):
    data = chunk_size_figure([10, 20, 30], tmp_path / "sizes.png", tokens=[4, 6, 9], max_seq_length=256, title="t")
    assert data["n_chunks"] == 3 and sum(data["tokens"]["counts"]) == 3
    assert _png_size((tmp_path / "sizes.png").read_bytes()) == (1280, 360)
    metrics = {"recall@1": 0.2, "recall@5": 0.6, "precision@1": 0.3, "precision@5": 0.1}
    assert rank_curve_figure(metrics, [5, 1], tmp_path / "curve.png") == ["recall", "precision"]  # no iou@k: left out
    assert _png_size((tmp_path / "curve.png").read_bytes()) == (640, 360)
    with pytest.raises(ValueError, match="tokens has 2 values but chars has 3"):
        chunk_size_figure([1, 2, 3], tmp_path / "x.png", tokens=[1, 2])
    with pytest.raises(ValueError, match=r"no recall@k for k=\[10\]"):
        rank_curve_figure(metrics, [1, 10], tmp_path / "x.png")


def test_chunk_sample_is_seeded_ordered_and_span_exact(kestrel):
    from harness.chunkers.fixed import FixedChunker

    chunker = FixedChunker(chunk_size=300, chunk_overlap=0, unit="chars")
    chunks = [c for d in kestrel.documents for c in chunker.chunk(d)]
    first = chunk_sample(chunks, 5, seed=3)
    assert first == chunk_sample(chunks, 5, seed=3) and first != chunk_sample(chunks, 5, seed=4)
    rows = [json.loads(line) for line in first.splitlines()]
    assert len(rows) == 5 and [r["index"] for r in rows] == sorted(r["index"] for r in rows)
    for r in rows:
        assert chunks[r["index"]].chunk_id == r["chunk_id"] and r["n_chars"] == sum(e - s for s, e in r["spans"])
    assert len(chunk_sample(chunks[:3], 20).splitlines()) == 3
    with pytest.raises(ValueError, match="n must be >= 0"):
        chunk_sample(chunks, -1)


def test_summary_table_is_readable_with_pandas(tmp_path, tracking_uri):
    """The MLflow table format: NaN cells come back as missing values."""
    tracker = Tracker(tracking_uri, "tables")
    tracker.start("t")
    tracker.log_table(pd.DataFrame({"a": [1.0, float("nan")], "b": ["x", "y"]}), "t.json")
    tracker.end()
    back = _table(tracking_uri, tracker.run_id, "t.json")
    assert list(back["b"]) == ["x", "y"] and back["a"][0] == 1.0 and math.isnan(back["a"][1])
