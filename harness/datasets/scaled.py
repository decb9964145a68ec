"""Deterministic scaled copies of a dataset, for measuring how cost grows with corpus size.

:func:`scale_dataset` turns a dataset into one ``factor`` times as large: every document is
repeated ``factor`` times as separate documents (copy 0 keeps its id; copy ``i >= 1`` is
named ``"{doc_id}~{i}"``, zero-padded to the width of ``factor - 1``), in the order
copy 0 of every document, copy 1 of every document, and so on. The question set stays
fixed (same ids, same texts, same count); each question's evidence is its original spans
in *every* copy of their document, since each copy holds the answer verbatim. Every span is
therefore exact by construction (same offsets into an identical text) and is verified again
by :func:`harness.datasets.validate.check_dataset`.

**Distinct copies** (``perturb > 0``): exact copies give identical chunk texts, identical
vectors and degenerate BM25 statistics (every term's document frequency a multiple of
``factor``), so nearest-neighbour search over them is a search among ties. With ``perturb``
each copy ``i >= 1`` is made different by :func:`perturb_text`: a deterministic share of its
words (maximal runs of letters) is replaced by other words *of the same length* from the
dataset's own vocabulary. Only letters change, each into letters: every character offset
means the same position in the copy as in the original, the same spaces, digits and
punctuation sit at the same places (so the ``\\w+`` token boundaries of BM25 and the token
count of each chunk are those of the original), and copy 0 is the original itself. Each
question keeps its evidence spans in every copy; the excerpt of a span in copy ``i`` is the
copy's own text there (possibly with replaced words), so every span stays exact.

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

import re
import zlib
from typing import Mapping, Sequence

import numpy as np

from harness.datasets.chroma import load_chroma_general
from harness.datasets.validate import DatasetError, check_dataset
from harness.params import Param
from harness.types import Dataset, Document, Evidence, Query

#: ``dataset.factor``: copies of each document, an integer >= 1.
FACTOR = Param("factor", "int", low=1, noun="an int", note="copies of each document")

#: ``dataset.perturb``: share of the words of every copy after the first that are replaced.
PERTURB = Param("perturb", "number", low=0, high=1, note="share of the words of copies >= 1 replaced by words of the same length")
#: ``dataset.seed``: seed of the replacements.
SEED = Param("seed", "int", low=0, note="seed of the word replacements")

#: What :func:`perturb_text` treats as a word: a maximal run of letters (no digits, no ``_``).
WORD = re.compile(r"[^\W\d_]+")

_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)

#: Separator between a document id and its copy number.
COPY_SEPARATOR = "~"


def copy_id(doc_id: str, copy: int, factor: int) -> str:
    """Id of copy ``copy`` (``0 <= copy < factor``) of ``doc_id``: the id itself for copy 0,
    else ``"{doc_id}~{copy}"`` with ``copy`` zero-padded to the width of ``factor - 1``."""
    if copy == 0:
        return doc_id
    return f"{doc_id}{COPY_SEPARATOR}{copy:0{len(str(factor - 1))}d}"


def _mix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser (Steele, Lea & Flood, "Fast splittable pseudorandom number
    generators", OOPSLA 2014) on a ``uint64`` array: a fixed, version-independent hash."""
    with np.errstate(over="ignore"):
        x = x.astype(np.uint64)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return (x ^ (x >> np.uint64(31))) & _MASK64


def vocabulary_by_length(texts: Sequence[str]) -> dict[int, tuple[str, ...]]:
    """The distinct :data:`WORD` words of ``texts`` grouped by length in code points, each
    group sorted (so the result depends on the texts only, not on their order)."""
    words: set[str] = set()
    for text in texts:
        words.update(WORD.findall(text))
    groups: dict[int, list[str]] = {}
    for w in words:
        groups.setdefault(len(w), []).append(w)
    return {n: tuple(sorted(ws)) for n, ws in groups.items()}


