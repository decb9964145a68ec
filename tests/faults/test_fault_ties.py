"""Issue 13, class 5: ties that score as hits.

A lexical retriever must never rank a chunk that shares no token with the query: such a
chunk has no evidence of relevance, and returning it in corpus order (all scores 0) lets a
query like ``???`` "find" whatever evidence happens to sit first. Every term that occurs in
the corpus keeps a positive IDF (Lucene's BM25 IDF), ties among positive scores are broken
in document order (the rule of :func:`harness.retrievers.base.ranked`: doc id in natural
order, then start and end offsets as numbers; issue 24, below), and chunks or
queries of the wrong type are refused with a ``TypeError`` naming the parameter.

Expected scores come from the Lucene BM25 formula written out below, independently of the
library the retriever uses:

    idf(t)    = ln(1 + (N - n_t + 0.5) / (n_t + 0.5))
    score(d)  = sum over query tokens t in d of idf(t) * tf / (tf + k1 * (1 - b + b * |d| / avgdl))
"""

from __future__ import annotations

import math
import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.chunkers.fixed import FixedChunker
from harness.experiment.pipeline import evaluate
from harness.experiment.settings import default_metric_settings
from harness.retrievers.base import ranked
from harness.retrievers.bm25 import BM25Retriever, bm25_tokenize
from harness.types import Chunk, Dataset, Document, Evidence, Query

# Four lines of six tokens each: "port" and "the" occur in exactly half of them, which
# gives rank-bm25's BM25Okapi an IDF of ln((4 - 2 + 0.5) / (2 + 0.5)) = 0.
LINES = [
    "The broker listens on port 8450.",
    "Workers send heartbeats every fifteen seconds.",
    "The dashboard runs on port 8460.",
    "Retry backoff is exponential by default.",
]
DOC = Document("kb.txt", "\n".join(LINES))


def line_chunks() -> list[Chunk]:
    out, pos = [], 0
    for line in LINES:
        out.append(Chunk.from_spans(DOC, [(pos, pos + len(line))]))
        pos += len(line) + 1
    return out


def q(text: str, qid: str = "q1") -> Query:
    return Query(qid, text, (Evidence("kb.txt", 0, 5),))


def lucene_scores(query: str, texts: list[str], k1: float = 1.5, b: float = 0.75) -> list[float]:
    """Lucene BM25 written out from the formula (independent of the retriever's library)."""
    docs = [bm25_tokenize(t) for t in texts]
    n_docs = len(docs)
    avgdl = sum(len(d) for d in docs) / n_docs
    out = []
    for d in docs:
        s = 0.0
        for t in bm25_tokenize(query):
            tf = d.count(t)
            if tf == 0:
                continue
            n_t = sum(1 for other in docs if t in other)
            idf = math.log(1 + (n_docs - n_t + 0.5) / (n_t + 0.5))
            s += idf * tf / (tf + k1 * (1 - b + b * len(d) / avgdl))
        out.append(s)
    return out


def test_term_in_half_the_chunks_ranks_only_the_chunks_that_contain_it():
    cs = line_chunks()
    retr = BM25Retriever()
    retr.index(cs)
    run = retr.search([q("Which port?")], k=10)
    # "which" is not in the corpus; "port" is in lines 0 and 2 (n=2 of N=4), all lines 6 tokens:
    # idf = ln(1 + 2.5/2.5) = ln 2, tf part = 1 / (1 + 1.5) -> ln(2) / 2.5 for both
    assert set(run["q1"]) == {cs[0].chunk_id, cs[2].chunk_id}
    for cid in run["q1"]:
        assert run["q1"][cid] == pytest.approx(math.log(2) / 2.5, rel=1e-6)


@pytest.mark.parametrize("text", ["???", "!!! ... ---", "zebra unicorn"])
def test_query_sharing_no_token_with_the_corpus_gets_no_hits(text):
    retr = BM25Retriever()
    retr.index(line_chunks())
    run = retr.search([q(text), q("heartbeats", "q2")], k=5)
    assert run["q1"] == {}  # present, empty: scored 0 by every metric, never a hit
    assert list(run["q2"]) == [line_chunks()[1].chunk_id]


