"""A folder of mixed documents (text, markdown, HTML, PDF, Python, CSV, chat exports) with
queries labelled by quoted excerpts, located in the *extracted* text.

Layout::

    <path>/corpus/**              the documents, in any sub-folders (hidden files and
                                  folders are ignored); doc_id = path relative to corpus/,
                                  with "/" separators (e.g. "guides/install.md")
    <path>/excerpts.jsonl         one query per line, as for dataset=excerpts:
        {"query": "What does a single adult ticket cost?",
         "excerpts": ["| Single | 4.50 | 2.00 |"], "doc_id": "ferries.html", "query_id": "q1"}

Each file is turned into text by :mod:`harness.ingest` (format by extension, see
:data:`harness.ingest.FORMATS`); the excerpts are then located in that text exactly like
``dataset=excerpts`` does (:func:`harness.datasets.excerpts.locate_queries`: exact, then
whitespace-normalised; missing or ambiguous excerpts stop the load unless
``allow_unlocated``). Extraction is deterministic, so the located spans are the same on
every run.

Document metadata: ``source`` (the relative path), ``type`` (``markdown``, ``html``,
``pdf``, ``python``, ``csv``, ``chat``, ``text``), ``format`` (the extractor, a value of
:data:`harness.ingest.FORMATS`: ``text``, ``markdown``, ``python``, ``log``, ``csv``,
``chat``, ``html``, ``pdf``),
``elements`` (``[{"type", "start", "end", ...}]``, see
:class:`harness.ingest.base.Extraction`), and for PDFs ``pages`` and ``n_pages``; HTML
pages with a ``<title>`` also ``title``.

Bad files -- empty, not UTF-8, binary, a PDF or JSON that does not parse, a JSON that is
not a chat export, an unsupported extension -- are handled by ``on_error``:

* ``skip`` (default): the file is left out, reported by name with the reason in one
  warning, and counted (``LoadReport`` kind ``skipped_files``; per reason in
  ``info["skipped_<kind>"]``). A skipped file that held evidence then shows up as missing
  excerpts, which stop the load unless ``allow_unlocated``, so skipping never silently
  changes what is scored.
* ``fail``: the first bad file stops the load with a :class:`DatasetError` naming it.

The returned :class:`FolderDataset` carries the report (``load_report``,
``skipped_files``) for the caller to log.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

from harness.datasets.excerpts import check_located, excerpts_layout, locate_queries
from harness.datasets.native import iter_jsonl
from harness.datasets.report import LoadReport
from harness.datasets.validate import DatasetError, check_dataset
from harness.types import Dataset, Document

log = logging.getLogger(__name__)

ON_ERROR = ("skip", "fail")


@dataclass(frozen=True)
class FolderDataset(Dataset):
    """A :class:`~harness.types.Dataset` plus what loading it skipped.

    ``load_report`` (inherited) holds the counts and messages of the load
    (``skipped_files``, excerpt location, ``queries_without_evidence``).
    """

    @property
    def skipped_files(self) -> int:
        """Number of corpus files left out (0 when none or no report)."""
        return self.load_report.count("skipped_files") if self.load_report is not None else 0


def corpus_files(corpus_dir: Path) -> list[Path]:
    """Every visible file under ``corpus_dir`` (recursively), sorted by relative POSIX path.

    Files and folders whose name starts with ``.`` are ignored.
    """
    out = []
    for p in corpus_dir.rglob("*"):
        rel = p.relative_to(corpus_dir)
        if p.is_file() and not any(part.startswith(".") for part in rel.parts):
            out.append(p)
    return sorted(out, key=lambda p: p.relative_to(corpus_dir).as_posix())


def read_documents(
    corpus_dir: Path,
    report: LoadReport,
    on_error: str = "skip",
    table_format: str = "markdown",
    ocr: bool = False,
    ocr_lang: str = "eng",
) -> list[Document]:
    """Extract every file of ``corpus_dir`` into a :class:`Document` (order: relative path).

    Args:
        corpus_dir: the corpus folder.
        report: receives ``skipped_files`` (with the file and reason) and, as info,
            ``skipped_<kind>`` and ``files_<type>`` counts.
        on_error: ``skip`` or ``fail`` (see the module docstring).
        table_format, ocr, ocr_lang: passed to :func:`harness.ingest.extract_bytes`.

    Raises:
        DatasetError: with ``on_error="fail"``, the first file that cannot be extracted
            (its relative path and the reason).
    """
    from harness.ingest import FORMATS, IngestError, extract_file

    documents = []
    for path in corpus_files(corpus_dir):
        rel = path.relative_to(corpus_dir).as_posix()
        try:
            x = extract_file(path, name=rel, table_format=table_format, ocr=ocr, ocr_lang=ocr_lang)
        except IngestError as exc:
            if on_error == "fail":
                raise DatasetError(f"corpus file {rel!r} ({path}): {exc} (dataset.on_error=fail; set skip to leave such files out)") from exc
            report.add("skipped_files", f"skipped {exc} (file {path})")
            report.note(f"skipped_{exc.kind}")
            continue
        meta = {"source": rel, "type": x.type, "format": FORMATS[path.suffix.lower()], "elements": x.elements, **x.metadata}
        if x.pages is not None:
            meta["pages"] = x.pages
        documents.append(Document(doc_id=rel, text=x.text, metadata=meta))
        report.note(f"files_{x.type}")
    return documents


def read_folder(
    path: str | Path,
    name: str | None = None,
    file: str = "excerpts.jsonl",
    on_error: str = "skip",
    table_format: str = "markdown",
    ocr: bool = False,
    ocr_lang: str = "eng",
    allow_unlocated: bool = False,
) -> FolderDataset:
    """Load a mixed-document folder without logging; see :func:`load_folder`."""
    if path is None or str(path) == "":
        raise DatasetError("folder: dataset.path is not set; point it at a folder with corpus/ and excerpts.jsonl")
    if on_error not in ON_ERROR:
        raise DatasetError(f"dataset.on_error must be one of {list(ON_ERROR)}, got {on_error!r}")
    from harness.ingest import TABLE_FORMATS

    if table_format not in TABLE_FORMATS:
        raise DatasetError(f"dataset.table_format must be one of {list(TABLE_FORMATS)}, got {table_format!r}")
    if not isinstance(ocr, bool):
        raise DatasetError(f"dataset.ocr must be true or false, got {ocr!r}")
    if ocr and shutil.which("tesseract") is None:
        raise DatasetError("dataset.ocr=true needs the tesseract program on PATH (Debian: apt-get install tesseract-ocr)")
    root, name, corpus_dir, qfile = excerpts_layout(path, name, file, "folder")
    report = LoadReport(name)
    documents = read_documents(corpus_dir, report, on_error=on_error, table_format=table_format, ocr=ocr, ocr_lang=ocr_lang)
    if not documents:
        raise DatasetError(f"dataset {name!r}: no usable document in {corpus_dir}\n" + report.summary())
    queries = locate_queries(documents, iter_jsonl(qfile), qfile.stem, report, where_docs=f"{corpus_dir} (after skipping bad files)")
    check_located(name, report, allow_unlocated)
    dataset = FolderDataset(name=name, documents=tuple(documents), queries=tuple(queries), source=str(root), load_report=report)
    check_dataset(dataset)
    return dataset


def load_folder(
    path: str | Path,
    name: str | None = None,
    file: str = "excerpts.jsonl",
    on_error: str = "skip",
    table_format: str = "markdown",
    ocr: bool = False,
    ocr_lang: str = "eng",
    allow_unlocated: bool = False,
) -> FolderDataset:
    """Load a folder of mixed documents plus an excerpts JSONL (see the module docstring).

    Args:
        path: folder holding ``corpus/`` and the excerpts file.
        name: dataset name (default MLflow experiment); defaults to the folder name.
        file: name of the JSONL inside ``path``.
        on_error: ``"skip"`` (default) or ``"fail"`` for files that cannot be extracted.
        table_format: ``"markdown"`` (default) or ``"csv"`` text for HTML and PDF tables.
        ocr: read text in PDF images with tesseract (needs the ``tesseract`` program).
        ocr_lang: tesseract language(s), e.g. ``"eng"``.
        allow_unlocated: drop missing/ambiguous excerpts (counted) instead of failing.

    Returns:
        A :class:`FolderDataset`: documents sorted by relative path, queries in file
        order, every evidence span equal to the extracted text it points at; the
        skipped-file count is in ``skipped_files`` and is logged as a warning with the
        file names.

    Raises:
        DatasetError: a bad parameter (named), a missing folder or file, a bad file with
            ``on_error="fail"``, no usable document, a malformed excerpt record, or
            unlocated excerpts without ``allow_unlocated``.
    """
    dataset = read_folder(path, name=name, file=file, on_error=on_error, table_format=table_format, ocr=ocr, ocr_lang=ocr_lang, allow_unlocated=allow_unlocated)
    dataset.load_report.log(log)
    return dataset
