"""``metrics.convention=chroma``: Chroma's recall, precision, IoU and PrecisionΩ beside ours.

Expected values are worked out by hand in the comments (ranges in characters, ``r`` a
reference = evidence span, ``N`` the numerator). A brute-force character-set oracle checks
the range arithmetic on generated cases, and where the two conventions coincide (no
overlapping references, no overlapping units, nothing touching) Chroma's values must equal
ours. The end-to-end test runs :func:`harness.experiment.pipeline.evaluate` with BM25.
"""

from __future__ import annotations

import pytest
from conftest import compose
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from harness.chunkers.fixed import FixedChunker
from harness.chunkers.hierarchical import HierarchicalChunker
from harness.evaluation.metrics import chroma, metric_names, parse_name
from harness.evaluation.metrics.ir import ChunkIndex, returnable_units
from harness.evaluation.metrics.ir import precision_omega as our_precision_omega
from harness.evaluation.metrics.ranking import query_metrics
from harness.experiment.build import config_hash
from harness.experiment.pipeline import evaluate
from harness.experiment.run import _results_text
from harness.experiment.settings import default_metric_settings, metric_settings
from harness.retrievers.bm25 import BM25Retriever
from harness.types import Chunk, Dataset, Document, Evidence, Query

A = Document("a", "x" * 100)
B = Document("b", "y" * 100)
DOCS = {"a": A, "b": B}


def chunk(*spans, doc=A):
    return Chunk.from_spans(doc, list(spans))


def query(*refs, doc="a"):
    return Query("q", "question", tuple(Evidence(doc, s, e) for s, e in refs))


def approx(d):
    return {k: pytest.approx(v) for k, v in d.items()}


# --------------------------------------------------------------------------- helpers


def test_range_helpers_follow_chroma():
    assert chroma.intersect((0, 10), (10, 20)) == (10, 10)  # closed: touching ranges intersect
    assert chroma.intersect((0, 10), (11, 20)) is None
    assert chroma.intersect((0, 10), (5, 20)) == (5, 10)
    assert chroma.union_ranges([(20, 30), (0, 10), (10, 15), (40, 40)]) == [(0, 15), (20, 30), (40, 40)]
    assert chroma.sum_of_ranges([(0, 10), (5, 10)]) == 15  # no union
    assert chroma.difference([(0, 30)], (10, 20)) == [(0, 10), (20, 30)]
    assert chroma.difference([(0, 30)], (0, 10)) == [(10, 30)]
    assert chroma.difference([(0, 10), (20, 30)], (10, 10)) == [(0, 10), (20, 30)]  # touching: kept whole
    assert chroma.difference([(5, 8)], (0, 10)) == []


# --------------------------------------------------------------------------- hand-computed examples


def test_touching_chunks_intersect_in_zero_characters():
    # r = (10, 20); (0, 10) and (20, 30) touch it: intersections (10, 10), (20, 20), N = 0.
    # precision 0 / 20; unused stays (10, 20): iou 0 / (20 + 10); ours agree (no shared character)
    q, top = query((10, 20)), [chunk((0, 10)), chunk((20, 30))]
    assert chroma.retrieval_metrics(q, top, [2]) == {"chroma_recall@2": 0.0, "chroma_precision@2": 0.0, "chroma_iou@2": 0.0}
    # PrecisionΩ over the partition (0,10), (10,20), (20,30): all three intersect (closed), so
    # D = (0, 30): 10 / 30. Ours counts only (10, 20), which overlaps: 10 / 10.
    units = [chunk((0, 10)), chunk((10, 20)), chunk((20, 30))]
    assert chroma.precision_omega(q, chroma.units_by_document(units)) == pytest.approx(1 / 3)
    assert our_precision_omega(q, ChunkIndex(units)) == pytest.approx(1.0)


