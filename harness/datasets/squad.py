"""Loader for SQuAD-style reading-comprehension JSON, turned into documents + evidence spans.

Format (Rajpurkar et al., "SQuAD: 100,000+ Questions for Machine Comprehension of Text",
EMNLP 2016; v2.0 adds ``is_impossible``, Rajpurkar et al., ACL 2018)::

    {"version": "...",
     "data": [{"title": "Kestrel",
               "paragraphs": [{"context": "...",
                               "qas": [{"id": "q1", "question": "...",
                                        "is_impossible": false,
                                        "answers": [{"text": "...", "answer_start": 42}]}]}]}]}

Mapping:

* each paragraph's ``context`` becomes one :class:`Document` with ``doc_id =
  "<title>#<i>"``, ``i`` counting that title's paragraphs from 0 in file order (so repeated
  titles still give unique ids; a missing title becomes ``article<j>``, ``j`` the article
  index);
* each answerable question becomes a :class:`Query` (``query_id`` = its ``id``, else
  ``"<doc_id>/q<k>"``) with evidence ``[answer_start, answer_start + len(text))`` in
  code points -- verified to satisfy ``context[start:end] == text``;
* ``answers="first"`` (default) keeps the first listed answer, the convention for SQuAD's
  single-annotation training files; ``answers="all"`` keeps every distinct answer span
  (the span metrics take the union, so overlapping alternatives count once, but
  alternatives at different places must all be retrieved for full recall);
* unanswerable questions (``is_impossible: true`` or an empty ``answers`` list) have no
  evidence: they are excluded (never scored 0) and counted in the :class:`LoadReport` as
  ``queries_without_evidence`` (``info["unanswerable"]``), which a run logs as the metric
  ``dataset.queries_without_evidence``;
* the file must be UTF-8 (an error names it and the byte offset); a leading byte-order
  mark is ignored.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from harness.datasets import textio
from harness.datasets.report import QUERIES_WITHOUT_EVIDENCE, LoadReport
from harness.datasets.validate import DatasetError, check_dataset, offset_unit_hint
from harness.text.normalisation import normalisation_mismatch
from harness.types import Dataset, Document, Evidence, Query

log = logging.getLogger(__name__)

ANSWER_POLICIES = ("first", "all")


def _resolve_file(path: str | Path | None) -> Path:
    if path is None or str(path) == "":
        raise DatasetError("SQuAD: dataset.path is not set; point it at a SQuAD-style .json file")
    p = Path(path)
    if p.is_dir():
        files = sorted(x for x in p.glob("*.json") if x.is_file())
        if len(files) != 1:
            raise DatasetError(f"SQuAD: folder {p} must hold exactly one .json file, found {[f.name for f in files]}")
        return files[0]
    if not p.is_file():
        raise DatasetError(f"SQuAD: file {p} does not exist")
    return p


def _field(obj, key: str, kind: type, where: str):
    if not isinstance(obj, dict):
        raise DatasetError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if key not in obj:
        raise DatasetError(f"{where}: missing field {key!r}")
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise DatasetError(f"{where}.{key}: expected {kind.__name__}, got {type(value).__name__}")
    return value


def read_squad(path: str | Path, name: str | None = None, answers: str = "first") -> tuple[Dataset, LoadReport]:
    """Load a SQuAD-style file and return the dataset with its :class:`LoadReport`.

    See :func:`load_squad` for arguments and errors; this variant does not log.
    """
    if answers not in ANSWER_POLICIES:
        raise ValueError(f"dataset.answers must be one of {list(ANSWER_POLICIES)}, got {answers!r}")
    file = _resolve_file(path)
    name = name or file.stem
    try:
        root = json.loads(textio.read_text(file, strip_bom=True))
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{file}: invalid JSON at line {exc.lineno} column {exc.colno} ({exc.msg})") from exc
    report = LoadReport(name)
    documents: list[Document] = []
    queries: list[Query] = []
    per_title: dict[str, int] = {}
    for a, article in enumerate(_field(root, "data", list, f"{file}")):
        where_a = f"{file}: data[{a}]"
        title = article.get("title") if isinstance(article, dict) else None
        title = title if isinstance(title, str) and title else f"article{a}"
        for p, para in enumerate(_field(article, "paragraphs", list, where_a)):
            where_p = f"{where_a}.paragraphs[{p}]"
            context = _field(para, "context", str, where_p)
            i = per_title.get(title, 0)
            per_title[title] = i + 1
            doc_id = f"{title}#{i}"
            if not context.strip():
                raise DatasetError(f"{where_p}.context: empty context (document {doc_id!r})")
            documents.append(Document(doc_id=doc_id, text=context, metadata={"type": "text", "source": where_p, "title": title}))
            for k, qa in enumerate(para.get("qas", [])):
                where_q = f"{where_p}.qas[{k}]"
                question = _field(qa, "question", str, where_q)
                qid = str(qa.get("id") or f"{doc_id}/q{k}")
                raw_answers = qa.get("answers", [])
                if not isinstance(raw_answers, list):
                    raise DatasetError(f"{where_q}.answers: expected list, got {type(raw_answers).__name__}")
                if qa.get("is_impossible") or not raw_answers:  # no evidence: excluded, never scored 0
                    report.note("unanswerable")
                    report.add(QUERIES_WITHOUT_EVIDENCE, f"{where_q}: question {qid!r} has no answer; excluded")
                    continue
                spans: list[tuple[int, int]] = []
                for n, ans in enumerate(raw_answers):
                    where_ans = f"{where_q}.answers[{n}]"
                    text = _field(ans, "text", str, where_ans)
                    start = _field(ans, "answer_start", int, where_ans)
                    if not text:
                        raise DatasetError(f"{where_ans}.text: empty answer text (question {qid!r})")
                    end = start + len(text)
                    unit = offset_unit_hint(context, start, None, text) if start >= 0 and context[start:end] != text else None
                    meant = f"; answer_start looks {unit[0]}: the answer is at answer_start={unit[1]} in code points (Python str indices)" if unit else ""
                    if start < 0 or end > len(context):
                        raise DatasetError(
                            f"{where_ans}: answer_start={start} + len(text)={len(text)} is outside the context of length {len(context)} (question {qid!r}){meant}"
                        )
                    if context[start:end] != text:
                        form = normalisation_mismatch(text, context[start:end], context)
                        why = f"; the answer text {form}: normalise contexts and answers to one form (NFC)" if form else meant
                        raise DatasetError(
                            f"{where_ans}: context[{start}:{end}] = {context[start:end][:60]!r} does not equal the answer text {text[:60]!r} (question {qid!r}){why}"
                        )
                    if (start, end) not in spans:
                        spans.append((start, end))
                if answers == "first":
                    spans = spans[:1]
                evidence = tuple(Evidence(doc_id=doc_id, start=s, end=e, text=context[s:e]) for s, e in spans)
                queries.append(Query(query_id=qid, text=question, evidence=evidence))
    dataset = Dataset(name=name, documents=tuple(documents), queries=tuple(queries), source=str(file), load_report=report)
    check_dataset(dataset)
    return dataset, report


def load_squad(path: str | Path, name: str | None = None, answers: str = "first") -> Dataset:
    """Load a SQuAD-style JSON file (see the module docstring) and verify every evidence span.

    Args:
        path: the ``.json`` file, or a folder holding exactly one ``.json`` file.
        name: dataset name (default MLflow experiment); defaults to the file stem.
        answers: ``"first"`` (first listed answer per question) or ``"all"`` (every
            distinct answer span).

    Returns:
        A :class:`Dataset` with one document per paragraph and one query per answerable
        question, both in file order.

    Raises:
        ValueError: ``answers`` is not ``"first"`` or ``"all"``.
        DatasetError: ``path`` unset or missing, not UTF-8 (byte offset named), invalid
            JSON (line and column named), a
            missing or mistyped field (JSON path such as ``data[0].paragraphs[2].qas[1]``
            named), an empty context, or an answer whose ``answer_start``/``text`` do not
            match the context; duplicate question ids (via ``check_dataset``).
    """
    dataset, report = read_squad(path, name=name, answers=answers)
    report.log(log)
    return dataset
