"""Loader for the ``chunking_evaluation`` general benchmark format (Chroma, 2024).

Format (see ``../shared/datasets/chroma_general/README.md``)::

    <path>/corpora/<corpus_id>.md     one UTF-8 corpus per file
    <path>/questions.csv              columns question, references, corpus_id

``references`` is a JSON list of ``{"content", "start_index", "end_index"}``; the indices
are Python ``str`` indices (code points, end exclusive) into the corpus file text (read as
stored: a byte-order mark is kept, so indices stay those of the file). Each corpus file
becomes one :class:`Document` whose ``doc_id`` is the corpus id. A question whose
``references`` is empty (``[]`` or a blank cell) has no evidence: it is excluded (never
scored 0) and counted as ``queries_without_evidence`` in the dataset's ``load_report``
(logged as a warning, and by a run as the metric ``dataset.queries_without_evidence``).
Every file must be UTF-8 (an error names the file and the byte offset).

Source: Smith & Troynikov, "Evaluating Chunking Strategies for Retrieval", Chroma
technical report, 2024; data from the MIT-licensed ``chunking_evaluation`` repository.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
import os
import shutil
import tempfile
import urllib.request
from pathlib import Path

from harness.datasets.native import read_text
from harness.datasets.report import QUERIES_WITHOUT_EVIDENCE, LoadReport
from harness.datasets.textio import read_text as read_text_file
from harness.datasets.validate import DatasetError, check_dataset
from harness.types import Dataset, Document, Evidence, Query

log = logging.getLogger(__name__)

#: Upstream commit the download is pinned to.
UPSTREAM_COMMIT = "35440b84e4564663157b825faec5968d4375399d"
UPSTREAM_BASE = (
    "https://raw.githubusercontent.com/brandonstarxel/chunking_evaluation/"
    f"{UPSTREAM_COMMIT}/src/chunking_evaluation/evaluation_framework/general_evaluation_data/"
)

#: Files fetched by :func:`download_chroma_general`: local relative path -> (URL, sha256).
#: The upstream questions file is named ``questions_df.csv``; it is stored as ``questions.csv``.
MANIFEST: dict[str, tuple[str, str]] = {
    "corpora/chatlogs.md": (
        UPSTREAM_BASE + "corpora/chatlogs.md",
        "543a98f82b2a6a492349fd7f8c9d6c3e78d1a4af81d13c79a7fd513c3f65bda6",
    ),
    "corpora/state_of_the_union.md": (
        UPSTREAM_BASE + "corpora/state_of_the_union.md",
        "6fc21d560d31eb2421e337596feea0f83f1fa9ca02c6c4e47bc26959d7531b37",
    ),
    "corpora/wikitexts.md": (
        UPSTREAM_BASE + "corpora/wikitexts.md",
        "74cafcdb771185ecb9f22cc41b73e2e44477e0636ecf9cf1f96fd6ee0f4b86c0",
    ),
    "questions.csv": (
        UPSTREAM_BASE + "questions_df.csv",
        # All five upstream corpora's questions (472 rows, \n line endings); rows of corpora
        # that are not downloaded are skipped at load time.
        "3ab3901889b8900f43775537bf12d36bd6614255fc59124faca31bede1dda7a3",
    ),
}

#: Where the shared, read-only copy lives relative to the project root.
SHARED_RELATIVE = Path("..") / "shared" / "datasets" / "chroma_general"


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def download_chroma_general(
    cache_dir: str | Path,
    manifest: dict[str, tuple[str, str]] | None = None,
    timeout: float = 60.0,
) -> Path:
    """Download the pinned benchmark files into ``cache_dir`` and verify their sha256.

    Files already present with the right digest are kept. Each file is written to a
    temporary name in the same folder and renamed only after its digest matched, so an
    interrupted download leaves no half-written file.

    Args:
        cache_dir: target folder; ``corpora/`` and ``questions.csv`` are created in it.
        manifest: relative path -> (URL, sha256); defaults to :data:`MANIFEST`. Any URL
            scheme urllib supports works (``file://`` and ``http://127.0.0.1`` in tests).
        timeout: seconds per request.

    Returns:
        ``cache_dir`` as a Path, ready for :func:`load_chroma_general`.

    Raises:
        DatasetError: a download failed or a file's sha256 differs from the pinned one
            (the message names the file, the expected and the actual digest).
    """
    root = Path(cache_dir)
    for rel, (url, expected) in (manifest or MANIFEST).items():
        target = root / rel
        if target.is_file() and sha256_file(target) == expected:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as out:
                try:
                    with urllib.request.urlopen(url, timeout=timeout) as resp:
                        shutil.copyfileobj(resp, out)
                except OSError as exc:
                    raise DatasetError(f"chroma_general: download of {url} failed: {exc}") from exc
            actual = sha256_file(Path(tmp_name))
            if actual != expected:
                raise DatasetError(
                    f"chroma_general: sha256 mismatch for {rel} from {url}: expected {expected}, got {actual}; "
                    "if the upstream file changed, download the benchmark yourself and set dataset.path"
                )
            os.replace(tmp_name, target)
        finally:
            if os.path.exists(tmp_name):
                os.unlink(tmp_name)
    return root


def default_chroma_path(project_root: str | Path) -> Path | None:
    """The shared copy ``<project_root>/../shared/datasets/chroma_general`` if it exists, else None."""
    candidate = (Path(project_root) / SHARED_RELATIVE).resolve()
    return candidate if (candidate / "questions.csv").is_file() else None


def load_chroma_general(
    path: str | Path | None = None,
    name: str = "chroma_general",
    corpora: list[str] | None = None,
    project_root: str | Path | None = None,
    download: bool = True,
    cache_dir: str | Path | None = None,
) -> Dataset:
    """Load (and if needed download) the chroma general benchmark; verify every span.

    Resolution of the folder: ``path`` if given; else the shared copy next to the project
    (``../shared/datasets/chroma_general``) when it exists; else, if ``download`` is true,
    the pinned upstream files fetched into ``cache_dir`` with sha256 checks.

    Args:
        path: folder in the format above, or None.
        name: dataset name (default MLflow experiment name).
        corpora: corpus ids to keep (e.g. ``["chatlogs"]``); None keeps every corpus file
            present. Questions of corpora that are not present are skipped.
        project_root: the project folder used to find the shared copy.
        download: allow downloading when no local copy is found.
        cache_dir: download target (required when downloading).

    Raises:
        DatasetError: no folder found, a requested corpus is missing, a file that is not
            UTF-8 (file and byte offset named), malformed CSV/JSON (row named), or an
            evidence span out of range or unequal to its ``content``.
    """
    folder: Path | None = Path(path) if path else None
    if folder is None and project_root is not None:
        folder = default_chroma_path(project_root)
    if folder is None:
        if not download or cache_dir is None:
            raise DatasetError(
                "dataset 'chroma_general': no local copy found; set dataset.path to a folder with "
                "corpora/ and questions.csv, or enable dataset.download with a dataset.cache_dir"
            )
        folder = download_chroma_general(cache_dir)
    corpora_dir = folder / "corpora"
    questions_file = folder / "questions.csv"
    if not corpora_dir.is_dir() or not questions_file.is_file():
        raise DatasetError(f"dataset {name!r}: expected {corpora_dir}/ and {questions_file} (dataset.path={folder})")
    files = {p.stem: p for p in sorted(corpora_dir.iterdir()) if p.is_file() and not p.name.startswith(".")}
    if corpora is not None:
        missing = [c for c in corpora if c not in files]
        if missing:
            raise DatasetError(f"dataset {name!r}: corpora {missing} not found in {corpora_dir} (have {sorted(files)})")
        files = {c: files[c] for c in corpora}
    documents = tuple(Document(doc_id=cid, text=read_text(p), metadata={"type": "text", "source": str(p)}) for cid, p in files.items())
    queries = []
    report = LoadReport(name)
    reader = csv.DictReader(io.StringIO(read_text_file(questions_file, strip_bom=True), newline=""))
    needed = {"question", "references", "corpus_id"}
    if not reader.fieldnames or not needed <= set(reader.fieldnames):
        raise DatasetError(f"{questions_file}: expected columns {sorted(needed)}, got {reader.fieldnames}")
    for row_no, row in enumerate(reader, start=2):
        corpus_id = row["corpus_id"]
        if corpus_id not in files:
            report.note("questions_of_absent_corpora")
            continue
        qid = f"{corpus_id}-{row_no - 1:04d}"
        try:
            refs = json.loads(row["references"] or "[]")
            if not refs:  # no evidence: excluded, never scored 0
                report.add(QUERIES_WITHOUT_EVIDENCE, f"{questions_file}: row {row_no}: question {qid!r} has no references; excluded")
                continue
            evidence = tuple(Evidence(doc_id=corpus_id, start=int(r["start_index"]), end=int(r["end_index"]), text=r["content"]) for r in refs)
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise DatasetError(f"{questions_file}: row {row_no}: bad references field ({exc})") from exc
        queries.append(Query(query_id=qid, text=row["question"], evidence=evidence))
    dataset = Dataset(name=name, documents=documents, queries=tuple(queries), source=str(folder), load_report=report)
    check_dataset(dataset)
    report.log(log)
    return dataset