def test_overlapping_retrieved_chunks_are_counted_twice():
    # r = (10, 30); A = (0, 20), B = (10, 30). Top 2: N = |(10,20) ∪ (10,30)| = 20.
    # recall 20 / 20 = 1; precision 20 / (20 + 20) = 0.5; iou 20 / (40 + 0) = 0.5.
    # Ours: R = (0, 30), 30 characters: precision 20 / 30, iou 20 / 30.
    # Top 1 (A): N = 10, unused (20, 30): recall 0.5, precision 10 / 20, iou 10 / (20 + 10) -- as ours.
    q, top = query((10, 30)), [chunk((0, 20)), chunk((10, 30))]
    got = chroma.retrieval_metrics(q, top, [1, 2])
    assert got == approx(
        {
            "chroma_recall@1": 0.5,
            "chroma_precision@1": 0.5,
            "chroma_iou@1": 1 / 3,
            "chroma_recall@2": 1.0,
            "chroma_precision@2": 0.5,
            "chroma_iou@2": 0.5,
        }
    )
    ours = query_metrics(q, top, [1, 2])
    assert (ours["precision@2"], ours["iou@2"]) == (pytest.approx(2 / 3), pytest.approx(2 / 3))
    assert (ours["precision@1"], ours["iou@1"]) == (pytest.approx(0.5), pytest.approx(1 / 3))
    # the same unit twice: its length counts twice
    assert chroma.retrieval_metrics(q, [top[1], top[1]], [2])["chroma_precision@2"] == pytest.approx(0.5)


def test_a_chunk_of_another_document_counts_in_the_denominators_only():
    # r = a(10, 30); top = [b(10, 30), a(10, 30)]. @1: N = 0 -> all 0 (iou 0 / (20 + 20)).
    # @2: N = 20; recall 1; precision 20 / 40; iou 20 / (40 + 0). Ours count b's chunk too.
    q, top = query((10, 30)), [chunk((10, 30), doc=B), chunk((10, 30))]
    got = chroma.retrieval_metrics(q, top, [1, 2])
    assert got == approx(
        {
            "chroma_recall@1": 0.0,
            "chroma_precision@1": 0.0,
            "chroma_iou@1": 0.0,
            "chroma_recall@2": 1.0,
            "chroma_precision@2": 0.5,
            "chroma_iou@2": 0.5,
        }
    )
    ours = query_metrics(q, top, [2])
    assert (ours["precision@2"], ours["iou@2"]) == (pytest.approx(0.5), pytest.approx(0.5))


def test_overlapping_references_sum_in_recall():
    # r1 = (10, 30), r2 = (20, 40). Unit (10, 40): N = |(10,30) ∪ (20,40)| = 30; recall
    # 30 / (20 + 20) = 0.75 (ours 30 / 30 = 1); precision 30 / 30; unused: r1 - (10,30) = ∅,
    # r2 - (10,30) = (30,40), then - (20,40) = ∅: iou 30 / 30.
    q = query((10, 30), (20, 40))
    assert chroma.retrieval_metrics(q, [chunk((10, 40))], [1]) == approx({"chroma_recall@1": 0.75, "chroma_precision@1": 1.0, "chroma_iou@1": 1.0})
    assert query_metrics(q, [chunk((10, 40))], [1])["recall@1"] == pytest.approx(1.0)
    # Unit (10, 25): N = 15; recall 15 / 40; precision 15 / 15; unused (25,30) + (25,40) = 5 + 15
    # (summed, they overlap): iou 15 / (15 + 20) = 3 / 7. Ours: 15 / |(10, 40)| = 0.5.
    got = chroma.retrieval_metrics(q, [chunk((10, 25))], [1])
    assert got == approx({"chroma_recall@1": 15 / 40, "chroma_precision@1": 1.0, "chroma_iou@1": 3 / 7})
    assert query_metrics(q, [chunk((10, 25))], [1])["iou@1"] == pytest.approx(0.5)


