"""Issue 24, class 3: non-finite and degenerate numbers are refused or counted at every boundary.

* vectors after any encoder (fresh or read from the disk cache): NaN or infinity refused
  in one line naming the model, the count and the first text; a zero vector flagged
  (warned, counted in ``embedding.zero_vectors``) and kept;
* scores after every retriever (the :class:`~harness.retrievers.base.Retriever` boundary)
  and at the fusion functions: a non-finite score refused;
* min-max normalisation of a constant list: every candidate gets 0.5;
* per-query values before a mean: a non-finite value scores 0, stays in the denominator
  and is counted (``queries.n_failed``).

Real FAISS, real BM25, a real SQLite embedding cache under ``tmp_path``; the encoder here is
a real :class:`~harness.embeddings.base.CachedEncoder` backend whose vectors are set by hand
(no model can be asked for a NaN), so every expected vector and score is known.
"""

from __future__ import annotations

import hashlib
import math
import re
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.embeddings.base import CachedEncoder, check_vectors
from harness.types import Chunk, Document, NonFiniteError, Query

DOC = Document("kb.txt", "The broker listens on port 8450. Workers send heartbeats. Backups run at noon.")
CHUNKS = [Chunk.from_spans(DOC, [(0, 32)]), Chunk.from_spans(DOC, [(33, 56)]), Chunk.from_spans(DOC, [(57, 78)])]


def unit_vector(text: str, dim: int = 4) -> np.ndarray:
    """A fixed unit vector from the text's sha256 (positive coordinates: every cosine > 0)."""
    raw = np.frombuffer(hashlib.sha256(text.encode()).digest()[:dim], dtype=np.uint8).astype(np.float32) + 1.0
    return raw / np.linalg.norm(raw)


class HandSet(CachedEncoder):
    """A backend whose vectors are :func:`unit_vector`, except the texts in ``special``."""

    backend = "hand"

    def __init__(self, special: dict[str, np.ndarray] | None = None, **kwargs) -> None:
        super().__init__("hand-set-model", show_progress=False, **kwargs)
        self.special = dict(special or {})

    @property
    def embedding_key(self) -> str:
        return hashlib.sha256(b"hand-set-model").hexdigest()

    @property
    def max_seq_length(self):
        return None

    def _count_raw(self, texts):
        return [len(t.split()) for t in texts]

    def _embed_batch(self, texts):
        return np.stack([self.special.get(t, unit_vector(t)) for t in texts]).astype(np.float32)


NAN = np.array([np.nan, 0.5, 0.5, 0.5], dtype=np.float32)
INF = np.array([np.inf, 0.0, 0.0, 0.0], dtype=np.float32)
ZERO = np.zeros(4, dtype=np.float32)


# -- the encoder boundary ------------------------------------------------------------------
@pytest.mark.parametrize("bad", [NAN, INF], ids=["nan", "inf"])
def test_a_non_finite_chunk_vector_is_refused_before_faiss_naming_the_chunk(bad, tmp_path):
    """Was: FAISS took the NaN row and never returned that chunk (k=3 gave 2 hits)."""
    from harness.retrievers.faiss import FaissRetriever

    enc = HandSet({CHUNKS[1].text: bad}, cache_dir=tmp_path)
    retriever = FaissRetriever(encoder=enc)
    with pytest.raises(NonFiniteError) as info:
        retriever.index(CHUNKS)
    message = str(info.value)
    assert "\n" not in message
    for part in ("hand-set-model", "1 of 3 texts", "embed chunks", "Workers send heartbeats"):
        assert part in message, message
    # nothing of it was cached: a later run does not read the bad vector back
    from harness.cache import EmbeddingCache, text_key

    assert EmbeddingCache(tmp_path / "embeddings").get(enc.embedding_key, [text_key(CHUNKS[1].text)]) == {}


def test_a_non_finite_query_vector_is_refused_naming_the_query():
    from harness.retrievers.faiss import FaissRetriever

    retriever = FaissRetriever(encoder=HandSet({"Which port?": NAN}))
    retriever.index(CHUNKS)
    with pytest.raises(NonFiniteError, match=r"1 of 1 texts \(embed queries\).*'Which port\?'"):
        retriever.search([Query("q", "Which port?", ())], 3)