def test_term_in_every_chunk_keeps_a_positive_idf():
    texts = ["alpha beta", "alpha gamma", "alpha delta delta", "alpha"]
    doc = Document("d", " ".join(texts))
    cs, pos = [], 0
    for t in texts:
        cs.append(Chunk.from_spans(doc, [(pos, pos + len(t))]))
        pos += len(t) + 1
    retr = BM25Retriever()
    retr.index(cs)
    run = retr.search([q("alpha")], k=4)
    expected = lucene_scores("alpha", texts)
    assert all(e > 0 for e in expected)  # ln(1 + 0.5 / 4.5) > 0
    assert len(run["q1"]) == 4
    for c, e in zip(cs, expected):
        assert run["q1"][c.chunk_id] == pytest.approx(e, rel=1e-5)


def test_single_chunk_corpus_scores_a_matching_query_positive_and_nothing_else():
    # N = n = 1: Robertson's IDF ln((1 - 1 + 0.5) / 1.5) is negative; Lucene's is ln(1 + 1/3)
    doc = Document("one.md", "Kestrel broker")
    c = Chunk.from_spans(doc, [(0, len(doc.text))])
    retr = BM25Retriever()
    retr.index([c])
    run = retr.search([q("broker?"), q("dashboard?", "q2")], k=3)
    # |d| = avgdl: tf part 1 / (1 + 1.5)
    assert run["q1"] == {c.chunk_id: pytest.approx(math.log(1 + 1 / 3) / 2.5, rel=1e-9)}
    assert run["q2"] == {}


@pytest.mark.parametrize("k1, b", [(0.0, 0.0), (0.0, 1.0), (1.2, 1.0), (3.0, 0.3)])
def test_chunks_without_tokens_are_indexed_but_never_returned(k1, b):
    texts = ["---", "broker broker port", "|  |  |", "port"]
    doc = Document("t.md", "\n".join(texts))
    cs, pos = [], 0
    for t in texts:
        cs.append(Chunk.from_spans(doc, [(pos, pos + len(t))]))
        pos += len(t) + 1
    retr = BM25Retriever(k1=k1, b=b)
    retr.index(cs)
    run = retr.search([q("port"), q("---", "q2"), q("port broker port", "q3")], k=4)
    assert set(run["q1"]) == {cs[1].chunk_id, cs[3].chunk_id}
    assert run["q2"] == {}
    assert list(run["q3"]) == [cs[1].chunk_id, cs[3].chunk_id]
    for qid, text in (("q1", "port"), ("q3", "port broker port")):
        expected = lucene_scores(text, texts, k1=k1, b=b)
        for c, e in zip(cs, expected):
            if c.chunk_id in run[qid]:
                assert run[qid][c.chunk_id] == pytest.approx(e, rel=1e-9) and e > 0
    # a corpus in which no chunk has a token answers every query with nothing
    only_marks = [cs[0], cs[2]]
    retr.index(only_marks)
    assert retr.search([q("port"), q("---", "q2")], k=2) == {"q1": {}, "q2": {}}


def test_pipeline_recall_of_a_query_without_matching_tokens_is_zero():
    """The issue's example end to end: before, ``???`` got recall@5 = 1.0 from corpus order."""
    queries = (
        Query("punct", "???", (Evidence("kb.txt", 0, len(LINES[0])),)),
        # "port" occurs in lines 0 and 2 only; the evidence is line 1
        Query("port", "Which port?", (Evidence("kb.txt", len(LINES[0]) + 1, len(LINES[0]) + 1 + len(LINES[1])),)),
        Query("hb", "How often are heartbeats sent?", (Evidence("kb.txt", len(LINES[0]) + 1, len(LINES[0]) + 1 + len(LINES[1])),)),
    )
    ds = Dataset(name="tiny", documents=(DOC,), queries=queries)
    chunker = FixedChunker(chunk_size=6, chunk_overlap=0, unit="words")
    ev = evaluate(ds, chunker, BM25Retriever(), default_metric_settings(ks=(5,), budgets=()), progress=False)
    assert [c.text for c in ev.chunks] == LINES
    per = ev.per_query.set_index("query_id")
    assert per.loc["punct", "recall@5"] == 0.0
    assert per.loc["punct", "retrieved"] == ""
    assert per.loc["port", "recall@5"] == 0.0
    assert per.loc["hb", "recall@5"] == 1.0
    assert ev.metrics["recall@5"] == pytest.approx(1 / 3)