def test_uncovered_reference_part_in_iou_and_precision_omega():
    # r = (10, 30); units (0, 15) and (25, 40) leave (15, 25) uncovered.
    # @1 = (0, 15): N = 5, unused (15, 30): iou 5 / (15 + 15) = 1/6 (ours 5 / |(0, 30)| = 1/6).
    q, units = query((10, 30)), [chunk((0, 15)), chunk((25, 40))]
    got = chroma.retrieval_metrics(q, units, [1, 2])
    assert got["chroma_iou@1"] == pytest.approx(1 / 6) == query_metrics(q, units, [1])["iou@1"]
    # @2: N = 10, unused (15, 25): recall 0.5, precision 10 / 30, iou 10 / (30 + 10)
    assert (got["chroma_recall@2"], got["chroma_precision@2"], got["chroma_iou@2"]) == (pytest.approx(0.5), pytest.approx(1 / 3), pytest.approx(0.25))
    # Ω: N = 10, D = (0,15) ∪ (25,40) = 30, + unused (15,25): 10 / 40. Ours: 10 / 30.
    assert chroma.precision_omega(q, chroma.units_by_document(units)) == pytest.approx(0.25)
    assert our_precision_omega(q, ChunkIndex(units)) == pytest.approx(1 / 3)


def test_empty_retrieval_and_no_units_score_zero():
    q = query((10, 30))
    assert chroma.retrieval_metrics(q, [], [1, 5]) == {f"chroma_{m}@{k}": 0.0 for k in (1, 5) for m in ("recall", "precision", "iou")}
    # no unit of the document: N = 0, denominator = unused (10, 30) -> 0 / 20
    assert chroma.precision_omega(q, {}) == 0.0
    assert chroma.precision_omega(Query("q", "t", ()), {}) == 0.0  # no evidence: 0 / 0 guarded


def test_units_with_several_spans_and_several_evidence_documents():
    # one unit with spans (0, 10) + (20, 30), r = (5, 25): intersections (5,10), (20,25), N = 10;
    # length 20: precision 10 / 20; recall 10 / 20; unused (10, 20): iou 10 / (20 + 10)
    q, u = query((5, 25)), chunk((0, 10), (20, 30))
    assert chroma.retrieval_metrics(q, [u], [1]) == approx({"chroma_recall@1": 0.5, "chroma_precision@1": 0.5, "chroma_iou@1": 1 / 3})
    # Ω: a unit with a touching span enters D with all its spans: r = (10, 20), units
    # (0,10)+(40,50) (touches at 10) and (10,20): N = 10, D = 30 -> 1/3
    q2 = query((10, 20))
    assert chroma.precision_omega(q2, chroma.units_by_document([chunk((0, 10), (40, 50)), chunk((10, 20))])) == pytest.approx(1 / 3)
    # evidence in two documents: a(0, 10) and b(0, 10); top = [a(0, 10)]: N = 10, recall 10 / 20,
    # precision 10 / 10, unused b(0, 10): iou 10 / (10 + 10)
    q3 = Query("q", "t", (Evidence("a", 0, 10), Evidence("b", 0, 10)))
    assert chroma.retrieval_metrics(q3, [chunk((0, 10))], [1]) == approx({"chroma_recall@1": 0.5, "chroma_precision@1": 1.0, "chroma_iou@1": 0.5})
    # Ω: units a(0, 10), b(0, 5): N = 15, D = 15, unused b(5, 10): 15 / 20
    assert chroma.precision_omega(q3, chroma.units_by_document([chunk((0, 10)), chunk((0, 5), doc=B)])) == pytest.approx(0.75)


# --------------------------------------------------------------------------- brute-force oracles

span_st = st.tuples(st.integers(0, 60), st.integers(1, 20)).map(lambda t: (t[0], min(100, t[0] + t[1])))


def _chars(spans):
    return {i for s, e in spans for i in range(s, e)}


def _touch_or_overlap(a, b):
    return max(a[0], b[0]) <= min(a[1], b[1])


