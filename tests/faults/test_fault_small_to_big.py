"""Rank metrics of small-to-big retrieval judge the units that can be returned.

A strategy whose ``expand`` hands back other units than it indexes (``hierarchical``:
children are indexed, parents or windows are returned) must have its ideal ranking (nDCG),
its AP divisor (MAP) and PrecisionΩ computed over the *returnable* units -- the image of
``expand`` over every indexed chunk -- and never over the indexed children, which cannot be
returned. The pool of judged units is the same for every query (it does not grow with the
other queries' results).

Expected values are worked out by hand in the comments, and a brute-force oracle written
here from the definitions (every returnable unit enumerated, relevance from character sets,
nDCG and AP summed term by term) is compared with the harness on seeded random corpora and
rankings, for small-to-big and plain chunkers alike.
"""

from __future__ import annotations

import functools
import math
import random

import pytest

from harness.chunkers.base import Chunker
from harness.chunkers.fixed import FixedChunker
from harness.chunkers.hierarchical import HierarchicalChunker
from harness.chunkers.recursive import RecursiveChunker
from harness.experiment.pipeline import evaluate
from harness.experiment.settings import default_metric_settings
from harness.retrievers.base import Retriever
from harness.retrievers.bm25 import BM25Retriever
from harness.types import Chunk, Dataset, Document, Evidence, Query

# --------------------------------------------------------------------------- the hand-worked corpus
#
# Three paragraphs of three 9-character lines, separated by blank lines (91 characters):
#
#   P0 = [0, 29)   children C00 [0, 9)   C01 [10, 19)  C02 [20, 29)
#   P1 = [31, 60)  children C10 [31, 40) C11 [41, 50)  C12 [51, 60)
#   P2 = [62, 91)  children C20 [62, 71) C21 [72, 81)  C22 [82, 91)
#
# HierarchicalChunker(mode="window", parent_size=40, child_size=10, unit="chars") makes each
# paragraph a parent (two paragraphs are 60 > 40 characters) and each line a child (two lines
# are 19 > 10); the test checks this layout before relying on it.

TEXT = "\n\n".join("\n".join(f"aa{p}{line} bb{p}{line}" for line in range(3)) for p in range(3))
DOC = Document("d", TEXT)
PARENTS = [(0, 29), (31, 60), (62, 91)]
CHILDREN = [(0, 9), (10, 19), (20, 29), (31, 40), (41, 50), (51, 60), (62, 71), (72, 81), (82, 91)]
KS = (1, 3, 10)


def cid(span, doc_id="d"):
    return f"{doc_id}#{span[0]}-{span[1]}"


class GivenRanking(Retriever):
    """Returns, for each query, the chunk ids it is given (best first, scores n, n-1, ...),
    cut to ``k``; a query without a ranking gets nothing."""

    name = "given"

    def __init__(self, rankings: dict[str, list[str]]) -> None:
        self.rankings = rankings

    def index(self, chunks):
        self.ids = {c.chunk_id for c in chunks}

    def search(self, queries, k):
        out = {}
        for q in queries:
            ids = self.rankings.get(q.query_id, [])[:k]
            assert set(ids) <= self.ids, "the test ranks only indexed chunks"
            out[q.query_id] = {c: float(len(ids) - i) for i, c in enumerate(ids)}
        return out


def parent_chunker(**kw):
    return HierarchicalChunker(mode="window", parent_size=40, child_size=10, unit="chars", **kw)


def score(queries, rankings, chunker, docs=(DOC,), **kw):
    ds = Dataset("small-to-big", tuple(docs), tuple(queries))
    ev = evaluate(ds, chunker, GivenRanking(rankings), default_metric_settings(ks=KS, budgets=(), **kw), progress=False)
    return ev, ev.per_query.set_index("query_id")


def test_the_hand_worked_layout_holds():
    h = parent_chunker()
    assert h.parent_spans(TEXT) == PARENTS
    assert [c.spans[0] for c in h.chunk(DOC)] == CHILDREN


