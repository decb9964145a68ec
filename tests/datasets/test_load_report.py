"""LoadReport.without_evidence: the one rule for a labelled query with no evidence (native and excerpts files)."""

import pytest

from harness.datasets.report import QUERIES_WITHOUT_EVIDENCE, LoadReport


@pytest.mark.parametrize("evidence", [None, []])
def test_none_or_empty_is_excluded_and_counted(evidence):
    report = LoadReport("d")
    assert report.without_evidence(evidence, "q.jsonl:3: query 'q1' has no evidence; excluded") is True
    assert report.counts == {QUERIES_WITHOUT_EVIDENCE: 1}
    assert report.problems == ["q.jsonl:3: query 'q1' has no evidence; excluded"]


@pytest.mark.parametrize("evidence", [[{"doc_id": "a", "start": 0, "end": 1}], ["an excerpt"], "", {}, 0])
def test_anything_else_is_left_to_the_format_checks(evidence):
    report = LoadReport("d")
    assert report.without_evidence(evidence, "never kept") is False
    assert (report.counts, report.problems) == ({}, [])
