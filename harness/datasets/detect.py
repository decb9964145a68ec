"""Which dataset format a path holds, and loading it in that format.

What ``harness datasets validate|audit`` reads when no ``--format`` is given; usable without
the command (:func:`detect_format`, :func:`load_any`).
"""

from __future__ import annotations

from pathlib import Path

from harness.datasets.report import LoadReport
from harness.datasets.validate import DatasetError

#: The formats :func:`load_any` reads.
FORMATS = ("native", "chroma", "beir", "squad", "excerpts", "folder")

#: Corpus file extensions only the folder format reads (it extracts their text).
_EXTRACTED = frozenset({".pdf", ".html", ".htm", ".json"})


def _needs_extraction(corpus: Path) -> bool:
    if not corpus.is_dir():
        return False
    return any(p.is_dir() or p.suffix.lower() in _EXTRACTED for p in corpus.iterdir() if not p.name.startswith("."))


def detect_format(path: Path) -> str:
    """The dataset format of ``path``, one of :data:`FORMATS`, by the files it holds (first match):
    a ``.json`` file is ``squad``; a folder with ``questions.jsonl`` is ``native``, with
    ``questions.csv`` ``chroma``, with ``corpus.jsonl`` and ``queries.jsonl`` ``beir``, with
    ``excerpts.jsonl`` ``folder`` when its ``corpus/`` has sub-folders or files that need
    extraction (``.pdf``, ``.html``, ``.htm``, ``.json``) else ``excerpts``; a folder holding
    exactly one ``.json`` file is ``squad``.

    Raises:
        DatasetError: none of these matches (the message lists what each format needs).
    """
    if path.is_file() and path.suffix.lower() == ".json":
        return "squad"
    if (path / "questions.jsonl").is_file():
        return "native"
    if (path / "questions.csv").is_file():
        return "chroma"
    if (path / "corpus.jsonl").is_file() and (path / "queries.jsonl").is_file():
        return "beir"
    if (path / "excerpts.jsonl").is_file():
        return "folder" if _needs_extraction(path / "corpus") else "excerpts"
    if path.is_dir() and len([p for p in path.glob("*.json") if p.is_file()]) == 1:
        return "squad"
    raise DatasetError(
        f"{path}: format not recognised; expected questions.jsonl (native), questions.csv (chroma), "
        "corpus.jsonl + queries.jsonl (beir), excerpts.jsonl (excerpts, folder) or a .json file (squad); "
        "or pass --format"
    )


def load_any(root: Path, fmt: str, split: str):
    """Load the dataset at ``root`` in format ``fmt`` (one of :data:`FORMATS`).

    Returns:
        ``(dataset, report)``: the :class:`~harness.types.Dataset` and its
        :class:`~harness.datasets.report.LoadReport`; excerpts and folder datasets load with
        unlocated excerpts kept as problems (``allow_unlocated=True``), so a check can count them.

    Raises:
        DatasetError: the dataset cannot be loaded (file, line or field named).
    """
    if fmt == "native":
        from harness.datasets.native import read_native

        ds = read_native(root)
        return ds, ds.load_report
    if fmt == "chroma":
        from harness.datasets.chroma import load_chroma_general

        ds = load_chroma_general(root)
        return ds, ds.load_report or LoadReport(ds.name)
    if fmt == "beir":
        from harness.datasets.beir import read_beir

        return read_beir(root, split=split)
    if fmt == "squad":
        from harness.datasets.squad import read_squad

        return read_squad(root)
    if fmt == "folder":
        from harness.datasets.folder import read_folder

        ds = read_folder(root, allow_unlocated=True)
        return ds, ds.load_report
    from harness.datasets.excerpts import read_excerpts

    return read_excerpts(root, allow_unlocated=True)