def test_only_relevant_parent_ranked_first_scores_one():
    # Evidence = line C11 [41, 50), inside P1. Ranking C11, C00 -> returned P1, P0.
    # Returnable units: P0, P1, P2; relevant: P1 only (overlap 9 >= 0.5 * min(29, 9)).
    #   DCG@10 = 1/log2(2) = 1, IDCG@10 = 1 (one relevant unit) -> nDCG@10 = 1
    #   AP@10 = P@1 * 1 / 1 = 1
    # Counting the relevant child C11 as well (it cannot be returned) gives IDCG 1 + 1/log2(3)
    # = 1.631 -> nDCG 0.613 and AP 1/2: the defect.
    # PrecisionΩ: the returnable units touching E are {P1} -> 9 / 29 (the child C11 alone
    # would give 9 / 9 = 1, a precision no returned unit has).
    q = Query("q", "line aa11", (Evidence("d", 41, 50),))
    _, pq = score([q], {"q": [cid(CHILDREN[4]), cid(CHILDREN[0])]}, parent_chunker())
    assert pq.loc["q", "retrieved"] == "d#31-60;d#0-29"
    assert pq.loc["q", "ndcg@10"] == pytest.approx(1.0)
    assert pq.loc["q", "map@10"] == pytest.approx(1.0)
    assert pq.loc["q", "ndcg@1"] == pytest.approx(1.0)
    assert pq.loc["q", "n_relevant_chunks"] == 1
    assert pq.loc["q", "precision_omega"] == pytest.approx(9 / 29)
    assert pq.loc["q", "recall@1"] == pytest.approx(1.0)  # span metrics were right before and stay so


def test_evidence_in_two_parents_with_the_second_never_returned():
    # Evidence C02 [20, 29) in P0 and C20 [62, 71) in P2. Ranking C10, C02 -> returned P1, P0.
    # Relevant returnable units: P0, P2 (R = 2); rel = [0, 1].
    #   DCG@10 = 1/log2(3) = 0.630930; IDCG@10 = 1 + 1/log2(3) = 1.630930 -> nDCG 0.386853
    #   DCG@3 = DCG@10 (only 2 returned), IDCG@3 = IDCG@10 -> nDCG@3 0.386853; nDCG@1 = 0
    #   AP@10 = (P@2 = 1/2) / 2 = 0.25; AP@1 = 0
    # PrecisionΩ: Ω = P0 ∪ P2 (58 characters), E ∩ Ω = 18 -> 0.310345
    q = Query("q", "two places", (Evidence("d", 20, 29), Evidence("d", 62, 71)))
    _, pq = score([q], {"q": [cid(CHILDREN[3]), cid(CHILDREN[2])]}, parent_chunker())
    assert pq.loc["q", "retrieved"] == "d#31-60;d#0-29"
    g = 1 / math.log2(3)
    assert pq.loc["q", "ndcg@10"] == pytest.approx(g / (1 + g))
    assert pq.loc["q", "ndcg@3"] == pytest.approx(g / (1 + g))
    assert pq.loc["q", "ndcg@1"] == 0.0
    assert pq.loc["q", "map@10"] == pytest.approx(0.25)
    assert pq.loc["q", "map@1"] == 0.0
    assert pq.loc["q", "n_relevant_chunks"] == 2
    assert pq.loc["q", "precision_omega"] == pytest.approx(18 / 58)


def test_window_return_judges_the_windows():
    # return_unit="window", window_chars=5: each child grows by 5 characters on each side,
    # clipped to its parent, whitespace-trimmed. In P1: C10 -> [31, 45), C11 -> [36, 55),
    # C12 -> [46, 60). Evidence = C11 [41, 50) (9 characters):
    #   [31, 45): overlap 4 < 0.5 * 9 -> not relevant
    #   [36, 55): overlap 9            -> relevant
    #   [46, 60): overlap 4            -> not relevant
    # R = 1. Ranking C10, C11 -> returned [31, 45), [36, 55); rel = [0, 1]:
    #   nDCG@10 = (1/log2(3)) / 1 = 0.630930, AP@10 = (1/2) / 1 = 0.5
    # (judging the child C11 too would give R = 2: nDCG 0.386853, AP 0.25.)
    # PrecisionΩ: windows touching E are all three -> Ω = [31, 60), 9 / 29.
    q = Query("q", "line aa11", (Evidence("d", 41, 50),))
    _, pq = score([q], {"q": [cid(CHILDREN[3]), cid(CHILDREN[4])]}, parent_chunker(return_unit="window", window_chars=5))
    assert pq.loc["q", "retrieved"] == "d#31-45;d#36-55"
    assert pq.loc["q", "ndcg@10"] == pytest.approx(1 / math.log2(3))
    assert pq.loc["q", "map@10"] == pytest.approx(0.5)
    assert pq.loc["q", "n_relevant_chunks"] == 1
    assert pq.loc["q", "precision_omega"] == pytest.approx(9 / 29)


