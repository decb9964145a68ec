"""retriever=hybrid and retriever=rerank: the fusion rules against hand-computed values and
as properties, real FAISS + real BM25 + the packaged MiniLM encoder, and a real
sentence-transformers CrossEncoder built here from the packaged MiniLM weights with a new,
untrained scoring head: it tests the plumbing (loading, batching, caching, the input
limit), not ranking quality, which is never claimed."""

from __future__ import annotations

import dataclasses
import re
import shutil
import warnings

import pytest
from conftest import compose
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.chunkers.recursive import RecursiveChunker
from harness.evaluation.metrics import metric_names
from harness.experiment import build
from harness.experiment.pipeline import evaluate
from harness.experiment.settings import default_metric_settings
from harness.retrievers import rerank as rerank_module
from harness.retrievers.base import ranked
from harness.retrievers.bm25 import BM25Retriever
from harness.retrievers.faiss import FaissRetriever
from harness.retrievers.hybrid import HybridRetriever, minmax, order, rrf_fuse, weighted_fuse
from harness.retrievers.rerank import RerankRetriever
from harness.types import Chunk, Document, Evidence, Query

TEXTS = [
    "The broker stores jobs in PostgreSQL and listens on port 8450.",
    "Workers execute jobs and send heartbeats every fifteen seconds.",
    "The dashboard shows queue depth and runs on port 8460.",
    "Retry backoff is exponential by default with a base delay of two seconds.",
]
DOC = Document("kb", "\n".join(TEXTS))


def chunks():
    out, pos = [], 0
    for t in TEXTS:
        out.append(Chunk.from_spans(DOC, [(pos, pos + len(t))]))
        pos += len(t) + 1
    return out


def q(text, qid="q1"):
    return Query(qid, text, (Evidence("kb", 0, 5),))


QUERIES = [q("How often do workers send heartbeats?"), q("Which port does the dashboard use?", "q2"), q("???", "q3")]


def document_order(cid):
    """The tie rule written out: doc id with digit runs as numbers, then the offsets as numbers."""
    doc, sep, spans = cid.rpartition("#")
    if not sep:  # an id without spans ("c3"): its own natural order
        doc, spans = cid, ""
    parts = re.split(r"(\d+)", doc)
    return (tuple(int(p) if i % 2 else p for i, p in enumerate(parts)), tuple(int(x) for x in re.findall(r"\d+", spans)), cid)


def in_tie_order(scores):
    return list(scores) == sorted(scores, key=lambda cid: (-scores[cid], document_order(cid)))


# --------------------------------------------------------------------------- fusion by hand

DENSE = {"a": 0.9, "b": 0.8, "c": 0.1}
LEXICAL = {"b": 7.0, "d": 3.0, "a": 1.0}


def test_rrf_against_hand_computed_values():
    # dense ranks a=1 b=2 c=3; BM25 ranks b=1 d=2 a=3
    fused = rrf_fuse([DENSE, LEXICAL], rrf_k=60)
    expected = {"b": 1 / 62 + 1 / 61, "a": 1 / 61 + 1 / 63, "d": 1 / 62, "c": 1 / 63}
    assert list(fused) == ["b", "a", "d", "c"]
    assert fused == pytest.approx(expected, abs=1e-15)
    assert list(rrf_fuse([DENSE, LEXICAL], rrf_k=0, k=2)) == ["b", "a"]  # 1/2 + 1 > 1 + 1/3
    assert rrf_fuse([DENSE, LEXICAL], rrf_k=0)["a"] == pytest.approx(1 + 1 / 3)


def test_rrf_uses_positions_and_the_tie_rule():
    # equal scores within a side: positions by ascending chunk id (a=1, b=2)
    assert rrf_fuse([{"b": 0.5, "a": 0.5}], rrf_k=1) == {"a": 1 / 2, "b": 1 / 3}
    # a fused tie (x: 1/61 + 1/62, y: 1/62 + 1/61) is broken by ascending chunk id
    fused = rrf_fuse([{"x": 1.0, "y": 0.5}, {"y": 2.0, "x": 1.0}])
    assert fused["x"] == fused["y"] and list(fused) == ["x", "y"]
    # only positions count: rescaling a side changes nothing
    assert rrf_fuse([{k: 100 * v - 3 for k, v in DENSE.items()}, LEXICAL]) == rrf_fuse([DENSE, LEXICAL])
    assert rrf_fuse([{}, {}]) == {}


