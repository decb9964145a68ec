"""Reading runs back and adding to finished runs (:mod:`harness.tracking.runs`), on real
MLflow SQLite stores under ``tmp_path``; runs are written with :class:`Tracker` (as a job
writes them) and checked with MLflow's own client."""

from __future__ import annotations

import signal
import threading

import mlflow
import pandas as pd
import pytest
from conftest import compose
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.evaluation.compare import CompareError
from harness.tracking import runs
from harness.tracking.tracker import Tracker


@pytest.fixture
def store(tmp_path):
    """Five finished runs ``r0``..``r4`` (in that order, metric ``x`` = index, param ``size``,
    tag ``kind`` even/odd), one FAILED run ``broken``, a second run also called ``r2``, and an
    empty experiment ``other``."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, "exp")
    ids = {}
    for i in range(5):
        with tracker.run(f"r{i}", tags={"kind": "even" if i % 2 == 0 else "odd"}):
            tracker.log_params({"size": 100 * i})
            tracker.log_metrics({"x": float(i)})
        ids[f"r{i}"] = tracker.run_id
    with pytest.raises(RuntimeError), tracker.run("broken"):
        raise RuntimeError("boom")
    ids["broken"] = tracker.run_id
    with tracker.run("r2"):
        tracker.log_metrics({"x": 20.0})
    ids["r2-again"] = tracker.run_id
    Tracker(uri, "other")
    return {"uri": uri, "ids": ids, "tmp": tmp_path}


def test_experiment_name_is_the_configured_one_else_the_dataset_name():
    assert runs.experiment_name(compose([])) == "kestrel_kb"  # conf: tracking.experiment null, dataset kestrel_kb
    assert runs.experiment_name(compose(["tracking.experiment=mine"])) == "mine"
    assert runs.experiment_name(compose(["tracking.experiment=", "dataset.name=renamed"])) == "renamed"


def test_search_follows_pages_and_keeps_order(store, monkeypatch):
    monkeypatch.setattr(runs, "PAGE_SIZE", 2)  # 7 runs over 4 pages of the real store
    found = runs.search_runs(store["uri"], "exp", order_by=["attributes.start_time ASC"])
    ids = store["ids"]
    assert [r.run_id for r in found] == [ids[n] for n in ("r0", "r1", "r2", "r3", "r4", "broken", "r2-again")]
    assert len(runs.search_runs(store["uri"], "exp", max_results=3)) == 3
    finished_even = runs.search_runs(store["uri"], "exp", "tags.kind = 'even' and attributes.status = 'FINISHED'", order_by=["metrics.x DESC"])
    assert [r.name for r in finished_even] == ["r4", "r2", "r0"]
    assert runs.search_runs(store["uri"], "other") == []


def test_run_records_are_plain_data(store):
    record = runs.get_run(store["uri"], store["ids"]["r3"])
    assert (record.name, record.status, record.params["size"], record.metrics["x"], record.tags["kind"]) == ("r3", "FINISHED", "300", 3.0, "odd")
    logged = mlflow.MlflowClient(store["uri"]).get_run(store["ids"]["r3"])
    assert record.start_time == logged.info.start_time and record.experiment_id == logged.info.experiment_id
    assert runs.get_run(store["uri"], store["ids"]["broken"]).status == "FAILED"


def test_lookup_errors_name_what_is_missing(store):
    with pytest.raises(runs.UnknownExperiment, match=r"no experiment named 'nope'.*'exp'.*'other'") as err:
        runs.search_runs(store["uri"], "nope")
    assert {"exp", "other"} <= set(err.value.existing)
    with pytest.raises(runs.InvalidFilter, match="invalid MLflow search filter"):
        runs.search_runs(store["uri"], "exp", "params.size >< 3")
    with pytest.raises(runs.UnknownRun, match="0" * 32):
        runs.get_run(store["uri"], "0" * 32)
    with pytest.raises(ValueError, match="max_results"):
        runs.search_runs(store["uri"], "exp", max_results=0)


@pytest.mark.slow
def test_find_run_by_name_gives_the_newest(store):
    assert runs.find_run_by_name(store["uri"], "exp", "r2").run_id == store["ids"]["r2-again"]
    assert runs.find_run_by_name(store["uri"], "exp", "r9") is None
    assert runs.find_run_by_name(store["uri"], "nope", "r2") is None


def test_load_run_reads_the_per_query_table(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, "exp")
    table = pd.DataFrame({"query_id": ["007", "8"], "recall@5": [1.0, 0.5]})
    with tracker.run("scored", tags={"dataset_fingerprint": "abc"}):
        tracker.log_dataframe_csv(table, "per_query.csv")
    scored = tracker.run_id
    with tracker.run("unscored"):
        pass
    logged = runs.load_run(uri, scored, tmp_path / "work")
    assert (logged.run_id, logged.name, logged.fingerprint) == (scored, "scored", "abc")
    assert logged.per_query["query_id"].tolist() == ["007", "8"]  # ids stay text: no leading zero lost
    assert logged.per_query["recall@5"].tolist() == [1.0, 0.5]
    with pytest.raises(CompareError, match="has no per_query.csv artifact"):
        runs.load_run(uri, tracker.run_id, tmp_path / "work")
    with pytest.raises(CompareError, match="not found"):
        runs.load_run(uri, "f" * 32, tmp_path / "work")


def test_annotate_run_adds_tags_metrics_and_text_to_a_finished_run(store):
    run_id = store["ids"]["r1"]
    many = {f"gate.m{i}@5.p": i / 1000 for i in range(250)}  # more than one batch
    runs.annotate_run(store["uri"], run_id, tags={"gate": "pass", "long": "y" * 9000}, metrics=many, texts={"gate_report.md": "# report\n"})
    logged = mlflow.MlflowClient(store["uri"]).get_run(run_id)
    assert logged.info.status == "FINISHED"
    assert logged.data.tags["gate"] == "pass" and len(logged.data.tags["long"]) == 8000
    assert logged.data.metrics["gate.m7_at_5.p"] == pytest.approx(0.007)
    assert sum(k.startswith("gate.m") for k in logged.data.metrics) == 250
    path = mlflow.MlflowClient(store["uri"]).download_artifacts(run_id, "gate_report.md", str(store["tmp"]))
    assert open(path, encoding="utf-8").read() == "# report\n"
    with pytest.raises(runs.UnknownRun):
        runs.annotate_run(store["uri"], "e" * 32, tags={"a": "b"})


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals reach the main thread only")
def test_ctrl_c_while_annotating_leaves_the_store_writable(store, monkeypatch):
    """SIGINT arrives while a batch is being written: it surfaces as KeyboardInterrupt once
    that call has returned, and the store takes the next write (no "database is locked")."""
    run_id = store["ids"]["r0"]
    metrics = {f"m{i}": float(i) for i in range(20000)}  # 200 batches
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # whatever an earlier test left, Ctrl-C raises here
    original = mlflow.MlflowClient.log_batch
    calls = {"n": 0}

    def log_batch(self, *args, **kwargs):  # the signal lands inside the third batch's write
        calls["n"] += 1
        if calls["n"] == 3:
            signal.raise_signal(signal.SIGINT)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(mlflow.MlflowClient, "log_batch", log_batch)
    try:
        with pytest.raises(KeyboardInterrupt):
            runs.annotate_run(store["uri"], run_id, metrics=metrics)
    finally:
        signal.signal(signal.SIGINT, previous)
    monkeypatch.setattr(mlflow.MlflowClient, "log_batch", original)
    runs.annotate_run(store["uri"], run_id, tags={"after": "ctrl-c"})
    client = mlflow.MlflowClient(store["uri"])
    client.set_terminated(run_id, "KILLED")
    logged = client.get_run(run_id)
    assert logged.data.tags["after"] == "ctrl-c" and logged.info.status == "KILLED"
    written = [k for k in logged.data.metrics if k.startswith("m")]
    assert 0 < len(written) < len(metrics) and len(written) % 100 == 0  # whole batches only


def test_get_run_accepts_any_unique_prefix_of_a_run_id(store):
    uri, ids = store["uri"], store["ids"]
    full = ids["r3"]
    for n in (32, 12, 8):
        assert runs.get_run(uri, full[:n]).run_id == full
    # shortest prefix no other run id (of any experiment) shares, found here by brute force
    others = [i for name, i in ids.items() if name != "r3"]
    n = next(n for n in range(1, 33) if not any(o.startswith(full[:n]) for o in others))
    assert runs.get_run(uri, full[:n]).run_id == full


def test_an_ambiguous_or_unknown_prefix_is_refused_in_one_line_naming_the_candidates(store):
    uri = store["uri"]
    all_ids = list(store["ids"].values())
    tracker = Tracker(uri, "other")
    while len({i[0] for i in all_ids}) == len(all_ids):  # 16 first characters: at most 17 runs until two share one
        with tracker.run("more"):
            pass
        all_ids.append(tracker.run_id)
    first = next(c for c in "0123456789abcdef" if sum(i.startswith(c) for i in all_ids) >= 2)
    sharing = sorted(i for i in all_ids if i.startswith(first))
    with pytest.raises(runs.AmbiguousRun) as err:
        runs.get_run(uri, first)  # spans two experiments: the lookup is store-wide
    message = str(err.value)
    assert f"{first!r} is ambiguous: {len(sharing)} runs match" in message and "\n" not in message
    assert all(i in message for i in sharing[:5]) and uri in message
    with pytest.raises(runs.UnknownRun, match="not found.*no run id starts with it"):
        runs.get_run(uri, "zz")
    with pytest.raises(runs.UnknownRun, match="must not be empty"):
        runs.get_run(uri, "")  # every id starts with "": refused, never the first one
    assert issubclass(runs.AmbiguousRun, runs.UnknownRun)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text("0123456789abcdef", min_size=1, max_size=6), min_size=1, max_size=8, unique=True), st.text("0123456789abcdef", max_size=4))
def test_match_prefix_property_agrees_with_a_brute_force_scan(ids, prefix):
    matches = [i for i in ids if i.startswith(prefix)]
    exact = prefix in ids
    if exact:
        assert runs.match_prefix(prefix, ids) == prefix  # a whole id is never ambiguous
    elif len(matches) == 1:
        assert runs.match_prefix(prefix, ids) == matches[0]
    elif not matches:
        with pytest.raises(runs.UnknownRun):
            runs.match_prefix(prefix, ids)
    else:
        with pytest.raises(runs.AmbiguousRun) as err:
            runs.match_prefix(prefix, ids)
        message = str(err.value)
        assert "\n" not in message and f"{len(matches)} runs" in message
        assert all(m in message for m in sorted(matches)[:5])


def test_compare_takes_short_run_ids_and_refuses_two_prefixes_of_one_run(tmp_path, capsys):
    from harness.cli import compare as cli_compare

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, "exp")
    ids = []
    for name, values in (("a", [0.0, 1.0]), ("b", [1.0, 1.0])):
        with tracker.run(name, tags={"dataset_fingerprint": "fp"}):
            tracker.log_dataframe_csv(pd.DataFrame({"query_id": ["q1", "q2"], "recall@5": values}), "per_query.csv")
        ids.append(tracker.run_id)
    # 8 characters, as the listing and sweep tables show them (two random 32-hex ids sharing 8 is a 2**-32 event)
    assert cli_compare.main(["runs", ids[0][:8], ids[1][:8], "--tracking-uri", uri, "--resamples", "50"]) == 0
    out = capsys.readouterr().out
    assert f"baseline: a ({ids[0][:8]})" in out and f"b ({ids[1][:8]})    0.5000 1.0000 0.5000" in out  # means 0.5 and 1.0, by hand
    assert cli_compare.main(["runs", ids[0][:8], ids[0], "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err
    assert "the same run" in err and ids[0] in err and len(err.strip().splitlines()) == 1
