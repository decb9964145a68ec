"""BEIR, SQuAD-style and excerpt-list datasets: loaders, excerpt location, validate, end to end.

The samples under ``tests/data/`` are written for this project (a fictional harbour town);
expected offsets below were counted by hand from the sample text.
"""

import json
import shutil
from pathlib import Path

import mlflow
import pytest
from conftest import PROJECT_ROOT, compose, fresh_store

from harness.datasets.beir import label_level, load_beir, read_beir
from harness.datasets.excerpts import load_excerpts, read_excerpts
from harness.datasets.locate import Match, NormalisedText, find_all, locate, normalise_whitespace
from harness.datasets.squad import load_squad, read_squad
from harness.datasets.validate import DatasetError
from harness.experiment import build

DATA = PROJECT_ROOT / "tests" / "data"
BEIR = DATA / "beir_saltmere"
SQUAD = DATA / "squad_saltmere" / "saltmere_squad.json"
EXCERPTS = DATA / "excerpts_saltmere"


# ---------------------------------------------------------------- locate


def test_find_all_counts_overlapping_occurrences():
    assert find_all("aaa", "aa") == [0, 1]
    assert find_all("abcabc", "bc") == [1, 4]
    assert find_all("abc", "x") == []
    with pytest.raises(ValueError, match="needle"):
        find_all("abc", "")


def test_whitespace_match_maps_back_to_raw_offsets():
    text = "ab  cd\n ef"  # a0 b1 _2 _3 c4 d5 \n6 _7 e8 f9
    assert locate(text, "cd ef") == [Match(4, 10, "whitespace")]
    assert text[4:10] == "cd\n ef"
    assert locate(text, "b cd") == [Match(1, 6, "whitespace")]
    assert locate(text, "  cd \t ef \n") == [Match(4, 10, "whitespace")]  # excerpt is stripped
    assert locate("x\u00a0y", "x y") == [Match(0, 3, "whitespace")]  # NBSP is whitespace
    assert normalise_whitespace(" a \n\t b ") == "a b"


def test_exact_matches_win_and_repeats_are_all_reported():
    # "a b" occurs exactly once at 0; the normalised text would also match at 4 ("a  b")
    assert locate("a b a  b", "a b") == [Match(0, 3, "exact")]
    # no exact match: both normalised matches are returned, so the caller sees the ambiguity
    assert locate("a\nb a  b", "a b") == [Match(0, 3, "whitespace"), Match(4, 8, "whitespace")]
    assert locate("abc", "xyz") == []
    with pytest.raises(ValueError, match="excerpt"):
        locate("abc", " \n")


def test_normalised_text_index_map():
    n = NormalisedText("a \n b")
    assert n.norm == "a b" and n.raw == [0, 1, 4]


# ---------------------------------------------------------------- BEIR


def test_beir_sample_documents_queries_and_whole_document_evidence():
    ds, report = read_beir(BEIR)
    assert ds.name == "beir_saltmere"
    assert [d.doc_id for d in ds.documents] == ["mill", "ferry", "light", "market", "wall", "bakery"]
    docs = ds.by_id
    # title + blank line + text; no title -> text only
    assert docs["light"].text.startswith("Gull Island Lighthouse\n\nThe lighthouse on Gull Island was first lit in 1862")
    assert docs["bakery"].text.startswith("Pennock's bakery on Chapel Street")
    raw = {r["_id"]: r for r in map(json.loads, (BEIR / "corpus.jsonl").read_text(encoding="utf-8").splitlines())}
    assert len(docs["bakery"].text) == len(raw["bakery"]["text"])
    assert len(docs["mill"].text) == len("The Tide Mill") + 2 + len(raw["mill"]["text"])
    assert [q.query_id for q in ds.queries] == [f"q{i}" for i in range(1, 9)]  # q9 has no qrels
    q = {x.query_id: x for x in ds.queries}
    assert [(e.doc_id, e.start, e.end) for e in q["q6"].evidence] == [
        ("bakery", 0, len(docs["bakery"].text)),
        ("mill", 0, len(docs["mill"].text)),
    ]
    assert [e.doc_id for e in q["q8"].evidence] == ["wall"]  # market judged 0 = not relevant
    assert [e.doc_id for e in q["q3"].evidence] == ["light"]  # judgement on an empty doc dropped
    assert [e.doc_id for e in q["q2"].evidence] == ["ferry"]  # unknown corpus-id dropped
    assert report.counts == {
        "empty_documents": 1,
        "qrels_empty_document": 1,
        "qrels_unknown_document": 1,
        "queries_without_evidence": 1,  # q9: excluded, not scored 0
    }
    assert report.info == {"qrels_not_relevant": 1, "queries_without_qrels": 1}
    assert ds.load_report is report
    assert any("test.tsv:14" in p and "nowhere" in p for p in report.problems)
    assert label_level(ds) == "document"
    assert all(d.metadata["label_level"] == "document" for d in ds.documents)


