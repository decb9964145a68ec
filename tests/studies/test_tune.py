"""harness.studies.tune: search-space parsing, conditional suggestions, a resumable BM25 study whose
trials are real MLflow runs (real store under tmp_path), and a smoke run of harness.studies.bench."""

import json
import textwrap

import mlflow
import optuna
import pytest
from conftest import PROJECT_ROOT

from harness.cli import tune as cli_tune
from harness.studies import tune


def _write(tmp_path, text, name="space.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_committed_space_files_parse():
    for path in sorted((PROJECT_ROOT / "experiments").glob("search_space*.yaml")):
        space = tune.load_space(path)
        assert space.params and space.objectives
    space = tune.load_space(PROJECT_ROOT / "experiments" / "search_space.yaml")
    assert space.objectives == (("recall@5", "maximize"),)
    assert tune.load_space(PROJECT_ROOT / "experiments" / "search_space_bm25.yaml").directions == ["maximize", "minimize"]


def test_conditional_and_fraction_suggestions():
    space = tune.load_space(PROJECT_ROOT / "experiments" / "search_space.yaml")
    # semantic: max_chunk_size and threshold are active, chunk_size/overlap are not
    trial = optuna.trial.FixedTrial({"chunker": "semantic", "chunker.max_chunk_size": 102, "chunker.threshold": 0.75, "retriever": "faiss"})
    assert tune.suggest(trial, space) == ["chunker=semantic", "chunker.max_chunk_size=102", "chunker.threshold=0.75", "retriever=faiss"]
    # fixed: overlap 0.375 of 256 = 96 tokens; no threshold
    trial = optuna.trial.FixedTrial({"chunker": "fixed", "chunker.chunk_size": 256, "chunker.chunk_overlap": 0.375, "retriever": "bm25"})
    assert tune.suggest(trial, space) == ["chunker=fixed", "chunker.chunk_size=256", "chunker.chunk_overlap=96", "retriever=bm25"]


@pytest.mark.parametrize(
    "body, key",
    [
        ("params: {chunker: {type: choice, choices: [fixed]}}", "params.chunker.type"),
        ("params: {a: {type: int, low: 5, high: 1}}", "low=5 > high=1"),
        ("params: {a: {type: fraction, low: 0, high: 0.5, of: b}}", "params.a.of"),
        ("params: {a: {type: int, low: 1, high: 5, when: {b: [1]}}}", "params.a.when"),
        ("objectives: [{metric: recall@5, direction: up}]\nparams: {a: {type: int, low: 1, high: 2}}", "objectives[0].direction"),
    ],
)
def test_bad_space_files_name_the_key(tmp_path, body, key):
    with pytest.raises(ValueError, match=key.replace("[", r"\[").replace("]", r"\]")):
        tune.load_space(_write(tmp_path, body))


def test_bad_objective_fails_before_any_trial(tmp_path):
    space = tune.load_space(_write(tmp_path, "objectives: [{metric: recall@7}]\nparams: {chunker.chunk_size: {type: int, low: 100, high: 200}}"))
    with pytest.raises(ValueError, match=r"k=7 in metrics.ks"):
        tune.run_study(space, 1, storage="memory")


@pytest.mark.slow
def test_resumable_bm25_study_logs_one_finished_run_per_trial(tmp_path, tracking_uri, capsys):
    space = _write(
        tmp_path,
        """
        study: t
        overrides: [retriever=bm25, chunker.unit=chars, stats.bootstrap=0, embedding.show_progress=false]
        params:
          chunker: {type: categorical, choices: [fixed, recursive]}
          chunker.chunk_size: {type: int, low: 300, high: 900, step: 300}
          chunker.chunk_overlap: {type: fraction, of: chunker.chunk_size, low: 0.0, high: 0.2, step: 0.1}
        """,
    )
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    common = ["--space", str(space), "--storage", storage, "--seed", "0", f"tracking.uri={tracking_uri}", f"cache.dir={tmp_path / 'cache'}"]
    assert cli_tune.main(["--trials", "3", *common]) == 0
    out = capsys.readouterr().out
    assert "running 3" in out and "best params: {'chunker': " in out

    study = optuna.load_study(study_name="t", storage=storage)
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.COMPLETE] * 3

    assert cli_tune.main(["--trials", "4", *common]) == 0  # 4 in total: exactly one more
    assert "3 complete trial(s), target 4: running 1" in capsys.readouterr().out
    assert cli_tune.main(["--trials", "4", *common]) == 0  # complete: nothing runs
    assert "running 0" in capsys.readouterr().out

    study = optuna.load_study(study_name="t", storage=storage)
    assert len(study.trials) == 4
    client = mlflow.MlflowClient(tracking_uri)
    exp = client.get_experiment_by_name("kestrel_kb")
    runs = {r.info.run_id: r for r in client.search_runs([exp.experiment_id])}
    assert len(runs) == 4
    for t in study.trials:
        run = runs[t.user_attrs["mlflow_run_id"]]
        assert run.info.status == "FINISHED"
        assert run.data.tags["optuna.study"] == "t"
        assert run.data.tags["optuna.trial"] == str(t.number)
        assert run.data.metrics["recall_at_5"] == pytest.approx(t.value)
        # the overlap fraction becomes round(fraction * size) characters
        size = t.params["chunker.chunk_size"]
        assert run.data.params["chunker.chunk_size"] == str(size)
        assert run.data.params["chunker.chunk_overlap"] == str(int(round(t.params["chunker.chunk_overlap"] * size)))
        assert run.data.tags["chunker"] in ("fixed", "recursive")
    assert study.best_value == max(r.data.metrics["recall_at_5"] for r in runs.values())


