"""embedding.distributed=ray: a real local Ray cluster on 127.0.0.1 (one head, two actors
of two torch threads each, started once for the module) embeds the cache misses of a real
run; every vector is bitwise the single-process run's, every metric equal, the driver
writes each vector to the cache once and a warm rerun starts no actor.
Bad settings and an unreachable head fail in one line before any work."""

import os
import secrets
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import mlflow
import pytest
from conftest import compose, fresh_store
from loopback import free_port

import harness
from harness.cache import EmbeddingCache
from harness.embeddings.model import Encoder
from harness.tracking.runs import run_metrics

pytest.importorskip("ray")

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SQUAD = PROJECT_ROOT / "tests" / "data" / "squad_saltmere" / "saltmere_squad.json"
RUN = ["dataset=squad", f"dataset.path={SQUAD}", "dataset.name=saltmere_squad", "chunker=fixed", "chunker.chunk_size=24", "retriever=faiss"]
#: Settings that describe the work, not its result.
BOOKKEEPING = ("time.", "cache.", "embedding.texts_embedded", "embedding.cache_hits", "embedding.ray_workers")


@pytest.fixture(scope="module")
def ray_head():
    """``127.0.0.1:<port>`` of a Ray head with 4 CPUs started for this module (two actors
    of two threads), token authentication, everything Ray writes about the session in a
    temporary folder; its workers import this checkout's ``harness``. Stopped afterwards
    (its process group only), and the test process disconnected."""
    import ray
    from ray._raylet import Config

    root = Path(tempfile.mkdtemp(prefix="hray"))  # short: Ray's socket paths must stay < 108 chars
    port = free_port()
    env_now = {
        "RAY_AUTH_MODE": "token",
        # a token of this module's own, in the environment the head, its workers and the driver share:
        # nothing is read from or written to ~/.ray (Ray 2.60's `ray start` refuses token mode without one)
        "RAY_AUTH_TOKEN": secrets.token_hex(32),
        "RAY_TMPDIR": str(root),
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    saved = {k: os.environ.get(k) for k in env_now}
    os.environ.update(env_now)
    Config.initialize("")  # Ray read RAY_AUTH_MODE when it was imported; read it again (as `ray start` does)
    env = {**os.environ, "PYTHONPATH": str(Path(harness.__file__).resolve().parents[1])}
    (root / "ray").mkdir()
    cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}"]
    cmd += ["--num-cpus=4", "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={root / 'ray'}"]
    log = open(root / "head.log", "w")  # noqa: SIM115 - open for the module's lifetime
    head = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while "Ray runtime started" not in (root / "head.log").read_text(errors="replace"):
            if head.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"ray start failed: {(root / 'head.log').read_text(errors='replace')[-2000:]}")
            time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        ray.shutdown()
        if head.poll() is None:
            os.killpg(head.pid, signal.SIGTERM)  # `ray start --block` stops the processes it started
            try:
                head.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(head.pid, signal.SIGKILL)
                head.wait()
        log.close()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        Config.initialize("")
        shutil.rmtree(root, ignore_errors=True)


def _stored(cache_dir: Path) -> dict[tuple[str, str], bytes]:
    """Every vector of an embedding cache as raw float32 bytes, by (embedding key, text key);
    the rows by model input (``ids:...``, written where the encoder shares inputs, which Ray
    actors do not) are left out."""
    with sqlite3.connect(cache_dir / "embeddings" / "embeddings.sqlite") as conn:
        rows = conn.execute("SELECT model_key, text_key, vec FROM vectors WHERE text_key NOT LIKE 'ids:%'")
        return {(m, t): bytes(v) for m, t, v in rows}


