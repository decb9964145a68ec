"""End-to-end runs against a real MLflow SQLite store in a temporary folder."""

import os
import subprocess
import sys

import mlflow
import pandas as pd
import pytest
from conftest import _SESSION_CACHE, PROJECT_ROOT, compose, fresh_store

from harness.experiment.run import execute


def _runs(uri, experiment):
    client = mlflow.MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    return client, client.search_runs([exp.experiment_id]) if exp else []


@pytest.mark.slow
@pytest.mark.parametrize("retriever", ["faiss", "bm25"])
def test_one_run_per_retriever_logs_everything(retriever, tracking_uri, tmp_path):
    cfg = compose([f"retriever={retriever}", "chunker=recursive", "chunker.chunk_size=128", f"tracking.uri={tracking_uri}", "embedding.show_progress=false"])
    result = execute(cfg)
    client, runs = _runs(tracking_uri, "kestrel_kb")
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert run.info.run_id == result["run_id"]
    assert run.info.run_name == f"recursive-128-0-{retriever}"
    from harness.tracking.runs import run_metrics

    m = run_metrics(tracking_uri, run.info.run_id)  # MLflow metrics + the metrics table (mrr@1..5, chunks.*)
    assert set(run.data.metrics) < set(m)
    for k in (1, 3, 5, 10):
        for fam in ("recall", "precision", "iou", "context_precision", "mrr"):
            assert 0.0 <= m[f"{fam}_at_{k}"] <= 1.0
    assert m["recall_at_1"] <= m["recall_at_5"] <= m["recall_at_10"]
    assert m["recall_at_5"] == pytest.approx(result["metrics"]["recall@5"])
    assert m["recall_at_5"] > 0.2  # the retrievers do find evidence on this corpus
    assert m["chunks.n_chunks"] > 100
    assert run.data.params["chunker.chunk_size"] == "128"
    assert run.data.tags["dataset_fingerprint"] and run.data.tags["config_hash"]
    assert run.data.tags["version.mlflow"] == "3.17.2"
    history = client.get_metric_history(run.info.run_id, "recall_curve")
    assert sorted(h.step for h in history) == [1, 3, 5, 10]
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.yaml", "per_query.csv", "chunk_stats.json", "results.txt"} <= artifacts
    local = client.download_artifacts(run.info.run_id, "per_query.csv", str(tmp_path))
    per_query = pd.read_csv(local)
    assert len(per_query) == len(result["evaluation"].per_query) >= 100  # every query scored
    assert per_query["recall@5"].mean() == pytest.approx(m["recall_at_5"])


@pytest.mark.slow
def test_semantic_threshold_run(tracking_uri):
    cfg = compose(["chunker=semantic", "chunker.threshold=0.8", f"tracking.uri={tracking_uri}", "embedding.show_progress=false"])
    result = execute(cfg)
    client, runs = _runs(tracking_uri, "kestrel_kb")
    assert runs[0].info.status == "FINISHED"
    assert runs[0].info.run_name == "semantic-threshold-0.8-faiss"
    assert 0 < result["metrics"]["recall@5"] <= 1


@pytest.mark.parametrize(
    "override, message",
    [
        ("chunker.chunk_overlap=300", "chunker.chunk_overlap"),
        ("chunker.chunk_size=0", "chunker.chunk_size"),
        ("chunker.unit=lines", "chunker.unit"),
    ],
)
def test_config_errors_fail_fast_without_a_run(override, message, tracking_uri):
    from harness.experiment.errors import ConfigError

    cfg = compose(["chunker=fixed", override, f"tracking.uri={tracking_uri}"])
    with pytest.raises(ConfigError, match=message) as info:
        execute(cfg)
    assert "\n" not in str(info.value)
    assert _store_runs(tracking_uri) == []  # checked before the tracker opened a run


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["metrics.ks=[0,5]"], "metrics.ks must be a non-empty list of integers >= 1"),
        (["metrics.relevance_fraction=1.5"], r"metrics.relevance_fraction must be in \[0, 1\]"),
        (["metrics.ks=[1,3]"], r"metrics.objective='recall@5' needs k=5 in metrics.ks=\[1, 3\]"),
        (["metrics.objective=recall5"], "metrics.objective: unknown metric"),
        (["metrics.context_tokenizer=foo"], "metrics.context_tokenizer must be one of"),
        (["embedding.device=gpu0"], "embedding.device must be"),
    ],
)
def test_metric_and_embedding_config_errors_fail_before_work(overrides, message, tracking_uri):
    cfg = compose([*overrides, f"tracking.uri={tracking_uri}"])
    with pytest.raises(ValueError, match=message):
        execute(cfg)
    assert _store_runs(tracking_uri) == []  # refused before any run was opened


