"""Loader for queries labelled with quoted excerpts (no offsets), located in a corpus folder.

Layout::

    <path>/corpus/<doc_id>        one UTF-8 file per document (as in the native format);
                                  the file name is the doc_id
    <path>/excerpts.jsonl         one query per line:
        {"query": "How long is a lease?",
         "excerpts": ["Leases last 30 seconds", "..."],
         "doc_id": "broker.md",          # optional
         "query_id": "L-7"}              # optional

* ``doc_id`` is **optional**. When given, excerpts are searched only in that document
  (an unknown doc_id is an error); when absent, in every document, and a passage found in
  two documents is ambiguous like one found twice in one document.
* ``query_id`` is optional; the default is ``"<file stem>-<line>"`` (e.g. ``excerpts-7``);
  when given, a non-empty string or an integer.
* any other field is refused naming the closest known one (``docid`` -> ``doc_id``: a
  misspelt ``doc_id`` would otherwise widen the search to every document); free-form facts
  go under ``metadata`` (see :data:`RECORD_FIELDS`).
* Each excerpt is located with :func:`harness.datasets.locate.locate`: exact match first,
  then whitespace-normalised match mapped back to raw offsets. Exactly one match gives an
  :class:`Evidence` span whose ``text`` is the document slice (original whitespace);
  zero matches is *missing*, two or more is *ambiguous*.
* Unless ``allow_unlocated`` is true, any missing or ambiguous excerpt stops loading with
  a :class:`DatasetError` giving the counts and the first problems. With it, those
  excerpts are dropped, queries left without evidence are dropped, and the counts are
  logged as a warning.
* A record with ``"excerpts": []`` (or ``null``) is a query without evidence: it is
  excluded (never scored 0) and counted as ``queries_without_evidence`` -- a run logs the
  metric ``dataset.queries_without_evidence`` and warns; a record without the field is
  an error.
* Corpus files must be UTF-8 (an error names the file and the byte offset); a leading
  byte-order mark is kept in the text (offsets stay those of the file).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterable, Sequence

from harness.datasets.locate import Match, NormalisedText, locate
from harness.datasets.native import iter_jsonl, read_corpus_folder
from harness.datasets.report import QUERIES_WITHOUT_EVIDENCE, LoadReport
from harness.datasets.validate import DatasetError, check_dataset, check_fields, string_field
from harness.text.normalisation import normalisation_mismatch
from harness.types import Dataset, Document, Evidence, Query

log = logging.getLogger(__name__)

#: Fields of an excerpts record: those a user writes, those ``harness generate`` adds
#: (``passage``, ``span``, ``generator``; not read) and ``metadata`` for free-form facts
#: (not read). Any other field is refused naming the closest of these (``docid`` -> ``doc_id``).
RECORD_FIELDS = ("query_id", "query", "excerpts", "doc_id", "passage", "span", "generator", "metadata")

#: How many problems a DatasetError lists before "... and N more".
SHOW_PROBLEMS = 5


def excerpts_layout(path: str | Path | None, name: str | None, file: str, kind: str) -> tuple[Path, str, Path, Path]:
    """Check the ``<path>/corpus/`` + ``<path>/<file>`` layout shared by excerpt-labelled formats.

    Args:
        path: the dataset folder (``dataset.path``).
        name: dataset name, or None for the folder name.
        file: the excerpts JSONL inside ``path``.
        kind: format name used in the error for a missing path (``excerpts``, ``folder``).

    Returns:
        ``(root, name, corpus_dir, qfile)``.

    Raises:
        DatasetError: ``path`` unset, or the corpus folder or the excerpts file missing.
    """
    if path is None or str(path) == "":
        raise DatasetError(f"{kind}: dataset.path is not set; point it at a folder with corpus/ and excerpts.jsonl")
    root = Path(path)
    name = name or root.name
    corpus_dir = root / "corpus"
    qfile = root / file
    if not corpus_dir.is_dir():
        raise DatasetError(f"dataset {name!r}: expected a corpus folder at {corpus_dir}")
    if not qfile.is_file():
        raise DatasetError(f"dataset {name!r}: expected an excerpts file at {qfile}")
    return root, name, corpus_dir, qfile


def read_excerpts(path: str | Path, name: str | None = None, allow_unlocated: bool = False, file: str = "excerpts.jsonl") -> tuple[Dataset, LoadReport]:
    """Load an excerpts dataset and return it with its :class:`LoadReport`.

    See :func:`load_excerpts` for arguments and errors; this variant does not log.
    """
    root, name, corpus_dir, qfile = excerpts_layout(path, name, file, "excerpts")
    documents = read_corpus_folder(corpus_dir)
    report = LoadReport(name)
    queries = locate_queries(documents, iter_jsonl(qfile), qfile.stem, report, where_docs=str(corpus_dir))
    check_located(name, report, allow_unlocated)
    dataset = Dataset(name=name, documents=tuple(documents), queries=tuple(queries), source=str(root), load_report=report)
    check_dataset(dataset)
    return dataset, report


def locate_queries(
    documents: Sequence[Document],
    records: Iterable[tuple[str, dict]],
    default_prefix: str,
    report: LoadReport,
    where_docs: str = "the corpus",
) -> list[Query]:
    """Turn excerpt records into queries whose evidence spans are located in ``documents``.

    Shared by the ``excerpts`` and ``folder`` loaders. Each record is
    ``{"query", "excerpts": [...], "doc_id"?, "query_id"?}`` (see the module docstring);
    every excerpt is located with :func:`harness.datasets.locate.locate` in its
    ``doc_id`` or, without one, in every document (exact matches anywhere win over
    whitespace-normalised ones). Missing and ambiguous excerpts, and queries left without
    evidence, are counted in ``report`` (kinds ``missing``, ``ambiguous``,
    ``queries_without_evidence``; info ``located_exact``/``located_whitespace``,
    ``queries_with_some_excerpts_dropped``) and dropped; the caller decides whether
    that is an error (:func:`check_located`).

    Args:
        documents: the corpus the excerpts were taken from.
        records: ``(where, record)`` pairs, ``where`` = ``"<file>:<line>"`` for messages.
        default_prefix: ``query_id`` default is ``"<default_prefix>-<line>"``.
        report: collects counts and problems.
        where_docs: how to name the corpus in an unknown-``doc_id`` message.

    Returns:
        The queries in record order, each with at least one located evidence span whose
        ``text`` equals the document slice.

    Raises:
        DatasetError: a record with a missing or mistyped field or an unknown ``doc_id``
            (file and line named).
    """
    by_id = {d.doc_id: d for d in documents}
    normalised: dict[str, NormalisedText] = {}
    queries: list[Query] = []
    for where, rec in records:
        lineno = int(where.rsplit(":", 1)[1])
        check_fields(rec, RECORD_FIELDS, where)
        query = rec.get("query")
        if not isinstance(query, str) or not query.strip():
            raise DatasetError(f"{where}: field 'query' must be a non-empty string, got {query!r}")
        if "excerpts" not in rec:
            raise DatasetError(f"{where}: missing field 'excerpts' (a list of quoted passages; [] for a query without evidence)")
        excerpts = rec["excerpts"]
        if report.without_evidence(excerpts, f"{where}: query {rec.get('query_id') or f'{default_prefix}-{lineno}'!r} has no excerpts; excluded"):
            continue
        if not isinstance(excerpts, list):
            raise DatasetError(f"{where}: field 'excerpts' must be a non-empty list of strings ([] for a query without evidence), got {excerpts!r}")
        doc_id = rec.get("doc_id")
        if doc_id is not None:
            if not isinstance(doc_id, str) or doc_id not in by_id:
                raise DatasetError(f"{where}: field 'doc_id' {doc_id!r} is not a file in {where_docs} (have {sorted(by_id)[:5]}...)")
            scope = [by_id[doc_id]]
        else:
            scope = list(documents)
        qid = string_field(rec, "query_id", where, allow_int=True) if rec.get("query_id") is not None else f"{default_prefix}-{lineno}"
        evidence: list[Evidence] = []
        for i, excerpt in enumerate(excerpts):
            if not isinstance(excerpt, str) or not excerpt.strip():
                raise DatasetError(f"{where}: excerpts[{i}] must be a non-empty string, got {excerpt!r}")
            found: list[tuple[str, Match]] = []
            for doc in scope:
                norm = normalised.get(doc.doc_id)
                if norm is None:
                    norm = normalised[doc.doc_id] = NormalisedText(doc.text)
                found += [(doc.doc_id, m) for m in locate(doc.text, excerpt, norm)]
            # exact matches anywhere win over whitespace-normalised ones elsewhere
            if any(m.method == "exact" for _, m in found):
                found = [(d, m) for d, m in found if m.method == "exact"]
            preview = excerpt if len(excerpt) <= 50 else excerpt[:47] + "..."
            where_in = doc_id or "any document"
            if not found:
                form = next((f for f in (normalisation_mismatch(excerpt, "", d.text) for d in scope) if f), None)
                why = f"; it {form.replace(', so its offsets were counted in another form', '')}: normalise corpus and labels to one form (NFC)" if form else ""
                report.add("missing", f"{where}: excerpts[{i}] {preview!r} not found in {where_in} (query {qid!r}){why}")
                continue
            if len(found) > 1:
                places = ", ".join(f"{d}@{m.start}" for d, m in found[:4]) + (", ..." if len(found) > 4 else "")
                report.add(
                    "ambiguous",
                    f"{where}: excerpts[{i}] {preview!r} matches {len(found)} places ({places}) (query {qid!r})",
                )
                continue
            d, m = found[0]
            report.note(f"located_{m.method}")
            ev = Evidence(doc_id=d, start=m.start, end=m.end, text=by_id[d].text[m.start : m.end])
            if ev not in evidence:
                evidence.append(ev)
        if not evidence:
            report.add(QUERIES_WITHOUT_EVIDENCE)
            continue
        if len(evidence) < len(excerpts):
            report.note("queries_with_some_excerpts_dropped")
        queries.append(Query(query_id=qid, text=query, evidence=tuple(evidence)))
    return queries


def check_located(name: str, report: LoadReport, allow_unlocated: bool) -> None:
    """Stop loading when excerpts were missing or ambiguous, unless ``allow_unlocated``.

    Raises:
        DatasetError: the counts (``missing``, ``ambiguous``) and the first
            :data:`SHOW_PROBLEMS` problems of ``report``.
    """
    unlocated = report.count("missing") + report.count("ambiguous")
    if unlocated and not allow_unlocated:
        raise DatasetError(
            f"dataset {name!r}: {unlocated} excerpt(s) could not be located "
            f"(missing={report.count('missing')}, ambiguous={report.count('ambiguous')}); fix them, add doc_id "
            f"or a longer excerpt, or set dataset.allow_unlocated=true to drop them.\n" + report.summary(SHOW_PROBLEMS)
        )


def load_excerpts(path: str | Path, name: str | None = None, allow_unlocated: bool = False, file: str = "excerpts.jsonl") -> Dataset:
    """Load a corpus folder plus an excerpts JSONL (see the module docstring); verify every span.

    Args:
        path: folder holding ``corpus/`` and the excerpts file.
        name: dataset name (default MLflow experiment); defaults to the folder name.
        allow_unlocated: drop missing/ambiguous excerpts (and queries left without
            evidence) instead of failing.
        file: name of the JSONL file inside ``path``.

    Returns:
        A :class:`Dataset`: documents sorted by file name, queries in file order, each
        evidence span's ``text`` equal to the document slice it points at.

    Raises:
        DatasetError: missing folder/file, invalid JSON, a missing or mistyped field, an
            unknown ``doc_id`` (file and line named); any missing or ambiguous excerpt
            when ``allow_unlocated`` is false (counts and the first
            :data:`SHOW_PROBLEMS` problems listed); or no query left.
    """
    dataset, report = read_excerpts(path, name=name, allow_unlocated=allow_unlocated, file=file)
    report.log(log)
    return dataset