@pytest.mark.slow
def test_a_run_on_the_cluster_equals_the_single_process_run(ray_head, tmp_path, monkeypatch):
    from harness.experiment.run import execute

    uri = fresh_store(tmp_path / "m.db")
    client = mlflow.MlflowClient(uri)
    # batch_size 2: blocks of 8 texts, so the chunks and the queries are several blocks over two actors
    common = [*RUN, f"tracking.uri={uri}", "embedding.show_progress=false", "embedding.batch_size=2"]
    local = execute(compose([*common, f"cache.dir={tmp_path / 'local'}"]))

    written: list[str] = []
    real_put = EmbeddingCache.put

    def counting_put(self, model_key, vectors, description):
        written.extend(vectors)
        return real_put(self, model_key, vectors, description)

    monkeypatch.setattr(EmbeddingCache, "put", counting_put)
    spread_cfg = [*common, f"cache.dir={tmp_path / 'ray'}", "embedding.distributed=ray", f"embedding.ray_address={ray_head}"]
    cold = execute(compose(spread_cfg))
    quality = {k: v for k, v in local["metrics"].items() if not k.startswith(BOOKKEEPING)}
    assert quality and {k: cold["metrics"][k] for k in quality} == quality  # exact equality, every metric
    mine, theirs = _stored(tmp_path / "local"), _stored(tmp_path / "ray")
    assert len(mine) > 8 and theirs == mine  # every chunk and query vector, bit for bit
    logged = client.get_run(cold["run_id"]).data
    values = run_metrics(uri, cold["run_id"])  # every recorded value: MLflow metrics and the metrics table
    assert values["embedding.ray_workers"] == 2.0  # 4 free CPUs // 2 torch threads
    assert values["embedding.texts_embedded"] == len(mine) == len(written) == len(set(written))  # each vector written once, by the driver
    assert logged.tags["embedding.distributed"] == "ray" and "embedding.distributed" not in client.get_run(local["run_id"]).data.tags

    written.clear()
    warm = execute(compose([*spread_cfg, "resume=false"]))
    assert {k: warm["metrics"][k] for k in quality} == quality
    logged = run_metrics(uri, warm["run_id"])
    assert logged["embedding.texts_embedded"] == 0 and logged["embedding.ray_workers"] == 0.0 and written == []  # no actor started
    assert logged["embedding.cache_hits"] == len(mine)


def test_an_unreachable_head_fails_in_one_line_before_any_work():
    port = free_port()  # nothing listens there
    encoder = Encoder(distributed="ray", ray_address=f"127.0.0.1:{port}")
    with pytest.raises(ValueError, match=rf"^embedding.ray_address='127.0.0.1:{port}': no Ray head answers at 127.0.0.1:{port} .*ray start --head") as info:
        encoder.preflight()
    assert "\n" not in str(info.value)


def test_bad_settings_are_refused_naming_them(monkeypatch):
    with pytest.raises(ValueError, match=r"embedding.distributed must be one of None, 'ray', got 'rya' \(did you mean 'ray'\?\)"):
        Encoder(distributed="rya")
    with pytest.raises(ValueError, match=r"embedding.ray_address is set .* but embedding.distributed is null; set embedding.distributed=ray"):
        Encoder(ray_address="127.0.0.1:6379")
    for name in ("ray_workers", "ray_threads"):
        with pytest.raises(ValueError, match=rf"embedding.{name} must be null or an integer >= 1, got 0"):
            Encoder(distributed="ray", **{name: 0})
    import importlib.metadata

    real = importlib.metadata.version

    def without_ray(name):
        if name == "ray":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", without_ray)  # as on a machine without the extra
    with pytest.raises(ValueError, match=r"^embedding.distributed=ray needs Ray, which is not installed: pip install 'harness\[ray\]'$"):
        Encoder(distributed="ray").preflight()


def test_the_settings_leave_every_config_hash_unchanged_at_null():
    from harness.experiment.build import config_hash

    base = compose(["paths.root=/project"])
    assert base.embedding.distributed is None and base.embedding.ray_workers is None
    assert config_hash(compose(["paths.root=/project", "embedding.distributed=ray"])) != config_hash(base)