@pytest.mark.parametrize("other", [[], [cid(CHILDREN[1])], [cid(CHILDREN[7])], [cid(CHILDREN[4]), cid(CHILDREN[7])]])
def test_pool_is_per_query_not_grown_by_other_queries_results(other):
    # qa: evidence C02 [20, 29) in P0 and C20 [62, 71) in P2; ranking C00 -> returned P0.
    # Relevant returnable units P0, P2 (R = 2), whatever qb retrieves:
    #   nDCG@10 = 1 / (1 + 1/log2(3)) = 0.613147, AP@10 = 1/2.
    # Before the fix the pool held every indexed child plus the units returned for *any*
    # query, so qa's ideal grew when qb happened to return P2.
    qa = Query("qa", "two places", (Evidence("d", 20, 29), Evidence("d", 62, 71)))
    qb = Query("qb", "aa21", (Evidence("d", 72, 81),))
    _, pq = score([qa, qb], {"qa": [cid(CHILDREN[0])], "qb": other}, parent_chunker())
    assert pq.loc["qa", "ndcg@10"] == pytest.approx(1 / (1 + 1 / math.log2(3)))
    assert pq.loc["qa", "map@10"] == pytest.approx(0.5)
    assert pq.loc["qa", "n_relevant_chunks"] == 2


def test_plain_chunker_hand_worked_is_unchanged():
    # RecursiveChunker(chunk_size=10, chars) cuts the same nine lines and returns them as they
    # are. Evidence = [41, 50) (line C11) and [48, 53) (the end of C11, "\n", the start of C12):
    #   C11: overlap 9 (with the first span)            -> relevant
    #   C12 [51, 60): overlap 2 < 0.5 * min(9, 5) = 2.5 -> not relevant
    #   C10: no overlap
    # R = 1. Ranking C10, C12, C11: rel = [0, 0, 1]
    #   nDCG@3 = (1/log2(4)) / 1 = 0.5, AP@3 = (1/3) / 1 = 1/3, nDCG@1 = AP@1 = 0
    # PrecisionΩ: chunks touching E: C11, C12 -> Ω 18 characters, E ∩ Ω = [41, 53) minus the
    # newline at 50, which is outside Ω -> 11 characters -> 11 / 18.
    chunker = RecursiveChunker(chunk_size=10, chunk_overlap=0, unit="chars")
    assert [c.spans[0] for c in chunker.chunk(DOC)] == CHILDREN
    q = Query("q", "aa11", (Evidence("d", 41, 50), Evidence("d", 48, 53)))
    _, pq = score([q], {"q": [cid(CHILDREN[3]), cid(CHILDREN[5]), cid(CHILDREN[4])]}, chunker)
    assert pq.loc["q", "ndcg@3"] == pytest.approx(0.5)
    assert pq.loc["q", "map@3"] == pytest.approx(1 / 3)
    assert pq.loc["q", "ndcg@1"] == 0.0
    assert pq.loc["q", "n_relevant_chunks"] == 1
    assert pq.loc["q", "precision_omega"] == pytest.approx(11 / 18)


# --------------------------------------------------------------------------- a strategy of its own


def _line_spans(text):
    spans, pos = [], 0
    for line in text.split("\n"):
        if line.strip():
            spans.append((pos, pos + len(line)))
        pos += len(line) + 1
    return spans


class LineWindow(Chunker):
    """Indexes every non-blank line and hands back each hit with the line before and after
    it (a sentence-window strategy that is not ``hierarchical``)."""

    name = "line_window"

    def chunk(self, doc):
        return [Chunk.from_spans(doc, [s]) for s in _line_spans(doc.text)]

    def expand(self, ranked, documents):
        out, seen = [], set()
        for c in ranked:
            doc = documents[c.doc_id]
            unit = Chunk.from_spans(doc, [line_window(doc.text, c.spans[0])])
            if unit.chunk_id not in seen:
                seen.add(unit.chunk_id)
                out.append(unit)
        return out


