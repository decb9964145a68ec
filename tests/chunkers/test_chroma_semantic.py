"""``compatible: chroma`` for ``cluster_semantic`` and ``semantic``: the ClusterSemanticChunker and
KamradtModifiedChunker of Chroma's ``chunking_evaluation`` (Smith & Troynikov, 2024), span-exact.

The reference algorithms are written out here a second time, plainly and independently of
the code under test: pieces from LangChain's ``RecursiveCharacterTextSplitter`` (the
reference's ``RecursiveTokenChunker`` algorithm) at 50 cl100k_base tokens, the full
``O(n^2 L)`` dynamic programme over block sums with its ``dp = 0`` start, and the Kamradt
windows, distances and bisection. They are fed with the same vectors as the chunkers (the
packaged all-MiniLM-L6-v2, its caches make the second embedding free), and the chunk spans
must be the same. A hand-made similarity matrix shows the DP quirk (a cluster longer than
``max_cluster`` whose reward is negative) with values worked out by hand.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import CHROMA_PATH, compose
from langchain_text_splitters import RecursiveCharacterTextSplitter
from omegaconf import open_dict

from harness.chunkers.chroma import token_count
from harness.chunkers.cluster_semantic import ClusterSemanticChunker, chroma_segmentation
from harness.chunkers.semantic import SemanticChunker, bisect_cut_off
from harness.experiment import build
from harness.text.sentences import sentence_spans
from harness.text.units import get_counter
from harness.types import Document

SEPARATORS = ["\n\n", "\n", ".", "?", "!", " ", ""]
COUNT = token_count("cl100k_base")  # the reference's openai_token_count

PROSE = (
    "Honeybees communicate the location of flowers through a waggle dance. The angle of the dance "
    "relative to gravity encodes the direction of the food source, and its duration encodes distance.\n\n"
    "A colony can hold tens of thousands of workers. Each worker changes tasks as it ages, from cleaning "
    "cells to nursing larvae, building comb, guarding the entrance and finally foraging.\n\n"
    "The central bank raised interest rates by a quarter of a point on Tuesday. Markets had expected the "
    "move, and bond yields barely changed after the announcement.\n"
    "Analysts said inflation remains above target. Mortgage rates are likely to rise again next month, "
    "which may cool the housing market. Consumer spending slowed in the third quarter!\n\n"
    "To repot a fern, water it the day before. Loosen the root ball gently? Use a pot one size larger "
    "with fresh, peat-free compost, and keep the plant out of direct sun for a week.\n"
    "Ferns like humidity: mist the leaves or stand the pot on a tray of wet pebbles. "
    "Brown tips usually mean the air is too dry.\n\n"
    "In 1969 the Apollo 11 crew landed in the Sea of Tranquility. Armstrong and Aldrin spent about two "
    "and a half hours outside the lunar module, collecting samples and setting up experiments, while "
    "Collins orbited overhead in the command module."
)


# --------------------------------------------------------------------------- the reference, written out


def reference_pieces(text: str) -> list[str]:
    """RecursiveTokenChunker(chunk_size=50, chunk_overlap=0, openai_token_count, the separators above)."""
    splitter = RecursiveCharacterTextSplitter(chunk_size=50, chunk_overlap=0, length_function=COUNT, separators=SEPARATORS, keep_separator=True)
    return splitter.split_text(text)


def locate(text: str, pieces: list[str]) -> list[tuple[int, int]]:
    """Source spans of the pieces: each starts at the first non-space character after the previous one."""
    spans, pos = [], 0
    for p in pieces:
        while text[pos].isspace():
            pos += 1
        assert text.startswith(p, pos), (pos, p[:40])
        spans.append((pos, pos + len(p)))
        pos += len(p)
    assert not text[pos:].strip()
    return spans


def reference_cluster_dp(similarity: np.ndarray, max_cluster: int) -> list[tuple[int, int]]:
    """_optimal_segmentation: block sums of the centred matrix, dp starting at 0, strict >."""
    m = np.array(similarity, dtype=np.float64)
    n = m.shape[0]
    mean = np.mean(m[np.triu_indices(n, k=1)]) if n > 1 else 0.0
    m = m - mean
    np.fill_diagonal(m, 0)
    dp = np.zeros(n)
    seg = np.zeros(n, dtype=int)
    for i in range(n):
        for size in range(1, max_cluster + 1):
            if i - size + 1 >= 0:
                r = np.sum(m[i - size + 1 : i + 1, i - size + 1 : i + 1])
                if i - size >= 0:
                    r += dp[i - size]
                if r > dp[i]:
                    dp[i] = r
                    seg[i] = i - size + 1
    out, i = [], n - 1
    while i >= 0:
        out.append((int(seg[i]), i))
        i = seg[i] - 1
    return out[::-1]


def reference_cluster(text: str, encoder, max_chunk_size: int = 400, min_chunk_size: int = 50) -> tuple[list[tuple[int, int]], list[str]]:
    """ClusterSemanticChunker.split_text: (source spans of the clusters, the reference's chunk strings)."""
    pieces = reference_pieces(text)
    e = np.array(encoder.encode(pieces), dtype=np.float64)
    clusters = reference_cluster_dp(e @ e.T, max_chunk_size // min_chunk_size)
    where = locate(text, pieces)
    return [(where[a][0], where[b][1]) for a, b in clusters], [" ".join(pieces[a : b + 1]) for a, b in clusters]


def reference_kamradt(text: str, encoder, avg_chunk_size: int) -> tuple[list[tuple[int, int]], list[str]]:
    """KamradtModifiedChunker.split_text with buffer 3: (source spans of the chunks, the reference's strings)."""
    pieces = reference_pieces(text)
    n = len(pieces)
    combined = []
    for i in range(n):
        s = ""
        for j in range(i - 3, i):
            if j >= 0:
                s += pieces[j] + " "
        s += pieces[i]
        for j in range(i + 1, i + 4):
            if j < n:
                s += " " + pieces[j]
        combined.append(s)
    e = np.array(encoder.encode(combined), dtype=np.float64)
    e = e / np.linalg.norm(e, axis=1, keepdims=True)
    sim = e @ e.T
    distances = [1 - sim[i, i + 1] for i in range(n - 1)]
    cuts = sum(COUNT(p) for p in pieces) // avg_chunk_size
    lo, hi = 0.0, 1.0
    while hi - lo > 1e-6:
        t = (lo + hi) / 2.0
        if np.sum(np.array(distances) > t) > cuts:
            lo = t
        else:
            hi = t
    groups, start = [], 0
    for i, x in enumerate(distances):
        if x > t:
            groups.append((start, i))
            start = i + 1
    if start < n:
        groups.append((start, n - 1))
    where = locate(text, pieces)
    return [(where[a][0], where[b][1]) for a, b in groups], [" ".join(pieces[a : b + 1]) for a, b in groups]


# --------------------------------------------------------------------------- helpers


def documents() -> list[Document]:
    docs = [Document("prose", PROSE), Document("short", "One sentence only, far below fifty tokens.")]
    path = CHROMA_PATH / "corpora" / "state_of_the_union.md"
    if path.is_file():
        docs.append(Document("sotu", path.read_text(encoding="utf-8")[:8000]))
    return docs


def check_properties(doc: Document, chunks) -> None:
    """Single spans in order, no overlap, every non-space character covered, text == source."""
    last_end = 0
    covered = bytearray(len(doc.text))
    for c in chunks:
        assert len(c.spans) == 1
        s, e = c.spans[0]
        assert last_end <= s < e <= len(doc.text)
        assert c.text == doc.text[s:e] == doc.text[s:e].strip()
        assert c.metadata["compatible"] == "chroma" and c.metadata["unit"] == "tokens" and c.metadata["size"] == COUNT(c.text)
        covered[s:e] = b"\x01" * (e - s)
        last_end = e
    assert not [i for i, ch in enumerate(doc.text) if not ch.isspace() and not covered[i]]


def spans(chunks) -> list[tuple[int, int]]:
    return [c.spans[0] for c in chunks]


def pieces_inside(doc: Document, chunk_span: tuple[int, int], pieces: list[str]) -> list[str]:
    """The reference pieces that lie inside a chunk's span."""
    return [p for p, (s, e) in zip(pieces, locate(doc.text, pieces)) if chunk_span[0] <= s and e <= chunk_span[1]]


# --------------------------------------------------------------------------- ClusterSemanticChunker


@pytest.mark.slow
@pytest.mark.parametrize("max_chunk_size", [400, 200])
def test_cluster_semantic_matches_the_reference(encoder, max_chunk_size):
    for doc in documents():
        chunker = ClusterSemanticChunker(max_chunk_size=max_chunk_size, piece_size=50, tokenizer="cl100k_base", compatible="chroma", encoder=encoder)
        chunks = chunker.chunk_all([doc])
        want_spans, want_texts = reference_cluster(doc.text, encoder, max_chunk_size, 50)
        assert spans(chunks) == want_spans, doc.doc_id
        pieces = reference_pieces(doc.text)
        inside = [pieces_inside(doc, c.spans[0], pieces) for c in chunks]
        assert [" ".join(p) for p in inside] == want_texts  # the reference's own strings, pieces joined by spaces
        assert [c.metadata["n_pieces"] for c in chunks] == [len(p) for p in inside]
        check_properties(doc, chunks)
        assert chunker.size_limit() is None


def test_cluster_dp_quirk_on_a_hand_made_matrix():
    """S34 = 0.9, every other pair 0.1: mu = 0.18, M34 = 0.72, the other pairs -0.08. With at most
    two pieces per cluster, ends 0, 1, 2 find no candidate above dp = 0 and keep start 0; end 4
    takes (3, 4) with 1.44. Read back: (3, 4), then end 2 -> (0, 2): three pieces, reward -0.48."""
    s = np.full((5, 5), 0.1)
    np.fill_diagonal(s, 1.0)
    s[3, 4] = s[4, 3] = 0.9
    assert reference_cluster_dp(s, 2) == [(0, 2), (3, 4)]
    assert chroma_segmentation(s, 2) == [(0, 2), (3, 4)]
    # one piece per cluster: no candidate ever beats 0, so everything is one cluster
    assert reference_cluster_dp(s, 1) == chroma_segmentation(s, 1) == [(0, 4)]


def test_cluster_dp_matches_the_reference_on_random_matrices():
    rng = np.random.default_rng(7)
    for n in (1, 2, 3, 7, 30):
        for max_cluster in (1, 2, 3, 8):
            e = rng.normal(size=(n, 6)) + rng.normal(size=6)  # correlated rows, some negative centred pairs
            sim = e @ e.T
            assert chroma_segmentation(sim, max_cluster) == reference_cluster_dp(sim, max_cluster), (n, max_cluster)
    assert chroma_segmentation(np.zeros((0, 0)), 3) == []


class PlannedEncoder:
    """Returns fixed vectors (rows of ``vectors``) for the pieces of one document."""

    def __init__(self, vectors: np.ndarray):
        self.vectors = vectors

    def encode(self, texts, desc: str = "embed"):
        assert len(texts) == len(self.vectors)
        return self.vectors.astype(np.float32)


def test_cluster_semantic_reproduces_the_quirk_on_a_document():
    """Five ~30-token paragraphs are five pieces; vectors with the Gram matrix of the test above
    give one chunk of pieces 0..2 (more than max_chunk_size // piece_size = 2) and one of 3..4."""
    paragraphs = [
        "Paragraph %d talks about something entirely different from its neighbours, in roughly thirty tokens of plain English prose, so that no two of them fit together."
        % i
        for i in range(5)
    ]
    doc = Document("five", "\n\n".join(paragraphs))
    assert len(reference_pieces(doc.text)) == 5
    gram = np.full((5, 5), 0.1)
    np.fill_diagonal(gram, 1.0)
    gram[3, 4] = gram[4, 3] = 0.9
    vectors = np.linalg.cholesky(gram)  # rows whose dot products are the Gram matrix
    chunker = ClusterSemanticChunker(max_chunk_size=100, piece_size=50, tokenizer="cl100k_base", compatible="chroma", encoder=PlannedEncoder(vectors))
    chunks = chunker.chunk(doc)
    where = locate(doc.text, paragraphs)
    assert spans(chunks) == [(where[0][0], where[2][1]), (where[3][0], where[4][1])]
    assert [c.metadata["n_pieces"] for c in chunks] == [3, 2]


# --------------------------------------------------------------------------- KamradtModifiedChunker


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:embedding.model .* truncates")  # 7-piece windows exceed MiniLM's 256 word pieces
@pytest.mark.parametrize("avg_chunk_size", [300, 100])
def test_semantic_compatible_matches_kamradt_modified(encoder, avg_chunk_size):
    for doc in documents():
        chunker = SemanticChunker(breakpoint="percentile", target_chunk_size=avg_chunk_size, tokenizer="cl100k_base", compatible="chroma", encoder=encoder)
        chunks = chunker.chunk_all([doc])
        want_spans, want_texts = reference_kamradt(doc.text, encoder, avg_chunk_size)
        assert spans(chunks) == want_spans, doc.doc_id
        pieces = reference_pieces(doc.text)
        inside = [pieces_inside(doc, c.spans[0], pieces) for c in chunks]
        assert [" ".join(p) for p in inside] == want_texts
        assert [c.metadata["n_pieces"] for c in chunks] == [len(p) for p in inside]
        check_properties(doc, chunks)
        assert chunker.size_limit() is None


def test_bisection_cut_off_by_hand():
    # 4 cuts wanted of 5 distances: the bisection settles just below the 4th largest (0.3)
    d = [0.1, 0.5, 0.3, 0.9, 0.7]
    t = bisect_cut_off(d, 3)
    assert 0.3 <= t < 0.5 + 1e-6 and sum(x > t for x in d) == 3
    assert sum(x > bisect_cut_off(d, 0) for x in d) == 0
    assert sum(x > bisect_cut_off(d, 9) for x in d) == 5  # t ends near 0: every positive distance is cut
    assert sum(x > bisect_cut_off([], 2) for x in []) == 0


def test_target_chunk_size_in_our_mode_cuts_where_the_bisection_says(encoder):
    """Over our sentences (no size guard firing): the semantic cuts are the bisection's, in model tokens."""
    doc = Document("prose", PROSE)
    chunker = SemanticChunker(breakpoint="percentile", target_chunk_size=60, max_chunk_size=100000, encoder=encoder)
    chunks = chunker.chunk(doc)
    sents = sentence_spans(doc.text)
    vecs = np.array(encoder.encode([doc.text[s:e] for s, e in sents]), dtype=np.float64)
    d = [1 - float(vecs[i] @ vecs[i + 1]) for i in range(len(sents) - 1)]
    counter = get_counter("tokens", "model")
    wanted = sum(counter.count(doc.text[s:e]) for s, e in sents) // 60
    lo, hi = 0.0, 1.0
    while hi - lo > 1e-6:
        t = (lo + hi) / 2
        lo, hi = (t, hi) if sum(x > t for x in d) > wanted else (lo, t)
    starts = [0] + [i + 1 for i, x in enumerate(d) if x > t] + [len(sents)]
    assert spans(chunks) == [(sents[a][0], sents[b - 1][1]) for a, b in zip(starts[:-1], starts[1:])]
    # about `wanted` cuts: any beyond them are distances within 1e-6 above the last midpoint (here
    # the bisection's final step raised lo to just below the 5th largest distance: 5 cuts for 4)
    cut = sorted((x for x in d if x > t), reverse=True)
    assert wanted >= 1 and len(chunks) - 1 == len(cut) >= wanted
    assert all(x - t <= 1e-6 for x in cut[wanted:])
    # the same with standard_deviation / interquartile: the mode's own cut-off is not read
    for mode in ("standard_deviation", "interquartile"):
        other = SemanticChunker(breakpoint=mode, target_chunk_size=60, max_chunk_size=100000, encoder=encoder).chunk(doc)
        assert spans(other) == spans(chunks)


def test_target_chunk_size_keeps_the_size_guards(encoder):
    doc = Document("prose", PROSE)
    chunks = SemanticChunker(breakpoint="percentile", target_chunk_size=1000, max_chunk_size=60, encoder=encoder).chunk_all([doc])
    counter = get_counter("tokens", "model")
    assert len(chunks) > 1 and all(counter.count(c.text) <= 60 for c in chunks)


# --------------------------------------------------------------------------- settings


@pytest.mark.parametrize("value", [0, -3, True, 2.5, "400"])
def test_target_chunk_size_must_be_a_positive_integer(value):
    with pytest.raises(ValueError, match=r"^chunker\.target_chunk_size must be null or an integer >= 1 \(average chunk size in tokens of chunker\.tokenizer\)"):
        SemanticChunker(breakpoint="percentile", target_chunk_size=value)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"breakpoint": "threshold"}, r"chunker\.breakpoint=threshold does not use: set chunker\.breakpoint=percentile"),
        ({"breakpoint": "gradient"}, r"chunker\.breakpoint=gradient does not use: set chunker\.breakpoint=percentile"),
        ({"breakpoint": "percentile", "number_of_chunks": 3}, r"chunker\.target_chunk_size=300 and chunker\.number_of_chunks=3 both set the number of cuts"),
        ({"breakpoint": "standard_deviation", "breakpoint_amount": 2.0}, r"chunker\.breakpoint_amount=2\.0 sets: set one of them"),
    ],
)
def test_target_chunk_size_refused_combinations(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SemanticChunker(target_chunk_size=300, **kwargs)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"target_chunk_size": None}, r"KamradtModifiedChunker, whose avg_chunk_size is chunker\.target_chunk_size: set it"),
        ({"tokenizer": "model"}, r"needs chunker\.tokenizer in \['cl100k_base'\], got 'model'"),
        ({"buffer_size": 1}, r"needs chunker\.buffer_size=0 \(default\) or 3, got 1"),
        ({"min_chunk_size": 20}, r"needs chunker\.min_chunk_size=0, got 20"),
        ({"compatible": "chromadb"}, r"chunker\.compatible must be null or one of \['chroma'\]"),
    ],
)
def test_semantic_compatible_refusals(kwargs, message):
    settings = {"breakpoint": "percentile", "target_chunk_size": 300, "tokenizer": "cl100k_base", "compatible": "chroma", **kwargs}
    with pytest.raises(ValueError, match=message):
        SemanticChunker(**settings)