def test_encoder_counts_tokens_like_the_model_tokenizer(encoder):
    texts = ["Kestrel's broker listens on port 8450.", "naïve café — 日本語", ""]
    expected = [len(ids) for ids in encoder.model.tokenizer(texts, add_special_tokens=True)["input_ids"]]
    assert encoder.count_tokens(texts) == expected
    assert encoder.max_seq_length == encoder.model.max_seq_length == 256


def test_semantic_threshold_out_of_range_is_a_config_error(tracking_uri):
    cfg = compose(["chunker=semantic", "chunker.threshold=1.5", f"tracking.uri={tracking_uri}"])
    with pytest.raises(Exception, match=r"chunker.threshold must be a cosine similarity in \[-1, 1\]"):
        execute(cfg)


def test_bad_dataset_path_is_refused_without_a_run(tracking_uri, tmp_path):
    from harness.experiment.errors import ConfigError

    cfg = compose([f"dataset.path={tmp_path / 'nowhere'}", f"tracking.uri={tracking_uri}", "retriever=bm25"])
    with pytest.raises(ConfigError, match="expected a corpus folder"):
        execute(cfg)
    assert _store_runs(tracking_uri) == []


@pytest.mark.slow
def test_multirun_sweep_continues_after_a_failed_job(tmp_path):
    """A Hydra multirun through the real CLI: one job has an invalid size, the others finish."""
    uri = fresh_store(tmp_path / "sweep.db")
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.run",
            "-m",
            "chunker=fixed,recursive",
            "chunker.chunk_size=0,200",
            "retriever=bm25",
            f"hydra.sweep.dir={tmp_path / 'multirun'}",
            f"cache.dir={_SESSION_CACHE}",
            "embedding.show_progress=false",
        ],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 2  # the invalid jobs make the sweep exit 2 ...
    _, runs = _runs(uri, "kestrel_kb")
    by_name = {r.info.run_name: r.info.status for r in runs if r.data.tags.get("harness.sweep") != "parent"}
    assert by_name == {"fixed-200-0-bm25": "FINISHED", "recursive-200-0-bm25": "FINISHED"}  # ... the valid ones ran; no run for the others
    (parent,) = [r for r in runs if r.data.tags.get("harness.sweep") == "parent"]
    assert parent.data.tags["sweep.jobs_invalid"] == "2" and parent.data.tags["sweep.jobs_finished"] == "2"
    assert "job 1/4 invalid: fixed-0-0-bm25: chunker.chunk_size" in proc.stderr


def _store_runs(uri: str) -> list:
    """Every run in the store at ``uri`` (all experiments, deleted ones too)."""
    import mlflow
    from mlflow.entities import ViewType

    client = mlflow.MlflowClient(uri)
    ids = [e.experiment_id for e in client.search_experiments(view_type=ViewType.ALL)]
    return list(client.search_runs(ids, run_view_type=ViewType.ALL)) if ids else []


def test_tracking_uri_resolution(monkeypatch, tmp_path):
    from harness.tracking.tracker import resolve_tracking_uri

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:////tmp/env.db")
    assert resolve_tracking_uri(None, tmp_path) == "sqlite:////tmp/env.db"
    assert resolve_tracking_uri("http://127.0.0.1:5005", tmp_path) == "http://127.0.0.1:5005"
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    assert resolve_tracking_uri(None, tmp_path) == f"sqlite:///{tmp_path.resolve() / 'mlruns' / 'mlflow.db'}"


def test_long_param_values_are_truncated_with_hash():
    from harness.tracking.tracker import MAX_PARAM_VALUE, safe_param_value

    v = safe_param_value("x" * 10_000)
    assert len(v) == MAX_PARAM_VALUE and "sha256:" in v
    assert safe_param_value("short") == "short"
