"""Two documents with the same text under different ids (red-team class: duplicate content).

Public corpora often hold the same passage twice under two ids (a page crawled twice, a
file copied into two folders). Both copies get equal retrieval scores, the tie rule ranks
one first, and when the evidence is labelled in the other the query loses recall for a
reason that has nothing to do with the chunking. The ids are distinct, so the duplicate-id
check passed them silently. Now loading such a dataset warns once, naming how many
documents repeat another's text and the first pair, and the count is kept in the load
report (``info["duplicate_texts"]``). Expected counts are worked out by brute force.
"""

from __future__ import annotations

import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.datasets.report import LoadReport
from harness.datasets.validate import check_dataset
from harness.types import Dataset, Document, Evidence, Query


def test_a_copied_document_is_warned_about_naming_both_ids():
    text = "The ferry leaves at nine."
    docs = (Document("a.txt", text), Document("b.txt", "Something else."), Document("copy/a.txt", text))
    report = LoadReport("dup")
    ds = Dataset("dup", docs, (Query("q1", "when?", (Evidence("a.txt", 0, 9),)),), load_report=report)
    with pytest.warns(UserWarning, match=r"dataset 'dup': 1 document repeats the text of another \(first: 'copy/a.txt' = 'a.txt'\)"):
        check_dataset(ds)
    assert report.info["duplicate_texts"] == 1


def test_distinct_documents_give_no_warning():
    ds = Dataset("ok", (Document("a", "x y"), Document("b", "x y z")), (Query("q1", "x?", (Evidence("a", 0, 1),)),))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_dataset(ds)


@settings(max_examples=40, deadline=None)
@given(texts=st.lists(st.sampled_from(["a b", "c d", "e f", "g h"]), min_size=1, max_size=8))
def test_the_count_is_the_number_of_documents_repeating_an_earlier_text(texts):
    docs = tuple(Document(f"d{i}", t) for i, t in enumerate(texts))
    report = LoadReport("p")
    ds = Dataset("p", docs, (Query("q", "a?", (Evidence("d0", 0, 1),)),), load_report=report)
    expected = sum(1 for i, t in enumerate(texts) if t in texts[:i])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_dataset(ds)
    mine = [w for w in caught if "repeats the text" in str(w.message) or "repeat the text" in str(w.message)]
    assert len(mine) == (1 if expected else 0)
    assert report.info.get("duplicate_texts", 0) == expected
