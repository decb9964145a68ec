"""What a run shows in MLflow: headline metrics as MLflow metrics, every value in the
``metrics.json`` table, read back by ``run_metrics``; grouping tags, params without noise,
gate/benchmark runs out of the default listing. Real BM25 runs in a temporary SQLite store."""

from __future__ import annotations

import math

import mlflow
import pandas as pd
import pytest
from conftest import PROJECT_ROOT, compose, fresh_store

DATA = "dataset.path=" + str(PROJECT_ROOT / "datasets" / "kestrel_kb")
KS, BUDGETS = (1, 3, 5, 10), (256, 512, 1024, 2048)  # the shipped metrics.ks / metrics.budgets
# written out here, not taken from the code under test
HEADLINE = (
    {f"{fam}_at_{k}" for fam in ("recall", "precision", "context_precision", "iou", "context_tokens") for k in KS}
    | {"ndcg_at_10", "mrr_at_10", "chunks.n_chunks", "recall_curve"}
    | {f"recall_at_{b}tok" for b in BUDGETS}
)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Two finished BM25 runs: headline (size 200) and a gate run with ``tracking.metrics=all``
    (``tracking.purpose=gate``, size 300); and a rerun of the first (a resume skip)."""
    from harness.experiment.run import execute

    tmp = tmp_path_factory.mktemp("headline")
    uri = fresh_store(tmp / "mlflow.db")
    base = [
        f"tracking.uri={uri}",
        f"cache.dir={tmp / 'cache'}",
        "retriever=bm25",
        "chunker=fixed",
        DATA,
        "stats.bootstrap=100",
        "embedding.show_progress=false",
    ]
    out = {"uri": uri, "tmp": tmp}
    out["headline"] = execute(compose([*base, "chunker.chunk_size=200"]))
    out["all"] = out["gate"] = execute(compose([*base, "chunker.chunk_size=300", "tracking.metrics=all", "tracking.purpose=gate"]))
    out["skip"] = execute(compose([*base, "chunker.chunk_size=200"]))
    return out


def _run(uri: str, run_id: str):
    return mlflow.MlflowClient(uri).get_run(run_id)


def _per_query(uri: str, run_id: str, tmp) -> pd.DataFrame:
    local = mlflow.MlflowClient(uri).download_artifacts(run_id, "per_query.csv", str(tmp))
    return pd.read_csv(local, dtype={"query_id": str})


@pytest.mark.slow
def test_a_run_logs_a_short_named_list_and_every_value_in_its_table(store, tmp_path):
    from harness.evaluation.metrics import mlflow_key
    from harness.tracking.runs import run_metrics

    uri, run_id = store["uri"], store["headline"]["run_id"]
    logged = _run(uri, run_id).data.metrics
    timings = {k for k in logged if k.startswith("time.")}
    assert set(logged) - timings == HEADLINE and len(logged) <= 40
    assert {"time.total_s", "time.log_s"} <= timings
    values = run_metrics(uri, run_id)
    assert len(values) > 150 and {"map_at_5", "hit_rate_at_10", "diagnostics.missed_at_5", "chunks.chars_mean"} <= set(values)
    # every mean equals the mean of its per-query column, computed here from per_query.csv
    per_query = _per_query(uri, run_id, tmp_path)
    checked = 0
    for col in per_query.columns:
        key = mlflow_key(col)
        if key in values and pd.api.types.is_numeric_dtype(per_query[col]):
            assert values[key] == pytest.approx(per_query[col].mean(), abs=1e-9), col
            low, high = values[f"{key}_ci_low"], values[f"{key}_ci_high"]
            assert low <= values[key] + 1e-12 and values[key] <= high + 1e-12, col
            checked += 1
    assert checked >= 40
    # the headline metrics are the same numbers in both places, and what the run computed
    assert all(values[k] == logged[k] for k in HEADLINE - {"recall_curve"})
    assert values["map_at_5"] == pytest.approx(store["headline"]["metrics"]["map@5"], abs=1e-12)


@pytest.mark.slow
def test_tracking_metrics_all_logs_every_value_as_an_mlflow_metric(store):
    from harness.tracking.runs import run_metrics

    uri, run_id = store["uri"], store["all"]["run_id"]
    logged = _run(uri, run_id).data.metrics
    values = run_metrics(uri, run_id)
    assert set(values) == set(logged) and len(logged) > 150
    assert all(logged[k] == values[k] or math.isnan(logged[k]) and math.isnan(values[k]) for k in logged)


@pytest.mark.slow
def test_a_skipped_rerun_returns_values_from_the_table(store):
    skip, first = store["skip"], store["headline"]
    assert skip.get("skipped") and skip["run_id"] == first["run_id"]
    assert skip["metrics"]["map_at_5"] == pytest.approx(first["metrics"]["map@5"], abs=1e-12)
    assert skip["objective"] == pytest.approx(first["metrics"]["recall@5"], abs=1e-12)


@pytest.mark.slow
def test_tags_group_runs_and_params_leave_out_noise(store):
    run = _run(store["uri"], store["headline"]["run_id"])
    tags, params = run.data.tags, run.data.params
    assert (tags["chunker"], tags["chunk_size"], tags["chunk_overlap"], tags["chunk_unit"], tags["retriever"]) == ("fixed", "200", "0", "tokens", "bm25")
    assert tags["embedding"] == "none" and tags["dataset"] == "kestrel_kb"  # BM25 with a fixed chunker embeds nothing
    assert "harness.purpose" not in tags
    assert params["chunker.chunk_size"] == "200" and params["retriever.k1"]
    assert not [k for k in params if k.startswith(("cache.", "tracking.")) or k.endswith("_target_") or k == "resume"]


@pytest.mark.slow
def test_gate_runs_are_left_out_of_the_listing_unless_asked_for(store):
    from harness.tracking.runs import list_runs

    uri = store["uri"]
    gate_id = store["gate"]["run_id"]
    assert _run(uri, gate_id).data.tags["harness.purpose"] == "gate"
    listed = list_runs(uri, "kestrel_kb")
    assert list(listed["run_id"]) == [store["headline"]["run_id"]]
    assert gate_id in set(list_runs(uri, "kestrel_kb", all_statuses=True)["run_id"])
    assert list(list_runs(uri, "kestrel_kb", tags=["harness.purpose=gate"])["run_id"]) == [gate_id]


@pytest.mark.slow
def test_sorting_by_a_metric_kept_in_the_tables(store, tmp_path):
    from harness.tracking.runs import list_runs

    uri = store["uri"]
    assert "map_at_5" not in _run(uri, store["headline"]["run_id"]).data.metrics
    assert "map_at_5" in _run(uri, store["all"]["run_id"]).data.metrics  # one run has it as a metric, the other in its table
    table = list_runs(uri, "kestrel_kb", sort="map@5", ascending=True, all_statuses=True)
    means = {r: _per_query(uri, r, tmp_path / r)["map@5"].mean() for r in table["run_id"]}
    assert list(table["run_id"]) == sorted(means, key=means.get) and len(set(means.values())) == 2


def test_an_unknown_metrics_mode_is_refused_with_the_one_meant():
    from harness.experiment.settings import RunSettings

    with pytest.raises(ValueError, match=r"tracking.metrics must be one of \['headline', 'all'\], got 'headlines'; did you mean 'headline'\?"):
        RunSettings.from_config(compose(["tracking.metrics=headlines"]))


def test_the_gate_tags_its_runs():
    from harness.studies.gate import DEFAULT_GATE, compose_candidate, load_gate

    cfg = compose_candidate(load_gate(DEFAULT_GATE), [], "gate")
    assert cfg.tracking.purpose == "gate" and cfg.tracking.run_name.startswith("gate-")


def test_chunking_tags_follow_the_chunker_params_of_each_strategy():
    from harness.tracking.tracker import chunking_tags

    assert chunking_tags({"chunker.chunk_size": 200, "chunker.chunk_overlap": 20, "chunker.unit": "tokens"}) == {
        "chunk_size": "200",
        "chunk_overlap": "20",
        "chunk_unit": "tokens",
    }
    # a semantic chunker's cap, a sentence chunker's overlap in sentences; nothing where a chunker has none
    assert chunking_tags({"chunker.max_chunk_size": 400, "chunker.overlap_sentences": 1, "chunker.threshold": 0.8}) == {
        "chunk_size": "400",
        "chunk_overlap": "1",
    }
    assert chunking_tags({"chunker.chunk_size": None, "chunker.child_size": 128}) == {"chunk_size": "128"}


def test_the_table_keeps_every_value_and_its_bounds():
    from harness.tracking.headline import metrics_table, split, table_values

    values = {"recall@5": 0.5, "recall@5_ci_low": 0.4, "recall@5_ci_high": 0.6, "map@5": 0.25, "chunks.n_chunks": 12.0, "diagnostics.missed_at_5": 0.1}
    to_log, headline = split(values, "headline", ks=[5], budgets=[], objective="recall@5")
    assert to_log == {"recall@5": 0.5, "chunks.n_chunks": 12.0} and headline == {"recall@5", "chunks.n_chunks"}
    table = metrics_table(values, headline)
    assert list(table["metric"]) == ["recall@5", "map@5", "chunks.n_chunks", "diagnostics.missed_at_5"]
    assert (table.loc[0, "family"], table.loc[0, "k"], table.loc[2, "family"]) == ("recall", 5, "chunks")
    back = table_values(list(table.columns), table.astype(object).where(table.notna(), None).to_numpy().tolist())
    assert back == {
        "recall_at_5": 0.5,
        "recall_at_5_ci_low": 0.4,
        "recall_at_5_ci_high": 0.6,
        "map_at_5": 0.25,
        "chunks.n_chunks": 12.0,
        "diagnostics.missed_at_5": 0.1,
    }
    assert split(values, "all", ks=[5])[0] == values


def test_an_approximate_indexs_recall_against_exact_search_is_a_headline_metric():
    """retriever.index=hnsw|ivf: its recall against exact search qualifies every other number,
    so the UI shows it next to recall@k; its timings stay in the table."""
    from harness.tracking.headline import split

    values = {"recall@5": 0.7, "map@5": 0.5, "retriever.ann_recall_at_10": 0.99, "retriever.ann_recall_at_depth": 0.98, "retriever.ann_search_s": 0.1}
    logged, headline = split(values, "headline", [5])
    assert set(logged) == headline == {"recall@5", "retriever.ann_recall_at_10", "retriever.ann_recall_at_depth"}
