"""Tracking server mode: a real ``mlflow server`` on a free loopback port, started with the
documented command ``python -m harness server``, and a real ``python -m harness.run`` logging
to it over HTTP (BM25 on the bundled kestrel_kb dataset, for speed)."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pandas as pd
import pytest
import yaml
from conftest import _SESSION_CACHE, PROJECT_ROOT

from harness.tracking.server import backend_uri, server_command, start_server

#: An 8,000-character free-text value: over MLflow's 6,000-character param limit.
LONG_NOTE = " ".join(f"note{i:04d}" for i in range(889))  # 889 words of 8 characters + 888 spaces


def _expected_param(value: str) -> str:
    """What a value over 6,000 characters must be stored as: its head, then its sha256 (first
    12 hex digits), 6,000 characters in all (worked out here, not taken from the tracker)."""
    tail = "...[truncated sha256:" + hashlib.sha256(value.encode("utf-8")).hexdigest()[:12] + "]"
    return value[: 6000 - len(tail)] + tail


def _group_gone(pgid: int, wait: float = 10.0) -> bool:
    """True once no process is left in process group ``pgid`` (polled up to ``wait`` seconds)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


def _env() -> dict:
    return {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """``python -m harness server --port 0 --root <tmp>``: yields ``(url, root)``. Stopped with
    SIGTERM (as a service manager would); it must exit 0 and leave no server process behind."""
    root = tmp_path_factory.mktemp("server")
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "server", "--port", "0", "--root", str(root)],
        cwd=PROJECT_ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    info, lines = {}, []
    try:
        for line in proc.stdout:  # printed once /health answers; EOF when the start failed
            lines.append(line)
            key, _, value = line.partition(":")
            info[key.strip()] = value.strip()
            if line.startswith("Ctrl-C stops it."):
                break
        if "process group" not in info:
            proc.wait(timeout=30)
            pytest.fail(f"python -m harness server did not start (rc {proc.returncode}):\n{''.join(lines)}\n{proc.stderr.read()[-3000:]}")
        yield info["MLflow tracking server"].split()[0], root, int(info["process group"]), "".join(lines)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            if "process group" in info:
                server_group = int(info["process group"])
                gone = _group_gone(server_group)
                if not gone:
                    os.killpg(server_group, signal.SIGKILL)
    assert rc == 0 and "server stopped" in proc.stdout.read()
    assert gone, "the mlflow server's process group outlived python -m harness server"


def test_server_command_uses_sqlite_served_artifacts_and_loopback(tmp_path):
    cmd = server_command(tmp_path / "lab", 5123)
    db = (tmp_path / "lab").resolve() / "mlflow.db"
    assert cmd[1:4] == ["-m", "mlflow", "server"]
    args = cmd[4:]
    assert args[args.index("--backend-store-uri") + 1] == f"sqlite:///{db}" == backend_uri(tmp_path / "lab")
    assert args[args.index("--artifacts-destination") + 1] == str(db.parent / "artifacts")
    assert "--serve-artifacts" in args
    assert args[args.index("--host") + 1] == "127.0.0.1"
    assert args[args.index("--port") + 1] == "5123"
    assert args[args.index("--workers") + 1] == "1"
    with pytest.raises(ValueError, match="port must be an integer in 1..65535, got 70000"):
        server_command(tmp_path, 70000)
    with pytest.raises(ValueError, match="workers must be an integer >= 1, got 0"):
        server_command(tmp_path, 5000, workers=0)


@pytest.mark.slow
def test_server_cli_prints_where_it_listens(server):
    url, root, _, banner = server
    assert url.startswith("http://127.0.0.1:") and int(url.rsplit(":", 1)[1]) > 0
    assert f"backend store:          sqlite:///{root.resolve() / 'mlflow.db'}" in banner
    assert f"python -m harness.run tracking.uri={url}" in banner
    assert (root / "mlflow.db").is_file()