def perturb_text(text: str, copy: int, rate: float, vocabulary: Mapping[int, Sequence[str]], key: str = "", seed: int = 0) -> str:
    """``text`` with a deterministic share ``rate`` of its words replaced by words of the same length.

    A word is a maximal run of letters (:data:`WORD`). Word ``j`` (0-based, in text order) is
    replaced when the hash of ``(seed, key, copy, j)`` (:func:`_mix64`, with ``key`` hashed by
    CRC-32) falls below ``rate``; its replacement is the word that hash picks from
    ``vocabulary[len(word)]`` (unchanged when that group is missing or empty). The choice of each
    word depends on its index only, so equal inputs give equal outputs on every machine and
    NumPy version.

    Invariants: ``len(result) == len(text)``; ``result[p] == text[p]`` for every position ``p``
    outside a word (spaces, digits, punctuation, ``_``), and a letter stays a letter; so any
    span ``[start, end)`` of ``text`` is a span of the same length at the same place in the result.
    ``copy == 0`` or ``rate == 0`` returns ``text`` unchanged.

    Args:
        text: any string.
        copy: the copy number, an int >= 0 (0 = the original).
        rate: share of words replaced, in [0, 1].
        vocabulary: length in code points -> candidate words (letters only, as
            :func:`vocabulary_by_length` gives).
        key: names the text (e.g. its document id), so equal texts of different documents
            are perturbed differently.
        seed: an int >= 0.

    Raises:
        ValueError: ``copy`` < 0, ``rate`` outside [0, 1], ``seed`` < 0, or a candidate word
            whose length differs from its group's or that is not all letters.
    """
    Param("copy", "int", low=0).check(copy, "dataset")
    PERTURB.check(rate, "dataset")
    SEED.check(seed, "dataset")
    if copy == 0 or rate == 0:
        return text
    spans = [m.span() for m in WORD.finditer(text)]
    if not spans:
        return text
    base = np.uint64((zlib.crc32(key.encode("utf-8")) << 32) ^ (seed & 0xFFFFFFFF))
    with np.errstate(over="ignore"):
        h = _mix64(
            _mix64(np.full(len(spans), base, dtype=np.uint64) + np.uint64(copy) * np.uint64(0x9E3779B97F4A7C15)) + np.arange(len(spans), dtype=np.uint64)
        )
    chosen = np.flatnonzero((h >> np.uint64(11)).astype(np.float64) / 2.0**53 < rate)
    pick = _mix64(h[chosen] ^ np.uint64(0xD6E8FEB86659FD93))
    pieces: list[str] = []
    at = 0
    for j, r in zip(chosen.tolist(), pick.tolist()):
        start, end = spans[j]
        group = vocabulary.get(end - start)
        if not group:
            continue
        word = group[r % len(group)]
        if len(word) != end - start or WORD.fullmatch(word) is None:
            raise ValueError(f"perturb_text: vocabulary[{end - start}] holds {word!r}, expected words of {end - start} letters")
        pieces += [text[at:start], word]
        at = end
    pieces.append(text[at:])
    return "".join(pieces)


def scale_dataset(dataset: Dataset, factor: int, name: str | None = None, perturb: float = 0.0, seed: int = 0) -> Dataset:
    """The dataset with its corpus repeated ``factor`` times and the same questions.

    Args:
        dataset: any loaded dataset (spans already verified).
        factor: how many copies of each document, an int >= 1.
        name: name of the result; default ``"{dataset.name}-x{factor}"`` (``dataset.name``
            for ``factor == 1``).
        perturb: share of the words of every copy ``i >= 1`` replaced by :func:`perturb_text`
            (vocabulary: the dataset's own words), in [0, 1]; 0 (default) keeps exact copies.
        seed: seed of the replacements, an int >= 0.

    Returns:
        A :class:`~harness.types.Dataset` with ``factor * len(dataset.documents)`` documents
        (``factor`` times the characters) and ``len(dataset.queries)`` queries, each with
        ``factor`` times its evidence spans; ``dataset`` itself when ``factor == 1`` and no
        new name is given.

    Raises:
        ValueError: ``factor`` is not an int >= 1, ``perturb`` outside [0, 1], ``seed`` < 0.
        DatasetError: a copy id collides with an existing document id.
    """
    FACTOR.check(factor, "dataset")
    PERTURB.check(perturb, "dataset")
    SEED.check(seed, "dataset")
    if factor == 1 and name is None:
        return dataset
    vocabulary = vocabulary_by_length([d.text for d in dataset.documents]) if perturb > 0 else {}
    documents = []
    for i in range(factor):
        for d in dataset.documents:
            meta = {**d.metadata, "copy_of": d.doc_id, "copy": i} | ({"perturb": perturb, "perturb_seed": seed} if perturb > 0 and i > 0 else {})
            text = perturb_text(d.text, i, perturb, vocabulary, d.doc_id, seed) if perturb > 0 else d.text
            documents.append(Document(doc_id=copy_id(d.doc_id, i, factor), text=text, metadata=meta))
    documents = tuple(documents)
    texts = {d.doc_id: d.text for d in documents}
    queries = tuple(
        Query(
            query_id=q.query_id,
            text=q.text,
            evidence=tuple(
                Evidence(cid, ev.start, ev.end, texts[cid][ev.start : ev.end] if cid in texts else ev.text)
                for i in range(factor)
                for ev in q.evidence
                for cid in (copy_id(ev.doc_id, i, factor),)
            ),
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


def load_scaled(base: Dataset, factor: int = 1, one_document: bool = False, name: str | None = None, perturb: float = 0.0, seed: int = 0) -> Dataset:
    """``base`` (any dataset; in a config a nested dataset node that Hydra builds first)
    scaled by :func:`scale_dataset` (``perturb``, ``seed``: distinct copies, see there), then
    with ``one_document`` joined by :func:`one_line`; ``name`` (the run's experiment name)
    defaults to theirs.

    Raises:
        ValueError: ``factor`` is not an int >= 1; ``perturb`` outside [0, 1]; ``base`` is not a Dataset.
    """
    if not isinstance(base, Dataset):
        raise ValueError(f"dataset.base must be a dataset config (with a _target_ loader), got {type(base).__name__}")
    if one_document:
        return one_line(scale_dataset(base, factor, perturb=perturb, seed=seed), name)
    return scale_dataset(base, factor, name, perturb, seed)


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