def line_window(text, span):
    lines = _line_spans(text)
    i = lines.index(span)
    return (lines[max(0, i - 1)][0], lines[min(len(lines) - 1, i + 1)][1])


def test_any_strategy_with_its_own_expand_is_judged_on_what_it_returns():
    # LineWindow on the 9 lines: returnable windows (one per line)
    #   [0,19) [0,29) [10,40) [20,50) [31,60) [41,71) [51,81) [62,91) [72,91)
    # Evidence C11 [41, 50): relevant windows are those holding >= 4.5 of its 9 characters:
    #   [20,50) [31,60) [41,71) -> R = 3.
    # Ranking C00, C11 -> returned [0,19), [31,60); rel = [0, 1]:
    #   nDCG@10 = (1/log2(3)) / (1 + 1/log2(3) + 1/log2(4)) = 0.630930 / 2.130930 = 0.296082
    #   AP@10 = (1/2) / 3 = 1/6
    # PrecisionΩ: windows touching E = those three -> Ω = [20, 71) (51 characters) -> 9 / 51.
    q = Query("q", "aa11", (Evidence("d", 41, 50),))
    _, pq = score([q], {"q": [cid(CHILDREN[0]), cid(CHILDREN[4])]}, LineWindow())
    assert pq.loc["q", "retrieved"] == "d#0-19;d#31-60"
    g2, g3 = 1 / math.log2(3), 1 / math.log2(4)
    assert pq.loc["q", "ndcg@10"] == pytest.approx(g2 / (1 + g2 + g3))
    assert pq.loc["q", "map@10"] == pytest.approx(1 / 6)
    assert pq.loc["q", "n_relevant_chunks"] == 3
    assert pq.loc["q", "precision_omega"] == pytest.approx(9 / 51)


# --------------------------------------------------------------------------- brute-force oracle


@functools.lru_cache(maxsize=None)
def chars(doc_id, spans):
    """The characters of a unit as an explicit set of (doc_id, offset)."""
    return frozenset((doc_id, p) for s, e in spans for p in range(s, e))


def oracle_relevant(doc_id, spans, query, rule, fraction):
    """Relevance from the definition, on explicit character sets."""
    unit = chars(doc_id, spans)
    for ev in query.evidence:
        if ev.doc_id != doc_id:
            continue
        ev_chars = chars(ev.doc_id, (ev.span,))
        ov = len(unit & ev_chars)
        if ov == 0:
            continue
        if rule == "any_overlap":
            return True
        if rule == "contains_evidence" and ov == len(ev_chars):
            return True
        if rule == "overlap_fraction" and ov >= fraction * min(len(unit), len(ev_chars)):
            return True
    return False


def oracle_scores(query, returned, returnable, ks, rule, fraction):
    """nDCG@k, AP@k, P@k, Success@k summed term by term; PrecisionΩ on character sets.

    ``returned``: the scored units (doc_id, spans) best first; ``returnable``: every unit the
    strategy can hand back."""
    n_rel = sum(oracle_relevant(d, s, query, rule, fraction) for d, s in returnable)
    rel = [oracle_relevant(d, s, query, rule, fraction) for d, s in returned]
    out = {"n_relevant_chunks": n_rel}
    for k in ks:
        dcg = sum(1 / math.log2(i + 1) for i, r in enumerate(rel[:k], start=1) if r)
        idcg = sum(1 / math.log2(i + 1) for i in range(1, min(n_rel, k) + 1))
        hits, ap = 0, 0.0
        for i, r in enumerate(rel[:k], start=1):
            if r:
                hits += 1
                ap += hits / i
        out[f"ndcg@{k}"] = dcg / idcg if n_rel else 0.0
        out[f"map@{k}"] = ap / n_rel if n_rel else 0.0
        out[f"chunk_precision@{k}"] = sum(rel[:k]) / k if n_rel else 0.0
        out[f"hit_rate@{k}"] = float(any(rel[:k])) if n_rel else 0.0
    evidence = set().union(*(chars(e.doc_id, (e.span,)) for e in query.evidence))
    omega = set()
    for d, s in returnable:
        c = chars(d, s)
        if c & evidence:
            omega |= c
    out["precision_omega"] = len(evidence & omega) / len(omega) if omega else 0.0
    return out


