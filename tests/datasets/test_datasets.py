"""The embedded dataset meets its brief; loaders verify spans and name what is wrong."""

import ast
import csv
import functools
import hashlib
import http.server
import json
import re
import shutil
import threading
from pathlib import Path

import pytest
from conftest import CHROMA_PATH, KESTREL_PATH
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from harness.datasets.chroma import download_chroma_general, load_chroma_general
from harness.datasets.native import load_native
from harness.datasets.validate import DatasetError


def test_kestrel_kb_size_and_forms(kestrel):
    docs = kestrel.by_id
    assert len(docs) >= 8
    assert kestrel.n_chars >= 60_000
    types = {d.metadata["type"] for d in kestrel.documents}
    assert {"markdown", "python", "chat", "text"} <= types
    md = docs["install_guide.md"].text
    assert re.search(r"^#{1,3} \S", md, re.M) and "```" in md
    assert re.search(r"^\s*[-*] \S", md, re.M) and re.search(r"^\s*\d+\. \S", md, re.M)
    assert re.search(r"^\|.*\|\s*$\n^\|[\s:|-]+\|\s*$", md, re.M), "a markdown table"
    ast.parse(docs["scheduler.py"].text)
    assert len(re.findall(r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\] ", docs["incident_chat.log"].text, re.M)) >= 50
    assert len(re.findall(r"^\*\*Q: ", docs["faq.md"].text, re.M)) >= 20


def test_kestrel_kb_questions_and_every_span_recomputed():
    """Re-read the raw files independently of the loader and recheck every stored span."""
    corpus = {p.name: p.read_bytes().decode("utf-8") for p in (KESTREL_PATH / "corpus").iterdir()}
    records = [json.loads(line) for line in (KESTREL_PATH / "questions.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(records) >= 100
    assert len({r["query_id"] for r in records}) == len(records)
    multi = [r for r in records if len({(e["doc_id"], e["start"]) for e in r["evidence"]}) >= 2]
    assert len(multi) >= 20
    for r in records:
        for e in r["evidence"]:
            text = corpus[e["doc_id"]]
            assert 0 <= e["start"] < e["end"] <= len(text)
            assert text[e["start"] : e["end"]] == e["text"], r["query_id"]
    # every document is asked about
    assert {e["doc_id"] for r in records for e in r["evidence"]} == set(corpus)


def test_chroma_general_loads_all_questions(chroma):
    assert {d.doc_id for d in chroma.documents} == {"chatlogs", "state_of_the_union", "wikitexts"}
    assert len(chroma.queries) == 276
    with open(CHROMA_PATH / "questions.csv", encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    n_refs = sum(len(json.loads(r["references"])) for r in rows)
    assert sum(len(q.evidence) for q in chroma.queries) == n_refs


def test_chroma_corpus_subset(chroma):
    ds = load_chroma_general(CHROMA_PATH, corpora=["chatlogs"])
    assert [d.doc_id for d in ds.documents] == ["chatlogs"]
    assert len(ds.queries) == 56
    with pytest.raises(DatasetError, match="pubmed"):
        load_chroma_general(CHROMA_PATH, corpora=["pubmed"])


def _copy_kestrel(tmp_path) -> Path:
    dst = tmp_path / "kb"
    shutil.copytree(KESTREL_PATH, dst)
    return dst


def test_mismatched_span_names_dataset_query_and_span(tmp_path):
    dst = _copy_kestrel(tmp_path)
    lines = (dst / "questions.jsonl").read_text(encoding="utf-8").splitlines()
    rec = json.loads(lines[3])
    rec["evidence"][0]["start"] += 1
    rec["evidence"][0]["end"] += 1
    lines[3] = json.dumps(rec)
    (dst / "questions.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(DatasetError) as err:
        load_native(dst)
    msg = str(err.value)
    assert "'kb'" in msg and rec["query_id"] in msg and f"[{rec['evidence'][0]['start']}, " in msg


def test_out_of_range_span_and_bad_json_are_reported(tmp_path):
    dst = _copy_kestrel(tmp_path)
    q = dst / "questions.jsonl"
    first = json.loads(q.read_text(encoding="utf-8").splitlines()[0])
    first["evidence"][0]["end"] = 10_000_000
    first["evidence"][0]["text"] = ""
    q.write_text(json.dumps(first) + "\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="beyond the document"):
        load_native(dst)
    q.write_text('{"query_id": "x", "query": "?"\n', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"questions.jsonl:1: invalid JSON"):
        load_native(dst)
    q.write_text('{"query_id": "x", "query": "?"}\n', encoding="utf-8")
    with pytest.raises(DatasetError, match="missing field 'evidence'"):
        load_native(dst)


def test_unicode_line_separator_inside_a_question_is_part_of_its_record(tmp_path):
    """JSON Lines ends a record at \\n only: a raw U+2028 inside a JSON string (json.dumps with
    ensure_ascii=False writes it as is) must not split the record."""
    dst = _copy_kestrel(tmp_path)
    q = dst / "questions.jsonl"
    lines = q.read_text(encoding="utf-8").splitlines()
    rec = json.loads(lines[0])
    rec["query"] = rec["query"] + "\u2028(second line)"
    lines[0] = json.dumps(rec, ensure_ascii=False)
    assert "\u2028" in lines[0]
    q.write_text("\n".join(lines) + "\n", encoding="utf-8")
    dataset = load_native(dst)
    assert len(dataset.queries) == len(lines)
    assert dataset.queries[0].text.endswith("\u2028(second line)")


def test_chroma_mismatch_names_row(tmp_path, chroma):
    dst = tmp_path / "cg"
    shutil.copytree(CHROMA_PATH, dst)
    (dst / "questions.csv").chmod(0o644)
    rows = list(csv.DictReader(open(dst / "questions.csv", encoding="utf-8", newline="")))
    refs = json.loads(rows[0]["references"])
    refs[0]["start_index"] += 3
    rows[0]["references"] = json.dumps(refs)
    with open(dst / "questions.csv", "w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["question", "references", "corpus_id"])
        w.writeheader()
        w.writerows(rows)
    with pytest.raises(DatasetError, match=r"dataset 'chroma_general', query 'state_of_the_union-0001', evidence #0"):
        load_chroma_general(dst)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture()
def local_http_server(chroma):
    """Serve ../shared/datasets/chroma_general on a free 127.0.0.1 port."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(CHROMA_PATH))
    handler.log_message = lambda *a, **k: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def test_download_from_local_http_server_verifies_sha256(tmp_path, local_http_server):
    rels = ["corpora/chatlogs.md", "corpora/state_of_the_union.md", "corpora/wikitexts.md", "questions.csv"]
    manifest = {rel: (local_http_server + rel, _sha(CHROMA_PATH / rel)) for rel in rels}
    cache = tmp_path / "cache"
    folder = download_chroma_general(cache, manifest=manifest)
    ds = load_chroma_general(folder)
    assert len(ds.queries) == 276
    assert not list(cache.rglob("*.part"))
    # a second call finds verified files and does not fetch again (server URL now bogus)
    stale = {rel: ("http://127.0.0.1:9/none", sha) for rel, (_, sha) in manifest.items()}
    download_chroma_general(cache, manifest=stale)


def test_download_sha_mismatch_leaves_nothing(tmp_path, local_http_server):
    manifest = {"questions.csv": (local_http_server + "questions.csv", "0" * 64)}
    with pytest.raises(DatasetError, match="sha256 mismatch for questions.csv"):
        download_chroma_general(tmp_path / "c", manifest=manifest)
    assert not (tmp_path / "c" / "questions.csv").exists()
    assert not list((tmp_path / "c").glob(".*part"))


def test_download_from_file_url(tmp_path, chroma):
    src = CHROMA_PATH / "corpora" / "chatlogs.md"
    manifest = {"corpora/chatlogs.md": (src.as_uri(), _sha(src))}
    folder = download_chroma_general(tmp_path / "f", manifest=manifest)
    assert _sha(folder / "corpora" / "chatlogs.md") == _sha(src)


def test_load_chroma_without_local_copy_or_download_is_a_clear_error(tmp_path):
    with pytest.raises(DatasetError, match="dataset.path"):
        load_chroma_general(None, project_root=tmp_path, download=False)


def test_validate_command_reports_counts_and_failures(tmp_path, capsys):
    from harness.cli.datasets import main

    assert main(["validate", str(KESTREL_PATH)]) == 0
    out = capsys.readouterr().out
    assert "queries:         191" in out and "303/303" in out
    dst = _copy_kestrel(tmp_path)
    (dst / "corpus" / "faq.md").write_text("shortened\n", encoding="utf-8")
    assert main(["validate", str(dst)]) == 1
    assert "faq.md" in capsys.readouterr().err


# ------------------------------------------------------------------ a path dataset is named after its corpus


@pytest.mark.parametrize(
    "group, path, expected",
    [
        ("folder", "/data/harbour_docs", "harbour_docs"),
        ("folder", "/data/harbour_docs/", "harbour_docs"),
        ("excerpts", "/data/policies", "policies"),
        ("beir", "/data/scifact", "scifact"),
        ("squad", "/data/dev-v2.0.json", "dev-v2.0"),
        ("squad", "/data/squad_dev", "squad_dev"),
    ],
)
def test_a_path_dataset_and_its_experiment_are_named_after_the_corpus(group, path, expected):
    from conftest import compose

    from harness.tracking.runs import experiment_name

    cfg = compose([f"dataset={group}", f"dataset.path={path}"])
    assert cfg.dataset.name == expected and experiment_name(cfg) == expected
    # an explicit name wins; no path keeps the group's name (so the shipped hashes stay)
    assert compose([f"dataset={group}", f"dataset.path={path}", "dataset.name=mine"]).dataset.name == "mine"
    assert compose([f"dataset={group}"]).dataset.name == group


def test_the_folder_dataset_loaded_from_its_config_carries_the_corpus_name(tmp_path):
    from conftest import compose
    from ingest_samples import make_folder

    from harness.experiment import build

    folder = make_folder(tmp_path / "harbour_docs", bad_files=False)
    ds = build.build_dataset(compose(["dataset=folder", f"dataset.path={folder}"]))
    assert ds.name == "harbour_docs"


@settings(max_examples=50, deadline=None)
@given(st.text(st.characters(codec="ascii", categories=("L", "N"), include_characters="-_. "), min_size=1, max_size=20), st.booleans())
def test_corpus_name_property_is_the_last_path_part_without_a_json_suffix(part, slash):
    from harness.experiment.build import corpus_name

    assume(part.strip(". ") == part and part not in ("", ".", ".."))
    path = f"/data/x/{part}" + ("/" if slash else "")
    expected = part[: -len(".jsonl")] if part.endswith(".jsonl") else part[: -len(".json")] if part.endswith(".json") else part
    assert corpus_name(path, "folder") == (expected or "folder")
    assert corpus_name(None, "folder") == "folder" and corpus_name("", "beir") == "beir" and corpus_name("/", "squad") == "squad"


def test_detect_format_by_the_files_a_path_holds(tmp_path):
    from harness.datasets.detect import detect_format
    from harness.datasets.validate import DatasetError

    assert detect_format(KESTREL_PATH) == "native"  # questions.jsonl + corpus/
    (tmp_path / "dev.json").write_text("{}", encoding="utf-8")
    assert detect_format(tmp_path / "dev.json") == "squad"
    assert detect_format(tmp_path) == "squad"  # a folder holding exactly one .json file
    excerpts = tmp_path / "ex"
    (excerpts / "corpus").mkdir(parents=True)
    (excerpts / "excerpts.jsonl").write_text("", encoding="utf-8")
    (excerpts / "corpus" / "a.txt").write_text("text", encoding="utf-8")
    assert detect_format(excerpts) == "excerpts"
    (excerpts / "corpus" / "b.pdf").write_bytes(b"%PDF-1.4")
    assert detect_format(excerpts) == "folder"  # a file that needs extraction
    with pytest.raises(DatasetError, match="format not recognised"):
        detect_format(tmp_path / "ex" / "corpus")