def test_weighted_fusion_against_hand_computed_values():
    # dense min-max over its candidates: a=1, b=0.7/0.8=0.875, c=0; BM25: b=1, d=2/6, a=0
    assert minmax(DENSE) == pytest.approx({"a": 1.0, "b": 0.875, "c": 0.0})
    assert minmax(LEXICAL) == pytest.approx({"b": 1.0, "d": 1 / 3, "a": 0.0})
    fused = weighted_fuse(DENSE, LEXICAL, alpha=0.5)
    assert list(fused) == ["b", "a", "d", "c"]
    assert fused == pytest.approx({"b": 0.9375, "a": 0.5, "d": 1 / 6, "c": 0.0})
    fused = weighted_fuse(DENSE, LEXICAL, alpha=0.8, k=3)  # a: 0.8, b: 0.7 + 0.2, d: 0.2/3, c: 0
    assert list(fused) == ["b", "a", "d"]
    assert fused == pytest.approx({"b": 0.9, "a": 0.8, "d": 0.2 / 3})


def test_minmax_edge_cases():
    assert minmax({}) == {}
    # a constant list (one candidate, or ties only) tells its candidates no apart: the middle, 0.5
    assert minmax({"only": -0.3}) == {"only": 0.5}
    assert minmax({"a": 2.0, "b": 2.0}) == {"a": 0.5, "b": 0.5}
    # a side with a single candidate counts half: 0.25 * 0.5
    assert weighted_fuse({"a": 0.2}, {}, alpha=0.25) == {"a": 0.125}


# --------------------------------------------------------------------------- fusion properties

IDS = st.sampled_from([f"c{i}" for i in range(12)])
# scores on a coarse grid: min-max normalisation keeps them distinct (no float collapse)
DENSE_RUNS = st.dictionaries(IDS, st.integers(-8, 8).map(lambda v: v / 8), max_size=10)
LEXICAL_RUNS = st.dictionaries(IDS, st.integers(1, 40).map(lambda v: v / 4), max_size=10)


@settings(max_examples=200, deadline=None)
@given(DENSE_RUNS, LEXICAL_RUNS, st.sampled_from([0, 1, 60]), st.none() | st.integers(1, 12))
def test_rrf_properties(dense, lexical, rrf_k, k):
    fused = rrf_fuse([dense, lexical], rrf_k=rrf_k, k=k)
    union = set(dense) | set(lexical)
    assert set(fused) <= union
    assert len(fused) == (len(union) if k is None else min(k, len(union)))
    assert in_tie_order(fused)
    assert all(0 < s <= 2 / (rrf_k + 1) for s in fused.values())
    assert fused == dict(list(rrf_fuse([dense, lexical], rrf_k=rrf_k).items())[: len(fused)])  # k only cuts


@settings(max_examples=200, deadline=None)
@given(DENSE_RUNS, LEXICAL_RUNS, st.floats(0, 1), st.none() | st.integers(1, 12))
def test_weighted_properties(dense, lexical, alpha, k):
    fused = weighted_fuse(dense, lexical, alpha=alpha, k=k)
    union = set(dense) | set(lexical)
    assert set(fused) <= union
    assert len(fused) == (len(union) if k is None else min(k, len(union)))
    assert in_tie_order(fused)
    assert all(-1e-12 <= s <= 1 + 1e-12 for s in fused.values())


@settings(max_examples=200, deadline=None)
@given(DENSE_RUNS, LEXICAL_RUNS)
def test_alpha_one_and_zero_reproduce_each_side(dense, lexical):
    only_dense = weighted_fuse(dense, lexical, alpha=1.0)
    assert [c for c in only_dense if c in dense] == order(dense)
    only_lexical = weighted_fuse(dense, lexical, alpha=0.0)
    assert [c for c in only_lexical if c in lexical] == order(lexical)


# --------------------------------------------------------------------------- hybrid retriever


