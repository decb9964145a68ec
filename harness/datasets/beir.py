"""Loader for the BEIR benchmark layout, labelled at document level.

Layout (Thakur et al., "BEIR: A Heterogeneous Benchmark for Zero-shot Evaluation of
Information Retrieval Models", NeurIPS Datasets and Benchmarks 2021)::

    <path>/corpus.jsonl        {"_id": "d1", "title": "...", "text": "..."} per line
    <path>/queries.jsonl       {"_id": "q1", "text": "..."} per line
    <path>/qrels/<split>.tsv   query-id <TAB> corpus-id <TAB> score, with a header line

Mapping to this project's span model:

* each corpus record becomes a :class:`Document` with ``doc_id = _id`` and
  ``text = title + "\\n\\n" + text`` when the title is non-empty, else ``text``;
* each judged query becomes a :class:`Query` whose evidence is the **whole** document
  ``[0, len(text))`` for every judged document with ``score > 0`` (grades are not kept:
  :class:`Evidence` has no grade field, so graded qrels become binary);
* BEIR judges documents, not passages, so span metrics on such a dataset measure how much
  of each relevant document was retrieved. Every document carries
  ``metadata["label_level"] == "document"`` so consumers (document-level metrics) can tell;
  :func:`label_level` reads it back.

Dropped records (counted in the :class:`LoadReport`, logged as a warning): queries with no
positive judgement in the split (kind ``queries_without_evidence``: excluded, never scored
0, logged by a run as the metric ``dataset.queries_without_evidence``; ``info`` splits it
into ``queries_without_qrels``, not judged in the split at all -- BEIR ships every split's
queries in one file -- and ``queries_without_positive_qrels``, judged only with
``score <= 0`` or only on absent documents), judgements with ``score <= 0``, judgements
naming a query or document absent from the files, and documents whose title and text are
both empty (their judgements are dropped with them).

Every file must be UTF-8 (an error names the file and the byte offset otherwise); a
byte-order mark at the start of a file is ignored.
"""

from __future__ import annotations

import logging
from pathlib import Path

from harness.datasets import textio
from harness.datasets.native import iter_jsonl_lines
from harness.datasets.report import QUERIES_WITHOUT_EVIDENCE, LoadReport
from harness.datasets.validate import DatasetError, check_dataset
from harness.types import Dataset, Document, Evidence, Query

log = logging.getLogger(__name__)

#: Value of ``Document.metadata["label_level"]`` for documents judged as a whole.
DOCUMENT_LEVEL = "document"


def label_level(dataset: Dataset) -> str:
    """``"document"`` when every document says ``label_level == "document"``, else ``"span"``."""
    if dataset.documents and all(d.metadata.get("label_level") == DOCUMENT_LEVEL for d in dataset.documents):
        return DOCUMENT_LEVEL
    return "span"


def _read_jsonl(path: Path, required: tuple[str, ...]):
    """Yield ``(line_number, record)`` for each non-blank line; DatasetError names file:line:field."""
    if not path.is_file():
        raise DatasetError(f"BEIR: expected a file at {path}")
    for lineno, rec in iter_jsonl_lines(path):
        for key in required:
            if key not in rec:
                raise DatasetError(f"{path}:{lineno}: missing field {key!r} (need {', '.join(required)})")
            if not isinstance(rec[key], str):
                raise DatasetError(f"{path}:{lineno}: field {key!r} must be a string, got {type(rec[key]).__name__}")
        yield lineno, rec


def _read_qrels(path: Path) -> list[tuple[int, str, str, int]]:
    """``(line, query_id, corpus_id, score)`` rows of a BEIR qrels TSV; the header is skipped.

    The first line is treated as a header when its third column is not an integer.
    """
    if not path.is_file():
        have = sorted(p.name for p in path.parent.glob("*.tsv")) if path.parent.is_dir() else []
        raise DatasetError(f"BEIR: expected a qrels file at {path} (found {have or 'none'}); set dataset.split")
    rows = []
    for lineno, line in textio.iter_lines(path):
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) != 3:
            raise DatasetError(f"{path}:{lineno}: expected 3 tab-separated columns (query-id, corpus-id, score), got {len(cols)}")
        try:
            score = int(cols[2])
        except ValueError:
            if lineno == 1:
                continue  # header: query-id corpus-id score
            raise DatasetError(f"{path}:{lineno}: score {cols[2]!r} is not an integer") from None
        rows.append((lineno, cols[0], cols[1], score))
    return rows


