"""``harness bench --scale-chunks``: the distinct corpus, the memory refusal, and the measuring
code path at 20,000 chunks (real FAISS, real BM25, a real distilled static model)."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from conftest import KESTREL_PATH

from harness.studies import bench_chunks as bc

KESTREL = [f"dataset.path={KESTREL_PATH}"]


def _spec(n_chunks: int, **extra) -> dict:
    return {
        "dataset_overrides": ["dataset=kestrel_kb", *KESTREL],
        "n_chunks": n_chunks,
        "chunk_chars": 256,
        "perturb": 0.15,
        "n_queries": 50,
        "indexes": ["ivf", "hnsw"],
        "static_path": "",
        "minilm_sample": 0,
        **extra,
    }


def test_the_distinct_corpus_has_enough_distinct_chunks_with_exact_spans(kestrel):
    corpus = bc.distinct_corpus(kestrel, 5000)
    chunks, dataset = corpus.chunks, corpus.dataset
    assert len(chunks) >= 5000
    assert len({c.text for c in chunks}) == len(chunks)  # distinct texts
    by_id = dataset.by_id
    for c in chunks:  # every chunk is the text of its span in its (perturbed) document
        ((start, end),) = c.spans
        assert by_id[c.doc_id].text[start:end] == c.text and 0 < end - start <= 256
    n_evidence = {q.query_id: len(q.evidence) for q in kestrel.queries}
    for q in dataset.queries:  # every evidence span points at its excerpt in every copy
        assert len(q.evidence) == corpus.copies * n_evidence[q.query_id]
        for ev in q.evidence:
            assert by_id[ev.doc_id].text[ev.start : ev.end] == ev.text
    originals = {d.doc_id: d.text for d in kestrel.documents}
    assert all(by_id[i].text == t for i, t in originals.items())  # copy 0 is the dataset itself
    copies = Counter(d.metadata["copy_of"] for d in dataset.documents)
    assert set(copies.values()) == {corpus.copies}
    assert corpus.duplicates_dropped >= 0
    again = bc.distinct_corpus(kestrel, 5000)
    assert [c.text for c in again.chunks] == [c.text for c in chunks]  # deterministic


def test_queries_are_sampled_evenly_and_arguments_are_checked(kestrel):
    sample = bc.sample_queries(kestrel.queries, 50)
    assert len(sample) == 50 == len({q.query_id for q in sample})
    assert bc.sample_queries(kestrel.queries[:10], 50) == list(kestrel.queries[:10])
    with pytest.raises(ValueError, match="scale-chunks must be an integer >= 1"):
        bc.distinct_corpus(kestrel, 0)
    with pytest.raises(ValueError, match=r"perturb must be a number in \(0, 1\]"):
        bc.distinct_corpus(kestrel, 10, perturb=0.0)
    assert bc.parse_indexes("ivf,hnsw,ivf") == ["ivf", "hnsw"] and bc.parse_indexes("") == []
    with pytest.raises(ValueError, match="did you mean 'hnsw'"):
        bc.parse_indexes("ivf,hnws")
    assert bc.parse_measures("faiss,bm25") == ["bm25", "faiss"]
    with pytest.raises(ValueError, match="did you mean 'minilm'"):
        bc.parse_measures("minilmm")


def test_an_estimate_above_the_available_memory_is_refused_in_one_line():
    small = bc.check_memory(20_000, 256, ["ivf"], 24 * 2**30)
    assert 0 < small["bm25"] < 2 * 2**30 and 0 < small["faiss"] < 2 * 2**30
    with_hnsw = bc.estimate_peak_bytes(10**6, 256, indexes=["ivf", "hnsw"])
    assert with_hnsw["faiss"] - bc.estimate_peak_bytes(10**6, 256, indexes=["ivf"])["faiss"] == 10**6 * 8 * 32  # the HNSW links
    assert with_hnsw["faiss"] > 10**6 * 384 * 4 * 3  # at least three float32 copies of a million 384-d vectors
    assert (
        bc.estimate_peak_bytes(10**6, 256, dim=256)["faiss"] > 11.6 * 2**30 and bc.estimate_peak_bytes(10**6, 256)["bm25"] > 6.75 * 2**30
    )  # the measured peaks
    with pytest.raises(ValueError, match=r"^--scale-chunks 1000000: the estimated peak memory \d+\.\d GB exceeds MemAvailable 1\.0 GB") as err:
        bc.check_memory(10**6, 256, ["ivf", "hnsw"], 2**30)
    assert "\n" not in str(err.value)
    assert bc.mem_available_bytes() is None or bc.mem_available_bytes() > 0


def test_cli_refuses_bad_arguments_and_too_much_memory_before_any_work(tmp_path, capsys):
    from harness.cli import bench as cli_bench

    out = tmp_path / "chunks.json"
    for argv, message in (
        (["--scale-chunks", "0"], "scale-chunks must be an integer >= 1"),
        (["--scale-chunks", "100", "--ann", "flat"], "ann must be one of 'ivf', 'hnsw'"),
        (["--scale-chunks", "100", "--perturb", "2"], r"perturb must be a number in (0, 1]"),
        (["--scale-chunks", str(10**12), "--dataset", "kestrel_kb"], "exceeds MemAvailable"),
    ):
        assert cli_bench.main([*argv, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
    assert not out.exists()


@pytest.fixture(scope="module")
def small_static(tmp_path_factory):
    """A static model distilled from the packaged MiniLM with a small vocabulary (seconds, not minutes)."""
    import warnings

    from harness.experiment.build import build_encoder
    from harness.experiment.config import compose

    words = sorted({w.lower() for p in (KESTREL_PATH / "corpus").rglob("*") if p.is_file() for w in p.read_text(encoding="utf-8").split() if w.isalpha()})[:400]
    cache = tmp_path_factory.mktemp("static")
    enc = build_encoder(compose(["embedding=static", f"cache.dir={cache}", "embedding.pca_dims=64", f"embedding.vocabulary=[{','.join(words)}]"]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return str(enc.model_path)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:.*a zero vector")  # the small vocabulary leaves some texts without a known word
def test_the_measuring_code_path_at_20000_chunks(small_static, kestrel):
    import faiss

    from harness.experiment.build import build_encoder
    from harness.experiment.config import compose
    from harness.retrievers.faiss import ann_recall

    spec = _spec(20_000, static_path=small_static)
    faiss_run = bc.measure("faiss", spec)
    bm25_run = bc.measure("bm25", spec)
    for run in (faiss_run, bm25_run):
        assert run["n_chunks"] >= 20_000 and run["n_queries"] == 50
        assert all(v > 0 for v in run["peak_bytes"].values()) and all(s >= 0 for s in run["seconds"].values())
    assert faiss_run["n_chunks"] == bm25_run["n_chunks"]  # the same corpus in both processes
    assert faiss_run["static"]["dim"] == 64 and faiss_run["static"]["chunks_per_s"] > 0
    assert set(faiss_run["indexes"]) == {"ivf", "hnsw"}
    for r in faiss_run["indexes"].values():
        assert all(0.0 <= r["ann_recall"][k] <= 1.0 for k in ("5", "10"))
        assert r["build_s"] > 0 and r["search_s_per_query"] > 0 and r["exact_search_s_per_query"] > 0
    assert faiss_run["indexes"]["ivf"]["ivf_nlist"] == round(faiss_run["n_chunks"] ** 0.5)
    assert bm25_run["bm25"]["build_s"] > 0 and bm25_run["bm25"]["backend"].startswith("bm25s ")

    # exact search against itself has recall 1; an index that misses everything has recall 0
    corpus = bc.distinct_corpus(kestrel, 20_000)
    enc = build_encoder(compose(["embedding=static", f"embedding.path={small_static}", "cache.enabled=false", "embedding.show_progress=false"]))
    vecs = np.ascontiguousarray(enc.encode([c.text for c in corpus.chunks]), dtype=np.float32)
    qv = np.ascontiguousarray(enc.encode([q.text for q in bc.sample_queries(kestrel.queries, 50)], role="query"), dtype=np.float32)
    _, exact = faiss.knn(qv, vecs, 10, metric=faiss.METRIC_INNER_PRODUCT)
    assert np.all(ann_recall(exact, exact, vecs, qv, 10) == 1.0) and np.all(ann_recall(exact, exact, vecs, qv, 5) == 1.0)
    assert np.all(ann_recall(exact, np.full_like(exact, -1), vecs, qv, 10) == 0.0)

    result = {
        "n_chunks_asked": 20_000,
        "dataset": "kestrel_kb",
        "cpu": {"model": "m", "usable_cores": 2, "simd": [], "load_average": None},
        "runs": {"bm25": bm25_run, "faiss": faiss_run},
        "minilm_extrapolated": None,
    }
    text = bc.tables(json.loads(json.dumps(result)))
    assert "| faiss ivf |" in text and "| faiss hnsw |" in text and "| bm25 (bm25s" in text and "measured |" in text


def test_docs_tables_are_rendered_from_the_committed_json(tmp_path):
    """docs/benchmark.md shows exactly the tables of experiments/bench/scale_chunks.json, which
    holds at least a million distinct chunks, ANN recall at 5 and 10 in [0, 1] and the MiniLM
    time labelled as extrapolated."""
    import re
    import shutil

    from harness.experiment.build import PROJECT_ROOT

    result = json.loads((PROJECT_ROOT / "experiments" / "bench" / "scale_chunks.json").read_text(encoding="utf-8"))
    docs = (PROJECT_ROOT / "docs" / "benchmark.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- scale-chunks:start -->\n(.*?)\n<!-- scale-chunks:end -->", docs, re.S)
    assert block is not None and block.group(1).strip() == bc.tables(result).strip()
    assert min(run["n_chunks"] for kind, run in result["runs"].items() if kind != "minilm") >= 1_000_000
    for r in result["runs"]["faiss"]["indexes"].values():
        assert all(0 <= r["ann_recall"][k] <= 1 for k in ("5", "10"))
    assert result["minilm_extrapolated"]["how"].startswith("extrapolated")
    (tmp_path / "docs").mkdir()
    shutil.copy(PROJECT_ROOT / "docs" / "benchmark.md", tmp_path / "docs" / "benchmark.md")
    assert bc.update_docs(result, tmp_path).read_text(encoding="utf-8") == docs  # rewriting gives the same page