def test_hybrid_is_the_fusion_of_real_faiss_and_bm25(encoder):
    cs = chunks()
    dense, lexical = FaissRetriever(encoder=encoder), BM25Retriever()
    for r in (dense, lexical):
        r.index(cs)
    d_run, l_run = dense.search(QUERIES, 100), lexical.search(QUERIES, 100)
    for fusion, fuse in (("rrf", lambda d, s, k: rrf_fuse([d, s], 60, k)), ("weighted", lambda d, s, k: weighted_fuse(d, s, 0.3, k))):
        hybrid = HybridRetriever(encoder=encoder, fusion=fusion, alpha=0.3)
        hybrid.index(cs)
        run = hybrid.search(QUERIES, k=3)
        assert set(run) == {"q1", "q2", "q3"}
        for qid in run:
            assert run[qid] == fuse(d_run[qid], l_run[qid], 3)
            assert len(run[qid]) == 3 and in_tie_order(run[qid])
            assert list(run[qid]) == ranked(run, qid)
        assert ranked(run, "q1")[0] == cs[1].chunk_id  # both sides rank the heartbeat chunk first
        assert ranked(run, "q2")[0] == cs[2].chunk_id
    # alpha = 1: the dense ranking; alpha = 0: the BM25 ranking over its candidates
    for alpha, side in ((1.0, d_run), (0.0, l_run)):
        hybrid = HybridRetriever(encoder=encoder, fusion="weighted", alpha=alpha)
        hybrid.index(cs)
        run = hybrid.search(QUERIES, k=4)
        for qid in run:
            assert [c for c in run[qid] if c in side[qid]] == ranked(side, qid)


def test_hybrid_depth_empty_index_and_errors(encoder):
    hybrid = HybridRetriever(encoder=encoder, depth=2)
    with pytest.raises(ValueError, match="before index"):
        hybrid.search(QUERIES, k=1)
    hybrid.index([])
    assert hybrid.search(QUERIES, k=2) == {"q1": {}, "q2": {}, "q3": {}}
    hybrid.index(chunks())
    run = hybrid.search(QUERIES, k=2)
    assert all(len(v) <= 2 for v in run.values())
    assert list(run["q3"].values()) == [1 / 61, 1 / 62]  # "???" has no BM25 candidate: RRF of the dense top 2 alone
    with pytest.raises(ValueError, match=r"retriever\.depth=2 is below the 3 results"):
        hybrid.search(QUERIES, k=3)
    with pytest.raises(ValueError, match="top-k"):
        hybrid.search(QUERIES, k=0)
    with pytest.raises(ValueError, match="retriever.hybrid needs an encoder"):
        HybridRetriever().index(chunks())


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"fusion": "rfr"}, r"retriever\.fusion must be one of 'rrf', 'weighted', got 'rfr' \(did you mean 'rrf'\?\)"),
        ({"fusion": "weigthed"}, r"did you mean 'weighted'"),
        ({"rrf_k": -1}, r"retriever\.rrf_k must be a number >= 0"),
        ({"rrf_k": True}, r"retriever\.rrf_k"),
        ({"alpha": 1.5}, r"retriever\.alpha must be a number in \[0, 1\]"),
        ({"alpha": "0.5"}, r"retriever\.alpha"),
        ({"depth": 0}, r"retriever\.depth must be an integer >= 1"),
        ({"depth": 2.5}, r"retriever\.depth"),
        ({"k1": -1}, r"retriever\.k1"),
        ({"b": 2}, r"retriever\.b"),
    ],
)
def test_hybrid_parameter_errors(kwargs, message):
    with pytest.raises(ValueError, match=message) as info:
        HybridRetriever(**kwargs)
    assert "\n" not in str(info.value)


# --------------------------------------------------------------------------- the cross-encoder


@pytest.fixture(scope="session")
def cross_encoder_dir(tmp_path_factory):
    """A CrossEncoder folder made from the packaged MiniLM weights (new 1-label head, seed 0)."""
    import torch
    from sentence_transformers import CrossEncoder

    from harness.embeddings.model import default_model_path

    folder = tmp_path_factory.mktemp("cross_encoder") / "minilm-ce"
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        CrossEncoder(str(default_model_path()), num_labels=1, device="cpu").save(str(folder))
    return folder


def _rerank(**kwargs) -> RerankRetriever:
    """A reranker built by hand, with the builder of its first stage (as build_retriever passes it)."""
    return RerankRetriever(builder=build.build_sub_retriever, **kwargs)