def test_ties_among_positive_scores_break_in_document_order_whatever_the_index_order():
    # the same text in two documents: identical positive scores for "broker"
    docs = [
        Document(n, t)
        for n, t in [
            ("b.txt", "broker stores jobs"),
            ("a.txt", "broker stores jobs"),
            ("c.txt", "workers run jobs"),
            ("d.txt", "dashboard shows queues"),
            ("e.txt", "retry with backoff"),
        ]
    ]
    cs = [Chunk.from_spans(d, [(0, len(d.text))]) for d in docs]
    for order in (cs, cs[::-1], [cs[0], cs[3], cs[1], cs[4], cs[2]]):
        retr = BM25Retriever()
        retr.index(order)
        top1 = retr.search([q("broker")], k=1)["q1"]
        assert list(top1) == ["a.txt#0-18"]  # "a.txt#..." < "b.txt#..."
        full = retr.search([q("broker")], k=5)
        assert ranked(full, "q1") == ["a.txt#0-18", "b.txt#0-18"]
        assert full["q1"]["a.txt#0-18"] == full["q1"]["b.txt#0-18"] > 0


def test_random_corpora_return_exactly_the_chunks_sharing_a_token_in_lucene_order():
    rng = random.Random(13)
    vocab = [f"w{i}" for i in range(12)] + ["the", "port", "ünïcode", "日本"]
    for trial in range(30):
        n = rng.randint(1, 9)
        texts = [" ".join(rng.choice(vocab) for _ in range(rng.randint(1, 8))) for _ in range(n)]
        doc = Document(f"doc{trial}", "\n".join(texts))
        cs, pos = [], 0
        for t in texts:
            cs.append(Chunk.from_spans(doc, [(pos, pos + len(t))]))
            pos += len(t) + 1
        cs = list({c.chunk_id: c for c in cs}.values())
        retr = BM25Retriever()
        retr.index(cs)
        query = " ".join(rng.choice(vocab + ["absent", "?"]) for _ in range(rng.randint(1, 4)))
        k = rng.randint(1, 12)
        run = retr.search([q(query)], k=k)["q1"]
        expected = dict(zip((c.chunk_id for c in cs), lucene_scores(query, [c.text for c in cs])))
        positive = {cid for cid, s in expected.items() if s > 0}
        qtok = set(bm25_tokenize(query))
        assert positive == {c.chunk_id for c in cs if qtok & set(bm25_tokenize(c.text))}
        assert len(run) == min(k, len(positive))
        assert set(run) <= positive
        for cid, s in run.items():
            assert s == pytest.approx(expected[cid], rel=1e-5)
        # nothing left out scores clearly better than the worst returned chunk
        if run:
            worst = min(run.values())
            assert all(expected[c] <= worst * (1 + 1e-5) for c in positive - set(run))
        assert ranked({"q1": run}, "q1") == list(run)  # the dict is already in ranking order


def test_plain_strings_instead_of_chunks_or_queries_raise_type_error_naming_the_parameter(encoder):
    from harness.retrievers.faiss import FaissRetriever

    for retr in (BM25Retriever(), FaissRetriever(encoder=encoder)):
        with pytest.raises(TypeError, match=r"chunks\[0\].*str.*Chunk"):
            retr.index(["a", "b"])
        with pytest.raises(TypeError, match=r"chunks.*str.*Chunk"):
            retr.index("broker stores jobs")
        retr.index(line_chunks())
        with pytest.raises(TypeError, match=r"queries\[0\].*str.*Query"):
            retr.search(["Which port?"], k=3)
        # two chunks with one id would merge into one result silently
        with pytest.raises(ValueError, match=r"chunks\[0\] and chunks\[2\] share chunk_id 'kb.txt#0-32'"):
            retr.index([line_chunks()[0], line_chunks()[1], line_chunks()[0]])