def test_beir_load_logs_the_dropped_counts(caplog):
    with caplog.at_level("WARNING", logger="harness.datasets.beir"), pytest.warns(UserWarning, match="1 labelled query without evidence"):
        ds = load_beir(BEIR, name="saltmere")
    assert ds.name == "saltmere"
    assert "queries_without_evidence=1" in caplog.text and "'q9'" in caplog.text


def _beir_copy(tmp_path) -> Path:
    dst = tmp_path / "beir"
    shutil.copytree(BEIR, dst)
    return dst


@pytest.mark.parametrize(
    "file, line_no, replacement, message",
    [
        ("corpus.jsonl", 3, '{"_id": "light", "text": ', r"corpus.jsonl:3: invalid JSON"),
        ("corpus.jsonl", 2, '{"_id": "ferry", "title": "x"}', r"corpus.jsonl:2: missing field 'text'"),
        ("corpus.jsonl", 2, '{"_id": "mill", "text": "again"}', r"corpus.jsonl:2: duplicate _id 'mill' \(first on line 1\)"),
        ("corpus.jsonl", 2, '{"_id": 7, "text": "x"}', r"corpus.jsonl:2: field '_id' must be a string"),
        ("queries.jsonl", 4, '{"id": "q4", "text": "x"}', r"queries.jsonl:4: missing field '_id'"),
        ("qrels/test.tsv", 3, "q2 ferry 1", r"test.tsv:3: expected 3 tab-separated columns"),
        ("qrels/test.tsv", 3, "q2\tferry\tyes", r"test.tsv:3: score 'yes' is not an integer"),
    ],
)
def test_beir_errors_name_file_line_and_field(tmp_path, file, line_no, replacement, message):
    dst = _beir_copy(tmp_path)
    lines = (dst / file).read_text(encoding="utf-8").splitlines()
    lines[line_no - 1] = replacement
    (dst / file).write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=message):
        load_beir(dst)


def test_beir_missing_split_path_and_no_judged_queries(tmp_path):
    with pytest.raises(DatasetError, match=r"qrels/dev.tsv \(found \['test.tsv'\]\); set dataset.split"):
        load_beir(BEIR, split="dev")
    with pytest.raises(DatasetError, match="dataset.path is not set"):
        load_beir(None)
    dst = _beir_copy(tmp_path)
    (dst / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tmill\t0\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="no labelled queries"):
        load_beir(dst)


# ---------------------------------------------------------------- SQuAD


def test_squad_sample_documents_and_answer_spans():
    ds, report = read_squad(SQUAD)
    assert [d.doc_id for d in ds.documents] == ["Chapel#0", "Chapel#1", "Regatta#0", "Regatta#1"]
    assert ds.by_id["Chapel#0"].text == "The bell was cast in 1702."
    assert [q.query_id for q in ds.queries] == ["s1", "s2", "s3", "s4", "s6", "s7", "s8", "s10", "s11"]
    q = {x.query_id: x for x in ds.queries}
    # "The bell was cast in " is 21 code points
    assert [(e.doc_id, e.start, e.end, e.text) for e in q["s1"].evidence] == [("Chapel#0", 21, 25, "1702")]
    (only,) = q["s3"].evidence  # answers="first" keeps the first listed answer
    assert only.text == "for weddings and for the blessing of the boats each May" and only.end - only.start == 55
    assert report.counts == {"queries_without_evidence": 2}  # unanswerable: excluded, not scored 0
    assert report.info == {"unanswerable": 2}
    assert "qas[3]" in report.problems[0] and "'s5'" in report.problems[0]
    for query in ds.queries:
        for e in query.evidence:
            assert ds.by_id[e.doc_id].text[e.start : e.end] == e.text