def _strip(text, s, e):
    while s < e and text[s].isspace():
        s += 1
    while e > s and text[e - 1].isspace():
        e -= 1
    return s, e


def unit_of(chunker, child, doc):
    """What one indexed chunk is handed back as, worked out here from the strategy's rule
    (not through ``expand``)."""
    if isinstance(chunker, HierarchicalChunker) and chunker.return_unit != "child":
        ps, pe = child.metadata["parent_span"]  # the parent the chunker cut this child from
        assert ps <= child.start and child.end <= pe
        if chunker.return_unit == "parent":
            return (ps, pe)
        w = chunker.window_chars
        return _strip(doc.text, max(ps, child.start - w), min(pe, child.end + w))
    if isinstance(chunker, LineWindow):
        return line_window(doc.text, child.spans[0])
    return None  # a plain chunker hands back the chunk itself


def oracle_for(chunker, docs, chunks, hits, query, ks, rule, fraction):
    by_doc = {d.doc_id: d for d in docs}
    if isinstance(chunker, HierarchicalChunker) and chunker.return_unit == "parent":
        returnable = {(c.doc_id, (tuple(c.metadata["parent_span"]),)) for c in chunks}  # the distinct parents
    else:
        returnable = set()
        for c in chunks:
            u = unit_of(chunker, c, by_doc[c.doc_id])
            returnable.add((c.doc_id, c.spans if u is None else (u,)))
    returned, seen = [], set()
    for c in hits:
        u = unit_of(chunker, c, by_doc[c.doc_id])
        key = (c.doc_id, c.spans if u is None else (u,))
        if key not in seen:
            seen.add(key)
            returned.append(key)
    returned = returned[: max(ks)]
    ids = ";".join(f"{d}#" + "+".join(f"{s}-{e}" for s, e in spans) for d, spans in returned)
    return ids, oracle_scores(query, returned, sorted(returnable), ks, rule, fraction)


WORDS = "kestrel queue job worker retry lease shard fence token ack nack drain".split()


def random_dataset(rng, n):
    docs = []
    for d in range(rng.randint(1, 3)):
        paras = []
        for p in range(rng.randint(2, 5)):
            lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6))) for _ in range(rng.randint(1, 4))]
            if rng.random() < 0.5:
                lines.insert(0, f"## Part {d}{p}")
            paras.append("\n".join(lines))
        docs.append(Document(f"d{d}.md", "\n\n".join(paras)))
    queries = []
    for i in range(n):
        evs = []
        for _ in range(rng.randint(1, 3)):
            doc = rng.choice(docs)
            s = rng.randrange(len(doc.text))
            evs.append(Evidence(doc.doc_id, s, min(len(doc.text), s + rng.randint(1, 40))))
        queries.append(Query(f"q{i}", "?", tuple(evs)))
    return docs, queries


CHUNKERS = {
    "hier-window-parent": lambda: HierarchicalChunker(mode="window", parent_size=60, child_size=15, unit="chars"),
    "hier-headings-window": lambda: HierarchicalChunker(
        mode="headings", parent_size=200, child_size=5, child_overlap=2, unit="words", return_unit="window", window_chars=7
    ),
    "hier-markers-parent": lambda: HierarchicalChunker(mode="markers", markers=[r"^## "], parent_size=12, child_size=4, unit="words"),
    "hier-child": lambda: HierarchicalChunker(mode="window", parent_size=60, child_size=15, unit="chars", return_unit="child"),
    "line-window": LineWindow,
    "plain-recursive": lambda: RecursiveChunker(chunk_size=30, chunk_overlap=10, unit="chars"),
    "plain-fixed": lambda: FixedChunker(chunk_size=5, chunk_overlap=2, unit="words"),
}


