"""Deterministic scaled copies of a dataset, for measuring how cost grows with corpus size.

:func:`scale_dataset` turns a dataset into one ``factor`` times as large: every document is
repeated ``factor`` times as separate documents (copy 0 keeps its id; copy ``i >= 1`` is
named ``"{doc_id}~{i}"``, zero-padded to the width of ``factor - 1``), in the order
copy 0 of every document, copy 1 of every document, and so on. The question set stays
fixed (same ids, same texts, same count); each question's evidence is its original spans
in *every* copy of their document, since each copy holds the answer verbatim. Every span is
therefore exact by construction (same offsets into an identical text) and is verified again
by :func:`harness.datasets.validate.check_dataset`.

So the corpus (characters, documents, chunks) grows ``factor``-fold while the queries stay
the same: searching grows linearly with the corpus, and scoring with the evidence spans
(``factor``-fold per question). ``factor=1`` returns the dataset unchanged (same
fingerprint). Metrics of a scaled dataset are not comparable with the original one (every
question has ``factor`` equally good answers); it is meant for timing and memory.

Usable from a config (see ``docs/benchmark.md``, "Cost as the work grows"): any dataset
through :func:`load_scaled` (``dataset: {_target_: harness.datasets.scaled.load_scaled,
factor: 10, base: {<a dataset config>}}``), or ``chroma_general`` on the command line::

    python -m harness.run dataset=chroma_general \\
        dataset._target_=harness.datasets.scaled.load_chroma_scaled +dataset.factor=10
"""

from __future__ import annotations

from harness.datasets.chroma import load_chroma_general
from harness.datasets.validate import DatasetError, check_dataset
from harness.params import Param
from harness.types import Dataset, Document, Evidence, Query

#: ``dataset.factor``: copies of each document, an integer >= 1.
FACTOR = Param("factor", "int", low=1, noun="an int", note="copies of each document")

#: Separator between a document id and its copy number.
COPY_SEPARATOR = "~"


def copy_id(doc_id: str, copy: int, factor: int) -> str:
    """Id of copy ``copy`` (``0 <= copy < factor``) of ``doc_id``: the id itself for copy 0,
    else ``"{doc_id}~{copy}"`` with ``copy`` zero-padded to the width of ``factor - 1``."""
    if copy == 0:
        return doc_id
    return f"{doc_id}{COPY_SEPARATOR}{copy:0{len(str(factor - 1))}d}"


def scale_dataset(dataset: Dataset, factor: int, name: str | None = None) -> Dataset:
    """The dataset with its corpus repeated ``factor`` times and the same questions.

    Args:
        dataset: any loaded dataset (spans already verified).
        factor: how many copies of each document, an int >= 1.
        name: name of the result; default ``"{dataset.name}-x{factor}"`` (``dataset.name``
            for ``factor == 1``).

    Returns:
        A :class:`~harness.types.Dataset` with ``factor * len(dataset.documents)`` documents
        (``factor`` times the characters) and ``len(dataset.queries)`` queries, each with
        ``factor`` times its evidence spans; ``dataset`` itself when ``factor == 1`` and no
        new name is given.

    Raises:
        ValueError: ``factor`` is not an int >= 1.
        DatasetError: a copy id collides with an existing document id.
    """
    FACTOR.check(factor, "dataset")
    if factor == 1 and name is None:
        return dataset
    documents = tuple(
        Document(doc_id=copy_id(d.doc_id, i, factor), text=d.text, metadata={**d.metadata, "copy_of": d.doc_id, "copy": i})
        for i in range(factor)
        for d in dataset.documents
    )
    queries = tuple(
        Query(
            query_id=q.query_id,
            text=q.text,
            evidence=tuple(Evidence(copy_id(ev.doc_id, i, factor), ev.start, ev.end, ev.text) for i in range(factor) for ev in q.evidence),
        )
        for q in dataset.queries
    )
    scaled = Dataset(
        name=name or (dataset.name if factor == 1 else f"{dataset.name}-x{factor}"),
        documents=documents,
        queries=queries,
        source=dataset.source,
        load_report=dataset.load_report,
    )
    if len({d.doc_id for d in documents}) != len(documents):
        raise DatasetError(f"dataset {scaled.name!r}: copy ids collide with existing document ids (ids containing {COPY_SEPARATOR!r})")
    check_dataset(scaled)
    return scaled


def one_line(dataset: Dataset, name: str | None = None) -> Dataset:
    """The whole corpus as one single-line document: the documents joined by one space, with
    every line break (``\\n``, ``\\r``, ``\\v``, ``\\f``, U+0085, U+2028, U+2029) replaced by a
    space (same length, so offsets inside a document only shift by where it starts).

    The stress case of a long text without structure: no paragraph or line separators for a
    chunker to cut at. Evidence spans are moved into the joined text and their excerpts get the
    same replacement. The document id is ``dataset.name``; the name defaults to
    ``"{dataset.name}-one-line"``.
    """
    table = str.maketrans({c: " " for c in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"})
    starts, pos = {}, 0
    for d in dataset.documents:
        starts[d.doc_id] = pos
        pos += len(d.text) + 1
    text = " ".join(d.text for d in dataset.documents).translate(table)
    doc_id = dataset.name
    queries = tuple(
        Query(q.query_id, q.text, tuple(Evidence(doc_id, starts[e.doc_id] + e.start, starts[e.doc_id] + e.end, e.text.translate(table)) for e in q.evidence))
        for q in dataset.queries
    )
    joined = Dataset(name or f"{dataset.name}-one-line", (Document(doc_id, text, {"type": "text"}),), queries, dataset.source, dataset.load_report)
    check_dataset(joined)
    return joined


def load_scaled(base: Dataset, factor: int = 1, one_document: bool = False, name: str | None = None) -> Dataset:
    """``base`` (any dataset; in a config a nested dataset node that Hydra builds first)
    scaled by :func:`scale_dataset`, then with ``one_document`` joined by :func:`one_line`;
    ``name`` (the run's experiment name) defaults to theirs.

    Raises:
        ValueError: ``factor`` is not an int >= 1; ``base`` is not a Dataset.
    """
    if not isinstance(base, Dataset):
        raise ValueError(f"dataset.base must be a dataset config (with a _target_ loader), got {type(base).__name__}")
    if one_document:
        return one_line(scale_dataset(base, factor), name)
    return scale_dataset(base, factor, name)


def load_chroma_scaled(factor: int = 1, one_document: bool = False, **kwargs) -> Dataset:
    """:func:`harness.datasets.chroma.load_chroma_general` (``kwargs`` are its arguments,
    e.g. ``name``), scaled by :func:`scale_dataset` and named ``"{name}-x{factor}"``
    (just ``name`` at ``factor == 1``); with ``one_document`` then joined by :func:`one_line`.

    Raises:
        ValueError: ``factor`` is not an int >= 1 (before anything is read).
        DatasetError: as the chroma loader.
    """
    FACTOR.check(factor, "dataset")
    return load_scaled(load_chroma_general(**kwargs), factor, one_document)
