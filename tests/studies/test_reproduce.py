"""Reproducing the Chroma evaluation's configurations: per-corpus split, table, resumable script."""

import csv
import importlib.util
import json
import random
import re

import pandas as pd
import pytest
from conftest import PROJECT_ROOT

from harness.studies.reproduce import ALL, CHROMA_CONFIGURATIONS, Result, base_overrides, corpus_table, select, split_by_corpus

SCRIPT = PROJECT_ROOT / "experiments" / "reproduce" / "chroma.py"


def _script():
    spec = importlib.util.spec_from_file_location("reproduce_chroma_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_evaluations_configurations_are_all_there():
    assert list(CHROMA_CONFIGURATIONS) == [
        "fixed 800/400",
        "fixed 400/200",
        "fixed 400/0",
        "fixed 200/0",
        "recursive 800/400",
        "recursive 400/200",
        "recursive 400/0",
        "recursive 200/0",
        "cluster 200",
        "cluster 400",
        "kamradt 300",
    ]
    assert all("chunker.compatible=chroma" in o and "chunker.tokenizer=cl100k_base" in o for o in CHROMA_CONFIGURATIONS.values())


def test_split_by_corpus_means_per_corpus_and_over_all_questions():
    table = pd.DataFrame({"query_id": ["0", "1", "2", "3"], "recall@5": [1.0, 0.0, 0.5, 0.25], "chroma_recall@5": [1.0, 0.0, 0.5, 0.5]})
    values, questions = split_by_corpus(table, {"0": "a", "1": "a", "2": "b", "3": "a"}, ["recall@5", "chroma_recall@5"])
    assert questions == {ALL: 4, "a": 3, "b": 1}
    assert values[ALL]["recall@5"] == pytest.approx(1.75 / 4)  # a mean over questions, not over corpora
    assert values["a"]["recall@5"] == pytest.approx(1.25 / 3)
    assert values["b"]["chroma_recall@5"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="metrics.convention=chroma"):
        split_by_corpus(table, {"0": "a", "1": "a", "2": "b", "3": "a"}, ["chroma_iou@5"])
    with pytest.raises(ValueError, match="'3'"):
        split_by_corpus(table, {"0": "a", "1": "a", "2": "b"}, ["recall@5"])


def test_bad_arguments_are_refused_before_anything_runs(tmp_path):
    with pytest.raises(ValueError, match="did you mean 'fixed 400/0'"):
        select(["fixed 400/O"])
    with pytest.raises(ValueError, match=re.escape(str(tmp_path))):
        base_overrides(tmp_path)
    with pytest.raises(ValueError, match="k must be"):
        base_overrides(tmp_path, k=0)


def test_table_lists_all_first_then_each_corpus():
    r = Result("fixed 400/0", "id", "fixed-400-0-cl100k_base-chroma-faiss", False, {ALL: 3, "a": 2, "b": 1}, {}, {ALL: 2, "a": 1, "b": 1})
    names = [n.format(k=5) for n in ("recall@{k}", "chroma_recall@{k}", "iou@{k}", "chroma_iou@{k}", "precision@{k}", "chroma_precision@{k}")]
    names += ["precision_omega", "chroma_precision_omega"]
    r.values = {c: {n: i / 10 for i, n in enumerate(names)} for c in (ALL, "b", "a")}
    lines = corpus_table([r]).splitlines()
    assert lines[0].startswith("| configuration | corpus | chunks | questions | recall | recall (chroma) | IoU | IoU (chroma) |")
    assert [line.split("|")[2].strip() for line in lines[2:]] == [ALL, "a", "b"]
    assert lines[2].split("|")[3].strip() == "3" and lines[3].split("|")[3].strip() == "2"
    assert lines[2].split("|")[5].strip() == "0.0000" and lines[2].split("|")[12].strip() == "0.7000"


def _tiny_chroma_dataset(root):
    """Two corpora of generated sentences, questions whose evidence is one or two exact sentences."""
    rng = random.Random(7)
    words = "river bank ledger harbour copper lantern orchard violin glacier meadow pepper saddle quartz tunnel falcon marble".split()
    rows = []
    (root / "corpora").mkdir(parents=True)
    for corpus in ("alpha", "beta"):
        sentences = [" ".join(rng.choice(words) for _ in range(rng.randint(8, 16))).capitalize() + "." for _ in range(120)]
        text = ""
        starts = []
        for i, s in enumerate(sentences):
            text += "\n\n" if i and i % 6 == 0 else " " if i else ""
            starts.append((len(text), len(text) + len(s)))
            text += s
        (root / "corpora" / f"{corpus}.md").write_text(text, encoding="utf-8", newline="")
        for q in range(6):
            picks = sorted(rng.sample(range(len(sentences)), rng.randint(1, 2)))
            refs = [{"content": text[a:b], "start_index": a, "end_index": b} for a, b in (starts[i] for i in picks)]
            rows.append({"question": " ".join(sentences[picks[0]].split()[:6]) + "?", "references": json.dumps(refs), "corpus_id": corpus})
    with open(root / "questions.csv", "w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["question", "references", "corpus_id"])
        w.writeheader()
        w.writerows(rows)


@pytest.mark.slow
def test_script_runs_pooled_per_corpus_and_resumes(tmp_path, tracking_uri, capsys):
    from harness.chunkers.fixed import FixedChunker
    from harness.types import Document

    data = tmp_path / "tiny_chroma"
    _tiny_chroma_dataset(data)
    out1, out2 = tmp_path / "first.json", tmp_path / "second.json"
    args = [
        "--dataset",
        str(data),
        "--only",
        "fixed 200/0",
        "--only",
        "recursive 200/0",
        f"tracking.uri={tracking_uri}",
        f"cache.dir={tmp_path / 'cache'}",
        "embedding.show_progress=false",
    ]
    assert _script().main([*args, "--json", str(out1)]) == 0
    first = json.loads(out1.read_text(encoding="utf-8"))
    printed = capsys.readouterr()
    assert "| fixed 200/0 | all |" in printed.out and "ran run fixed-200-0-cl100k_base-chroma-faiss" in printed.err
    fixed, recursive = (Result.from_json(r) for r in first["results"])
    assert fixed.questions == recursive.questions == {ALL: 12, "alpha": 6, "beta": 6}
    for corpus in ("alpha", "beta"):  # chunk counts are those of the compatible chunker on each corpus
        text = (data / "corpora" / f"{corpus}.md").read_text(encoding="utf-8")
        assert fixed.chunks[corpus] == len(FixedChunker(200, 0, "tokens", "cl100k_base", "chroma").chunk(Document(corpus, text)))
    assert fixed.chunks[ALL] == fixed.chunks["alpha"] + fixed.chunks["beta"]
    for res in (fixed, recursive):
        for corpus, v in res.values.items():
            assert 0.0 < v["recall@5"] <= 1.0
            # evidence spans do not overlap and chunks of one configuration do not either: the recalls agree
            assert v["chroma_recall@5"] == pytest.approx(v["recall@5"])
            assert v["chroma_precision@5"] <= v["precision@5"] + 1e-12  # a summed denominator is never below the union
        pooled = (res.values["alpha"]["recall@5"] * 6 + res.values["beta"]["recall@5"] * 6) / 12
        assert res.values[ALL]["recall@5"] == pytest.approx(pooled)
    # a second call reads the FINISHED runs back: same runs, same numbers, nothing recomputed
    assert _script().main([*args, "--json", str(out2)]) == 0
    assert "read back (FINISHED before)" in capsys.readouterr().err
    second = json.loads(out2.read_text(encoding="utf-8"))
    assert second["results"] == first["results"]


def test_docs_table_is_the_committed_runs_table():
    """The numbers of docs/reproduce.md come from a run of the script (its JSON), never typed in."""
    data = json.loads((PROJECT_ROOT / "experiments" / "reproduce" / "chroma_general.json").read_text(encoding="utf-8"))
    assert data["dataset"] == "chroma_general" and data["k"] == 5
    results = [Result.from_json(r) for r in data["results"]]
    assert [r.name for r in results] == list(CHROMA_CONFIGURATIONS)
    for r in results:
        assert r.questions[ALL] == sum(n for c, n in r.questions.items() if c != ALL)
        assert r.chunks[ALL] == sum(n for c, n in r.chunks.items() if c != ALL)
    page = (PROJECT_ROOT / "docs" / "reproduce.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- reproduce-chroma:start[^>]*-->\n(.*?)\n<!-- reproduce-chroma:end -->", page, re.S)
    assert block is not None, "docs/reproduce.md lost its reproduce-chroma table markers"
    assert block.group(1) == corpus_table(results, data["k"])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["chunker.chunk_size=100"], r"chunker\.chunk_size is set by each reproduced configuration"),
        (["retriever=bm25"], r"retriever is set by each"),
        (["dataset.path=/tmp/x"], r"dataset\.path is set by each"),
        (["metrics.convention=harness"], r"metrics\.convention is set by each"),
        (["trackinguri"], r"expected key=value"),
    ],
)
def test_overrides_of_what_is_reproduced_are_refused(extra, message):
    from harness.studies.reproduce import check_extra

    with pytest.raises(ValueError, match=message):
        check_extra(extra)
    check_extra(["tracking.uri=sqlite:////tmp/m.db", "cache.dir=/tmp/c", "embedding.batch_size=32"])  # these pass through


def test_a_misspelt_override_fails_in_one_line_before_anything_runs(tmp_path):
    from harness.studies.reproduce import reproduce

    data = tmp_path / "tiny_chroma"
    _tiny_chroma_dataset(data)
    with pytest.raises(ValueError) as caught:
        reproduce(data, only=["fixed 400/0"], extra=["trackng.uri=sqlite:////tmp/x.db"])
    assert str(caught.value).startswith("fixed 400/0: ") and "trackng" in str(caught.value) and "\n" not in str(caught.value)
    assert not (tmp_path / "x.db").exists()


def test_script_errors_are_one_line_with_exit_2(tmp_path, capsys):
    script = _script()
    assert script.main(["--dataset", str(tmp_path / "nowhere")]) == 2
    assert "does not exist: pass --dataset PATH" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text('{"a": 1}', encoding="utf-8")
    assert script.main(["--from-json", str(bad)]) == 2
    assert "not a results file of this script" in capsys.readouterr().err
