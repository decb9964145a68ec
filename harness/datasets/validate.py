"""Span checks shared by every loader: evidence in range and equal to the stored excerpt."""

from __future__ import annotations

from harness.text.normalisation import normalisation_mismatch
from harness.types import Dataset


class DatasetError(ValueError):
    """A dataset file or record is invalid; the message names the dataset, file, query or span."""


def check_dataset(dataset: Dataset) -> None:
    """Verify every document id is unique and every evidence span is valid.

    Checks, for each query and each evidence span: the document exists, ``0 <= start <
    end <= len(text)``, and ``text[start:end]`` equals the stored excerpt (when one is
    stored; an excerpt that differs only by Unicode normalisation, NFC vs NFD, is refused
    with a message that says so and names both forms). Also rejects an empty corpus, an empty query list, duplicate query ids and
    queries without evidence (loaders exclude and count those before calling this, see
    :data:`harness.datasets.report.QUERIES_WITHOUT_EVIDENCE`; a dataset built in code
    must not hold any).

    Raises:
        DatasetError: on the first problem, naming the dataset, query id, document and span.
    """
    name = dataset.name
    if not dataset.documents:
        raise DatasetError(f"dataset {name!r}: the corpus has no documents")
    if not dataset.queries:
        report = getattr(dataset, "load_report", None)
        excluded = report.count("queries_without_evidence") if report is not None else 0
        why = f" ({excluded} queries without evidence were excluded)" if excluded else ""
        raise DatasetError(f"dataset {name!r}: no labelled queries{why}")
    docs: dict[str, str] = {}
    for doc in dataset.documents:
        if doc.doc_id in docs:
            raise DatasetError(f"dataset {name!r}: duplicate doc_id {doc.doc_id!r}")
        docs[doc.doc_id] = doc.text
    seen: set[str] = set()
    for q in dataset.queries:
        if q.query_id in seen:
            raise DatasetError(f"dataset {name!r}: duplicate query_id {q.query_id!r}")
        seen.add(q.query_id)
        if not q.text.strip():
            raise DatasetError(f"dataset {name!r}, query {q.query_id!r}: empty query text")
        if not q.evidence:
            raise DatasetError(f"dataset {name!r}, query {q.query_id!r}: no evidence spans")
        for i, ev in enumerate(q.evidence):
            where = f"dataset {name!r}, query {q.query_id!r}, evidence #{i} [{ev.start}, {ev.end}) in {ev.doc_id!r}"
            text = docs.get(ev.doc_id)
            if text is None:
                raise DatasetError(f"{where}: unknown doc_id (known: {sorted(docs)[:5]}...)")
            if ev.end > len(text):
                raise DatasetError(f"{where}: span ends beyond the document (length {len(text)})")
            if ev.text and text[ev.start : ev.end] != ev.text:
                found = text[ev.start : ev.end]
                form = normalisation_mismatch(ev.text, found, text)
                if form is not None:
                    raise DatasetError(
                        f"{where}: the stored excerpt {ev.text[:60]!r} {form}; normalise the corpus and the labels to one form "
                        "(e.g. unicodedata.normalize('NFC', ...)) and count the offsets in it"
                    )
                raise DatasetError(f"{where}: document text {found[:60]!r} does not equal the stored excerpt {ev.text[:60]!r}")