@pytest.mark.parametrize("name", sorted(CHUNKERS))
def test_harness_equals_brute_force_on_random_rankings(name):
    rng = random.Random(f"small-to-big/{name}")
    compared = 0
    for _ in range(25):
        docs, queries = random_dataset(rng, rng.randint(2, 5))
        chunker = CHUNKERS[name]()
        chunks = chunker.chunk_all(docs)
        ids = [c.chunk_id for c in chunks]
        rankings = {q.query_id: rng.sample(ids, rng.randint(0, min(len(ids), 14))) for q in queries}
        rule = rng.choice(["overlap_fraction", "any_overlap", "contains_evidence"])
        fraction = rng.choice([0.0, 0.3, 0.5, 1.0])
        ev, pq = score(queries, rankings, chunker, docs=docs, relevance=rule, relevance_fraction=fraction)
        by_id = {c.chunk_id: c for c in chunks}
        for q in queries:
            hits = [by_id[c] for c in sorted(ev.run[q.query_id], key=lambda c: -ev.run[q.query_id][c])]
            ids_expected, expected = oracle_for(chunker, docs, chunks, hits, q, KS, rule, fraction)
            assert pq.loc[q.query_id, "retrieved"] == ids_expected
            for metric, value in expected.items():
                assert pq.loc[q.query_id, metric] == pytest.approx(value, abs=1e-9), (name, q, metric)
            compared += 1
    assert compared >= 50


@pytest.mark.parametrize(
    "chunker",
    [
        HierarchicalChunker(mode="headings", parent_size=1200, child_size=200, unit="chars"),
        HierarchicalChunker(mode="headings", parent_size=1200, child_size=200, unit="chars", return_unit="window", window_chars=150),
        RecursiveChunker(chunk_size=400, chunk_overlap=0, unit="chars"),
    ],
    ids=["parent", "window", "plain"],
)
def test_kestrel_with_bm25_equals_brute_force(kestrel, chunker):
    """Real BM25 rankings on the bundled dataset, every query checked against the oracle."""
    ds = Dataset("kestrel-sub", kestrel.documents, kestrel.queries[:60])
    ev = evaluate(ds, chunker, BM25Retriever(), default_metric_settings(ks=KS, budgets=()), progress=False)
    pq = ev.per_query.set_index("query_id")
    by_id = {c.chunk_id: c for c in ev.chunks}
    docs = list(ds.documents)
    for q in ds.queries:
        hits = [by_id[c] for c in sorted(ev.run[q.query_id], key=lambda c: (-ev.run[q.query_id][c], c))]
        ids_expected, expected = oracle_for(chunker, docs, ev.chunks, hits, q, KS, "overlap_fraction", 0.5)
        assert pq.loc[q.query_id, "retrieved"] == ids_expected
        for metric, value in expected.items():
            assert pq.loc[q.query_id, metric] == pytest.approx(value, abs=1e-9), (q.query_id, metric)


# --------------------------------------------------------------------------- the same units, the same numbers


class GivenSpans(Chunker):
    """A plain strategy that indexes exactly the spans it is given, per document."""

    name = "given_spans"

    def __init__(self, spans: dict[str, list[tuple[int, int]]]) -> None:
        self.spans = spans

    def chunk(self, doc):
        return [Chunk.from_spans(doc, [s]) for s in self.spans.get(doc.doc_id, [])]


@pytest.mark.parametrize("rule", ["overlap_fraction", "any_overlap", "contains_evidence"])
def test_small_to_big_scores_like_indexing_the_returned_units_directly(kestrel, rule):
    """Returning parents in some order must score exactly like a plain chunking whose chunks
    *are* those parents, ranked in that order: the children behind them change nothing."""
    h = HierarchicalChunker(mode="headings", parent_size=1500, child_size=250, unit="chars")
    queries = kestrel.queries[:40]
    children = h.chunk_all(kestrel.documents)
    rng = random.Random(f"same-units/{rule}")
    rankings = {q.query_id: rng.sample([c.chunk_id for c in children], 25) for q in queries}
    ds = Dataset("kestrel-sub", kestrel.documents, queries)
    small = evaluate(ds, h, GivenRanking(rankings), default_metric_settings(ks=KS, budgets=(), relevance=rule), progress=False).per_query.set_index("query_id")
    parents: dict[str, list[tuple[int, int]]] = {}
    for c in children:
        span = tuple(c.metadata["parent_span"])
        if span not in parents.setdefault(c.doc_id, []):
            parents[c.doc_id].append(span)
    direct_rankings = {qid: small.loc[qid, "retrieved"].split(";") if small.loc[qid, "retrieved"] else [] for qid in small.index}
    big = evaluate(
        ds, GivenSpans(parents), GivenRanking(direct_rankings), default_metric_settings(ks=KS, budgets=(), relevance=rule), progress=False
    ).per_query.set_index("query_id")
    assert (big["retrieved"] == small["retrieved"]).all()
    cols = [f"{f}@{k}" for f in ("ndcg", "map", "chunk_precision", "hit_rate", "mrr", "recall") for k in KS] + ["precision_omega", "n_relevant_chunks"]
    for col in cols:
        assert big[col].tolist() == pytest.approx(small[col].tolist(), abs=1e-12), col
    assert small["n_relevant_chunks"].sum() > 0 and small["ndcg@10"].sum() > 0  # the comparison is not vacuous


