"""``harness bench --vs-reference``: the reference-style script on a tiny dataset (real tiktoken,
real MiniLM, real FAISS), the ratio/verdict/JSON/table logic, and the
docs/benchmark.md tables being the rendering of the committed JSON."""

from __future__ import annotations

import ast
import csv
import json
import random
import shutil

import pytest
from conftest import PROJECT_ROOT

from harness.studies import bench_reference, reference_style
from harness.studies.bench_reference import MARKERS, TARGETS, docs_tables, generated_block, summarize


def _tiny(root):
    """Two corpora of generated sentences; each question's evidence is one or two exact sentences."""
    rng = random.Random(3)
    words = "river bank ledger harbour copper lantern orchard violin glacier meadow pepper saddle quartz tunnel falcon marble".split()
    rows = []
    (root / "corpora").mkdir(parents=True)
    for corpus in ("alpha", "beta"):
        text, spans = "", []
        for i in range(40):
            s = " ".join(rng.choice(words) for _ in range(rng.randint(6, 12))).capitalize() + "."
            text += "\n\n" if i and i % 5 == 0 else " " if i else ""
            spans.append((len(text), len(text) + len(s)))
            text += s
        (root / "corpora" / f"{corpus}.md").write_text(text, encoding="utf-8", newline="")
        for _ in range(4):
            picks = sorted(rng.sample(range(len(spans)), 2))
            refs = [{"content": text[a:b], "start_index": a, "end_index": b} for a, b in (spans[i] for i in picks)]
            rows.append({"question": text[spans[picks[0]][0] : spans[picks[0]][1]][:40] + "?", "references": json.dumps(refs), "corpus_id": corpus})
    with open(root / "questions.csv", "w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["question", "references", "corpus_id"])
        w.writeheader()
        w.writerows(rows)
    return root


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return _tiny(tmp_path_factory.mktemp("bench_ref") / "tiny")


@pytest.fixture(scope="module")
def outputs(tiny, tmp_path_factory):
    """The reference-style pipeline and the fp32 floor, run once on the tiny dataset."""
    texts = tmp_path_factory.mktemp("bench_ref_texts") / "texts.json"
    texts.write_text(json.dumps(reference_style.texts_of(tiny, 50, 0)), encoding="utf-8")
    return reference_style.pipeline(tiny, k=2, size=50), reference_style.floor(texts, "fp32")


def test_the_reference_style_script_imports_nothing_from_the_harness():
    tree = ast.parse(bench_reference.SCRIPT.read_text(encoding="utf-8"))
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert names and not [n for n in names if n.split(".")[0] == "harness"]
    assert bench_reference.SCRIPT.name == "reference_style.py" and bench_reference.SCRIPT.is_file()


def test_windows_are_found_where_the_span_exact_chunker_puts_them(tiny):
    """Text search finds every window at the span the harness's chroma-compatible chunker computes from offsets."""
    from harness.chunkers.fixed import FixedChunker
    from harness.types import Document

    chunks, _ = reference_style.chunk_folder(tiny, 50, 10)
    for corpus in ("alpha", "beta"):
        text = (tiny / "corpora" / f"{corpus}.md").read_text(encoding="utf-8")
        ours = FixedChunker(50, 10, "tokens", "cl100k_base", "chroma").chunk(Document(corpus, text))
        theirs = [c for c in chunks if c["corpus_id"] == corpus]
        assert [c["text"] for c in theirs] == [c.text for c in ours]
        assert [c["span"] for c in theirs] == [tuple(c.spans[0]) for c in ours]


def test_recall_counts_covered_evidence_characters_once():
    q = {"corpus_id": "a", "spans": [(0, 10), (20, 30)]}
    chunk = lambda cid, a, b: {"corpus_id": cid, "span": (a, b)}  # noqa: E731
    # 5 of the first span twice (overlapping chunks), 5 of the second; another corpus's chunk counts nothing
    assert reference_style.recall(q, [chunk("a", 5, 12), chunk("a", 8, 15), chunk("a", 25, 40), chunk("b", 0, 30)]) == pytest.approx(10 / 20)
    assert reference_style.recall(q, []) == 0.0
    assert reference_style.recall(q, [chunk("a", 0, 30)]) == 1.0


def test_pipeline_and_floor_report_their_steps_on_real_data(outputs, tiny):
    pipe, floor = outputs
    assert pipe["n_questions"] == 8 and pipe["n_unlocated"] == 0 and pipe["k"] == 2
    assert 0.0 < pipe["recall"] <= 1.0
    texts = reference_style.texts_of(tiny, 50, 0)
    assert floor["n_chunks"] == len(texts["chunks"]) <= pipe["n_chunks"] and floor["n_questions"] == len(texts["questions"])
    for out in (pipe, floor):
        assert all(out[key] >= 0.0 for key in ("import_s", "load_s", "encode_chunks_s", "encode_queries_s"))
        assert out["encode_chunks_s"] > 0.0


def _result(outputs, seconds):
    """A result as run_vs_reference builds it, with the script outputs of the tiny run and given process seconds."""
    pipe, floor = outputs
    rounds = [
        {
            "cold_s": cold,
            "reference_s": ref,
            "floor_fp32_s": fl,
            "warm_s": warm,
            "cold_run": {"recall@5": 0.5},
            "reference": pipe,
            "floor_fp32": floor,
        }
        for cold, ref, fl, warm in seconds
    ]
    return {
        "dataset": "tiny",
        "mb": 0.01,
        "n_unique_chunks": floor["n_chunks"],
        "n_unique_questions": floor["n_questions"],
        "window": "50/0 cl100k_base tokens",
        "k": 5,
        "auto_precision": {"precision": "fp32", "why": "no AMX"},
        "machine": {"cpus": 2},
        "started": "2026-01-01 00:00 UTC",
        "rounds": rounds,
    }


def test_ratios_are_medians_of_per_round_ratios_with_verdicts(outputs):
    # hand-worked: per-round A/B = 0.4, 0.6, 0.5 -> median 0.5 (at the limit: PASS);
    # A/C = 10/9.5, 12/10, 11/10 -> median 1.1 (PASS); W/A = 0.05, 0.25, 0.1 -> median 0.1 (PASS)
    r = summarize(_result(outputs, [(10, 25, 9.5, 0.5), (12, 20, 10, 3), (11, 22, 10, 1.1)]))
    assert r["medians"]["cold_vs_reference"] == pytest.approx(0.5)
    assert r["medians"]["cold_vs_floor"] == pytest.approx(1.1)
    assert r["medians"]["warm_vs_cold"] == pytest.approx(0.1)
    assert r["verdicts"] == {"cold_vs_reference": "PASS", "cold_vs_floor": "PASS", "warm_vs_cold": "PASS"}
    assert [x["cold_vs_reference"] for x in r["ratios"]] == pytest.approx([0.4, 0.6, 0.5])
    # one round slower on every count: medians move past the limits
    r = summarize(_result(outputs, [(30, 31, 29, 5), (31, 32, 29, 5)]))
    assert r["verdicts"] == {"cold_vs_reference": "FAIL", "cold_vs_floor": "PASS", "warm_vs_cold": "FAIL"}
    assert r["medians"]["cold_vs_floor"] == pytest.approx((30 / 29 + 31 / 29) / 2)


def test_json_round_trip_tables_and_the_command(outputs, tmp_path, capsys):
    from harness.cli.bench import main

    r = summarize(_result(outputs, [(10, 25, 9.5, 0.5)]))
    path = tmp_path / "ref.json"
    path.write_text(json.dumps(r), encoding="utf-8")
    tampered = dict(r, medians={k: 0.0 for k in r["medians"]})  # a hand-edited ratio does not survive a reload
    (tmp_path / "tampered.json").write_text(json.dumps(tampered), encoding="utf-8")
    assert bench_reference.load(tmp_path / "tampered.json")["medians"] == r["medians"]
    assert main(["--from-json", str(path)]) == 0
    printed = capsys.readouterr().out
    assert printed.strip() == docs_tables(r)
    for key, (what, limit) in TARGETS.items():
        assert f"| {what} | {r['medians'][key]:.3f} |" in printed and f"≤ {limit:g}" in printed
    assert "resolves to **fp32** here: no AMX" in printed
    assert "\n| cold harness run / reference-style pipeline | 0.400 | " in printed and "| ≤ 0.5 | PASS |\n" in printed
    (tmp_path / "bad.json").write_text("{}", encoding="utf-8")
    assert main(["--from-json", str(tmp_path / "bad.json")]) == 2
    assert "no 'rounds'" in capsys.readouterr().err


def test_update_docs_rewrites_only_the_marked_block(outputs, tmp_path):
    r = summarize(_result(outputs, [(10, 25, 9.5, 0.5)]))
    (tmp_path / "docs").mkdir()
    before, after = "# title\n\ntext before\n", "\ntext after\n"
    (tmp_path / "docs" / "benchmark.md").write_text(f"{before}{MARKERS[0]}\nold\n{MARKERS[1]}{after}", encoding="utf-8")
    (tmp_path / "README.md").write_text(f"{MARKERS[0]}\nold\n{MARKERS[1]}\n", encoding="utf-8")  # the README holds no benchmark table
    assert bench_reference.update_docs(r, tmp_path) == [tmp_path / "docs" / "benchmark.md"]
    docs = (tmp_path / "docs" / "benchmark.md").read_text(encoding="utf-8")
    assert docs == f"{before}{MARKERS[0]}\n{docs_tables(r)}\n{MARKERS[1]}{after}"
    assert (tmp_path / "README.md").read_text(encoding="utf-8") == f"{MARKERS[0]}\nold\n{MARKERS[1]}\n"
    (tmp_path / "docs" / "benchmark.md").write_text("no markers\n", encoding="utf-8")
    with pytest.raises(ValueError, match="benchmark.md has no <!-- bench-reference:start"):
        bench_reference.update_docs(r, tmp_path)


def test_bad_arguments_are_refused_before_anything_runs(tmp_path):
    with pytest.raises(ValueError, match="--rounds must be an integer >= 1, got 0"):
        bench_reference.run_vs_reference(str(tmp_path), rounds=0)
    shutil.copytree(PROJECT_ROOT / "datasets" / "kestrel_kb", tmp_path / "kestrel")
    with pytest.raises(ValueError, match="--dataset .*needs a chroma-format folder"):
        bench_reference.run_vs_reference(str(tmp_path / "kestrel"), rounds=1)


def test_the_docs_tables_are_the_committed_json():
    """The published ratios come from a run of the benchmark (its JSON), never typed in; they
    live in docs/benchmark.md only (the README links there)."""
    result = bench_reference.load(PROJECT_ROOT / bench_reference.COMMITTED_JSON)
    assert result["k"] == 5 and result["rounds"]
    docs = (PROJECT_ROOT / "docs" / "benchmark.md").read_text(encoding="utf-8")
    assert docs.count(MARKERS[0]) == 1 and docs.count(MARKERS[1]) == 1
    assert generated_block(docs) == docs_tables(result)
    assert generated_block((PROJECT_ROOT / "README.md").read_text(encoding="utf-8")) is None