def test_a_zero_chunk_vector_is_flagged_counted_and_still_returned():
    from harness.retrievers.faiss import FaissRetriever

    enc = HandSet({CHUNKS[2].text: ZERO})
    retriever = FaissRetriever(encoder=enc)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        retriever.index(CHUNKS)
    flagged = [str(w.message) for w in record if "zero vector" in str(w.message)]
    assert len(flagged) == 1 and "1 of 3 texts" in flagged[0] and "Backups run at noon" in flagged[0], flagged
    assert enc.run_metrics()["embedding.zero_vectors"] == 1.0
    run = retriever.search([Query("q", "Which port?", ())], 3)["q"]
    assert len(run) == 3 and run[CHUNKS[2].chunk_id] == 0.0  # its cosine with anything is defined as 0


def test_a_non_finite_vector_in_the_disk_cache_is_refused_naming_the_cache(tmp_path):
    from harness.cache import EmbeddingCache, text_key

    enc = HandSet(cache_dir=tmp_path)
    EmbeddingCache(tmp_path / "embeddings").put(enc.embedding_key, {text_key("hello"): NAN}, {"model": "an older writer"})
    with pytest.raises(NonFiniteError, match=r"embedding cache .*embeddings\.sqlite.*1 of 1 .*'hello'.*harness cache clear"):
        enc.encode(["hello"])


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 12),
    dim=st.integers(1, 5),
    kinds=st.lists(st.sampled_from(["ok", "ok", "nan", "inf", "-inf", "zero"]), min_size=12, max_size=12),
    seed=st.integers(0, 2**16),
)
def test_check_vectors_refuses_exactly_the_non_finite_rows_and_flags_exactly_the_zero_rows(n, dim, kinds, seed):
    rng = np.random.default_rng(seed)
    kinds = kinds[:n]
    rows = []
    for kind in kinds:
        v = rng.uniform(0.5, 1.0, dim) * rng.choice([-1, 1], dim)  # |each coordinate| >= 0.5: never near zero
        if kind in ("nan", "inf", "-inf"):
            v[rng.integers(dim)] = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf}[kind]
        elif kind == "zero":
            v[:] = 0.0
        rows.append(v)
    vectors = np.asarray(rows, dtype=np.float32)
    labels = [f"text {i}" for i in range(n)]
    bad = [i for i, k in enumerate(kinds) if k in ("nan", "inf", "-inf")]
    if bad:
        with pytest.raises(NonFiniteError) as info:
            check_vectors(vectors, labels, "embedding.model 'm'")
        message = str(info.value)
        assert f"{len(bad)} of {n} texts" in message and repr(labels[bad[0]]) in message and "\n" not in message
    else:
        zero = check_vectors(vectors, labels, "embedding.model 'm'")
        assert zero.tolist() == [k == "zero" for k in kinds]


# -- the retriever boundary ----------------------------------------------------------------
def test_every_retriever_subclass_has_its_scores_checked():
    """A retriever written tomorrow is checked too: the check sits on the base class."""
    from harness.retrievers.base import Retriever

    class Sloppy(Retriever):
        name = "sloppy"

        def index(self, chunks):
            self.ids = [c.chunk_id for c in chunks]

        def search(self, queries, k):
            return {q.query_id: {cid: (math.nan if i == 1 else 1.0 - i / 10) for i, cid in enumerate(self.ids[:k])} for q in queries}

    r = Sloppy()
    r.index(CHUNKS)
    with pytest.raises(NonFiniteError, match=rf"retriever\.sloppy: 1 of 3 scores .*query 'q'.*chunk '{CHUNKS[1].chunk_id}'.*nan"):
        r.search([Query("q", "anything", ())], 3)


def test_bm25_and_faiss_scores_pass_the_boundary_unchanged(encoder):
    from harness.retrievers.base import check_scores
    from harness.retrievers.bm25 import BM25Retriever

    bm25 = BM25Retriever()
    bm25.index(CHUNKS)
    run = bm25.search([Query("q", "Which port does the broker listen on?", ())], 3)
    assert run["q"] and all(math.isfinite(s) and s > 0 for s in run["q"].values())
    assert check_scores(run, "bm25") is run


@pytest.mark.parametrize("fusion", ["rrf", "weighted"])
def test_fusion_refuses_a_non_finite_input_score(fusion):
    """Was: weighted fusion passed a NaN through (a NaN fused score ranked anywhere)."""
    from harness.retrievers.hybrid import rrf_fuse, weighted_fuse

    dense, lexical = {"a": 0.9, "b": math.nan}, {"a": 2.0, "c": 1.0}
    with pytest.raises(NonFiniteError, match=r"'b'.*nan"):
        rrf_fuse([dense, lexical]) if fusion == "rrf" else weighted_fuse(dense, lexical, 0.5)