# ----------------------------------------------------------------------------------------
# Issue 24, class 5: ties decided by string order. Equal scores must be ordered by the
# natural order of the document id (digit runs compared as numbers: doc9 < doc10), then
# the start and end offsets as numbers (d#5-9 before d#100-110), by every retriever and
# every metric, whatever order the chunks were indexed in. The expected orders below are
# written by hand or computed by ``numeric_key``, a separate parse of the chunk id.


def numeric_key(chunk_id: str) -> tuple:
    """The tie rule written out independently: (doc id with numbers as numbers, offsets)."""
    doc, _, spans = chunk_id.rpartition("#")
    parts = re.split(r"(\d+)", doc)
    return (tuple(int(p) if i % 2 else p for i, p in enumerate(parts)), tuple(int(x) for x in re.findall(r"\d+", spans)), chunk_id)


def tie_order(scores: dict[str, float]) -> list[str]:
    return sorted(scores, key=lambda cid: (-scores[cid], numeric_key(cid)))


#: The same sentence at offsets 5 and 100 of one document and at offset 0 of doc9 and doc10.
SENTENCE = "broker stores jobs"
FILL = "x" * 5
TWIN_TEXT = FILL + SENTENCE + "y" * (100 - 5 - len(SENTENCE)) + SENTENCE


def twin_chunks() -> list[Chunk]:
    d = Document("d", TWIN_TEXT)
    n = len(SENTENCE)
    out = [Chunk.from_spans(d, [(5, 5 + n)]), Chunk.from_spans(d, [(100, 100 + n)])]
    out += [Chunk.from_spans(Document(name, SENTENCE), [(0, n)]) for name in ("doc10", "doc9")]
    out += [Chunk.from_spans(Document(name, text), [(0, len(text))]) for name, text in (("e", "workers run tasks"), ("f", "dashboard shows queues"))]
    return out


#: By hand: "d" < "doc9" < "doc10" (9 < 10 as numbers), and in d offset 5 before 100.
TWIN_ORDER = ["d#5-23", "d#100-118", "doc9#0-18", "doc10#0-18"]


def test_ties_are_ordered_by_document_then_offsets_as_numbers_in_every_ranking():
    cs = twin_chunks()
    assert [c.chunk_id for c in cs[:4]] == ["d#5-23", "d#100-118", "doc10#0-18", "doc9#0-18"]
    scores = {cid: 1.0 for cid in TWIN_ORDER[::-1]}
    assert ranked({"q": scores}, "q") == TWIN_ORDER
    for order in (cs, cs[::-1], cs[2:] + cs[:2]):
        retr = BM25Retriever()
        retr.index(order)
        full = retr.search([q("broker")], k=6)["q1"]
        assert list(full) == TWIN_ORDER and len(set(full.values())) == 1
        for k in (1, 2, 3):  # the top-k cut follows the same rule
            assert list(retr.search([q("broker")], k=k)["q1"]) == TWIN_ORDER[:k]


def test_fusion_and_document_metrics_use_the_numeric_rule():
    from harness.evaluation.metrics.ir import document_run
    from harness.retrievers.hybrid import order, rrf_fuse, weighted_fuse

    tied = {"d#100-110": 0.5, "d#5-9": 0.5, "doc10#0-4": 0.5, "doc9#0-4": 0.5}
    expected = ["d#5-9", "d#100-110", "doc9#0-4", "doc10#0-4"]
    assert order(tied) == expected
    assert list(rrf_fuse([tied])) == expected
    assert list(weighted_fuse(tied, {})) == expected
    # max-pooled documents: equal best scores -> the better ranked best chunk first (doc9 before doc10)
    docs = document_run({"q": {"doc10#0-4": 0.5, "doc9#0-4": 0.5}}, {"doc10#0-4": "doc10", "doc9#0-4": "doc9"})
    assert sorted(docs["q"], key=lambda d: -docs["q"][d]) == ["doc9", "doc10"]