def test_squad_all_answers_keeps_every_distinct_span():
    ds = load_squad(SQUAD, answers="all", name="sq")
    s3 = next(q for q in ds.queries if q.query_id == "s3")
    (a, b) = s3.evidence
    assert a.start == b.start and (a.end - a.start, b.end - b.start) == (55, 12)
    assert b.text == "for weddings"
    with pytest.raises(ValueError, match=r"dataset.answers must be one of \['first', 'all'\]"):
        load_squad(SQUAD, answers="longest")


def _squad_variant(tmp_path, edit) -> Path:
    data = json.loads(SQUAD.read_text(encoding="utf-8"))
    edit(data)
    out = tmp_path / "v.json"
    out.write_text(json.dumps(data), encoding="utf-8")
    return out


def test_squad_answer_mismatch_names_the_json_path(tmp_path):
    def shift(data):
        data["data"][0]["paragraphs"][1]["qas"][0]["answers"][0]["answer_start"] += 1

    with pytest.raises(DatasetError, match=r"data\[0\]\.paragraphs\[1\]\.qas\[0\]\.answers\[0\]: context\[.*'1880'.*'s2'"):
        load_squad(_squad_variant(tmp_path, shift))


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d["data"][1]["paragraphs"][0]["qas"][1].pop("question"), r"data\[1\]\.paragraphs\[0\]\.qas\[1\]: missing field 'question'"),
        (lambda d: d["data"][0]["paragraphs"][0]["qas"][0]["answers"][0].update(answer_start="21"), r"answers\[0\]\.answer_start: expected int, got str"),
        (
            lambda d: d["data"][0]["paragraphs"][0]["qas"][0]["answers"][0].update(answer_start=24),
            r"answer_start=24 \+ len\(text\)=4 is outside the context of length 26",
        ),
        (lambda d: d["data"][0]["paragraphs"][0].update(context=" "), r"data\[0\]\.paragraphs\[0\]\.context: empty context"),
        (lambda d: d.pop("data"), r"missing field 'data'"),
        (lambda d: d["data"][1]["paragraphs"][1]["qas"][0].update(id="s1"), r"duplicate query_id 's1'"),
    ],
)
def test_squad_errors(tmp_path, edit, message):
    with pytest.raises(DatasetError, match=message):
        load_squad(_squad_variant(tmp_path, edit))


def test_squad_repeated_titles_and_invalid_json(tmp_path):
    def same_title(data):
        data["data"][1]["title"] = "Chapel"

    ds = load_squad(_squad_variant(tmp_path, same_title))
    assert [d.doc_id for d in ds.documents] == ["Chapel#0", "Chapel#1", "Chapel#2", "Chapel#3"]
    bad = tmp_path / "bad.json"
    bad.write_text('{"data": [\n  {"title": "x",}\n]}', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"bad.json: invalid JSON at line 2"):
        load_squad(bad)
    with pytest.raises(DatasetError, match="does not exist"):
        load_squad(tmp_path / "nope.json")


# ---------------------------------------------------------------- excerpts


def test_excerpts_sample_located_exactly_and_across_line_breaks():
    ds, report = read_excerpts(EXCERPTS)
    assert [d.doc_id for d in ds.documents] == ["harbour_rules.md", "lifeboat.md", "tide_notes.txt"]
    assert [q.query_id for q in ds.queries] == ["e1", "e2", "e3", "e4", "e5", "e6", "e7", "excerpts-8"]
    q = {x.query_id: x for x in ds.queries}
    (e1,) = q["e1"].evidence
    # "# Saltmere harbour rules\n" (25) + "\n" (1) + rule 1 (71 + "\n") = 98; "2. " -> 101
    assert (e1.doc_id, e1.start) == ("harbour_rules.md", 101)
    assert e1.text == "Visiting yachts may stay on the pontoon for up to\n   three nights without booking."
    assert e1.end == 101 + len(e1.text)
    fuel_a, fuel_b = q["excerpts-8"].evidence
    assert fuel_a.doc_id == "harbour_rules.md" and fuel_a.text == "Fuel is sold from the quay pump on weekdays only."
    assert fuel_b.doc_id == "lifeboat.md" and fuel_b.text == "Fuel for the lifeboat is stored in the boathouse,\nnot at the quay pump."
    assert report.info == {"located_exact": 8, "located_whitespace": 2}
    assert report.counts == {}
    for query in ds.queries:
        for e in query.evidence:
            assert ds.by_id[e.doc_id].text[e.start : e.end] == e.text


