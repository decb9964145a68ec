"""``semantic`` with LangChain's ``number_of_chunks``: the cut-off that yields that many chunks.

Independent references: hand-worked distance series (which boundaries are the
``number_of_chunks - 1`` largest), and langchain-experimental's own ``SemanticChunker``
run on the same sentences with the same MiniLM embeddings (one sentence per embedding on
both sides: ``buffer_size=0``). LangChain joins a chunk's sentences with single spaces,
so on documents whose sentences are separated by single spaces its chunk texts equal the
source slices this chunker returns.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import warnings

import numpy as np
import pytest
from conftest import ADDED_EMBEDDING_SETTINGS, ADDED_FAISS_SETTINGS, compose

from harness.chunkers.semantic import SemanticChunker, breakpoint_indices
from harness.experiment import build
from harness.text.sentences import sentence_spans
from harness.types import Document

DISTANCE_MODES = ("percentile", "standard_deviation", "interquartile")

# d_i between sentence i and i + 1 of six sentences; sorted descending: 0.9 (3), 0.5 (1),
# 0.3 (2), 0.2 (4), 0.1 (0)
D = [0.1, 0.5, 0.3, 0.9, 0.2]


@pytest.mark.parametrize(
    "k, expected",
    [(1, []), (2, [3]), (3, [1, 3]), (4, [1, 2, 3]), (5, [1, 2, 3, 4]), (6, [0, 1, 2, 3, 4]), (50, [0, 1, 2, 3, 4])],
)
@pytest.mark.parametrize("mode", DISTANCE_MODES)
def test_number_of_chunks_cuts_at_the_largest_distances(mode, k, expected):
    assert breakpoint_indices(D, mode, 1.0, number_of_chunks=k) == expected


def test_number_of_chunks_on_the_gradient_series():
    # numpy.gradient of D: one-sided at the ends, central inside:
    # [0.5-0.1, (0.3-0.1)/2, (0.9-0.5)/2, (0.2-0.3)/2, 0.2-0.9] = [0.4, 0.1, 0.2, -0.05, -0.7]
    assert breakpoint_indices(D, "gradient", 95.0, number_of_chunks=2) == [0]
    assert breakpoint_indices(D, "gradient", 95.0, number_of_chunks=3) == [0, 2]
    assert breakpoint_indices(D, "gradient", 95.0, number_of_chunks=4) == [0, 1, 2]
    # two sentences: no gradient exists, but two chunks of two sentences is every boundary
    assert breakpoint_indices([0.3], "gradient", 95.0, number_of_chunks=2) == [0]
    assert breakpoint_indices([0.3], "gradient", 95.0, number_of_chunks=1) == []


def test_number_of_chunks_ties_give_the_exact_count_earliest_first():
    # three equal distances, two cuts wanted: the two earliest boundaries
    assert breakpoint_indices([0.4, 0.4, 0.4, 0.1], "percentile", 95.0, number_of_chunks=3) == [0, 1]
    # identical sentences (distance 0) still split when every sentence must be a chunk
    assert breakpoint_indices([0.0, 0.0], "percentile", 95.0, number_of_chunks=3) == [0, 1]
    assert breakpoint_indices([], "percentile", 95.0, number_of_chunks=4) == []


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["chunker.breakpoint=percentile", "chunker.number_of_chunks=0"], r"chunker\.number_of_chunks must be null or an integer >= 1"),
        (["chunker.breakpoint=percentile", "chunker.number_of_chunks=-2"], r"chunker\.number_of_chunks must be null or an integer >= 1"),
        (["chunker.breakpoint=percentile", "chunker.number_of_chunks=2.5"], r"chunker\.number_of_chunks must be null or an integer >= 1"),
        (["chunker.breakpoint=percentile", "chunker.number_of_chunks=true"], r"chunker\.number_of_chunks must be null or an integer >= 1"),
        (["chunker.number_of_chunks=3"], r"chunker\.number_of_chunks .*chunker\.breakpoint=threshold"),
        (
            ["chunker.breakpoint=standard_deviation", "chunker.breakpoint_amount=2", "chunker.number_of_chunks=3"],
            r"chunker\.number_of_chunks\b.*chunker\.breakpoint_amount",
        ),
    ],
)
def test_number_of_chunks_validation(overrides, message):
    with pytest.raises(ValueError, match=message):
        build.build_chunker(compose(["chunker=semantic", *overrides]))


def test_default_semantic_config_hash_is_unchanged_and_the_option_joins_it():
    cfg = compose(["chunker=semantic"])
    assert cfg.chunker.number_of_chunks is None
    data = {k: v for k, v in build.to_container(cfg).items() if k not in ("tracking", "hydra", "paths", "resume", "cache")}
    del data["chunker"]["number_of_chunks"]  # the config as it was before the option existed
    assert data["embedding"].pop("on_truncate") == "warn"  # likewise (added with the truncation warning)
    for key, neutral in ADDED_EMBEDDING_SETTINGS:
        assert data["embedding"].pop(key) == neutral  # added with the embedding backends
    for key, neutral in ADDED_FAISS_SETTINGS:
        assert data["retriever"].pop(key) == neutral  # added with the approximate indexes
    assert data["chunker"].pop("target_chunk_size") is None and data["chunker"].pop("compatible") is None  # added with the Chroma options
    assert data["metrics"].pop("convention") == "harness"  # added with metrics.convention=chroma
    assert data.pop("sweep") == {"screen": None, "keep": 3}  # added with screening sweeps
    assert data["compression"]["_target_"] == "harness.evaluation.compression.Compressor"
    data["compression"]["_target_"] = "harness.compression.Compressor"  # its path before the package re-layout
    before = hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode("utf-8")).hexdigest()[:16]
    assert build.config_hash(cfg) == before
    five = compose(["chunker=semantic", "chunker.breakpoint=percentile", "chunker.number_of_chunks=5"])
    assert build.config_hash(five) != build.config_hash(compose(["chunker=semantic", "chunker.breakpoint=percentile"]))
    assert build.run_name(five) == "semantic-percentile-5chunks-faiss"


class _Memo:
    """The real encoder, each distinct text embedded once (both chunkers see the same vectors)."""

    def __init__(self, encoder):
        self.encoder = encoder
        self.rows: dict[str, np.ndarray] = {}

    def encode(self, texts, desc: str = "embed"):
        todo = [t for t in dict.fromkeys(texts) if t not in self.rows]
        if todo:
            self.rows.update(zip(todo, self.encoder.encode(todo, desc=desc)))
        return np.stack([self.rows[t] for t in texts])


def _langchain(memo, k: int):
    from langchain_core.embeddings import Embeddings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from langchain_experimental.text_splitter import SemanticChunker as LCSemanticChunker

    class Emb(Embeddings):
        def embed_documents(self, texts):
            return [row.astype(float).tolist() for row in memo.encode(texts)]

        def embed_query(self, text):
            return self.embed_documents([text])[0]

    return LCSemanticChunker(Emb(), buffer_size=0, breakpoint_threshold_type="percentile", number_of_chunks=k)


POOL = [
    "The harbour crane lifted the last container onto the ship.",
    "Dock workers tied the mooring lines before the tide turned.",
    "A tugboat guided the freighter out of the narrow channel.",
    "Sourdough bread needs a starter that is fed every day.",
    "The baker folded the dough and left it to rise overnight.",
    "A hot oven gives the loaf a dark and crisp crust.",
    "Volcanic eruptions can cool the climate for several years.",
    "Ash from the eruption grounded flights across the region.",
    "Lava flows slowly reshaped the coastline of the island.",
    "The violinist tuned her instrument before the concert began.",
    "An orchestra rehearses the symphony for many weeks.",
    "The conductor raised his baton and the hall fell silent.",
    "Glaciers carve deep valleys as they move downhill.",
    "Meltwater from the glacier feeds the river in summer.",
    "Chess players study openings to gain an early advantage.",
    "The grandmaster sacrificed a rook to attack the king.",
    "Tax returns must be filed before the end of April.",
    "The auditor asked for receipts for every deduction.",
]


def _documents(n_docs: int, seed: int = 7) -> list[Document]:
    rng = random.Random(seed)
    docs = []
    for i in range(n_docs):
        n = rng.randint(3, 9)
        docs.append(Document(f"d{i}", " ".join(rng.sample(POOL, n))))
    return docs


def test_number_of_chunks_matches_langchain_semantic_chunker(encoder):
    memo = _Memo(encoder)
    compared = 0
    for doc in _documents(24):
        sentences = [doc.text[s:e] for s, e in sentence_spans(doc.text)]
        assert sentences == re.split(r"(?<=[.?!])\s+", doc.text)  # both sides see the same sentences
        n = len(sentences)
        for k in range(1, n):
            ours = SemanticChunker(breakpoint="percentile", number_of_chunks=k, max_chunk_size=254, encoder=memo).chunk(doc)
            theirs = _langchain(memo, k).split_text(doc.text)
            assert [c.text for c in ours] == theirs, (doc.doc_id, k)
            assert len(ours) == k
            compared += 1
        # asked for as many chunks as sentences (or more): every sentence is a chunk. LangChain
        # caps its cuts at the boundaries above the smallest distance, so it gives n - 1.
        for k in (n, n + 3):
            ours = SemanticChunker(breakpoint="percentile", number_of_chunks=k, max_chunk_size=254, encoder=memo).chunk(doc)
            assert [c.text for c in ours] == sentences
            assert len(_langchain(memo, k).split_text(doc.text)) == n - 1
    assert compared >= 80


def test_number_of_chunks_is_the_same_in_every_distance_mode(encoder):
    memo = _Memo(encoder)
    for doc in _documents(6, seed=3):
        for k in (2, 3):
            spans = {
                mode: [c.spans for c in SemanticChunker(breakpoint=mode, number_of_chunks=k, max_chunk_size=254, encoder=memo).chunk(doc)]
                for mode in DISTANCE_MODES
            }
            assert spans["percentile"] == spans["standard_deviation"] == spans["interquartile"]
            assert len(spans["percentile"]) == k


@pytest.mark.parametrize("mode", [*DISTANCE_MODES, "gradient"])
def test_number_of_chunks_degenerate_documents(encoder, mode):
    one = "The harbour crane lifted the last container onto the ship."
    two = one + " Sourdough bread needs a starter that is fed every day."
    for k in (1, 2, 7):
        make = SemanticChunker(breakpoint=mode, number_of_chunks=k, max_chunk_size=254, encoder=encoder)
        assert make.chunk(Document("empty", "")) == []
        assert make.chunk(Document("blank", " \n\t ")) == []
        single = make.chunk(Document("one", "  " + one + "\n"))
        assert [c.spans for c in single] == [((2, 2 + len(one)),)]
        pair = [c.text for c in make.chunk(Document("two", two))]
        assert pair == ([two] if k == 1 else [one, two[len(one) + 1 :]]), (mode, k)


def test_number_of_chunks_keeps_the_size_limit(encoder):
    """The size guard still applies: a cap below the document's size adds cuts."""
    from harness.text.units import get_counter

    doc = _documents(1, seed=11)[0]
    chunks = SemanticChunker(breakpoint="percentile", number_of_chunks=1, max_chunk_size=30, encoder=encoder).chunk(doc)
    counter = get_counter("tokens")
    assert len(chunks) > 1
    assert all(counter.count(c.text) <= 30 for c in chunks)
    assert "".join(doc.text[c.start : c.end] for c in chunks).replace(" ", "") == doc.text.replace(" ", "")