def test_faiss_keeps_the_tied_chunk_the_rule_ranks_first_at_the_cut(encoder):
    from harness.retrievers.faiss import FaissRetriever

    cs = twin_chunks()
    for order in (cs, cs[::-1]):
        retr = FaissRetriever(encoder=encoder)
        retr.index(order)
        full = retr.search([q("Where are jobs stored?")], k=6)["q1"]
        assert list(full)[:4] == TWIN_ORDER and len({full[c] for c in TWIN_ORDER}) == 1
        for k in (1, 2, 3):
            assert list(retr.search([q("Where are jobs stored?")], k=k)["q1"]) == TWIN_ORDER[:k]


#: Chunk ids with varied numbers: documents doc{n}, offsets of 1 to 4 digits.
TIE_IDS = st.builds(lambda n, s, w: f"doc{n}#{s}-{s + w}", st.integers(0, 120), st.integers(0, 2000), st.integers(1, 300))


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(TIE_IDS, st.sampled_from([0.25, 0.5, 1.0]), min_size=1, max_size=25), st.randoms(use_true_random=False))
def test_every_ranking_follows_the_numeric_rule_on_generated_ties(scores, rnd):
    from harness.evaluation.metrics.ir import run_from_rankings
    from harness.retrievers.hybrid import order, top

    expected = tie_order(scores)
    shuffled = list(scores.items())
    rnd.shuffle(shuffled)
    again = dict(shuffled)
    assert ranked({"q": again}, "q") == expected
    assert order(again) == expected
    for k in (1, 3, len(expected)):
        assert list(top(again, k)) == expected[:k]
    # the metric side scores ranks n - i: the scored order is the rule's order
    scored = run_from_rankings({"q": ranked({"q": again}, "q")})["q"]
    assert sorted(scored, key=lambda c: -scored[c]) == expected


WORDS = ["broker", "jobs", "port"]


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 30), st.integers(0, 3), st.lists(st.sampled_from(WORDS), min_size=1, max_size=2)), min_size=1, max_size=14),
    st.randoms(use_true_random=False),
    st.integers(1, 6),
)
def test_bm25_top_k_is_the_rule_s_prefix_whatever_the_index_order(specs, rnd, k):
    cs = []
    for n, slot, words in specs:
        text = " ".join(words)
        start = slot * 1000 + (n % 7)  # offsets of 1 to 4 digits
        doc = Document(f"doc{n}", " " * start + text)
        c = Chunk.from_spans(doc, [(start, start + len(text))])
        if c.chunk_id not in {x.chunk_id for x in cs}:
            cs.append(c)
    shuffled = cs[:]
    rnd.shuffle(shuffled)
    runs = []
    for order in (cs, shuffled):
        retr = BM25Retriever()
        retr.index(order)
        full = retr.search([q("broker jobs")], k=len(cs))["q1"]
        assert list(full) == tie_order(full)
        assert list(retr.search([q("broker jobs")], k=k)["q1"]) == list(full)[:k]
        runs.append(full)
    assert list(runs[0].items()) == list(runs[1].items())


# ---------------------------------------------------------------- ties across the cut-off