def test_unlocated_excerpts_stop_loading_with_counts_and_first_problems():
    with pytest.raises(DatasetError) as info:
        load_excerpts(EXCERPTS, file="excerpts_unlocated.jsonl")
    msg = str(info.value)
    assert "3 excerpt(s) could not be located (missing=2, ambiguous=1)" in msg
    assert "dataset.allow_unlocated=true" in msg
    assert "excerpts_unlocated.jsonl:1: excerpts[0] 'Dues are' matches 2 places" in msg
    assert "excerpts_unlocated.jsonl:2: excerpts[1] 'the harbour mistress' not found in any document" in msg
    assert "excerpts_unlocated.jsonl:3:" in msg


def test_allow_unlocated_drops_excerpts_and_empty_queries(caplog):
    with caplog.at_level("WARNING", logger="harness.datasets.excerpts"):
        ds = load_excerpts(EXCERPTS, file="excerpts_unlocated.jsonl", allow_unlocated=True)
    assert [q.query_id for q in ds.queries] == ["b2", "b4"]
    assert [e.text for e in ds.queries[0].evidence] == ["the harbour master"]
    assert "ambiguous=1" in caplog.text and "missing=2" in caplog.text and "queries_without_evidence=2" in caplog.text
    _, report = read_excerpts(EXCERPTS, file="excerpts_unlocated.jsonl", allow_unlocated=True)
    assert report.counts == {"ambiguous": 1, "missing": 2, "queries_without_evidence": 2}
    # b4's excerpt crosses the line break after "Neap tides have the"
    assert report.info == {"located_exact": 1, "located_whitespace": 1, "queries_with_some_excerpts_dropped": 1}