def _oracle_retrieval(refs, top, k):
    """Chroma's @k on character sets (one document "a"; units of "b" in the denominators)."""
    top = top[:k]
    evidence = _chars(refs)
    covered = evidence & _chars(s for doc, spans in top if doc == "a" for s in spans)
    retrieved_len = sum(e - s for _, spans in top for s, e in spans)
    unused = sum(len(_chars([r]) - covered) for r in refs)
    ref_len = sum(e - s for s, e in refs)
    return {
        f"chroma_recall@{k}": len(covered) / ref_len if ref_len else 0.0,
        f"chroma_precision@{k}": len(covered) / retrieved_len if retrieved_len else 0.0,
        f"chroma_iou@{k}": len(covered) / (retrieved_len + unused) if retrieved_len + unused else 0.0,
    }


def _oracle_omega(refs, units):
    hit = [spans for spans in units if any(_touch_or_overlap(s, r) for s in spans for r in refs)]
    evidence = _chars(refs)
    d = _chars(s for spans in hit for s in spans)
    covered = evidence & d
    denominator = len(d | (evidence - covered))
    return len(covered) / denominator if denominator else 0.0


def _disjoint_spans(draw_spans):
    """Sorted spans with a gap of at least one character between neighbours (no overlap, no touching)."""
    out, end = [], -1
    for s, e in sorted(draw_spans):
        if s > end:
            out.append((s, e))
            end = e
    return out


def _units(draw):
    return [(doc, tuple(_disjoint_spans(spans))) for doc, spans in draw]


unit_st = st.tuples(st.sampled_from(["a", "a", "b"]), st.lists(span_st, min_size=1, max_size=2))


@settings(max_examples=300, deadline=None)
@given(refs=st.lists(span_st, min_size=1, max_size=3), raw=st.lists(unit_st, max_size=6), k=st.integers(1, 6))
def test_chroma_matches_a_character_set_oracle(refs, raw, k):
    units = _units(raw)
    top = [Chunk.from_spans(DOCS[doc], list(spans)) for doc, spans in units]
    got = chroma.retrieval_metrics(query(*refs), top, [k])
    assert got == approx(_oracle_retrieval(refs, units, k))
    omega_units = [Chunk.from_spans(A, list(spans)) for doc, spans in units if doc == "a"]
    expected = _oracle_omega(refs, [u.spans for u in omega_units])
    assert chroma.precision_omega(query(*refs), chroma.units_by_document(omega_units)) == pytest.approx(expected)


@settings(max_examples=300, deadline=None)
@given(
    refs=st.lists(span_st, min_size=1, max_size=3),
    raw=st.lists(span_st, max_size=6),
    other=st.lists(span_st, max_size=2),
    k=st.integers(1, 8),
    data=st.data(),
)
def test_where_the_conventions_coincide_chroma_equals_ours(refs, raw, other, k, data):
    # disjoint references, pairwise disjoint units (plus units of another document): the
    # union of our denominators is then a sum, and touching adds nothing to a numerator
    refs = _disjoint_spans(refs)
    top = [Chunk.from_spans(A, [s]) for s in _disjoint_spans(raw)] + [Chunk.from_spans(B, [s]) for s in _disjoint_spans(other)]
    top = data.draw(st.permutations(top))  # units of both documents in any rank order
    q = query(*refs)
    ours, theirs = query_metrics(q, top, [k]), chroma.retrieval_metrics(q, top, [k])
    # brute-force character sets of our definitions
    evidence = {("a", i) for i in _chars(refs)}
    retrieved = {(c.doc_id, i) for c in top[:k] for i in _chars(c.spans)}
    inter = len(evidence & retrieved)
    brute = {
        "recall": inter / len(evidence),
        "precision": inter / len(retrieved) if retrieved else 0.0,
        "iou": inter / len(evidence | retrieved),
    }
    for m, v in brute.items():
        assert ours[f"{m}@{k}"] == pytest.approx(v)
        assert theirs[f"chroma_{m}@{k}"] == pytest.approx(v), m