@pytest.mark.slow
def test_bench_quick_smoke_writes_json(tmp_path, kestrel):
    """harness.studies.bench end to end on a two-document dataset with tiny settings (no timing asserted).

    The documents are the first 4,000 characters of two bundled ones (with the questions whose
    evidence lies inside them): the whole documents, ten times over in the 10x rows, cost
    LangChain's token-length recursive splitter minutes and test nothing more."""
    from harness.cli import bench as cli_bench

    data = tmp_path / "tiny"
    (data / "corpus").mkdir(parents=True)
    cut = 4000
    docs = {d.doc_id: d.text[:cut] for d in kestrel.documents[:2]}
    for doc_id, text in docs.items():
        (data / "corpus" / doc_id).write_text(text, encoding="utf-8")
    with (data / "questions.jsonl").open("w", encoding="utf-8") as f:
        for q in kestrel.queries:
            if all(e.doc_id in docs and e.end <= cut for e in q.evidence):
                ev = [{"doc_id": e.doc_id, "start": e.start, "end": e.end, "text": e.text} for e in q.evidence]
                f.write(json.dumps({"query_id": q.query_id, "query": q.text, "evidence": ev}) + "\n")
    out = tmp_path / "bench.json"
    # phases and chunker throughput (the sweep part starts five more processes: too slow for the suite)
    assert cli_bench.main(["--dataset", str(data), "--out", str(out), "--quick", "--tiny", "--parts", "phases,chunkers"]) == 0
    result = json.loads(out.read_text(encoding="utf-8"))
    assert set(result) >= {"dataset", "phases", "chunkers", "targets"}
    assert result["phases"]["cold"]["total"] > 0 and result["phases"]["warm"]["total"] > 0
    names = {r["chunker"] for r in result["chunkers"]}
    assert {"ours fixed chars", "langchain RecursiveCharacterTextSplitter chars", "langchain TokenTextSplitter cl100k_base"} <= names
    assert all(r["mb_per_s_1x"] > 0 and r["mb_per_s_10x"] > 0 for r in result["chunkers"])
    assert {t["target"] for t in result["targets"]} >= {"warm_vs_cold", "non_embedding_share", "vs_langchain", "chunking_10x"}
    assert all(isinstance(t["pass"], bool) for t in result["targets"] if t["limit"] is not None)
