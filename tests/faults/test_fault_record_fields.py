"""Dataset records whose fields are misspelt or of the wrong type (red-team class: record fields).

Public bug reports against evaluation tools keep finding the same two silent failures in
hand-written label files:

* a number of the wrong type is coerced: ``"start": 6.7`` became offset 6, ``true`` became
  1, ``"6"`` became 6, so a span moved without a word (and with no stored excerpt to check
  it against, nothing noticed);
* a misspelt field is ignored: ``"txt"`` instead of ``"text"`` switched the excerpt check
  off, ``"docid"`` instead of ``"doc_id"`` in an excerpts file widened the search from one
  document to the whole corpus.

The rule now: a record field is read as the type the format names or refused; an unknown
field is refused naming it and the field it most likely meant (free-form facts go under
``metadata``). Every refusal is one line naming the file and line, the field, what was
expected and what was found. Expected values are written by hand in each test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.datasets.excerpts import read_excerpts
from harness.datasets.native import read_native
from harness.datasets.validate import DatasetError, check_dataset
from harness.types import Dataset, Document, Evidence, Query

TEXT = "Alpha beta gamma delta epsilon."  # "beta" is [6, 10)


def _native(root: Path, records: list[dict]) -> Path:
    (root / "corpus").mkdir(parents=True, exist_ok=True)
    (root / "corpus" / "a.txt").write_text(TEXT, encoding="utf-8")
    (root / "questions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return root


def _excerpts(root: Path, records: list[dict]) -> Path:
    (root / "corpus").mkdir(parents=True, exist_ok=True)
    (root / "corpus" / "a.txt").write_text(TEXT, encoding="utf-8")
    (root / "corpus" / "b.txt").write_text("Another file that says beta too.", encoding="utf-8")
    (root / "excerpts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return root


def _evidence_record(**fields) -> dict:
    return {"query_id": "q1", "query": "which letter?", "evidence": [{"doc_id": "a.txt", "start": 6, "end": 10, **fields}]}


@pytest.mark.parametrize(
    ("value", "shown"),
    [(6.7, "float 6.7"), (6.0, "float 6.0"), (True, "bool True"), ("6", "str '6'"), (None, "NoneType None")],
)
def test_an_offset_that_is_not_an_integer_is_refused_naming_file_line_and_field(tmp_path, value, shown):
    """Before: 6.7 and 6.0 loaded as 6, True as 1, "6" as 6 (None: a bare TypeError message)."""
    root = _native(tmp_path / "ds", [_evidence_record(start=value)])
    with pytest.raises(DatasetError) as err:
        read_native(root)
    msg = str(err.value)
    assert "\n" not in msg
    assert f"{root / 'questions.jsonl'}:1" in msg
    assert "evidence[0].start" in msg and "integer" in msg and shown in msg


def test_a_misspelt_excerpt_field_is_refused_with_the_field_it_meant(tmp_path):
    """Before: ``txt`` was ignored, so the stored excerpt was never compared with the corpus."""
    root = _native(tmp_path / "ds", [_evidence_record(txt="gamma")])  # wrong on purpose: [6, 10) is "beta"
    with pytest.raises(DatasetError) as err:
        read_native(root)
    msg = str(err.value)
    assert "\n" not in msg
    assert f"{root / 'questions.jsonl'}:1" in msg
    assert "evidence[0]" in msg and "unknown field 'txt'" in msg and "did you mean 'text'?" in msg


def test_a_misspelt_query_field_is_refused_and_metadata_is_the_place_for_free_form_facts(tmp_path):
    root = _native(tmp_path / "ds", [{**_evidence_record(), "query_idd": "x"}])
    with pytest.raises(DatasetError, match=r"questions\.jsonl:1: unknown field 'query_idd'; did you mean 'query_id'\?"):
        read_native(root)
    ok = _native(tmp_path / "ok", [{**_evidence_record(text="beta"), "metadata": {"difficulty": "easy"}}])
    (q,) = read_native(ok).queries
    assert (q.evidence[0].start, q.evidence[0].end, q.evidence[0].text) == (6, 10, "beta")


def test_an_extra_field_far_from_every_known_name_is_ignored_with_one_warning(tmp_path):
    records = [{**_evidence_record(text="beta"), "source": "wiki"}, {**_evidence_record(text="beta"), "query_id": "q2", "source": "faq"}]
    root = _native(tmp_path / "ds", records)
    with pytest.warns(UserWarning, match=r"questions\.jsonl:1: field 'source' is not part of the format and is ignored") as seen:
        ds = read_native(root)
    assert sum("'source'" in str(w.message) for w in seen) == 1  # once per file, not per record
    assert [(e.start, e.end, e.text) for q in ds.queries for e in q.evidence] == [(6, 10, "beta"), (6, 10, "beta")]


def test_a_query_text_that_is_not_a_string_is_one_line(tmp_path):
    """Before: ``AttributeError: 'int' object has no attribute 'strip'`` from check_dataset."""
    root = _native(tmp_path / "ds", [{**_evidence_record(), "query": 123}])
    with pytest.raises(DatasetError, match=r"questions\.jsonl:1: field 'query' must be a string, got int 123"):
        read_native(root)
    ds = Dataset("code", (Document("a.txt", TEXT),), (Query("q1", 123, (Evidence("a.txt", 6, 10),)),))  # type: ignore[arg-type]
    with pytest.raises(DatasetError, match=r"dataset 'code', query 'q1': query text must be a string, got int 123"):
        check_dataset(ds)


def test_a_null_query_id_is_refused_not_named_none(tmp_path):
    """Before: a null ``query_id`` became the id ``'None'``."""
    root = _native(tmp_path / "ds", [{**_evidence_record(), "query_id": None}])
    with pytest.raises(DatasetError, match=r"questions\.jsonl:1: field 'query_id' must be a non-empty string or an integer, got NoneType None"):
        read_native(root)


def test_a_bool_span_bound_is_refused_by_the_type_itself():
    """``True`` is an ``int`` to Python; as an offset it is a mistake."""
    with pytest.raises(TypeError, match="span bounds must be int"):
        Evidence("a.txt", True, 10)  # type: ignore[arg-type]


def test_a_misspelt_doc_id_in_an_excerpts_file_is_refused_not_searched_everywhere(tmp_path):
    """Before: ``docid`` was ignored, "beta" was searched in both files and the query was
    dropped as ambiguous (or, with one match elsewhere, labelled in the wrong document)."""
    root = _excerpts(tmp_path / "ex", [{"query_id": "e1", "query": "which letter?", "excerpts": ["beta"], "docid": "a.txt"}])
    with pytest.raises(DatasetError) as err:
        read_excerpts(root)
    msg = str(err.value)
    assert "\n" not in msg
    assert f"{root / 'excerpts.jsonl'}:1" in msg and "unknown field 'docid'; did you mean 'doc_id'?" in msg


def test_the_generator_s_own_excerpts_fields_are_known(tmp_path):
    rec = {
        "query_id": "gen-0001",
        "query": "which letter?",
        "excerpts": ["beta"],
        "doc_id": "a.txt",
        "passage": [0, 31],
        "span": [6, 10],
        "generator": {"model": "m", "prompt_version": 1},
    }
    ds, _ = read_excerpts(_excerpts(tmp_path / "ex", [rec]))
    assert [(e.doc_id, e.start, e.end) for e in ds.queries[0].evidence] == [("a.txt", 6, 10)]


# ---------------------------------------------------------------------- property over field values

VALUES = st.one_of(
    st.integers(min_value=-3, max_value=40),
    st.floats(min_value=-3, max_value=40, allow_nan=False),
    st.booleans(),
    st.integers(min_value=0, max_value=40).map(str),
    st.none(),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(start=VALUES, end=VALUES, extra=st.sampled_from([None, "txt", "Start", "docid", "metadata"]))
def test_a_record_loads_with_exactly_its_integers_or_is_refused_in_one_line(tmp_path_factory, start, end, extra):
    """Either the loaded span is the record's own integers (never a coerced value) or the
    load is refused with one line naming the file and line."""
    item = {"doc_id": "a.txt", "start": start, "end": end}
    if extra == "metadata":
        item_record = {"query_id": "q1", "query": "which letter?", "evidence": [item], "metadata": {"k": 1}}
    else:
        if extra is not None:
            item[extra] = 1
        item_record = {"query_id": "q1", "query": "which letter?", "evidence": [item]}
    root = _native(tmp_path_factory.mktemp("ds"), [item_record])
    exact_ints = all(type(v) is int for v in (start, end))
    valid = exact_ints and 0 <= start < end <= len(TEXT) and extra in (None, "metadata")
    try:
        ds = read_native(root)
    except DatasetError as exc:
        assert not valid, exc
        msg = str(exc)
        assert "\n" not in msg
        assert "questions.jsonl:1" in msg or "dataset 'ds" in msg
        return
    assert valid
    (ev,) = ds.queries[0].evidence
    assert (type(ev.start), type(ev.end), ev.start, ev.end) == (int, int, start, end)
