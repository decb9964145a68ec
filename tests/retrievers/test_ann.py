"""Approximate FAISS indexes (retriever.index=hnsw|ivf): real FAISS over random unit vectors,
recall against exact search computed here with numpy, the exact default unchanged, IVF on a
corpus too small for its cells, determinism, config hashes and setting errors."""

import json
import warnings

import faiss
import numpy as np
import pandas as pd
import pytest
from conftest import PROJECT_ROOT, compose

from harness.chunkers.base import Chunker
from harness.experiment.build import build_retriever, config_hash, run_name
from harness.experiment.pipeline import Evaluation
from harness.experiment.run import Components, metric_groups, prepare
from harness.retrievers.base import ranked
from harness.retrievers.faiss import FaissRetriever, ann_recall
from harness.types import Chunk, Document, Evidence, Query

DIM, N_CHUNKS, N_QUERIES = 32, 1500, 60


class TableEncoder:
    """Looks each text up in a table of fixed unit vectors (the model is not what is tested here)."""

    def __init__(self, table: dict[str, np.ndarray]):
        self.table = table

    def encode(self, texts, desc="", role="document"):
        return np.stack([self.table[t] for t in texts]).astype(np.float32)

    def run_metrics(self):
        return {}  # no embedding.* counters of its own


class PlainChunker(Chunker):
    """A strategy with no counters of its own (the base's ``stats()``)."""

    def chunk(self, doc):
        return [Chunk.from_spans(doc, [(0, len(doc.text))])]