@pytest.fixture()
def fresh_scores():
    rerank_module.clear_score_cache()
    yield
    rerank_module.clear_score_cache()


def pair_lengths(folder, pairs):
    """Independent count: the transformers tokenizer of the folder, pair encoding, no truncation."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    return [len(tok(a, b, truncation=False)["input_ids"]) for a, b in pairs]


@pytest.mark.slow
def test_rerank_scores_candidates_with_the_cross_encoder_and_caches(cross_encoder_dir, fresh_scores):
    cs = chunks()
    retr = _rerank(first_stage="bm25", model=str(cross_encoder_dir), candidates=3, show_progress=False)
    assert retr.needs_encoder is False and RerankRetriever.needs_encoder is True
    retr.index(cs)
    run = retr.search(QUERIES, k=2)
    first = BM25Retriever()
    first.index(cs)
    candidates = first.search(QUERIES, 3)
    by_id = {c.chunk_id: c.text for c in cs}
    expected_pairs = {(qq.text, by_id[cid]) for qq in QUERIES for cid in candidates[qq.query_id]}
    assert retr.n_scored == len(expected_pairs) and retr.n_cache_hits == 0
    for qq in QUERIES:
        got = run[qq.query_id]
        assert len(got) == min(2, len(candidates[qq.query_id])) and in_tie_order(got)
        assert set(got) <= set(candidates[qq.query_id])
        scores = retr.model.predict([(qq.text, by_id[cid]) for cid in candidates[qq.query_id]]) if candidates[qq.query_id] else []
        full = dict(zip(candidates[qq.query_id], (float(s) for s in scores)))
        assert list(got) == order(full)[:2]
        for cid, s in got.items():
            assert s == pytest.approx(full[cid], abs=1e-5)
    assert run["q3"] == {}  # BM25 has no candidate for "???"
    # the same pairs again, also from a new instance: read from the cache, never re-scored
    assert retr.search(QUERIES, k=2) == run
    other = _rerank(first_stage="bm25", model=str(cross_encoder_dir), candidates=3, show_progress=False)
    other.index(cs)
    assert other.search(QUERIES, k=2) == run
    assert other.n_scored == 0 and other.n_cache_hits == len(expected_pairs)
    assert retr.stats() == {"rerank.pairs_scored": len(expected_pairs), "rerank.cache_hits": len(expected_pairs), "rerank.pairs_over_limit": 0.0}
    with pytest.raises(ValueError, match=r"retriever\.candidates=3 is below the 4 results"):
        retr.search(QUERIES, k=4)


@pytest.mark.slow
def test_rerank_input_limit_is_counted_and_follows_on_truncate(cross_encoder_dir, fresh_scores):
    cs = chunks()
    queries = QUERIES[:2]
    retr = _rerank(first_stage="bm25", model=str(cross_encoder_dir), candidates=4, max_length=16, on_truncate="error", show_progress=False)
    assert retr.max_length == 16
    retr.index(cs)
    first = retr.first_stage.search(queries, 4)
    by_id = {c.chunk_id: c.text for c in cs}
    pairs = [(qq.text, by_id[cid]) for qq in queries for cid in first[qq.query_id]]
    lengths = pair_lengths(cross_encoder_dir, pairs)
    over = [n for n in lengths if n > 16]
    assert 0 < len(over) <= len(pairs)
    assert retr.count_pair_tokens(pairs) == lengths
    message = rf"retriever\.on_truncate=error: {len(over)} of {len(pairs)} \(query, chunk\) pairs \(rerank\) exceed the 16-word-piece input limit .* \(longest {max(over)} word pieces"
    with pytest.raises(ValueError, match=message):
        retr.search(queries, k=2)
    assert retr.n_scored == 0  # refused before scoring anything

    warned = _rerank(first_stage="bm25", model=str(cross_encoder_dir), candidates=4, max_length=16, show_progress=False)
    warned.index(cs)
    with pytest.warns(UserWarning, match=rf"truncates {len(over)} of {len(pairs)} \(query, chunk\) pairs \(rerank\) to its 16-word-piece input limit"):
        warned.search(queries, k=2)
    assert warned.n_over_limit == len(over) == warned.stats()["rerank.pairs_over_limit"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warned.search(queries, k=2)  # each pair is counted once per retriever
    assert warned.n_over_limit == len(over)

    silent = _rerank(first_stage="bm25", model=str(cross_encoder_dir), candidates=4, max_length=16, on_truncate="ignore", show_progress=False)
    silent.index(cs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        silent.search(queries, k=2)
    assert silent.n_over_limit == 0
    # the default limit is the model's own (512): nothing here exceeds it
    assert _rerank(first_stage="bm25", model=str(cross_encoder_dir)).max_length == 512


@pytest.mark.slow
def test_rerank_finds_a_hub_id_in_the_local_cache_only(cross_encoder_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("SENTENCE_TRANSFORMERS_HOME", str(tmp_path))
    with pytest.raises(ValueError, match=r"retriever\.model 'local/minilm-ce' is neither a local folder nor a hub id in .*HF_HUB_OFFLINE=1 is set") as info:
        _rerank(first_stage="bm25", model="local/minilm-ce")
    assert "\n" not in str(info.value)
    # the hub cache layout: models--<org>--<name>/refs/main -> snapshots/<commit>/
    repo = tmp_path / "models--local--minilm-ce"
    commit = "0" * 40
    shutil.copytree(cross_encoder_dir, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    retr = _rerank(first_stage="bm25", model="local/minilm-ce")
    assert retr.model_path == repo / "snapshots" / commit


@pytest.mark.slow
def test_rerank_parameter_and_model_errors(cross_encoder_dir, tmp_path, monkeypatch):
    from harness.embeddings.model import default_model_path

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("SENTENCE_TRANSFORMERS_HOME", str(tmp_path))
    model = str(cross_encoder_dir)
    cases = [
        ({"candidates": 0}, r"retriever\.candidates must be an integer >= 1"),
        ({"candidates": True}, r"retriever\.candidates"),
        ({"max_length": 0}, r"retriever\.max_length must be an integer >= 1"),
        ({"max_length": 1024}, r"retriever\.max_length=1024 exceeds the 512-word-piece input limit of retriever\.model"),
        ({"batch_size": 0}, r"retriever\.batch_size must be an integer >= 1"),
        ({"device": "gpu"}, r"retriever\.device must be"),
        ({"on_truncate": "wran"}, r"retriever\.on_truncate must be one of 'warn', 'error', 'ignore', got 'wran' \(did you mean 'warn'\?\)"),
        ({"show_progress": "yes"}, r"retriever\.show_progress must be true or false"),
        ({"first_stage": "bm52"}, r"retriever\.first_stage must be one of 'faiss', 'bm25', 'hybrid', got 'bm52' \(did you mean 'bm25'\?\)"),
        ({"first_stage": None}, r"retriever\.first_stage must be one of"),
        (
            {"first_stage": {"_target_": "harness.retrievers.bm25.BM25Retriever", "k_1": 1.2}},
            r"retriever\.first_stage\.k_1 is not a setting of .*BM25Retriever .*did you mean 'k1'",
        ),
        ({"first_stage": {"_target_": "harness.retrievers.bm25.BM25Retriever", "k1": -1}}, r"retriever\.first_stage: retriever\.k1 must be a number >= 0"),
        ({"first_stage": {"_target_": "harness.retrievers.hybrid.HybridRetriever", "fusion": "rff"}}, r"retriever\.first_stage: .*did you mean 'rrf'"),
        ({"first_stage": {"_target_": "harness.retrievers.nowhere.Missing"}}, r"retriever\.first_stage\._target_ .* cannot be imported"),
        ({"first_stage": {"_target_": "harness.types.Query"}}, r"is not a harness Retriever"),
        ({"model": ""}, r"retriever\.model must be a local model folder or a hub id"),
        ({"model": "not a valid id!"}, r"retriever\.model 'not a valid id!' is neither a local folder nor a hub id"),
        ({"model": "cross-encoder/ms-marco-MiniLM-L6-v2"}, r"retriever\.model 'cross-encoder/ms-marco-MiniLM-L6-v2' is neither"),
        ({"model": str(default_model_path())}, r"retriever\.model .* is not a cross-encoder: .*BertModel"),
        ({"model": str(tmp_path)}, r"retriever\.model .* holds no readable config\.json"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message) as info:
            _rerank(**{"first_stage": "bm25", "model": model, **kwargs})
        assert "\n" not in str(info.value), kwargs
    with pytest.raises(ValueError, match="before index"):
        _rerank(first_stage="bm25", model=model).search(QUERIES, k=1)


# --------------------------------------------------------------------------- configs and the builder


def test_configs_build_through_the_builder(cross_encoder_dir, encoder):
    cfg = compose(["retriever=hybrid"])
    hybrid = build.build_retriever(cfg, encoder)
    assert isinstance(hybrid, HybridRetriever) and hybrid.name == "hybrid" and hybrid.needs_encoder
    assert (hybrid.fusion, hybrid.rrf_k, hybrid.alpha, hybrid.depth, hybrid.lexical.k1, hybrid.lexical.b) == ("rrf", 60, 0.5, None, 1.5, 0.75)
    assert build.run_name(cfg).endswith("-hybrid")
    assert build.config_hash(cfg) == build.config_hash(compose(["retriever=hybrid"]))

    cfg = compose(["retriever=rerank", f"retriever.model={cross_encoder_dir}"])
    retr = build.build_retriever(cfg, encoder)
    assert isinstance(retr, RerankRetriever) and retr.name == "rerank" and build.run_name(cfg).endswith("-rerank")
    assert isinstance(retr.first_stage, HybridRetriever) and retr.first_stage.encoder is encoder and retr.needs_encoder
    assert retr.candidates is None and retr.max_length == 512 and retr.on_truncate == "warn"
    cfg = compose(["retriever=rerank", f"retriever.model={cross_encoder_dir}", "retriever.first_stage.fusion=weighted", "retriever.first_stage.alpha=0.7"])
    first = build.build_retriever(cfg, encoder).first_stage
    assert (first.fusion, first.alpha) == ("weighted", 0.7)
    cfg = compose(["retriever=rerank", f"retriever.model={cross_encoder_dir}", "retriever.first_stage=bm25"])
    retr = build.build_retriever(cfg, encoder)
    assert isinstance(retr.first_stage, BM25Retriever) and retr.needs_encoder is False
    overrides = ["~retriever.first_stage", "+retriever.first_stage={_target_:harness.retrievers.bm25.BM25Retriever,k1:1.2}"]
    retr = build.build_retriever(compose(["retriever=rerank", f"retriever.model={cross_encoder_dir}", *overrides]), encoder)
    assert isinstance(retr.first_stage, BM25Retriever) and retr.first_stage.k1 == 1.2
    with pytest.raises(ValueError, match=r"retriever\.fusion .*did you mean 'weighted'"):
        build.build_retriever(compose(["retriever=hybrid", "retriever.fusion=weigted"]), encoder)


def test_the_first_stage_is_built_by_the_builder_only(cross_encoder_dir, encoder, monkeypatch):
    """Rerank declares ``needs_builder``: build_retriever hands it build_sub_retriever, which
    builds the first stage (a reranker without a builder refuses, naming where to get one)."""
    assert RerankRetriever.needs_builder and not any(c.needs_builder for c in (BM25Retriever, FaissRetriever, HybridRetriever))
    with pytest.raises(ValueError, match=r"^retriever\.first_stage: no builder for nested retriever configs; .*build_sub_retriever$"):
        RerankRetriever(first_stage="bm25", model=str(cross_encoder_dir))
    calls, original = [], build.build_sub_retriever

    def recording(where, node, enc=None):
        calls.append((where, dict(node), enc))
        return original(where, node, enc)

    monkeypatch.setattr(build, "build_sub_retriever", recording)
    cfg = compose(["retriever=rerank", f"retriever.model={cross_encoder_dir}", "retriever.first_stage.fusion=weighted"])
    retr = build.build_retriever(cfg, encoder)
    expected = {"_target_": "harness.retrievers.hybrid.HybridRetriever", "fusion": "weighted", "rrf_k": 60, "alpha": 0.5, "depth": None, "k1": 1.5, "b": 0.75}
    assert calls == [("retriever.first_stage", expected, encoder)]
    assert isinstance(retr.first_stage, HybridRetriever) and retr.first_stage.fusion == "weighted" and retr.first_stage.encoder is encoder
    calls.clear()
    retr = build.build_retriever(compose(["retriever=rerank", f"retriever.model={cross_encoder_dir}", "retriever.first_stage=bm25"]), encoder)
    assert calls == [("retriever.first_stage", {"_target_": "harness.retrievers.bm25.BM25Retriever"}, encoder)] and isinstance(retr.first_stage, BM25Retriever)


# --------------------------------------------------------------------------- end to end

KS = [1, 3, 5, 10]
RERANK_KS = [1, 3, 5]  # the reranker's runs fetch k = 5 (no budgets): 5 candidates per query suffice
#: Queries the reranker answers end to end (every query of the hybrid runs): enough to
#: exercise batching and the cache, few enough to keep this file well under a minute.
RERANK_QUERIES = 30


def check_evaluation(ev, dataset, ks):
    names = set(metric_names(ks, [], context_tokens=False))
    assert names <= set(ev.metrics)
    for name in names:
        assert 0.0 <= ev.metrics[name] <= 1.0, name
    m = ev.metrics
    assert [m[f"recall@{k}"] for k in ks] == sorted(m[f"recall@{k}"] for k in ks)
    assert len(ev.per_query) == len(dataset.queries)
    assert set(ev.run) == {qq.query_id for qq in dataset.queries}
    chunk_ids = {c.chunk_id for c in ev.chunks}
    for scores in ev.run.values():
        assert len(scores) <= max(ks) and set(scores) <= chunk_ids and in_tie_order(scores)


def check_rerank_permutes(reranked, first, retr, dataset, ks):
    """With candidates == max(ks) the reranker returns the first stage's top-k set re-ordered,
    so set-based metrics at max(ks) are unchanged and each distinct pair is scored once."""
    k = max(ks)
    for qid, scores in reranked.run.items():
        assert set(scores) == set(ranked(first.run, qid)[:k])
    for name in (f"recall@{k}", f"item_recall@{k}", f"hit_rate@{k}", f"chunk_precision@{k}"):
        assert reranked.metrics[name] == pytest.approx(first.metrics[name]), name
    texts = {c.chunk_id: c.text for c in reranked.chunks}
    pairs = {(qq.text, texts[c]) for qq in dataset.queries for c in reranked.run[qq.query_id]}
    assert retr.n_scored == len(pairs) and retr.n_cache_hits == 0


@pytest.mark.slow
@pytest.mark.parametrize("dataset_name", ["kestrel", "chroma"])
def test_hybrid_and_rerank_end_to_end(dataset_name, request, encoder, cross_encoder_dir, fresh_scores):
    dataset = request.getfixturevalue(dataset_name)  # chroma skips when the shared copy is missing
    chunker = RecursiveChunker(chunk_size=254)
    fusion = {"kestrel": "rrf", "chroma": "weighted"}[dataset_name]
    hybrid = evaluate(dataset, chunker, HybridRetriever(encoder=encoder, fusion=fusion), default_metric_settings(ks=KS, budgets=[]), progress=False)
    check_evaluation(hybrid, dataset, KS)
    assert hybrid.metrics["recall@5"] > 0.2  # the fused retrievers do find evidence on these corpora
    assert all(len(v) == 10 for v in hybrid.run.values())  # the dense side always has 10 candidates

    # the reranker over a hybrid first stage (kestrel; its embeddings are cached by now) or BM25 (chroma: no encoder)
    subset = dataclasses.replace(dataset, queries=dataset.queries[:RERANK_QUERIES])
    settings_ = default_metric_settings(ks=RERANK_KS, budgets=[])
    stage = {"kestrel": HybridRetriever(encoder=encoder, fusion=fusion), "chroma": BM25Retriever()}[dataset_name]
    first = evaluate(subset, chunker, stage, settings_, progress=False)
    retr = RerankRetriever(
        first_stage={"kestrel": "hybrid", "chroma": "bm25"}[dataset_name],
        model=str(cross_encoder_dir),
        candidates=max(RERANK_KS),
        max_length=64,
        on_truncate="ignore",
        show_progress=False,
        encoder=encoder,
        builder=build.build_sub_retriever,
    )
    assert retr.needs_encoder is (dataset_name == "kestrel")
    reranked = evaluate(subset, chunker, retr, settings_, progress=False)
    check_evaluation(reranked, subset, RERANK_KS)
    check_rerank_permutes(reranked, first, retr, subset, RERANK_KS)