def _excerpt_dataset(tmp_path, records) -> Path:
    dst = tmp_path / "ex"
    shutil.copytree(EXCERPTS / "corpus", dst / "corpus")
    (dst / "excerpts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return dst


def test_doc_id_restricts_the_search(tmp_path):
    # "quay pump" is in harbour_rules.md and in lifeboat.md
    dst = _excerpt_dataset(
        tmp_path,
        [
            {"query_id": "a", "query": "fuel?", "excerpts": ["quay pump"]},
            {"query_id": "b", "query": "fuel?", "excerpts": ["quay pump"], "doc_id": "lifeboat.md"},
            {"query_id": "c", "query": "fuel?", "excerpts": ["Fuel is sold"], "doc_id": "lifeboat.md"},
        ],
    )
    ds, report = read_excerpts(dst, allow_unlocated=True)
    assert [q.query_id for q in ds.queries] == ["b"]
    assert ds.queries[0].evidence[0].doc_id == "lifeboat.md"
    assert report.counts == {"ambiguous": 1, "missing": 1, "queries_without_evidence": 2}
    assert "harbour_rules.md@" in report.problems[0] and "lifeboat.md@" in report.problems[0]
    assert "not found in lifeboat.md" in report.problems[1]


@pytest.mark.parametrize(
    "record, message",
    [
        ({"query": "x", "excerpts": ["quay pump"], "doc_id": "pub.md"}, r"excerpts.jsonl:1: field 'doc_id' 'pub.md' is not a file"),
        ({"query": "x", "excerpts": "quay pump"}, r"excerpts.jsonl:1: field 'excerpts' must be a non-empty list"),
        ({"query": "x", "excerpts": ["quay pump", " "]}, r"excerpts.jsonl:1: excerpts\[1\] must be a non-empty string"),
        ({"excerpts": ["quay pump"]}, r"excerpts.jsonl:1: field 'query' must be a non-empty string"),
    ],
)
def test_excerpt_record_errors(tmp_path, record, message):
    with pytest.raises(DatasetError, match=message):
        load_excerpts(_excerpt_dataset(tmp_path, [record]))


# ---------------------------------------------------------------- validate command


def test_validate_prints_counts_and_problems_for_each_format(tmp_path, capsys):
    from harness.cli.datasets import main

    assert main(["validate", str(BEIR)]) == 0
    out = capsys.readouterr().out
    assert "(beir format)" in out and "queries:         8" in out and "10/10 in range" in out
    assert "queries_without_evidence=1" in out and "document level" in out

    assert main(["validate", str(SQUAD)]) == 0
    out = capsys.readouterr().out
    assert "(squad format)" in out and "documents:       4" in out and "queries_without_evidence=2" in out and "9/9" in out

    assert main(["validate", str(EXCERPTS)]) == 0
    out = capsys.readouterr().out
    assert "(excerpts format)" in out and "located_whitespace:" in out and "dropped or unresolved: none" in out

    dst = tmp_path / "bad"
    shutil.copytree(EXCERPTS / "corpus", dst / "corpus")
    shutil.copy(EXCERPTS / "excerpts_unlocated.jsonl", dst / "excerpts.jsonl")
    assert main(["validate", str(dst)]) == 1
    captured = capsys.readouterr()
    assert "ambiguous=1, missing=2" in captured.out and "'Dues are' matches 2 places" in captured.out
    assert "allow_unlocated" in captured.err

    assert main(["validate", str(tmp_path / "bad" / "corpus")]) == 1
    assert "format not recognised" in capsys.readouterr().err
    assert main(["validate", str(BEIR), "--split", "dev"]) == 1
    assert "qrels/dev.tsv" in capsys.readouterr().err


# ---------------------------------------------------------------- configs and end to end


@pytest.mark.parametrize(
    "overrides, n_docs, n_queries",
    [
        (["dataset=beir", f"dataset.path={BEIR}"], 6, 8),
        (["dataset=squad", f"dataset.path={SQUAD}", "dataset.answers=all"], 4, 9),
        (["dataset=excerpts", f"dataset.path={EXCERPTS}"], 3, 8),
        (["dataset=excerpts", f"dataset.path={EXCERPTS}", "dataset.file=excerpts_unlocated.jsonl", "dataset.allow_unlocated=true"], 3, 2),
    ],
)
def test_dataset_configs_build(overrides, n_docs, n_queries):
    ds = build.build_dataset(compose(overrides))
    assert (len(ds.documents), len(ds.queries)) == (n_docs, n_queries)


@pytest.mark.parametrize("group", ["beir", "squad", "excerpts"])
def test_dataset_config_without_path_fails_clearly(group):
    with pytest.raises(Exception, match="dataset.path is not set"):
        build.build_dataset(compose([f"dataset={group}"]))


@pytest.mark.parametrize(
    "overrides, experiment, n_queries",
    [
        (["dataset=beir", f"dataset.path={BEIR}", "dataset.name=saltmere_beir", "chunker.chunk_size=48"], "saltmere_beir", 8),
        (["dataset=squad", f"dataset.path={SQUAD}", "dataset.name=saltmere_squad", "chunker.chunk_size=24"], "saltmere_squad", 9),
    ],
)
@pytest.mark.slow
def test_beir_and_squad_samples_run_end_to_end(overrides, experiment, n_queries, tmp_path):
    from harness.experiment.run import execute

    uri = fresh_store(tmp_path / "m.db")
    cfg = compose([*overrides, "chunker=fixed", "retriever=bm25", f"tracking.uri={uri}", "embedding.show_progress=false"])
    result = execute(cfg)
    client = mlflow.MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    (run,) = client.search_runs([exp.experiment_id])
    assert run.info.status == "FINISHED" and run.info.run_id == result["run_id"]
    assert run.data.tags["n_queries"] == str(n_queries)
    per_query = result["evaluation"].per_query
    assert len(per_query) == n_queries  # every query scored
    m = result["metrics"]
    assert 0.0 < m["recall@10"] <= 1.0
    assert 0.0 < m["recall@1"] <= m["recall@5"] <= m["recall@10"]
    assert m["mrr@10"] > 0.5  # BM25 ranks a relevant chunk first for most of these questions
    assert run.data.metrics["recall_at_10"] == pytest.approx(m["recall@10"])