def read_beir(path: str | Path, split: str = "test", name: str | None = None) -> tuple[Dataset, LoadReport]:
    """Load a BEIR folder and return the dataset with its :class:`LoadReport`.

    See :func:`load_beir` for arguments and errors; this variant does not log.
    """
    if path is None or str(path) == "":
        raise DatasetError("BEIR: dataset.path is not set; point it at a folder with corpus.jsonl, queries.jsonl and qrels/")
    root = Path(path)
    name = name or root.name
    if not root.is_dir():
        raise DatasetError(f"dataset {name!r}: BEIR folder {root} does not exist")
    report = LoadReport(name)
    corpus_file = root / "corpus.jsonl"
    documents: list[Document] = []
    doc_len: dict[str, int] = {}
    empty: set[str] = set()
    seen_line: dict[str, int] = {}
    for lineno, rec in _read_jsonl(corpus_file, ("_id", "text")):
        doc_id = rec["_id"]
        if not doc_id:
            raise DatasetError(f"{corpus_file}:{lineno}: field '_id' is empty")
        if doc_id in seen_line:
            raise DatasetError(f"{corpus_file}:{lineno}: duplicate _id {doc_id!r} (first on line {seen_line[doc_id]})")
        seen_line[doc_id] = lineno
        title = rec.get("title") or ""
        if not isinstance(title, str):
            raise DatasetError(f"{corpus_file}:{lineno}: field 'title' must be a string, got {type(title).__name__}")
        text = f"{title}\n\n{rec['text']}" if title else rec["text"]
        if not text.strip():
            empty.add(doc_id)
            report.add("empty_documents", f"{corpus_file}:{lineno}: document {doc_id!r} has no title and no text; skipped")
            continue
        meta = {"type": "text", "source": f"{corpus_file}:{lineno}", "title": title, "label_level": DOCUMENT_LEVEL}
        documents.append(Document(doc_id=doc_id, text=text, metadata=meta))
        doc_len[doc_id] = len(text)

    queries_file = root / "queries.jsonl"
    query_text: dict[str, str] = {}
    for lineno, rec in _read_jsonl(queries_file, ("_id", "text")):
        if rec["_id"] in query_text:
            raise DatasetError(f"{queries_file}:{lineno}: duplicate _id {rec['_id']!r}")
        query_text[rec["_id"]] = rec["text"]

    qrels_file = root / "qrels" / f"{split}.tsv"
    relevant: dict[str, list[str]] = {}
    judged: set[str] = set()
    for lineno, qid, did, score in _read_qrels(qrels_file):
        where = f"{qrels_file}:{lineno}"
        judged.add(qid)
        if qid not in query_text:
            report.add("qrels_unknown_query", f"{where}: query-id {qid!r} is not in {queries_file.name}; skipped")
            continue
        if did in empty:
            report.add("qrels_empty_document", f"{where}: corpus-id {did!r} is an empty document; skipped")
            continue
        if did not in doc_len:
            report.add("qrels_unknown_document", f"{where}: corpus-id {did!r} is not in {corpus_file.name}; skipped")
            continue
        if score <= 0:
            report.note("qrels_not_relevant")  # a judged non-relevant pair: normal, not a problem
            continue
        docs = relevant.setdefault(qid, [])
        if did not in docs:
            docs.append(did)

    queries = []
    unjudged: list[str] = []
    for qid, text in query_text.items():
        if qid not in relevant:  # no evidence in this split: excluded, never scored 0
            if qid in judged:
                report.note("queries_without_positive_qrels")
                report.add(
                    QUERIES_WITHOUT_EVIDENCE,
                    f"{qrels_file}: query {qid!r} has no positive judgement on a document of {corpus_file.name}; excluded",
                )
            else:
                report.note("queries_without_qrels")  # BEIR ships all splits' queries in one file
                report.add(QUERIES_WITHOUT_EVIDENCE)
                unjudged.append(qid)
            continue
        if not text.strip():
            report.add("empty_queries", f"{queries_file}: query {qid!r} has empty text; skipped")
            continue
        evidence = tuple(Evidence(doc_id=d, start=0, end=doc_len[d]) for d in relevant[qid])
        queries.append(Query(query_id=qid, text=text, evidence=evidence))
    if unjudged:
        first = ", ".join(repr(q) for q in unjudged[:5]) + (", ..." if len(unjudged) > 5 else "")
        report.problems.append(
            f"{queries_file}: {len(unjudged)} quer{'y' if len(unjudged) == 1 else 'ies'} not judged in {qrels_file.name} ({first}); excluded"
        )
    dataset = Dataset(name=name, documents=tuple(documents), queries=tuple(queries), source=str(root), load_report=report)
    check_dataset(dataset)
    return dataset, report


def load_beir(path: str | Path, split: str = "test", name: str | None = None) -> Dataset:
    """Load a BEIR-format folder (see the module docstring) and verify every evidence span.

    Args:
        path: folder holding ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv``.
        split: qrels file stem, e.g. ``test``, ``dev``, ``train``.
        name: dataset name (default MLflow experiment); defaults to the folder name.

    Returns:
        A :class:`Dataset`: every non-empty corpus record in file order (relevant or not --
        the rest are distractors) and, in ``queries.jsonl`` order, every query with at least
        one positive judgement. Evidence spans hold no stored excerpt (``text == ""``), to
        avoid a second copy of each relevant document; their range is checked.

    Raises:
        DatasetError: ``path`` unset or missing, a missing file, a file that is not UTF-8
            (file and byte offset named), invalid JSON, a missing or
            non-string ``_id``/``text`` field, a duplicate ``_id`` (file and line named), a
            qrels line without three columns or with a non-integer score, or no judged
            query left.
    """
    dataset, report = read_beir(path, split=split, name=name)
    report.log(log)
    return dataset