def test_returnable_units_and_per_query_pool_directly():
    from harness.evaluation.metrics.ir import ChunkIndex, chunk_qrels, returnable_units

    h = parent_chunker()
    children = h.chunk(DOC)
    units = returnable_units(children, h.expand, {"d": DOC})
    assert sorted(u.spans[0] for u in units) == PARENTS  # the distinct parents, once each
    assert returnable_units(children, None, {"d": DOC}) == children  # identity: the chunks themselves
    # a unit returned for q1 only (not in the index) is judged for q1, never for q2
    q1 = Query("q1", "?", (Evidence("d", 41, 50),))
    q2 = Query("q2", "?", (Evidence("d", 41, 50),))
    odd = Chunk.from_spans(DOC, [(36, 60)])
    qrels = chunk_qrels([q1, q2], ChunkIndex(units), returned={"q1": [odd]})
    assert qrels == {"q1": {"d#31-60": 1, "d#36-60": 1}, "q2": {"d#31-60": 1}}


class MergeRuns(Chunker):
    """Indexes lines; hands back each run of consecutive hits on neighbouring lines of one
    document as one merged unit (an expansion that depends on which hits come together)."""

    name = "merge_runs"

    def chunk(self, doc):
        return [Chunk.from_spans(doc, [s]) for s in _line_spans(doc.text)]

    def expand(self, ranked, documents):
        out = []
        for c in ranked:
            ends = [e for _, e in _line_spans(documents[c.doc_id].text)]
            if out and out[-1].doc_id == c.doc_id and out[-1].end in ends and ends.index(c.end) == ends.index(out[-1].end) + 1:
                out[-1] = Chunk.from_spans(documents[c.doc_id], [(out[-1].start, c.end)])
            else:
                out.append(c)
        return out


def test_a_unit_only_returned_in_combination_is_judged_for_its_query_and_warned_about():
    # MergeRuns on the 9 lines: single hits come back as the lines themselves, so the
    # returnable units are the 9 lines; ranking C10, C11 comes back as one merged unit
    # [31, 50), which is not the expansion of any single line.
    # Evidence C11 [41, 50): relevant units of qa's pool: the line C11 and the merged unit
    # [31, 50) (overlap 9 >= 0.5 * 9) -> R = 2; returned [31, 50): rel = [1]
    #   nDCG@10 = 1 / (1 + 1/log2(3)) = 0.613147, AP@10 = 1/2.
    # qb has the same evidence but retrieves nothing merged: R = 1 (the merged unit returned
    # for qa is not in qb's pool). Returned C11: nDCG@10 = AP@10 = 1.
    qa = Query("qa", "aa11", (Evidence("d", 41, 50),))
    qb = Query("qb", "aa11", (Evidence("d", 41, 50),))
    with pytest.warns(UserWarning, match=r"chunker 'merge_runs': 1 returned units are not the expansion of any single indexed chunk"):
        _, pq = score([qa, qb], {"qa": [cid(CHILDREN[3]), cid(CHILDREN[4])], "qb": [cid(CHILDREN[4])]}, MergeRuns())
    assert pq.loc["qa", "retrieved"] == "d#31-50"
    assert pq.loc["qa", "ndcg@10"] == pytest.approx(1 / (1 + 1 / math.log2(3)))
    assert pq.loc["qa", "map@10"] == pytest.approx(0.5)
    assert pq.loc["qa", "n_relevant_chunks"] == 2
    assert pq.loc["qb", "ndcg@10"] == pytest.approx(1.0)
    assert pq.loc["qb", "map@10"] == pytest.approx(1.0)
    assert pq.loc["qb", "n_relevant_chunks"] == 1
