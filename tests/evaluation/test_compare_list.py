"""``harness compare list``: the runs of an experiment as a table, read
from a real MLflow SQLite store filled by real BM25 runs on the bundled dataset."""

from __future__ import annotations

import io

import mlflow
import pandas as pd
import pytest
from conftest import compose

from harness.cli import compare as cli_compare
from harness.tracking import runs as tracking_runs

COLUMNS = ["chunker", "size", "overlap", "unit", "retriever", "recall@5", "precision@5", "context_precision@5", "iou@5", "time_s", "run", "run_id"]


def _cfg(uri, *overrides):
    return compose(["retriever=bm25", "stats.bootstrap=0", "embedding.show_progress=false", f"tracking.uri={uri}", *overrides])


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Three finished BM25 runs (fixed 100/0, fixed 200/20, recursive 150/0), one run that
    failed after it was opened (its chunk cache cannot be created), and a sweep parent run
    that logged a (high) recall_at_5."""
    from harness.experiment.run import execute

    uri = f"sqlite:///{tmp_path_factory.mktemp('compare_list') / 'mlflow.db'}"
    runs = {
        "fixed-100": execute(_cfg(uri, "chunker=fixed", "chunker.chunk_size=100")),
        "fixed-200": execute(_cfg(uri, "chunker=fixed", "chunker.chunk_size=200", "chunker.chunk_overlap=20")),
        "recursive-150": execute(_cfg(uri, "chunker=recursive", "chunker.chunk_size=150")),
    }
    blocker = tmp_path_factory.mktemp("blocked") / "a-file"
    blocker.write_text("not a folder", encoding="utf-8")
    with pytest.raises(OSError):  # a config error makes no run; this failure comes after the run opened
        execute(_cfg(uri, "chunker=fixed", "chunker.chunk_size=200", f"cache.dir={blocker / 'cache'}"))
    client = mlflow.MlflowClient(uri)
    exp = client.get_experiment_by_name("kestrel_kb")
    failed = next(r.info.run_id for r in client.search_runs([exp.experiment_id]) if r.info.status == "FAILED")
    parent = client.create_run(exp.experiment_id, run_name="sweep chunker.chunk_size=100,200", tags={"harness.sweep": "parent"}).info.run_id
    client.log_metric(parent, "recall_at_5", 0.999)
    client.set_terminated(parent, "FINISHED")
    client.create_experiment("empty")
    logged = {name: client.get_run(r["run_id"]) for name, r in runs.items()}
    return {"uri": uri, "results": runs, "logged": logged, "failed": failed, "parent": parent}


def _markdown_rows(out: str) -> tuple[list[str], list[list[str]]]:
    """Header and body cells of the one pipe table in ``out``."""
    lines = [line for line in out.splitlines() if line.startswith("|")]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    return cells[0], cells[2:]  # cells[1] is the alignment row


@pytest.mark.slow
def test_markdown_listing_sorted_by_recall(store, capsys):
    assert cli_compare.main(["list", "--tracking-uri", store["uri"], "--experiment", "kestrel_kb"]) == 0
    out = capsys.readouterr().out
    header, rows = _markdown_rows(out)
    assert header == COLUMNS
    # the three finished evaluation runs, best recall@5 first (from the runs' own results)
    results = store["results"]
    expected = sorted(results, key=lambda name: results[name]["metrics"]["recall@5"], reverse=True)
    assert [row[header.index("run_id")] for row in rows] == [results[name]["run_id"] for name in expected]
    assert store["failed"] not in out and store["parent"] not in out
    for row in rows:
        name = next(n for n in results if results[n]["run_id"] == row[header.index("run_id")])
        metrics = results[name]["metrics"]
        for col in ("recall@5", "precision@5", "context_precision@5", "iou@5"):
            assert row[header.index(col)] == f"{metrics[col]:.4f}"
        logged = store["logged"][name]
        assert row[header.index("time_s")] == f"{logged.data.metrics['time.total_s']:.1f}"
        assert row[header.index("run")] == logged.info.run_name
    by_run = {row[header.index("run")]: row for row in rows}
    assert [by_run["fixed-100-0-bm25"][header.index(c)] for c in ("chunker", "size", "overlap", "unit", "retriever")] == ["fixed", "100", "0", "tokens", "bm25"]
    assert [by_run["fixed-200-20-bm25"][header.index(c)] for c in ("size", "overlap")] == ["200", "20"]
    assert [by_run["recursive-150-0-bm25"][header.index(c)] for c in ("chunker", "size", "overlap")] == ["recursive", "150", "0"]
    assert "sorted by recall@5 descending" in out


@pytest.mark.slow
def test_csv_listing_with_sort_filter_tag_k_and_limit(store, capsys):
    def listing(*args) -> pd.DataFrame:
        assert cli_compare.main(["list", "--tracking-uri", store["uri"], "--experiment", "kestrel_kb", "--format", "csv", *args]) == 0
        return pd.read_csv(io.StringIO(capsys.readouterr().out), dtype={"run_id": str})

    logged = store["logged"]
    # ascending run time; full precision in CSV
    table = listing("--sort", "time.total_s", "--ascending")
    assert list(table.columns) == COLUMNS
    times = {r.info.run_id: r.data.metrics["time.total_s"] for r in logged.values()}
    assert list(table["run_id"]) == sorted(times, key=times.get)
    assert dict(zip(table["run_id"], table["time_s"])) == times
    recalls = {r.info.run_id: r.data.metrics["recall_at_5"] for r in logged.values()}
    assert dict(zip(table["run_id"], table["recall@5"])) == recalls

    # an MLflow filter on a param, and a tag filter
    only_200 = listing("--filter", "params.chunker.chunk_size = '200'")
    assert list(only_200["run_id"]) == [logged["fixed-200"].info.run_id]
    assert list(listing("--filter", "params.`chunker.chunk_size` = '200' and tags.chunker = 'fixed'")["run_id"]) == list(only_200["run_id"])
    recursive = listing("--tag", "chunker=recursive")
    assert list(recursive["run_id"]) == [logged["recursive-150"].info.run_id]
    assert listing("--tag", "chunker=fixed", "--tag", "retriever=faiss").empty

    # other cut-off, sorted by a metric name with @, limited to the best run
    top = listing("--k", "3", "--sort", "mrr@3", "--limit", "1")
    assert [c for c in top.columns if "@" in c] == ["recall@3", "precision@3", "context_precision@3", "iou@3"]
    mrr3 = {r["run_id"]: r["metrics"]["mrr@3"] for r in store["results"].values()}  # no MLflow metric: read from the runs' metrics tables
    assert list(top["run_id"]) == [max(mrr3, key=mrr3.get)]
    assert top["recall@3"].iloc[0] == logged[next(n for n in logged if logged[n].info.run_id == top["run_id"].iloc[0])].data.metrics["recall_at_3"]


@pytest.mark.slow
def test_all_runs_adds_failed_and_parent_runs_with_status(store, capsys):
    assert cli_compare.main(["list", "--tracking-uri", store["uri"], "--experiment", "kestrel_kb", "--format", "csv", "--all-runs"]) == 0
    table = pd.read_csv(io.StringIO(capsys.readouterr().out), dtype={"run_id": str})
    assert list(table.columns) == [*COLUMNS, "status"]
    status = dict(zip(table["run_id"], table["status"]))
    assert status[store["failed"]] == "FAILED" and status[store["parent"]] == "FINISHED"
    assert len(table) == 5
    assert table["run_id"].iloc[0] == store["parent"]  # its recall_at_5 of 0.999 sorts first
    assert table["run_id"].iloc[-1] == store["failed"]  # no recall: last
    # sorted by a table column; the run that failed on a config error still logged its
    # params (chunk_size 200), the sweep parent has none: last
    assert (
        cli_compare.main(
            ["list", "--tracking-uri", store["uri"], "--experiment", "kestrel_kb", "--format", "csv", "--all-runs", "--sort", "size", "--ascending"]
        )
        == 0
    )
    by_size = pd.read_csv(io.StringIO(capsys.readouterr().out), dtype={"run_id": str})
    assert by_size["size"].tolist()[:4] == [100, 150, 200, 200] and by_size["size"].iloc[4:].isna().all()
    assert by_size["run_id"].iloc[-1] == store["parent"]
    assert store["failed"] in set(by_size["run_id"].iloc[2:4])


@pytest.mark.slow
def test_defaults_come_from_the_environment_and_the_project_config(store, capsys, monkeypatch):
    assert cli_compare.default_experiment() == "kestrel_kb"  # conf/config.yaml: dataset kestrel_kb, tracking.experiment null
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store["uri"])
    assert cli_compare.main(["list"]) == 0
    out = capsys.readouterr().out
    assert f"tracking URI: {store['uri']}" in out
    assert all(r.info.run_id in out for r in store["logged"].values())


@pytest.mark.slow
def test_listing_errors_name_the_problem(store, capsys):
    uri = ["--tracking-uri", store["uri"]]
    assert cli_compare.main(["list", *uri, "--experiment", "nope"]) == 2
    assert "no experiment named 'nope'" in (err := capsys.readouterr().err) and "'kestrel_kb'" in err
    assert cli_compare.main(["list", *uri, "--experiment", "kestrel_kb", "--filter", "params.chunk_size >< 3"]) == 2
    assert "invalid --filter" in capsys.readouterr().err
    assert cli_compare.main(["list", *uri, "--experiment", "kestrel_kb", "--sort", "no_such_metric"]) == 2
    assert "--sort 'no_such_metric' is neither a column" in capsys.readouterr().err
    assert cli_compare.main(["list", *uri, "--experiment", "kestrel_kb", "--tag", "chunker"]) == 2
    assert "--tag must look like KEY=VALUE" in capsys.readouterr().err
    assert cli_compare.main(["list", *uri, "--experiment", "kestrel_kb", "--k", "0"]) == 2
    assert "--k must be >= 1" in capsys.readouterr().err
    # an experiment without runs is not an error
    assert cli_compare.main(["list", *uri, "--experiment", "empty"]) == 0
    assert "no finished runs in experiment 'empty' match" in capsys.readouterr().out


def test_listing_and_paired_options_belong_to_their_subcommand(capsys):
    with pytest.raises(SystemExit) as exc:
        cli_compare.main(["runs", "a" * 32, "b" * 32, "--sort", "recall@5"])
    assert exc.value.code == 2 and "unrecognized arguments: --sort recall@5" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        cli_compare.main(["list", "--resamples", "100"])
    assert exc.value.code == 2 and "unrecognized arguments: --resamples 100" in capsys.readouterr().err
    assert cli_compare.main(["runs", "a" * 32]) == 2
    assert "give at least two run ids" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:  # no subcommand: the usage names both
        cli_compare.main([])
    assert exc.value.code == 2 and "{list,runs}" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:  # run ids without the subcommand are refused, not listed or compared
        cli_compare.main(["a" * 32, "b" * 32])
    assert exc.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_tag_filter_quotes_keys_and_values():
    assert tracking_runs.tag_filter(["chunker=fixed", "mlflow.user=o'neil"]) == "tags.`chunker` = 'fixed' and tags.`mlflow.user` = \"o'neil\""
    with pytest.raises(ValueError, match="cannot contain both"):
        tracking_runs.tag_filter(["note=it's \"x\""])
    with pytest.raises(ValueError, match="KEY=VALUE"):
        tracking_runs.tag_filter(["=fixed"])


# ---------------------------------------------------------------- content-cut chunkers: the cut rule, not the cap


def _record(name, params, recall=0.5):
    return tracking_runs.RunRecord(
        run_id=name * 4, name=name, experiment_id="1", status="FINISHED", start_time=1, params=params, metrics={"recall_at_5": recall}, tags={"chunker": "x"}
    )


def _semantic(breakpoint, **extra):
    base = {"chunker.breakpoint": breakpoint, "chunker.threshold": "0.5", "chunker.percentile": "95.0", "chunker.breakpoint_amount": "None"}
    base.update({"chunker.number_of_chunks": "None", "chunker.target_chunk_size": "None", "chunker.max_chunk_size": "254"})
    return {**base, **{f"chunker.{k}": str(v) for k, v in extra.items()}}


def test_a_semantic_run_lists_its_cut_rule_and_not_its_cap_as_size():
    from harness.evaluation.compare import runs_table

    table = runs_table(
        [
            _record("sem", _semantic("threshold", threshold=0.7)),
            _record("pct", _semantic("percentile")),
            _record("tgt", _semantic("interquartile", target_chunk_size=200)),
            _record("fix", {"chunker.chunk_size": "200", "chunker.chunk_overlap": "0"}),
        ]
    ).set_index("run")
    assert list(table.columns[:4]) == ["chunker", "size", "cut", "overlap"]
    # the cap of a semantic run is not its size; its cut rule is a column of its own
    assert pd.isna(table.loc["sem", "size"]) and table.loc["sem", "cut"] == "threshold 0.7, max 254"
    assert table.loc["pct", "cut"] == "percentile 95.0, max 254"
    assert table.loc["tgt", "size"] == 200 and table.loc["tgt", "cut"] == "interquartile, target 200, max 254"
    assert table.loc["fix", "size"] == 200 and pd.isna(table.loc["fix", "cut"])
    # a listing without such runs keeps its columns
    assert "cut" not in runs_table([_record("fix", {"chunker.chunk_size": "200"})]).columns