def test_queries_whose_tie_crosses_a_cutoff_are_counted():
    """By hand: "broker" scores the four twins alike (ranks 1-4), "dashboard" one chunk."""
    cs = twin_chunks()
    docs = {}
    for c in cs:
        docs.setdefault(c.doc_id, Document(c.doc_id, TWIN_TEXT if c.doc_id == "d" else c.text))
    queries = (
        Query("tied", "broker", (Evidence("doc10", 0, len(SENTENCE)),)),
        Query("clear", "dashboard", (Evidence("f", 0, 9),)),
    )
    ds = Dataset(name="twins", documents=tuple(docs.values()), queries=queries)

    from harness.chunkers.base import Chunker

    class TwinChunker(Chunker):
        name = "twins"

        def chunk(self, doc):
            return [c for c in cs if c.doc_id == doc.doc_id]

    ev = evaluate(ds, TwinChunker(), BM25Retriever(), default_metric_settings(ks=(1, 2, 4, 5), budgets=()), progress=False)
    # ranks 1..4 tie: the cut at 1 and at 2 splits the tie (rank k and k + 1 score alike); at 4
    # the tie ends (rank 5 does not exist for "broker": only four chunks share a token)
    assert ev.ties == {"ties.crossing_at_1": 1.0, "ties.crossing_at_2": 1.0, "ties.crossing_at_4": 0.0, "ties.crossing_at_5": 0.0}
    # the metric depends on the rule: doc10 is 4th by the rule, so recall@1/2 are 0, recall@4 is 1
    per = ev.per_query.set_index("query_id")
    assert per.loc["tied", "recall@2"] == 0.0 and per.loc["tied", "recall@4"] == 1.0

    # logged with the run's step-0 values, and one warning line in the run summary
    from conftest import compose

    from harness.experiment.run import Components, metric_groups, prepare, ties_warning

    class Counters:  # the encoder's counters a run logs (no model: BM25 embeds nothing)
        n_encoded = n_cache_hits = 0

        def run_metrics(self):
            return {}

    groups = metric_groups(
        ev,
        Components(Counters(), TwinChunker(), BM25Retriever(), None, None),
        None,
        prepare(compose(["retriever=bm25", "metrics.ks=[1,2,4,5]", "stats.bootstrap=0"])),
    )
    logged = {name: v for values, step in groups if step == 0 for name, v in values.items()}
    assert {name: logged[name] for name in ev.ties} == ev.ties
    line = ties_warning(ev.ties)
    assert line.startswith("WARNING ties.crossing_at_1=1, ties.crossing_at_2=1: ") and "\n" not in line and "tie rule" in line
    assert ties_warning({"ties.crossing_at_5": 0.0}) is None


def test_a_tie_just_below_the_fetched_depth_is_counted_from_what_the_retriever_left_out():
    # k = 2 is the deepest cut, so the run holds 2 chunks; ranks 2 and 3 tie
    cs = twin_chunks()
    retr = BM25Retriever()
    retr.index(cs)
    run = retr.search([q("broker"), q("dashboard", "q2")], k=2)
    from harness.evaluation.diagnostics import crossing_ties

    assert crossing_ties(run, [1, 2], retr.beyond_cut()) == {"ties.crossing_at_1": 1.0, "ties.crossing_at_2": 1.0}
    assert crossing_ties(run, [2], {}) == {"ties.crossing_at_2": 0.0}  # unknown beyond the run: not counted


class TableEncoder:
    """Looks each text up in a table of fixed unit vectors (FAISS is what is tested here)."""

    def __init__(self, table):
        self.table = table

    def encode(self, texts, desc="", role="document"):
        import numpy as np

        return np.stack([self.table[t] for t in texts]).astype(np.float32)


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 40), st.integers(0, 3000), st.integers(0, 2)), min_size=2, max_size=40, unique_by=lambda t: (t[0], t[1])),
    st.randoms(use_true_random=False),
    st.integers(1, 8),
)
def test_faiss_flat_top_k_is_the_rule_s_prefix_over_many_exact_ties(specs, rnd, k):
    import numpy as np

    from harness.retrievers.faiss import FaissRetriever

    # three texts -> three vectors at angles 0, 60 and 120 degrees from the query: many exact ties
    angles = {f"t{v}": np.radians(60 * v) for v in range(3)}
    table = {t: np.array([np.cos(a), np.sin(a), 0.0, 0.0]) for t, a in angles.items()}
    table["query"] = np.array([1.0, 0.0, 0.0, 0.0])
    cs = [Chunk(doc_id=f"doc{n}", spans=((s, s + 4),), text=f"t{v}", chunk_id=f"doc{n}#{s}-{s + 4}") for n, s, v in specs]
    by_id = {c.chunk_id: c for c in cs}
    shuffled = cs[:]
    rnd.shuffle(shuffled)
    results = []
    for order in (cs, shuffled):
        retr = FaissRetriever(encoder=TableEncoder(table))
        retr.index(order)
        top = retr.search([Query("q1", "query", ())], k=k)["q1"]
        full = retr.search([Query("q1", "query", ())], k=len(cs))["q1"]
        # by hand: text t0 scores 1, t1 0.5, t2 -0.5; within one text the numeric rule
        expected = sorted(by_id, key=lambda cid: (int(by_id[cid].text[1]), numeric_key(cid)))
        assert list(full) == expected
        assert list(top) == expected[:k]
        results.append(list(top))
    assert results[0] == results[1]
