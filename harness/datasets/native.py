"""This project's own dataset folder format (used by the embedded ``datasets/kestrel_kb``).

Layout::

    <path>/corpus/<doc_id>          one UTF-8 file per document; the file name is the doc_id
    <path>/questions.jsonl          one labelled query per line:
        {"query_id": "A-001", "query": "...",
         "evidence": [{"doc_id": "faq.md", "start": 10, "end": 80, "text": "..."}]}

A query whose ``evidence`` is ``[]`` (or ``null``) is excluded and counted
(``queries_without_evidence``), not scored 0; a record without the field is an error.

``start``/``end`` are Python ``str`` indices (code points, end exclusive) into the file's
text read with ``newline=""`` (no newline translation), and must be JSON integers: ``6.7``,
``6.0``, ``true`` or ``"6"`` are refused, never coerced. A field the format does not define
is refused naming the closest known one (``txt`` -> ``text``); free-form facts go under a
``metadata`` object, which is not read. ``query_id`` is a non-empty string or an integer.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from harness.datasets import textio
from harness.datasets.report import LoadReport
from harness.datasets.validate import DatasetError, check_dataset, check_fields, integer_field, string_field
from harness.types import Dataset, Document, Evidence, Query

log = logging.getLogger(__name__)

#: Fields of a ``questions.jsonl`` record; free-form facts go under ``metadata`` (not read).
QUERY_FIELDS = ("query_id", "query", "evidence", "metadata")
#: Fields of one evidence item.
EVIDENCE_FIELDS = ("doc_id", "start", "end", "text")

DOC_TYPES = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".py": "python",
    ".log": "chat",
    ".txt": "text",
    ".csv": "csv",
}


def read_text(path: Path) -> str:
    """Read a UTF-8 file exactly as stored (no newline translation, no BOM stripping).

    Raises:
        DatasetError: the file is not UTF-8 (file, byte offset, line and column named).
    """
    return textio.read_text(path)


def iter_jsonl_lines(path: Path):
    """Yield ``(line_number, record)`` for each non-blank line of a UTF-8 JSONL file, read as
    a stream (large corpora are never held as one string).

    Lines end at ``\n`` only, as JSON Lines defines them: a U+2028 or other Unicode line
    separator inside a JSON string stays part of its record. A byte-order mark at the
    start of the file is ignored.

    Raises:
        DatasetError: a line is not UTF-8 (file, line and byte offset named), not valid
            JSON or not a JSON object (file and line named).
    """
    for lineno, line in textio.iter_lines(path):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from exc
        if not isinstance(rec, dict):
            raise DatasetError(f"{path}:{lineno}: expected a JSON object, got {type(rec).__name__}")
        yield lineno, rec


def iter_jsonl(path: Path):
    """Yield ``(where, record)`` for each non-blank line of a UTF-8 JSONL file
    (:func:`iter_jsonl_lines`); ``where`` is ``"<path>:<line>"`` for error messages.

    Raises:
        DatasetError: a line is not valid JSON or not a JSON object (file and line named).
    """
    for lineno, rec in iter_jsonl_lines(path):
        yield f"{path}:{lineno}", rec


def read_corpus_folder(corpus_dir: Path) -> list[Document]:
    """One :class:`Document` per visible file of ``corpus_dir``, sorted by name; doc_id = file name."""
    return [
        Document(doc_id=f.name, text=read_text(f), metadata={"type": DOC_TYPES.get(f.suffix.lower(), "text"), "source": str(f)})
        for f in sorted(p for p in corpus_dir.iterdir() if p.is_file() and not p.name.startswith("."))
    ]


def read_native(path: str | Path, name: str | None = None) -> Dataset:
    """Load a native-format folder without logging; see :func:`load_native`.

    The returned dataset's ``load_report`` counts queries excluded for an empty
    ``evidence`` list (kind ``queries_without_evidence``).
    """
    root = Path(path)
    name = name or root.name
    corpus_dir = root / "corpus"
    questions = root / "questions.jsonl"
    if not corpus_dir.is_dir():
        raise DatasetError(f"dataset {name!r}: expected a corpus folder at {corpus_dir}")
    if not questions.is_file():
        raise DatasetError(f"dataset {name!r}: expected a questions file at {questions}")
    documents = read_corpus_folder(corpus_dir)
    report = LoadReport(name)
    queries = []
    for where, rec in iter_jsonl(questions):
        check_fields(rec, QUERY_FIELDS, where)
        for key in ("query_id", "query", "evidence"):
            if key not in rec:
                raise DatasetError(f"{where}: missing field {key!r} (need query_id, query, evidence[doc_id,start,end])")
        qid = string_field(rec, "query_id", where, allow_int=True)
        spans = rec["evidence"]
        if report.without_evidence(spans, f"{where}: query {qid!r} has no evidence; excluded"):
            continue
        if not isinstance(spans, list):
            raise DatasetError(f"{where}: field 'evidence' must be a list of {{doc_id, start, end}}, got {type(spans).__name__}")
        text = rec["query"]
        if not isinstance(text, str):
            string_field(rec, "query", where)  # raises, naming the type found
        evidence = []
        for i, e in enumerate(spans):
            at = f"{where}: evidence[{i}]"
            if not isinstance(e, dict):
                raise DatasetError(f"{at} must be an object {{doc_id, start, end, text?}}, got {type(e).__name__}")
            check_fields(e, EVIDENCE_FIELDS, at)
            for key in ("doc_id", "start", "end"):
                if key not in e:
                    raise DatasetError(f"{at}: missing field {key!r} (need doc_id, start, end; text optional)")
            doc_id = string_field(e, "doc_id", at)
            start, end = integer_field(e, "start", at), integer_field(e, "end", at)
            excerpt = e.get("text", "")
            if not isinstance(excerpt, str):
                string_field(e, "text", at)  # raises, naming the type found
            try:
                evidence.append(Evidence(doc_id=doc_id, start=start, end=end, text=excerpt))
            except ValueError as exc:
                raise DatasetError(f"{at}: {exc}") from exc
        queries.append(Query(query_id=qid, text=text, evidence=tuple(evidence)))
    dataset = Dataset(name=name, documents=tuple(documents), queries=tuple(queries), source=str(root), load_report=report)
    check_dataset(dataset)
    return dataset


def load_native(path: str | Path, name: str | None = None) -> Dataset:
    """Load a dataset in the project's folder format and verify every evidence span.

    Args:
        path: folder holding ``corpus/`` and ``questions.jsonl``.
        name: dataset name; defaults to the folder name.

    Returns:
        A :class:`Dataset` with documents sorted by doc_id and queries in file order. A
        query whose ``evidence`` is ``[]`` or ``null`` is excluded (never scored 0),
        counted in ``load_report`` (``queries_without_evidence``) and warned about.

    Raises:
        DatasetError: missing folder/file, a file that is not UTF-8 (file and byte offset
            named), malformed JSON line (file and line named), missing, unknown or mistyped
            field (file, line and field named, with the closest known field), or an
            evidence span that is out of range or does not match its stored excerpt; no
            query left.
    """
    dataset = read_native(path, name=name)
    dataset.load_report.log(log)
    return dataset