def _unit(rng, n):
    x = rng.standard_normal((n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture(scope="module", autouse=True)
def _one_faiss_thread():
    """FAISS on one thread: on a busy machine its OpenMP threads mostly wait for each other."""
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


@pytest.fixture(scope="module")
def corpus():
    rng = np.random.default_rng(17)
    vectors, qvecs = _unit(rng, N_CHUNKS), _unit(rng, N_QUERIES)
    doc = Document("d", "".join(f"c{i:05d}" for i in range(N_CHUNKS)))
    chunks = [Chunk.from_spans(doc, [(6 * i, 6 * i + 6)]) for i in range(N_CHUNKS)]
    queries = [Query(f"q{j}", f"query {j}", (Evidence("d", 0, 6),)) for j in range(N_QUERIES)]
    table = {c.text: v for c, v in zip(chunks, vectors)} | {q.text: v for q, v in zip(queries, qvecs)}
    # the exact top-k by numpy (no FAISS): the reference every recall below is measured against
    exact = np.argsort(-(qvecs @ vectors.T), axis=1, kind="stable")
    return TableEncoder(table), chunks, queries, vectors, qvecs, exact


def _retriever(corpus, **settings):
    enc, chunks, *_ = corpus
    r = FaissRetriever(encoder=enc, **settings)
    r.index(chunks)
    return r


def _recall(run, corpus, k):
    _, chunks, queries, _, _, exact = corpus
    ids = [c.chunk_id for c in chunks]
    return float(np.mean([len(set(ranked(run, q.query_id)[:k]) & {ids[i] for i in exact[j, :k]}) / k for j, q in enumerate(queries)]))


@pytest.mark.parametrize("settings", [{"index": "hnsw", "hnsw_m": 4, "hnsw_ef_search": 1, "hnsw_ef_construction": 8}, {"index": "ivf", "ivf_nprobe": 1}])
def test_logged_recall_equals_recall_computed_from_the_vectors(corpus, settings):
    r = _retriever(corpus, **settings)
    with pytest.warns(UserWarning, match=r"recall@10 against exact search is 0\.\d+, below retriever.ann_min_recall=0.9"):
        run = r.search(corpus[2], k=10)
    stats = r.stats()
    expected = _recall(run, corpus, 10)
    assert 0.05 < expected < 0.9  # a deliberately weak index: the comparison is not trivially 1 == 1
    assert stats["retriever.ann_recall_at_10"] == pytest.approx(expected, abs=1e-12)
    assert stats["retriever.ann_recall_at_depth"] == pytest.approx(expected, abs=1e-12)  # depth 10 = the run's k
    assert stats["retriever.ann_search_seconds"] > 0 and stats["retriever.exact_search_seconds"] > 0 and stats["retriever.ann_build_seconds"] > 0
    with pytest.warns(UserWarning, match="below retriever.ann_min_recall"):  # fewer than 10 asked: recall@10 still from a search for 10
        run5 = r.search(corpus[2], k=5)
    assert r.stats()["retriever.ann_search_depth"] == 5
    assert r.stats()["retriever.ann_recall_at_depth"] == pytest.approx(_recall(run5, corpus, 5), abs=1e-12)
    assert all(len(hits) <= 5 for hits in run5.values())
    refusing = FaissRetriever(encoder=r.encoder, on_low_recall="error", **settings)
    refusing.index(corpus[1])
    with pytest.raises(ValueError, match=r"raise retriever\.(hnsw_ef_search|ivf_nprobe), or use retriever.index=flat"):
        refusing.search(corpus[2], k=10)


def test_ann_recall_counts_ties_and_padding_by_hand():
    vectors = np.array([[1, 0], [1, 0], [0, 1], [0.6, 0.8]], dtype=np.float32)  # rows 0 and 1: the same vector (a repeated text)
    query = np.array([[1, 0]], dtype=np.float32)
    exact = np.array([[0, 1, 3, 2]])
    for found, k, expected in [([1, 0], 1, 1.0), ([3, 0], 1, 0.0), ([2, 3], 2, 0.0), ([1, 3], 2, 0.5), ([-1, 0], 2, 0.5), ([0, 1, 3], 3, 1.0)]:
        assert ann_recall(exact, np.array([found + [-1] * (4 - len(found))]), vectors, query, k)[0] == expected, (found, k)
    with pytest.raises(ValueError, match=r"k must be in \[1, 4\]"):
        ann_recall(exact, exact, vectors, query, 5)


def test_exact_default_ranks_as_before_and_logs_nothing(corpus):
    enc, chunks, queries, vectors, qvecs, exact = corpus
    r = _retriever(corpus)
    run = r.search(queries, k=10)
    ids = [c.chunk_id for c in chunks]
    before = faiss.IndexFlatIP(DIM)  # the index the retriever always used
    before.add(vectors)
    _, idx = before.search(qvecs, 10)
    for j, q in enumerate(queries):
        assert ranked(run, q.query_id) == [ids[i] for i in idx[j]] == [ids[i] for i in exact[j, :10]]
    assert r.stats() == {} and r.name == "faiss"


def test_accurate_settings_reach_exact_recall_and_builds_repeat(corpus):
    runs = {}
    for name, settings in {"hnsw": {"index": "hnsw", "hnsw_ef_construction": 40, "hnsw_ef_search": 400}, "ivf": {"index": "ivf", "ivf_nprobe": 1000}}.items():
        first, second = _retriever(corpus, **settings), _retriever(corpus, **settings)
        runs[name] = first.search(corpus[2], k=10)
        assert second.search(corpus[2], k=10) == runs[name]  # same vectors, same seed / one build thread: the same index
        assert first.stats()["retriever.ann_recall_at_10"] == _recall(runs[name], corpus, 10) == 1.0
    # null cells: round(4 * sqrt(1500)) = 155, more than 1500 chunks train (39 each): 1500 // 39 = 38; nprobe capped at them
    assert first.stats()["retriever.ivf_nprobe"] == first.stats()["retriever.ivf_nlist"] == 38


def test_ivf_on_fewer_chunks_than_its_cells_need(corpus):
    enc, chunks, queries, *_ = corpus
    r = FaissRetriever(encoder=enc, index="ivf", ivf_nlist=16)
    with pytest.warns(UserWarning, match=r"retriever.ivf_nlist=16 needs at least 39 \* 16 = 624 chunks .* this corpus has 100: using 2 cells"):
        r.index(chunks[:100])
    assert (r.stats()["retriever.ivf_nlist"], r.stats()["retriever.ivf_nprobe"]) == (2, 2)
    tiny = FaissRetriever(encoder=enc, index="ivf")  # null cells: reduced without a warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tiny.index(chunks[:5])
        run = tiny.search(queries[:3], k=10)
    assert tiny.stats()["retriever.ivf_nlist"] == 1 and tiny.stats()["retriever.ann_recall_at_10"] == 1.0
    assert all(len(hits) == 5 for hits in run.values())  # one cell holds every chunk: k capped at 5


def test_default_configs_keep_their_recorded_hash_and_an_index_changes_it():
    recorded = json.loads((PROJECT_ROOT / "tests" / "data" / "config_hashes.json").read_text(encoding="utf-8"))
    base = ["paths.root=/project"]
    assert config_hash(compose(base)) == recorded["(defaults)"]["config_hash"]
    spelled_out = compose(["retriever=faiss", "retriever.index=flat", "retriever.ivf_seed=1234", "retriever.ann_min_recall=0.9", *base])
    assert config_hash(spelled_out) == recorded["retriever=faiss"]["config_hash"]
    hnsw = compose(["retriever.index=hnsw", *base])
    assert config_hash(hnsw) not in (recorded["(defaults)"]["config_hash"], recorded["retriever=faiss"]["config_hash"])
    assert run_name(hnsw) == "recursive-254-0-faiss-hnsw" and build_retriever(hnsw, encoder=None).name == "faiss-hnsw"


def test_bad_setting_in_the_config_is_refused_when_built():
    with pytest.raises(ValueError, match=r"retriever.index must be one of 'flat', 'hnsw', 'ivf', got 'hnws' \(did you mean 'hnsw'\?\)"):
        build_retriever(compose(["retriever.index=hnws"]), encoder=None)


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"index": "IVF"}, r"\(did you mean 'ivf'\?\)"),
        ({"index": "exact"}, r"\(did you mean 'flat'\?\)"),
        (
            {"index": "hnsw", "on_low_recall": "eror"},
            r"retriever.on_low_recall must be one of 'warn', 'error', 'ignore', got 'eror' \(did you mean 'error'\?\)",
        ),
        ({"index": "ivf", "hnsw_ef_search": 64}, r"retriever.hnsw_ef_search=64 applies to retriever.index=hnsw only, but retriever.index=ivf"),
        ({"index": "hnsw", "ivf_nprobe": 4}, r"retriever.ivf_nprobe=4 applies to retriever.index=ivf only, but retriever.index=hnsw"),
        ({"ann_min_recall": 0.99}, r"retriever.ann_min_recall=0.99 applies to an approximate index only"),
        ({"index": "ivf", "ivf_nlist": 0}, r"retriever.ivf_nlist must be an integer >= 1"),
        ({"index": "hnsw", "hnsw_m": 1}, r"retriever.hnsw_m must be an integer >= 2"),
        ({"index": "hnsw", "hnsw_build_threads": True}, r"retriever.hnsw_build_threads must be an integer >= 1"),
        ({"index": "hnsw", "ann_min_recall": 1.5}, r"retriever.ann_min_recall must be a number in \[0, 1\]"),
    ],
)
def test_bad_settings_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        FaissRetriever(**settings)


def test_a_run_logs_the_index_numbers_with_its_metrics(corpus):
    enc, chunks, queries, *_ = corpus
    r = _retriever(corpus, index="hnsw")
    r.search(queries, k=10)
    settings = prepare(compose(["retriever.index=hnsw"]))
    ev = Evaluation(metrics={f"recall@{k}": 0.0 for k in settings.metrics.ks}, per_query=pd.DataFrame(), chunks=chunks, run={})
    enc.n_encoded = enc.n_cache_hits = 0
    groups = metric_groups(ev, Components(enc, PlainChunker(), r, None, None), None, settings)
    logged = {k: v for metrics, step in groups for k, v in metrics.items() if step == 0}
    assert {k: logged[k] for k in r.stats()} == r.stats() and logged["retriever.ann_recall_at_10"] == _recall(r.search(queries, k=10), corpus, 10)