def test_a_constant_side_gets_one_half_and_does_not_dominate_fusion():
    """Was: a constant list (one candidate, all zeros too) mapped to 1.0, as high as the other side's best."""
    from harness.retrievers.hybrid import minmax, weighted_fuse

    assert minmax({"a": 0.0, "b": 0.0}) == {"a": 0.5, "b": 0.5}
    assert minmax({"a": 3.0}) == {"a": 0.5}
    # dense: one candidate; lexical: b clearly best. Hand-worked with alpha = 0.5:
    # a = 0.5 * 0.5 + 0.5 * 0 = 0.25; b = 0.5 * 0 + 0.5 * 1 = 0.5; c = 0.5 * 0 + 0.5 * 0 = 0
    assert weighted_fuse({"a": 0.2}, {"b": 7.0, "c": 1.0}, 0.5) == {"b": 0.5, "a": 0.25, "c": 0.0}


@settings(max_examples=80, deadline=None)
@given(st.dictionaries(st.text("abcdef", min_size=1, max_size=3), st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=12))
def test_minmax_is_in_unit_interval_order_preserving_and_constant_lists_map_to_one_half(scores):
    from harness.retrievers.hybrid import minmax

    out = minmax(scores)
    assert set(out) == set(scores)
    assert all(0.0 <= v <= 1.0 for v in out.values())
    if len(set(scores.values())) == 1:
        assert set(out.values()) == {0.5}
    else:
        assert max(out.values()) == 1.0 and min(out.values()) == 0.0
        for a in scores:
            for b in scores:
                if scores[a] < scores[b]:
                    assert out[a] <= out[b]


# -- the mean boundary ---------------------------------------------------------------------
def test_the_issue_example_scores_failed_queries_zero_and_counts_them():
    """Was: ``[1, NaN, 0.5, NaN]`` gave 0.75 (NaN skipped, no count)."""
    from harness.evaluation.stats import query_mean

    with pytest.warns(UserWarning, match=r"recall@5: 2 of 4 queries .*scored 0"):
        mean, failed = query_mean([1.0, math.nan, 0.5, math.nan], "recall@5")
    assert (mean, failed) == (1.5 / 4, 2)


def test_a_run_table_with_a_failed_query_logs_n_failed_and_a_mean_over_every_query():
    from harness.evaluation.scoring import per_query_table

    rows = [
        {"query_id": "q1", "recall@5": 1.0, "iou@5": 0.5},
        {"query_id": "q2", "recall@5": math.nan, "iou@5": 0.25},
        {"query_id": "q3", "recall@5": 0.5, "iou@5": math.inf},
    ]
    with pytest.warns(UserWarning, match="scored 0"):
        table, means = per_query_table(rows)
    assert means["recall@5"] == pytest.approx(1.5 / 3) and means["iou@5"] == pytest.approx(0.75 / 3)
    assert means["queries.n_failed"] == 2.0  # q2 and q3 each failed one metric
    assert table["recall@5"].tolist() == [1.0, 0.0, 0.5]  # the table agrees with its mean (and the CIs drawn from it)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.one_of(st.floats(0, 1), st.just(math.nan), st.just(math.inf), st.just(-math.inf)), min_size=1, max_size=30))
def test_query_mean_is_the_finite_sum_over_every_query_with_failures_counted(values):
    from harness.evaluation.stats import query_mean

    finite = [v for v in values if math.isfinite(v)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mean, failed = query_mean(values, "m")
    assert failed == len(values) - len(finite)
    assert mean == pytest.approx(sum(finite) / len(values), abs=1e-12)


# The run's last boundary before logging: a value outside its documented range is a bug and is
# refused (recall, precision, IoU and hit rate are shares: [0, 1] by their definitions).


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(["recall@5", "precision@1", "iou@10", "hit_rate@3", "recall_at_5"]),
    value=st.floats(min_value=-2, max_value=3, allow_nan=False),
)
def test_a_share_outside_zero_one_is_refused_before_logging(name, value):
    from harness.experiment.run import RANGE_SLACK, check_ranges

    if -RANGE_SLACK <= value <= 1 + RANGE_SLACK:
        check_ranges({name: value})
    else:
        with pytest.raises(NonFiniteError, match=rf"^metric {re.escape(name)} = .* outside its documented range \[0.0, 1.0\]"):
            check_ranges({name: value})


def test_a_nan_metric_is_refused_by_the_range_check_too():
    from harness.experiment.run import check_ranges

    with pytest.raises(NonFiniteError, match="recall@5 = nan"):
        check_ranges({"recall@5": float("nan"), "context_tokens@5": 120.0})
