"""What ``harness run`` prints, through real subprocesses on a real MLflow store in tmp_path:
configuration errors as one line with exit code 2 and no run, a skipped rerun with the
earlier run's table, a sweep with one line per job and the summary naming the best job;
and the embedding progress bar advancing per batch (unit level, the real model)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import mlflow
import pytest
from conftest import KESTREL_PATH, PROJECT_ROOT, fresh_store

#: Fast settings shared by every run here (BM25 on the bundled dataset, no bootstrap).
FAST = ["retriever=bm25", "chunker=fixed", "stats.bootstrap=0", "embedding.show_progress=false", f"dataset.path={KESTREL_PATH}"]


def _run(tmp, uri: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "harness.run", *args, f"tracking.uri={uri}", f"cache.dir={tmp / 'cache'}", f"hydra.run.dir={tmp / 'out'}"]
    full_env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    full_env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **(env or {})})
    return subprocess.run(cmd, cwd=PROJECT_ROOT, env=full_env, capture_output=True, text=True, timeout=600)


def _runs(uri: str) -> list:
    """Every run in the store, all experiments, deleted ones included."""
    from mlflow.entities import ViewType

    client = mlflow.MlflowClient(uri)
    ids = [e.experiment_id for e in client.search_experiments(view_type=ViewType.ALL)]
    return list(client.search_runs(ids, run_view_type=ViewType.ALL)) if ids else []


# ------------------------------------------------------------------ configuration errors


@pytest.fixture(scope="module")
def bad_store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bad")
    return tmp, fresh_store(tmp / "mlflow.db")


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["chunker.chunk_overlap=300", "chunker.chunk_size=254"], ["chunker.chunk_overlap", "[0, 254)", "got 300"]),
        (["dataset.path={tmp}/nowhere"], ["expected a corpus folder", "nowhere"]),
        (["chunker=semantic", "chunker.threshold=high"], ["chunker.threshold", "[-1, 1]", "'high'"]),
        (["chunker.chunk_sise=300"], ["chunker.chunk_sise: unknown setting", "did you mean chunker.chunk_size?"]),
        (["+chunker.chunk_sise=300"], ["chunker.chunk_sise: unknown setting", "did you mean chunker.chunk_size?", "FixedChunker"]),
        (["chunker=fixd"], ["chunker=fixd: no such option", "did you mean chunker=fixed?"]),
        (["-m", "chunker=fixed,recursiv"], ["chunker=recursiv: no such option", "did you mean chunker=recursive?"]),
    ],
    ids=["overlap>size", "missing dataset.path", "threshold=high", "misspelt key", "misspelt +key", "unknown option", "unknown option in a sweep"],
)
def test_a_config_error_is_one_line_exit_2_and_no_run(bad_store, overrides, expected):
    tmp, uri = bad_store
    extra = [o.format(tmp=tmp) for o in overrides]
    keys = {o.split("=", 1)[0].lstrip("+") for o in extra}
    base = [o for o in FAST if o.split("=", 1)[0] not in keys]  # each key once: a repeated key adds a warning line
    proc = _run(tmp, uri, *base, *extra)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("harness run: ") and "Traceback" not in proc.stderr
    for fragment in expected:
        assert fragment in lines[0], lines[0]
    assert proc.stdout.strip() == ""
    assert _runs(uri) == []  # refused before the tracker opened a run


def test_hydra_full_error_still_shows_the_traceback(bad_store):
    tmp, uri = bad_store
    proc = _run(tmp, uri, *FAST, "chunker.chunk_sise=300", env={"HYDRA_FULL_ERROR": "1"})
    assert proc.returncode != 0 and "Traceback" in proc.stderr and "chunk_sise" in proc.stderr


# ------------------------------------------------------------------ a sweep, then a rerun


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sweep")
    uri = fresh_store(tmp / "mlflow.db")
    proc = _run(tmp, uri, "-m", *FAST, "chunker.chunk_size=100,200", f"hydra.sweep.dir={tmp / 'multirun'}")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    jobs = {r.info.run_name: r for r in _runs(uri) if r.data.tags.get("harness.sweep") != "parent"}
    return tmp, uri, proc, jobs


@pytest.mark.slow
def test_a_sweep_prints_one_line_per_job_and_the_best_job(sweep):
    _, _, proc, jobs = sweep
    assert set(jobs) == {"fixed-100-0-bm25", "fixed-200-0-bm25"}
    for num, name in ((1, "fixed-100-0-bm25"), (2, "fixed-200-0-bm25")):
        logged = jobs[name].data.metrics
        (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith(f"job {num}/2 done: ")]
        assert line.startswith(f"job {num}/2 done: {name}  recall@5 {logged['recall_at_5']:.4f}  precision@5 {logged['precision_at_5']:.4f}")
        assert f"run {jobs[name].info.run_id[:8]}" in line and re.search(r"\(\d+\.\d s, ", line)
    assert "precision_omega" not in proc.stdout and "MLflow run id:" not in proc.stdout  # no full table per job
    best = max(jobs.values(), key=lambda r: r.data.metrics["recall_at_5"])
    assert (
        f"best by recall@5: job {best.data.tags['harness.sweep_job']} {best.info.run_name} (recall@5 {best.data.metrics['recall_at_5']:.4f}, run {best.info.run_id})"
        in proc.stdout
    )
    table = proc.stdout[max(0, proc.stdout.index("best by") - 2000) :]
    header = [ln for ln in table.splitlines() if "recall@5" in ln and "status" in ln]
    assert header, proc.stdout[-2000:]
    rows = [ln for ln in table.splitlines() if "FINISHED" in ln and "bm25" in ln]
    assert [r.split()[1] if r.startswith("*") else None for r in rows[:1]] == [best.data.tags["harness.sweep_job"]]  # best row first, starred


@pytest.mark.slow
def test_a_rerun_prints_the_earlier_runs_table(sweep):
    tmp, uri, _, jobs = sweep
    earlier = jobs["fixed-200-0-bm25"]
    proc = _run(tmp, uri, *FAST, "chunker.chunk_size=200")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"skip: finished as run {earlier.info.run_id}" in proc.stdout
    client = mlflow.MlflowClient(uri)
    path = client.download_artifacts(earlier.info.run_id, "results.txt", str(tmp / "dl"))
    with open(path, encoding="utf-8") as fh:
        logged_table = fh.read()
    assert logged_table.strip() and logged_table in proc.stdout  # the table the run printed and logged
    assert f"chunks: {int(earlier.data.metrics['chunks.n_chunks'])}, " in proc.stdout
    assert len(_runs(uri)) == 3  # parent + two jobs: the rerun created nothing


# ------------------------------------------------------------------ the embedding progress bar


class _Bar:
    def __init__(self) -> None:
        self.steps: list[int] = []

    def update(self, n: int) -> None:
        self.steps.append(n)


def test_the_embedding_bar_advances_per_batch(encoder):
    import numpy as np

    from harness.embeddings.model import Encoder

    small = Encoder(batch_size=4, show_progress=False)
    small._model, small._model_path = encoder.model, encoder.model_path  # the session's loaded model
    texts = [f"Kestrel note {i}: the broker listens on port {8000 + i}." for i in range(10)]
    bar = _Bar()
    vectors = small._embed_block(texts, bar)
    assert bar.steps == [4, 4, 2]  # one step per batch of batch_size texts
    whole = encoder.model.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
    assert vectors.shape == (10, 384) and np.allclose(vectors, whole, atol=1e-5)


# ------------------------------------------------------------------ every constructor


@pytest.mark.slow  # imports every component's libraries (LangChain, chonkie, model2vec, ...)
def test_an_unknown_setting_of_any_component_is_one_line_naming_its_settings(tmp_path):
    """``+group.key=...`` for every shipped chunker, retriever, embedding and dataset config:
    refused before a run exists, one line naming the key and the settings the constructor takes."""
    import inspect

    from conftest import compose
    from hydra.utils import get_object

    from harness.experiment.errors import ConfigError
    from harness.experiment.run import validate

    checked = 0
    for group in ("chunker", "retriever", "embedding", "dataset"):
        for option in sorted(p.stem for p in (PROJECT_ROOT / "conf" / group).glob("*.yaml")):
            where = [f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}", f"cache.dir={tmp_path / 'cache'}"]  # nothing outside tmp_path
            cfg = compose([f"{group}={option}", f"+{group}.chunk_sizes=1", *where] + ([] if group == "retriever" else ["retriever=bm25"]))
            with pytest.raises(ConfigError) as info:
                validate(cfg, {})
            message = str(info.value)
            assert "\n" not in message and message.startswith(f"{group}.chunk_sizes: unknown setting of {group}"), message
            target = get_object(cfg[group]._target_)
            params = inspect.signature(target.__init__ if inspect.isclass(target) else target).parameters
            if "chunk_size" in params:
                assert f"did you mean {group}.chunk_size?" in message, message
            named = [p for p in params if p not in ("self", "encoder", "cache_dir") and params[p].kind not in (params[p].VAR_KEYWORD, params[p].VAR_POSITIONAL)]
            assert f"(settings: {', '.join(named)})" in message, message
            checked += 1
    assert checked >= 30  # 18 chunkers, 4 retrievers, 4 embeddings, 6 datasets at the time of writing
