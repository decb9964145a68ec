"""Dataset inputs at the edges (issue 13, class 6, dataset part).

* A query without evidence, in a format that allows one (BEIR qrels, SQuAD unanswerable,
  an empty excerpts list, an empty native evidence list, empty chroma references), is
  excluded and counted (``dataset.queries_without_evidence``, an MLflow metric of the run,
  and a warning): never scored 0, never failing the run.
* A file that is not UTF-8 stops every loader, and ``harness datasets validate``,
  with one line naming the file and the byte offset (not a bare ``UnicodeDecodeError``).
* A leading byte-order mark does not hide the first markdown heading, and evidence offsets
  stay those of the file.

Everything is real: files written under ``tmp_path``, the loaders, the markdown chunker,
``harness.experiment.run.execute`` with BM25 and an MLflow SQLite store in ``tmp_path``. Expected
counts and byte offsets are worked out by hand in the comments.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import warnings
from pathlib import Path

import mlflow
import pytest
from conftest import PROJECT_ROOT, compose

from harness.datasets.validate import DatasetError
from harness.types import Document

BOM = "\ufeff"


def _write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_bytes(data.encode("utf-8"))
    return path


def _jsonl(records) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One MLflow SQLite store for the module's runs (each in its own experiment)."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


def _run(uri, overrides):
    from harness.experiment.run import execute

    cfg = compose([*overrides, "chunker=fixed", "chunker.chunk_size=200", "retriever=bm25", f"tracking.uri={uri}", "embedding.show_progress=false"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = execute(cfg)
    client = mlflow.MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name(cfg.dataset.name).experiment_id])
    return result, run, [str(w.message) for w in caught]


def _values(store, run) -> dict:
    """Every value the run recorded (its MLflow metrics and its metrics table)."""
    from harness.tracking.runs import run_metrics

    return run_metrics(store, run.info.run_id)


# ------------------------------------------------------------ queries without evidence

# Three short documents on unrelated topics: each fits one 200-token chunk, and each
# answerable query shares its rare words with one document only.
DOCS = {
    "mill": "The tide mill on Saltmere creek ground barley with seawater trapped at high tide.",
    "ferry": "The chain ferry crosses the estuary every twenty minutes from the slipway.",
    "bakery": "Pennock's bakery bakes saffron buns and heavy cake every Saturday morning.",
}


def _beir(tmp_path) -> Path:
    root = tmp_path / "beir"
    _write(root / "corpus.jsonl", _jsonl({"_id": k, "title": "", "text": v} for k, v in DOCS.items()))
    queries = [
        {"_id": "q1", "text": "what did the tide mill grind with seawater"},
        {"_id": "q2", "text": "when does the chain ferry cross"},  # judged, but only score 0
        {"_id": "q3", "text": "who bakes saffron buns"},  # no qrels row at all
        {"_id": "q4", "text": "saffron buns heavy cake Saturday"},
    ]
    _write(root / "queries.jsonl", _jsonl(queries))
    _write(root / "qrels" / "test.tsv", "query-id\tcorpus-id\tscore\nq1\tmill\t1\nq2\tferry\t0\nq4\tbakery\t2\n")
    return root


@pytest.mark.slow
def test_beir_queries_without_positive_qrels_are_excluded_counted_and_logged(tmp_path, store):
    result, run, messages = _run(store, ["dataset=beir", f"dataset.path={_beir(tmp_path)}", "dataset.name=edge_beir"])
    assert run.info.status == "FINISHED"
    # q2 (judged 0 only) and q3 (not judged) have no evidence: 2 excluded
    assert _values(store, run)["dataset.queries_without_evidence"] == 2
    assert any("2 labelled queries without evidence" in m for m in messages)
    per_query = result["evaluation"].per_query
    assert sorted(per_query["query_id"]) == ["q1", "q4"]  # the excluded ones are not scored at all
    assert run.data.tags["n_queries"] == "2"
    # each answerable query's only document is ranked first: 1.0, not (1 + 1 + 0 + 0) / 4
    assert run.data.metrics["recall_at_1"] == pytest.approx(1.0)


def _excerpts(tmp_path) -> Path:
    root = tmp_path / "ex"
    for doc_id, text in DOCS.items():
        _write(root / "corpus" / f"{doc_id}.md", text + "\n")
    records = [
        {"query_id": "e1", "query": "what did the tide mill grind with seawater", "excerpts": ["ground barley with seawater"]},
        {"query_id": "e2", "query": "is there anything about the lighthouse", "excerpts": []},
        {"query_id": "e3", "query": "who bakes saffron buns", "excerpts": ["bakes saffron buns"]},
    ]
    _write(root / "excerpts.jsonl", _jsonl(records))
    return root


def test_excerpts_query_with_empty_excerpts_is_excluded_counted_and_logged(tmp_path, store):
    result, run, messages = _run(store, ["dataset=excerpts", f"dataset.path={_excerpts(tmp_path)}", "dataset.name=edge_ex"])
    assert run.info.status == "FINISHED"
    assert _values(store, run)["dataset.queries_without_evidence"] == 1  # e2
    assert any("1 labelled query without evidence" in m for m in messages)
    assert sorted(result["evaluation"].per_query["query_id"]) == ["e1", "e3"]
    assert run.data.metrics["recall_at_1"] == pytest.approx(1.0)  # not (1 + 0 + 1) / 3


def test_every_loader_excludes_and_counts_a_query_without_evidence(tmp_path):
    from harness.datasets.chroma import load_chroma_general
    from harness.datasets.folder import load_folder
    from harness.datasets.native import load_native
    from harness.datasets.squad import load_squad

    # native: "evidence": [] on the second line
    nat = tmp_path / "native"
    _write(nat / "corpus" / "mill.md", DOCS["mill"])
    _write(
        nat / "questions.jsonl",
        _jsonl(
            [
                {"query_id": "n1", "query": "what was ground", "evidence": [{"doc_id": "mill.md", "start": 39, "end": 45, "text": "barley"}]},
                {"query_id": "n2", "query": "anything else?", "evidence": []},
            ]
        ),
    )
    # chroma: references "[]" on the second row
    chroma = tmp_path / "chroma"
    _write(chroma / "corpora" / "mill.md", DOCS["mill"])
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["question", "references", "corpus_id"])
    w.writerow(["what was ground", json.dumps([{"content": "barley", "start_index": 39, "end_index": 45}]), "mill"])
    w.writerow(["anything else?", "[]", "mill"])
    _write(chroma / "questions.csv", buf.getvalue())
    # SQuAD v2: one answerable, one is_impossible
    squad = tmp_path / "sq.json"
    para = {
        "context": DOCS["mill"],
        "qas": [
            {"id": "s1", "question": "what was ground", "answers": [{"text": "barley", "answer_start": 39}]},
            {"id": "s2", "question": "anything else?", "answers": [], "is_impossible": True},
        ],
    }
    _write(squad, json.dumps({"version": "v2.0", "data": [{"title": "Mill", "paragraphs": [para]}]}))
    # folder: "excerpts": [] on the second line
    folder = tmp_path / "folder"
    _write(folder / "corpus" / "mill.html", f"<html><body><p>{DOCS['mill']}</p></body></html>")
    _write(folder / "excerpts.jsonl", _jsonl([{"query_id": "f1", "query": "q", "excerpts": ["barley"]}, {"query_id": "f2", "query": "q", "excerpts": []}]))

    assert DOCS["mill"][39:45] == "barley"
    loaded = {
        "native": load_native(nat),
        "chroma": load_chroma_general(chroma, name="c"),
        "squad": load_squad(squad),
        "folder": load_folder(folder),
    }
    for fmt, ds in loaded.items():
        assert len(ds.queries) == 1, fmt
        assert ds.load_report.count("queries_without_evidence") == 1, fmt


# ------------------------------------------------------------ files that are not UTF-8

# b"caf\xe9": 0xe9 is Latin-1 for e-acute and not valid UTF-8 there; it is byte 3.
LATIN1 = "caf\u00e9 au lait\n".encode("latin-1")


def _native_bad_corpus(tmp_path):
    root = tmp_path / "n"
    bad = _write(root / "corpus" / "menu.md", LATIN1)
    _write(root / "questions.jsonl", _jsonl([{"query_id": "a", "query": "q", "evidence": [{"doc_id": "menu.md", "start": 0, "end": 3}]}]))
    return root, bad, "offset 3", "line 1, column 4"


def _native_bad_questions(tmp_path):
    root = tmp_path / "n"
    _write(root / "corpus" / "menu.md", "cafe au lait\n")
    first = '{"query_id": "a", "query": "q", "evidence": [{"doc_id": "menu.md", "start": 0, "end": 4}]}\n'  # 91 bytes
    bad = _write(root / "questions.jsonl", first.encode() + b'{"query_id": "b", "query": "caf\xe9", "evidence": []}\n')
    # line 2: '{"query_id": "b", "query": "caf' is 31 bytes, so 0xe9 is at 91 + 31 = 122, column 32
    assert len(first.encode()) == 91
    return root, bad, "offset 122", "line 2, column 32"


def _excerpts_bad_corpus(tmp_path):
    root = tmp_path / "e"
    _write(root / "corpus" / "ok.md", "cafe au lait\n")
    bad = _write(root / "corpus" / "menu.txt", b"tea\n" + LATIN1)  # 4 + 3 = 7
    _write(root / "excerpts.jsonl", _jsonl([{"query": "q", "excerpts": ["cafe"]}]))
    return root, bad, "offset 7", "line 2, column 4"


def _chroma_bad_corpus(tmp_path):
    root = tmp_path / "c"
    bad = _write(root / "corpora" / "menu.md", LATIN1)
    _write(root / "questions.csv", 'question,references,corpus_id\nq,"[{""content"": ""caf"", ""start_index"": 0, ""end_index"": 3}]",menu\n')
    return root, bad, "offset 3", "line 1, column 4"


def _beir_bad_corpus(tmp_path):
    root = tmp_path / "b"
    # line 1 '{"_id":"d1","text":"one"}\n' is 26 bytes; on line 2 '{"_id":"d2","text":"caf' is 23
    bad = _write(root / "corpus.jsonl", b'{"_id":"d1","text":"one"}\n{"_id":"d2","text":"caf\xe9"}\n')
    _write(root / "queries.jsonl", '{"_id":"q1","text":"one"}\n')
    _write(root / "qrels" / "test.tsv", "q1\td1\t1\n")
    return root, bad, "offset 49", "line 2, column 24"


def _beir_bad_corpus_far(tmp_path):
    root = tmp_path / "b"
    # 5000 lines of '{"_id":"d00000","text":"x"}\n', 28 bytes each = 140000 bytes: far past any
    # read buffer; on line 5001 '{"_id":"bad","text":"caf' is 24 bytes
    lines = "".join(f'{{"_id":"d{i:05d}","text":"x"}}\n' for i in range(5000)).encode()
    bad = _write(root / "corpus.jsonl", lines + b'{"_id":"bad","text":"caf\xe9"}\n')
    _write(root / "queries.jsonl", '{"_id":"q1","text":"x"}\n')
    _write(root / "qrels" / "test.tsv", "q1\td00001\t1\n")
    return root, bad, "offset 140024", "line 5001, column 25"


def _beir_bad_qrels(tmp_path):
    root = tmp_path / "b"
    _write(root / "corpus.jsonl", '{"_id":"d1","text":"one"}\n')
    _write(root / "queries.jsonl", '{"_id":"q1","text":"one"}\n')
    # "query-id\tcorpus-id\tscore\n" is 25 bytes; "q1\td1\t1\n" 8 more; then "q\xe9": 0xe9 at 33 + 1
    bad = _write(root / "qrels" / "test.tsv", b"query-id\tcorpus-id\tscore\nq1\td1\t1\nq\xe9\td1\t1\n")
    return root, bad, "offset 34", "line 3, column 2"


def _squad_bad(tmp_path):
    # '{"data": [{"title": "caf' is 24 bytes
    bad = _write(tmp_path / "s.json", b'{"data": [{"title": "caf\xe9", "paragraphs": []}]}')
    return bad, bad, "offset 24", "line 1, column 25"


def _folder_bad(tmp_path):
    root = tmp_path / "f"
    _write(root / "corpus" / "ok.md", "cafe au lait\n")
    bad = _write(root / "corpus" / "sub" / "notes.md", b"line one\n" + LATIN1)  # 9 + 3 = 12
    _write(root / "excerpts.jsonl", _jsonl([{"query": "q", "excerpts": ["cafe"]}]))
    return root, bad, "offset 12", "line 2, column 4"


LOADERS = {
    "native-corpus": (_native_bad_corpus, "harness.datasets.native:load_native", {}),
    "native-questions": (_native_bad_questions, "harness.datasets.native:load_native", {}),
    "excerpts-corpus": (_excerpts_bad_corpus, "harness.datasets.excerpts:load_excerpts", {}),
    "chroma-corpus": (_chroma_bad_corpus, "harness.datasets.chroma:load_chroma_general", {}),
    "beir-corpus": (_beir_bad_corpus, "harness.datasets.beir:load_beir", {}),
    "beir-corpus-far": (_beir_bad_corpus_far, "harness.datasets.beir:load_beir", {}),
    "beir-qrels": (_beir_bad_qrels, "harness.datasets.beir:load_beir", {}),
    "squad": (_squad_bad, "harness.datasets.squad:load_squad", {}),
    "folder-fail": (_folder_bad, "harness.datasets.folder:load_folder", {"on_error": "fail"}),
}


def _loader(spec: str):
    import importlib

    module, name = spec.split(":")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("case", sorted(LOADERS))
def test_a_file_that_is_not_utf8_names_the_file_and_the_byte_offset(tmp_path, case):
    make, spec, kwargs = LOADERS[case]
    root, bad, offset, line = make(tmp_path)
    with pytest.raises(DatasetError) as info:
        _loader(spec)(root, **kwargs)
    msg = str(info.value)
    assert str(bad) in msg, msg
    assert "not UTF-8" in msg and "0xe9" in msg and offset in msg and line in msg, msg


def test_folder_skip_mode_names_the_file_and_offset_in_its_report(tmp_path):
    from harness.datasets.folder import read_folder

    root, _, offset, line = _folder_bad(tmp_path)
    ds = read_folder(root)
    assert ds.skipped_files == 1 and [d.doc_id for d in ds.documents] == ["ok.md"]
    (problem,) = ds.load_report.problems
    assert str(root / "corpus" / "sub" / "notes.md") in problem and offset in problem and line in problem


@pytest.mark.parametrize("case, fmt", [("native-corpus", "native"), ("beir-corpus", "beir"), ("squad", "squad"), ("chroma-corpus", "chroma")])
def test_validate_reports_a_file_that_is_not_utf8(tmp_path, case, fmt):
    make, _, _ = LOADERS[case]
    root, bad, offset, line = make(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "datasets", "validate", str(root), "--format", fmt],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "UnicodeDecodeError" not in proc.stderr, proc.stderr
    (msg,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("INVALID:")]
    assert str(bad) in msg and offset in msg and line in msg, msg


def test_a_utf16_file_is_named_as_utf16(tmp_path):
    from harness.datasets.native import load_native

    root = tmp_path / "n"
    bad = _write(root / "corpus" / "notes.txt", "hello\n".encode("utf-16"))  # FF FE, then UTF-16-LE
    _write(root / "questions.jsonl", _jsonl([{"query_id": "a", "query": "q", "evidence": [{"doc_id": "notes.txt", "start": 0, "end": 1}]}]))
    with pytest.raises(DatasetError, match="UTF-16") as info:
        load_native(root)
    assert str(bad) in str(info.value) and "offset 0" in str(info.value)


# ------------------------------------------------------------ byte-order mark


def test_a_leading_bom_does_not_hide_the_first_heading_and_offsets_stay_true(tmp_path):
    from harness.chunkers.markdown import MarkdownChunker
    from harness.datasets.native import load_native

    text = BOM + "# Heading\n\nBody of the first section.\n\n## Sub\n\nMore text.\n"
    # code points: BOM 0, "# Heading" 1-9, "\n\n" 10-11, "Body" starts at 12
    root = tmp_path / "n"
    _write(root / "corpus" / "guide.md", text)
    _write(
        root / "questions.jsonl", _jsonl([{"query_id": "a", "query": "body?", "evidence": [{"doc_id": "guide.md", "start": 12, "end": 16, "text": "Body"}]}])
    )
    ds = load_native(root)
    (doc,) = ds.documents
    assert doc.text == text  # the mark is kept: the stored offsets are those of the file

    chunks = MarkdownChunker(max_chunk_size=60, unit="chars").chunk(doc)
    assert [c.metadata["section_path"] for c in chunks] == ["Heading", "Heading > Sub"]
    for c in chunks:
        ((s, e),) = c.spans
        assert c.text == doc.text[s:e]
    assert chunks[0].spans[0][0] <= 12 and chunks[0].spans[0][1] >= 16  # the evidence is in the first section


def test_a_leading_bom_does_not_hide_heading_fence_or_table_elsewhere():
    from harness.chunkers.faq import faq_regions
    from harness.ingest import extract_bytes
    from harness.text.blocks import markdown_blocks

    assert [(b.kind, b.level, b.title) for b in markdown_blocks(BOM + "## Title\ntext\n")][0] == ("heading", 2, "Title")
    assert [b.kind for b in markdown_blocks(BOM + "```\n# not a heading\n```\n")] == ["fence"]
    assert [b.kind for b in markdown_blocks(BOM + "| a | b |\n| --- | --- |\n| 1 | 2 |\n")] == ["table"]
    x = extract_bytes((BOM + "# Heading\n\nBody.\n").encode("utf-8"), "guide.md")
    assert x.text.startswith(BOM) and x.elements[0]["type"] == "heading" and x.elements[0]["level"] == 1
    # an FAQ whose first question is a heading
    regions = faq_regions(BOM + "# Can I park here?\n\nYes, after six.\n")
    assert [q for _, _, q, _ in regions if q] == ["Can I park here?"]


def test_a_leading_bom_in_record_files_is_ignored(tmp_path):
    from harness.datasets.beir import load_beir
    from harness.datasets.chroma import load_chroma_general
    from harness.datasets.squad import load_squad
    from harness.ingest import extract_bytes

    root = _beir(tmp_path)
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        (root / name).write_text(BOM + (root / name).read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.warns(UserWarning, match="2 labelled queries without evidence"):
        ds = load_beir(root)
    assert [q.query_id for q in ds.queries] == ["q1", "q4"] and ds.documents[0].doc_id == "mill"

    squad = _write(
        tmp_path / "s.json",
        BOM
        + json.dumps(
            {
                "data": [
                    {
                        "title": "T",
                        "paragraphs": [{"context": "abc def", "qas": [{"id": "x", "question": "q", "answers": [{"text": "def", "answer_start": 4}]}]}],
                    }
                ]
            }
        ),
    )
    assert [(e.start, e.end) for e in load_squad(squad).queries[0].evidence] == [(4, 7)]

    chroma = tmp_path / "c"
    _write(chroma / "corpora" / "menu.md", "cafe au lait\n")
    _write(chroma / "questions.csv", BOM + 'question,references,corpus_id\nq,"[{""content"": ""cafe"", ""start_index"": 0, ""end_index"": 4}]",menu\n')
    assert len(load_chroma_general(chroma, name="c").queries) == 1

    chat = extract_bytes((BOM + json.dumps([{"timestamp": "2025-01-01T09:00:00", "author": "a", "text": "hi"}])).encode("utf-8"), "c.json")
    assert "hi" in chat.text and not chat.text.startswith(BOM)
    assert Document("d", BOM + "x").text.startswith(BOM)


def test_a_leading_bom_does_not_hide_a_heading_from_routing_or_parents():
    from harness.chunkers.adaptive import sniff_type
    from harness.chunkers.hierarchical import heading_starts

    # a .txt file whose only markdown sign is its first heading: routed as markdown, with
    # or without the byte-order mark in front of it
    plain = "# Install\n\nRun the installer and wait.\n"
    assert sniff_type(Document("guide.txt", plain)) == "markdown"
    assert sniff_type(Document("guide.txt", BOM + plain)) == "markdown"
    # a second file concatenated with its own BOM: its heading starts a parent at the BOM
    text = "Intro line.\n\n" + BOM + "# Second\n\nBody.\n"
    assert heading_starts(text) == [text.index(BOM)]
    assert heading_starts(BOM + "1.2 Install on Linux\n\nSteps.\n") == [0]