@settings(max_examples=200, deadline=None)
@given(cuts=st.sets(st.integers(1, 99), max_size=12), refs=st.lists(span_st, min_size=1, max_size=3))
def test_precision_omega_equals_ours_on_a_partition_without_touching(cuts, refs):
    # units partition the document (all evidence covered) and no reference starts or ends on
    # a unit boundary (so no unit only touches it): Chroma's PrecisionΩ equals ours
    bounds = [0, *sorted(cuts), 100]
    assume(all(s not in bounds and e not in bounds for s, e in refs))
    units = [Chunk.from_spans(A, [(s, e)]) for s, e in zip(bounds, bounds[1:])]
    q = query(*refs)
    assert chroma.precision_omega(q, chroma.units_by_document(units)) == pytest.approx(our_precision_omega(q, ChunkIndex(units)))


# --------------------------------------------------------------------------- registry and settings


def test_chroma_names_appear_only_with_the_chroma_convention():
    ours = metric_names([1, 5], [256], level="document")
    assert not [n for n in ours if n.startswith("chroma_")]
    both = metric_names([1, 5], [256], level="document", convention="chroma")
    assert [n for n in both if n.startswith("chroma_")] == [
        "chroma_recall@1",
        "chroma_recall@5",
        "chroma_precision@1",
        "chroma_precision@5",
        "chroma_iou@1",
        "chroma_iou@5",
        "chroma_precision_omega",
    ]
    assert [n for n in both if not n.startswith("chroma_")] == ours
    for n in ("chroma_recall@5", "chroma_precision_omega"):
        assert parse_name(n).family.source == chroma.SOURCE and parse_name(n).family.level == "span"


def test_bad_convention_is_one_line_naming_the_setting():
    with pytest.raises(ValueError) as info:
        default_metric_settings(convention="chrom")
    msg = str(info.value)
    assert msg == "metrics.convention must be one of ['harness', 'chroma'], got 'chrom'; did you mean 'chroma'?"
    with pytest.raises(ValueError, match=r"metrics.convention must be one of \['harness', 'chroma'\], got 'ours'$"):
        metric_settings(compose(["metrics.convention=ours"]))
    assert metric_settings(compose([])).convention == "harness"
    assert metric_settings(compose(["metrics.convention=chroma"])).convention == "chroma"


def test_a_chroma_objective_needs_the_chroma_convention():
    with pytest.raises(ValueError, match=r"metrics.objective='chroma_recall@5' needs metrics.convention=chroma"):
        metric_settings(compose(["metrics.objective=chroma_recall@5"]))
    assert metric_settings(compose(["metrics.objective=chroma_iou@5", "metrics.convention=chroma"])).objective == "chroma_iou@5"


def test_convention_harness_leaves_the_config_hash_unchanged():
    default, explicit, removed = compose([]), compose(["metrics.convention=harness"]), compose(["~metrics.convention"])
    assert config_hash(default) == config_hash(explicit) == config_hash(removed)
    assert config_hash(compose(["metrics.convention=chroma"])) != config_hash(default)


# --------------------------------------------------------------------------- end to end

TEXTS = {
    "birds": "Swallows migrate south in autumn. They return in spring to nest under roofs.\n\n"
    "Owls hunt at night. Their feathers make almost no sound when they fly.",
    "boats": "A keel keeps a sailing boat upright. Ballast in the keel lowers the centre of gravity.\n\n"
    "The rudder steers the boat. It turns the stern, and the bow follows.",
    "bread": "Yeast makes bread dough rise. It ferments sugars and releases carbon dioxide.\n\n"
    "Salt slows the yeast down. Too much salt stops the dough from rising at all.",
}
QUESTIONS = [
    ("q1", "when do swallows migrate", "birds", "Swallows migrate south in autumn."),
    ("q2", "why are owls silent when they fly", "birds", "Their feathers make almost no sound when they fly."),
    ("q3", "what does the keel ballast do", "boats", "Ballast in the keel lowers the centre of gravity."),
    ("q4", "how does the rudder steer", "boats", "The rudder steers the boat. It turns the stern"),
    ("q5", "what makes bread dough rise", "bread", "Yeast makes bread dough rise."),
    ("q6", "what does too much salt do to dough", "bread", "Too much salt stops the dough from rising at all."),
]


