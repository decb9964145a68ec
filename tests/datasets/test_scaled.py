"""Scaled datasets: N exact copies of each document, the same questions, evidence in every copy."""

from __future__ import annotations

import pytest

from harness.datasets.scaled import copy_id, load_chroma_scaled, scale_dataset
from harness.datasets.validate import DatasetError
from harness.types import Dataset, Document, Evidence, Query


@pytest.fixture(scope="module")
def small() -> Dataset:
    docs = (Document("a", "alpha beta gamma delta"), Document("b", "one two three"))
    queries = (
        Query("q1", "which greek letter?", (Evidence("a", 6, 10, "beta"),)),
        Query("q2", "numbers?", (Evidence("b", 4, 7, "two"), Evidence("a", 0, 5, "alpha"))),
    )
    return Dataset("toy", docs, queries, source="mem")


def test_factor_one_is_the_dataset_itself(small):
    assert scale_dataset(small, 1) is small


@pytest.mark.parametrize("factor", [2, 11])
def test_copies_are_exact_and_evidence_points_into_every_copy(small, factor):
    scaled = scale_dataset(small, factor)
    assert scaled.name == f"toy-x{factor}"
    assert len(scaled.documents) == factor * len(small.documents)
    assert scaled.n_chars == factor * small.n_chars
    assert [q.query_id for q in scaled.queries] == ["q1", "q2"]
    by_id = scaled.by_id
    assert len(by_id) == len(scaled.documents)
    for q, orig in zip(scaled.queries, small.queries):
        assert len(q.evidence) == factor * len(orig.evidence)
        for ev in q.evidence:
            assert by_id[ev.doc_id].text[ev.start : ev.end] == ev.text
        # every copy of every original evidence document is named exactly once
        assert sorted({ev.doc_id for ev in q.evidence}) == sorted(copy_id(e.doc_id, i, factor) for e in orig.evidence for i in range(factor))
    ids = [d.doc_id for d in scaled.documents]
    assert ids[:2] == ["a", "b"]
    assert ids[-1] == ("b~1" if factor == 2 else "b~10")
    assert scale_dataset(small, factor).fingerprint() == scaled.fingerprint()  # deterministic


def test_bad_factor_and_colliding_ids_are_refused(small):
    for bad in (0, -1, 1.5, True, "10"):
        with pytest.raises(ValueError, match="dataset.factor must be an int >= 1"):
            scale_dataset(small, bad)
    clash = Dataset("clash", (Document("a", "xyz"), Document("a~1", "xyz")), (Query("q", "?", (Evidence("a", 0, 1, "x"),)),))
    with pytest.raises(DatasetError, match="copy ids collide"):
        scale_dataset(clash, 2)


def test_chroma_scaled_loader(chroma):
    from tests.conftest import CHROMA_PATH

    scaled = load_chroma_scaled(3, path=CHROMA_PATH)
    assert scaled.name == "chroma_general-x3"
    assert scaled.n_chars == 3 * chroma.n_chars
    assert len(scaled.queries) == len(chroma.queries)
    assert load_chroma_scaled(1, path=CHROMA_PATH).fingerprint() == chroma.fingerprint()
    with pytest.raises(ValueError, match="dataset.factor"):
        load_chroma_scaled(0, path="/nonexistent")


def test_load_scaled_from_a_nested_dataset_config_and_one_line(kestrel):
    from hydra.utils import instantiate

    from harness.datasets.scaled import one_line

    node = {"_target_": "harness.datasets.scaled.load_scaled", "factor": 2, "base": {"_target_": "harness.datasets.native.load_native", "path": kestrel.source}}
    scaled = instantiate(node)
    assert scaled.n_chars == 2 * kestrel.n_chars and len(scaled.queries) == len(kestrel.queries)
    joined = one_line(scaled)
    (doc,) = joined.documents
    assert len(doc.text) == scaled.n_chars + len(scaled.documents) - 1
    assert "\n" not in doc.text and "\r" not in doc.text
    assert sum(len(q.evidence) for q in joined.queries) == sum(len(q.evidence) for q in scaled.queries)
    for q in joined.queries:  # check_dataset ran too; spans still hold their (line-break free) excerpts
        assert all(doc.text[e.start : e.end] == e.text for e in q.evidence)
    from harness.datasets.scaled import load_scaled

    with pytest.raises(ValueError, match="dataset.base must be a dataset config"):
        load_scaled({"path": "x"}, 2)
