"""Hypothesis strategies for small generated corpora, built with the project's own types.

:func:`datasets` draws 1-5 documents of generated text (words from a small vocabulary, so
queries share terms with documents; punctuation, newlines, blank lines, headings and
non-ASCII words) and 1-6 queries with 1-2 evidence spans each. Every evidence span is an
exact slice of its document (``Evidence.text == doc.text[start:end]``) and the dataset is
passed through :func:`harness.datasets.validate.check_dataset`, the loaders' span check.
"""

from __future__ import annotations

from hypothesis import strategies as st

from harness.datasets.validate import check_dataset
from harness.types import Dataset, Document, Evidence, Query

WORDS = (
    "port",
    "server",
    "config",
    "token",
    "alpha",
    "beta",
    "gamma",
    "delta",
    "restart",
    "kestrel",
    "cache",
    "index",
    "café",
    "naïve",
    "Straße",
    "東京",
    "ñandú",
    "Ωmega",
    "8450",
    "v2.1",
)
SEPARATORS = (" ", " ", " ", ", ", ". ", "; ", "! ", "? ", "\n", "\n\n", " - ", ": ")


@st.composite
def document_texts(draw) -> str:
    """One document's text: 3-60 words joined by separators, sometimes a heading first."""
    words = draw(st.lists(st.sampled_from(WORDS), min_size=3, max_size=60))
    seps = draw(st.lists(st.sampled_from(SEPARATORS), min_size=len(words) - 1, max_size=len(words) - 1))
    text = words[0] + "".join(s + w for s, w in zip(seps, words[1:]))
    if draw(st.booleans()):
        text = f"# {draw(st.sampled_from(WORDS))}\n\n{text}"
    if draw(st.booleans()):
        text += draw(st.sampled_from((".", "\n", "!\n")))
    return text


@st.composite
def evidence_in(draw, doc: Document) -> Evidence:
    """An exact evidence span of ``doc`` with at least one non-whitespace character."""
    n = len(doc.text)
    start = draw(st.integers(0, n - 1))
    end = draw(st.integers(start + 1, min(n, start + 80)))
    if not doc.text[start:end].strip():  # widen a whitespace-only span to the next content character
        more = next((i for i in range(end, n) if not doc.text[i].isspace()), None)
        if more is None:
            start = next(i for i in range(start, -1, -1) if not doc.text[i].isspace())
        else:
            end = more + 1
    return Evidence(doc.doc_id, start, end, doc.text[start:end])


@st.composite
def datasets(draw, max_documents: int = 5, max_queries: int = 6) -> Dataset:
    """A small labelled dataset (see the module docstring); doc ids ``d<i>.md`` in a shuffled
    numbering so document order and id order differ."""
    n_docs = draw(st.integers(1, max_documents))
    numbers = draw(st.permutations(range(1, n_docs + 1)))
    docs = tuple(Document(doc_id=f"d{n}.md", text=draw(document_texts())) for n in numbers)
    queries = []
    for i in range(draw(st.integers(1, max_queries))):
        n_ev = draw(st.integers(1, 2))
        evidence = tuple(draw(evidence_in(draw(st.sampled_from(docs)))) for _ in range(n_ev))
        text = " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4)))
        queries.append(Query(query_id=f"q{i}", text=text, evidence=evidence))
    dataset = Dataset(name="generated", documents=docs, queries=tuple(queries))
    check_dataset(dataset)
    return dataset