@pytest.fixture(scope="module")
def tiny():
    docs = tuple(Document(d, t) for d, t in TEXTS.items())
    queries = []
    for qid, text, doc, excerpt in QUESTIONS:
        start = TEXTS[doc].index(excerpt)
        queries.append(Query(qid, text, (Evidence(doc, start, start + len(excerpt), excerpt),)))
    return Dataset("tiny", docs, tuple(queries))


def _units_of(ids, documents):
    """Rebuild the scored units from their ids (``doc#s-e+s-e``)."""
    out = []
    for cid in filter(None, ids.split(";")):
        doc, spans = cid.rsplit("#", 1)
        out.append(Chunk.from_spans(documents[doc], [tuple(map(int, s.split("-"))) for s in spans.split("+")]))
    return out


@pytest.mark.parametrize(
    "make_chunker, overlapping",
    [
        (lambda: FixedChunker(chunk_size=60, chunk_overlap=20, unit="chars"), True),
        (lambda: HierarchicalChunker(mode="window", parent_size=120, child_size=40, unit="chars"), False),
    ],
    ids=["fixed-overlapping", "small-to-big"],
)
def test_evaluate_adds_chroma_metrics_only_with_the_chroma_convention(tiny, make_chunker, overlapping):
    ks = [1, 3]
    plain = evaluate(tiny, make_chunker(), BM25Retriever(), default_metric_settings(ks=ks, budgets=[]), progress=False)
    chunker = make_chunker()
    both = evaluate(tiny, chunker, BM25Retriever(), default_metric_settings(ks=ks, budgets=[], convention="chroma"), progress=False)
    assert not [c for c in plain.per_query.columns if c.startswith("chroma_")]
    assert not [m for m in plain.metrics if m.startswith("chroma_")]
    names = {n for n in metric_names(ks, convention="chroma", context_tokens=False) if n.startswith("chroma_")}
    assert names <= set(both.metrics) and names <= set(both.per_query.columns)
    # ours are identical in both conventions
    assert {k: v for k, v in both.metrics.items() if not k.startswith("chroma_")} == plain.metrics
    assert both.per_query[list(plain.per_query.columns)].equals(plain.per_query)
    assert list(both.table().index) == list(plain.table().index)
    # the values are those of the module, over the scored (expanded) units and the returnable units
    documents = tiny.by_id
    units = chroma.units_by_document(returnable_units(both.chunks, chunker.expand, documents))
    for q, (_, row) in zip(tiny.queries, both.per_query.iterrows()):
        expected = chroma.retrieval_metrics(q, _units_of(row["retrieved"], documents), ks)
        assert {k: row[k] for k in expected} == approx(expected)
        assert row["chroma_precision_omega"] == pytest.approx(chroma.precision_omega(q, units))
    for name, v in both.metrics.items():
        if name.startswith("chroma_"):
            assert 0.0 <= v <= 1.0, name
    m = both.metrics
    if overlapping:  # overlapping windows in the top 3 are summed by Chroma, united by us
        assert m["chroma_precision@3"] < m["precision@3"] and m["chroma_iou@3"] < m["iou@3"]
    assert m["chroma_recall@1"] == pytest.approx(m["recall@1"])  # one evidence span per question: same recall
    # the printed results: ours unchanged, Chroma's block after them only in the chroma convention
    ours_text, both_text = _results_text(plain), _results_text(both)
    assert "chroma" not in ours_text and both_text.startswith(ours_text + "\n\n")
    block = both_text[len(ours_text) :].split()
    assert block[:2] == ["@1", "@3"] and block[2] == "chroma_recall" and "chroma_iou" in block
    assert block[-2:] == ["chroma_precision_omega", f"{m['chroma_precision_omega']:.4f}"]