@pytest.mark.slow
def test_harness_run_logs_to_the_server_over_http(server, tmp_path):
    url, root, _, _ = server
    cmd = [
        sys.executable,
        "-m",
        "harness.run",
        "retriever=bm25",
        "chunker=fixed",
        "chunker.chunk_size=200",
        "stats.bootstrap=0",
        "embedding.show_progress=false",
        f"tracking.uri={url}",
        "tracking.experiment=served",
        f"cache.dir={_SESSION_CACHE}",
        f"+note={LONG_NOTE}",  # a long free-text config value: an 8,000-character param
        f"hydra.run.dir={tmp_path / 'out'}",
    ]
    done = subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"tracking URI:  {url}" in done.stdout
    assert not (tmp_path / "mlruns").exists() and not (tmp_path / "mlflow.db").exists()  # nothing logged locally

    client = mlflow.MlflowClient(url)  # everything read back over HTTP
    exp = client.get_experiment_by_name("served")
    assert exp.artifact_location.startswith("mlflow-artifacts:")  # artifacts go through the server
    (run,) = client.search_runs([exp.experiment_id])
    assert run.info.status == "FINISHED" and run.info.run_name == "fixed-200-0-bm25"
    assert run.data.params["chunker.chunk_size"] == "200" and run.data.tags["retriever"] == "bm25"
    # the 8,000-character param: stored cut to MLflow's 6,000 with its hash, full text in config.yaml
    assert len(LONG_NOTE) == 8000
    assert run.data.params["note"] == _expected_param(LONG_NOTE)
    config = yaml.safe_load(Path(client.download_artifacts(run.info.run_id, "config.yaml", str(tmp_path))).read_text())
    assert config["note"] == LONG_NOTE
    # metrics equal the mean of the per-query table downloaded through the server
    per_query = pd.read_csv(client.download_artifacts(run.info.run_id, "per_query.csv", str(tmp_path)), dtype={"query_id": str})
    assert len(per_query) == int(run.data.tags["n_queries"]) == per_query["query_id"].nunique()
    for k in (1, 5, 10):
        assert run.data.metrics[f"recall_at_{k}"] == pytest.approx(per_query[f"recall@{k}"].mean(), abs=1e-12)
    assert 0.2 < run.data.metrics["recall_at_5"] <= 1.0
    assert [h.step for h in sorted(client.get_metric_history(run.info.run_id, "recall_curve"), key=lambda h: h.step)] == [1, 3, 5, 10]
    # the files live under the server's root, not beside the client
    stored = {p.name for p in (root / "artifacts").rglob("*") if p.is_file()}
    assert {"config.yaml", "per_query.csv", "results.txt"} <= stored


@pytest.mark.slow
def test_tracker_logs_an_8000_character_param_and_tag_to_the_server(server):
    from harness.tracking.tracker import Tracker

    url, _, _, _ = server
    tracker = Tracker(url, "long_values")
    with tracker.run("long-param"):
        tracker.log_params({"note": LONG_NOTE, "short": "kept"})
        tracker.set_tags({"note": LONG_NOTE})
    run = mlflow.MlflowClient(url).get_run(tracker.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params == {"note": _expected_param(LONG_NOTE), "short": "kept"}
    assert run.data.tags["note"] == LONG_NOTE  # tags hold 8,000 characters whole


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds leftover processes through Linux /proc")
def test_start_server_gives_up_with_the_log_tail_and_leaves_nothing_running(tmp_path):
    root = tmp_path / "slow"
    with pytest.raises(RuntimeError, match=r"did not answer on http://127\.0\.0\.1:\d+/health within 0\.2 s") as err:
        start_server(root, timeout=0.2)  # a fresh server needs seconds: this start must give up
    assert "mlflow server --backend-store-uri" in str(err.value)  # the command and the log tail are quoted
    assert (root / "server.log").is_file()
    assert _processes_mentioning(str(root.resolve())) == []


def _processes_mentioning(text: str) -> list[int]:
    """Pids whose command line contains ``text`` (Linux ``/proc``)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # exited meanwhile
            continue
        if text in cmdline:
            pids.append(int(entry.name))
    return pids


@pytest.mark.slow
def test_start_server_rejects_a_bad_timeout(tmp_path):
    with pytest.raises(ValueError, match="timeout must be > 0 seconds, got 0"):
        start_server(tmp_path, timeout=0)


def test_the_readme_opens_the_ui_with_harness_server_on_the_store_runs_log_to(monkeypatch, tmp_path):
    import re

    from harness.tracking.tracker import resolve_tracking_uri

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    readme = (PROJECT_ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Comparing runs") :]
    first = re.search(r"`((?:\.venv/bin/)?(?:mlflow|harness) \w+[^`]*)`", section).group(1)
    # the first UI command of the section is harness server (one uvicorn worker, job runners off), not `mlflow ui`
    assert first.startswith("harness server"), first
    root = re.search(r"--root (\S+)", first).group(1)
    # ... rooted where the default run logs: its backend is the default tracking store
    # (a project folder of the test's own: resolving the default store creates its folder)
    assert backend_uri(tmp_path / root) == resolve_tracking_uri(None, tmp_path)
    cmd = server_command(tmp_path / root, 5000)
    assert str((tmp_path / root / "artifacts").resolve()) in " ".join(cmd)  # the default run's artifact folder