def test_semantic_compatible_accepts_buffer_3():
    assert SemanticChunker(breakpoint="percentile", target_chunk_size=300, tokenizer="cl100k_base", compatible="chroma", buffer_size=3).buffer_size == 3


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"tokenizer": "model"}, r"needs chunker\.tokenizer in \['cl100k_base'\], got 'model'"),
        ({"pieces": "sentences"}, r"needs chunker\.pieces=recursive, got 'sentences'"),
        ({"compatible": "yes"}, r"chunker\.compatible must be null or one of \['chroma'\]"),
    ],
)
def test_cluster_semantic_compatible_refusals(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ClusterSemanticChunker(**{"tokenizer": "cl100k_base", "compatible": "chroma", **kwargs})


def test_whitespace_documents_give_no_chunks(encoder):
    doc = Document("blank", " \n\n\t ")
    assert ClusterSemanticChunker(tokenizer="cl100k_base", compatible="chroma", encoder=encoder).chunk(doc) == []
    assert SemanticChunker(breakpoint="percentile", target_chunk_size=300, tokenizer="cl100k_base", compatible="chroma", encoder=encoder).chunk(doc) == []


def test_configs_build_and_null_settings_leave_the_hash_alone():
    cluster = build.build_chunker(
        compose(["chunker=cluster_semantic", "chunker.compatible=chroma", "chunker.tokenizer=cl100k_base", "chunker.max_chunk_size=400"])
    )
    assert (cluster.compatible, cluster.max_chunk_size, cluster.size_limit()) == ("chroma", 400, None)
    kamradt = [
        "chunker=semantic",
        "chunker.compatible=chroma",
        "chunker.tokenizer=cl100k_base",
        "chunker.breakpoint=percentile",
        "chunker.target_chunk_size=300",
    ]
    semantic = build.build_chunker(compose(kamradt))
    assert (semantic.compatible, semantic.target_chunk_size, semantic.size_limit()) == ("chroma", 300, None)
    ours = build.build_chunker(compose(["chunker=semantic", "chunker.breakpoint=percentile", "chunker.target_chunk_size=300"]))
    assert (ours.compatible, ours.target_chunk_size, ours.size_limit()) == (None, 300, ("tokens", "model", 254))
    for name in ("semantic", "cluster_semantic"):
        shipped = compose([f"chunker={name}"])
        assert shipped.chunker.compatible is None
        without = shipped.copy()
        with open_dict(without):
            del without.chunker["compatible"]
            without.chunker.pop("target_chunk_size", None)
        assert "compatible" not in without.chunker and "target_chunk_size" not in without.chunker
        assert build.config_hash(shipped) == build.config_hash(without)
        assert build.config_hash(compose([f"chunker={name}", "chunker.compatible=chroma"])) != build.config_hash(shipped)
