"""Label audit (harness.evaluation.audit): key values, the flag rule, order independence,
the run's miss_with_candidate share, and the audit of the embedded kestrel_kb labels."""

from __future__ import annotations

import json
import random
import string

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from harness.datasets.native import read_native
from harness.evaluation.audit import AuditRule, audit, audit_query, content_words, key_values, misses_with_candidate, overlap, statement_units
from harness.studies.audit import audit_dataset
from harness.types import Chunk, Document, Evidence, Query
from tests.conftest import KESTREL_PATH


def _chunk(doc: Document, start: int, end: int) -> Chunk:
    return Chunk.from_spans(doc, [(start, end)])


def test_key_values_by_hand():
    text = "The `kestrel-broker` listens on port 8450 since 2.3.1; set broker.bind to \"0.0.0.0:8450\" on Postgres, not SQLite."
    got = key_values(text)
    for v in ("kestrel-broker", "8450", "2.3.1", "broker.bind", "0.0.0.0:8450", "postgres", "sqlite"):
        assert v in got, v
    assert "the" not in got and "listens" not in got  # a sentence's first word and plain words are not key values


def test_found_is_a_whole_token():
    # 8450 is a key value of the evidence; 18450 in the statement is another number
    assert overlap("port 8450", "depth=18450 on the queue").shared_values == ()
    assert overlap("port 8450", "listens on 8450.").shared_values == ("8450",)


def test_content_words_drop_stopwords_and_plural_s():
    assert content_words("What are the leases and the jobs?") == {"lease", "job"}


def test_answer_values_exclude_what_the_question_names():
    o = overlap("| `kestrel-broker` | Stores jobs | 8450 |", "The broker listens on port 8450.", "Which port does kestrel-broker use?")
    assert o.shared_values == ("8450",) and o.missing_values == () and o.key_share == 1.0


def test_statement_units_cut_table_rows_but_keep_wrapped_prose():
    text = "Intro line one\nwraps here.\n| a | 1 |\n| b | 2 |\n- item one\n"
    units = [text[s:e] for s, e in statement_units(text, 0, len(text))]
    assert units == ["Intro line one\nwraps here.", "| a | 1 |", "| b | 2 |", "- item one"]


@pytest.mark.parametrize("field,value", [("k", 0), ("k", True), ("min_key_share", 0.0), ("min_word_share", 1.5), ("min_word_share_plain", float("nan"))])
def test_rule_refuses_bad_fields_in_one_line(field, value):
    with pytest.raises(ValueError, match=field if field != "k" else "audit k") as exc:
        AuditRule(**{field: value})
    assert "\n" not in str(exc.value)


def test_audit_refuses_an_unknown_document():
    doc = Document("a.txt", "Port 8450.")
    q = Query("q", "port?", (Evidence("a.txt", 0, 10, "Port 8450."),))
    ghost = _chunk(Document("ghost.txt", "Port"), 0, 4)
    with pytest.raises(ValueError, match="query 'q' names document 'ghost.txt'"):
        audit([q], {"a.txt": doc}, {"q": [ghost]})


_WORDS = st.text(alphabet=string.ascii_lowercase, min_size=4, max_size=9).filter(lambda w: w not in {"what", "which", "there", "their", "these", "those"})
_STATEMENT = st.lists(st.one_of(_WORDS, st.integers(10, 99999).map(str)), min_size=2, max_size=12).map(lambda ws: " ".join(ws) + ".")


@settings(max_examples=40, deadline=None)
@given(evidence=_STATEMENT, filler=_STATEMENT, pos=st.integers(0, 2))
def test_evidence_text_placed_in_another_document_is_always_flagged(evidence, filler, pos):
    """A statement equal to the evidence text, elsewhere, shares everything: flagged."""
    assume(not set(filler.rstrip(".").split()) & set(evidence.rstrip(".").split()))  # the filler is another statement, not a near copy
    labelled = Document("a.txt", f"{filler}\n\n{evidence}\n")
    start = labelled.text.index(f"\n\n{evidence}") + 2
    parts = [filler, filler, filler]
    parts[pos] = evidence
    other = Document("b.txt", "\n\n".join(parts))
    q = Query("q", "question?", (Evidence("a.txt", start, start + len(evidence), evidence),))
    found = audit_query(q, {"a.txt": labelled, "b.txt": other}, [_chunk(other, 0, len(other.text))])
    assert found and evidence in found[0].text and found[0].doc_id == "b.txt"


@settings(max_examples=40, deadline=None)
@given(evidence=_STATEMENT, other=_STATEMENT)
def test_a_statement_sharing_nothing_is_never_flagged(evidence, other):
    ev_tokens = set(evidence.rstrip(".").split())
    other = " ".join(w for w in other.rstrip(".").split() if w not in ev_tokens and w.rstrip("s") not in {t.rstrip("s") for t in ev_tokens}) or "zzzz"
    a, b = Document("a.txt", evidence), Document("b.txt", other + ".")
    q = Query("q", "question?", (Evidence("a.txt", 0, len(evidence), evidence),))
    assert overlap(evidence, b.text).shared_values == () or set(overlap(evidence, b.text).shared_values) <= ev_tokens
    if not (key_values(evidence) & key_values(b.text)) and not (content_words(evidence) & content_words(b.text)):
        assert audit_query(q, {"a.txt": a, "b.txt": b}, [_chunk(b, 0, len(b.text))]) == []


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), statements=st.lists(_STATEMENT, min_size=3, max_size=6, unique=True))
def test_result_does_not_depend_on_document_order(seed, statements):
    """Shuffling the documents (and so the ranking's document order) changes no candidate."""
    docs = [Document(f"d{i}.txt", s) for i, s in enumerate(statements)]
    docs.append(Document("copy.txt", statements[0]))
    q = Query("q", "question?", (Evidence("d0.txt", 0, len(statements[0]), statements[0]),))
    chunks = [_chunk(d, 0, len(d.text)) for d in docs]
    base = audit([q], {d.doc_id: d for d in docs}, {"q": chunks})
    rng = random.Random(seed)
    shuffled = docs[:]
    rng.shuffle(shuffled)
    got = audit([q], {d.doc_id: d for d in shuffled}, {"q": sorted(chunks, key=lambda c: (c.doc_id, c.spans))})
    key = lambda cs: sorted((c.doc_id, c.start, c.end, c.overlap) for c in cs)  # noqa: E731
    assert key(base["q"]) == key(got["q"])
    assert any(c.doc_id == "copy.txt" for c in got["q"])


def _audit_by_definition(query, documents, ranked, rule):
    """The audit as the module docstring defines it: every statement of every retrieved chunk
    compared with every evidence span through :func:`overlap`, flagged by ``rule.flags``."""
    out = []
    for rank, chunk in enumerate(ranked[: rule.k], start=1):
        if any(e.doc_id == chunk.doc_id and s < e.end and e.start < t for e in query.evidence for s, t in chunk.spans):
            continue
        text = documents[chunk.doc_id].text
        units = [u for s, t in chunk.spans for u in statement_units(text, s, t)]
        statements = units + [(units[i][0], units[i + 1][1]) for i in range(len(units) - 1)]
        for i, ev in enumerate(query.evidence):
            ev_text = documents[ev.doc_id].text[ev.start : ev.end]
            flagged = [(s, t, overlap(ev_text, text[s:t], query.text)) for s, t in statements]
            flagged = [(s, t, o) for s, t, o in flagged if rule.flags(o)]
            if flagged:
                s, t, o = min(flagged, key=lambda f: (-f[2].key_share, -f[2].word_share, f[1] - f[0], f[0]))
                out.append(((rank, chunk.doc_id, s, i), (rank, chunk.chunk_id, s, t, text[s:t], o)))
    return [c for _, c in sorted(out, key=lambda x: x[0])]


_SENTENCE = st.lists(
    st.sampled_from(["port", "8450", "broker", "kestrel-broker", "lease", "leases", "the", "v2.3.1", "`kctl`", "Postgres", "bind"]), min_size=1, max_size=8
).map(lambda ws: " ".join(ws) + ".")


@settings(max_examples=60, deadline=None)
@given(
    evidence=st.lists(_SENTENCE, min_size=1, max_size=2),
    chunks=st.lists(st.lists(_SENTENCE, min_size=1, max_size=5), min_size=1, max_size=4),
    question=st.sampled_from(["which port?", "what does kestrel-broker bind?", "how long is a lease?"]),
    rule=st.sampled_from([AuditRule(), AuditRule(k=2), AuditRule(min_key_share=0.5, min_word_share=0.0, min_word_share_plain=0.2)]),
)
def test_audit_query_picks_what_the_definition_picks(evidence, chunks, question, rule):
    """The audit's shortcut (word share tested before the key values are searched, statement
    words computed once per chunk) gives the candidates of comparing every statement."""
    labelled = Document("a.txt", " ".join(evidence))
    docs = {"a.txt": labelled}
    ranked = []
    for j, sentences in enumerate(chunks):
        doc = Document(f"c{j}.txt", " ".join(sentences) if j % 2 else "\n".join(sentences))
        docs[doc.doc_id] = doc
        ranked.append(_chunk(doc, 0, len(doc.text)))
    ranked.append(_chunk(labelled, 0, len(labelled.text)))  # overlaps the evidence: never audited
    spans, cursor = [], 0
    for sentence in evidence:
        spans.append(Evidence("a.txt", cursor, cursor + len(sentence), sentence))
        cursor += len(sentence) + 1
    q = Query("q", question, tuple(spans))
    got = [(c.rank, c.chunk_id, c.start, c.end, c.text, c.overlap) for c in audit([q], docs, {"q": ranked}, rule)["q"]]
    assert got == _audit_by_definition(q, docs, ranked, rule)


def test_misses_with_candidate_counts_only_missed_queries_with_a_candidate_in_top_k():
    doc = Document("b.txt", "Port 8450 here.")
    ev = Document("a.txt", "Port 8450.")
    q1 = Query("q1", "port?", (Evidence("a.txt", 0, 10, "Port 8450."),))
    q2 = Query("q2", "port?", (Evidence("a.txt", 0, 10, "Port 8450."),))
    ranking = {"q1": [_chunk(ev, 0, 3), _chunk(doc, 0, 15)], "q2": [_chunk(doc, 0, 15)]}
    # the first q1 chunk overlaps its evidence (skipped); the second is a candidate at rank 2
    cands = audit([q1, q2], {"a.txt": ev, "b.txt": doc}, ranking)
    assert [c.rank for c in cands["q1"]] == [2] and [c.rank for c in cands["q2"]] == [1]
    reasons = {"q1": {1: "rank_miss", 2: "rank_miss"}, "q2": {1: None, 2: None}, "q3": {1: "rank_miss", 2: "rank_miss"}}
    # at k=1 no missed query has a candidate in its top 1; at k=2 q1 does (q2 is not missed); 3 queries
    assert misses_with_candidate(reasons, cands, [1, 2]) == {"diagnostics.miss_with_candidate@1": 0.0, "diagnostics.miss_with_candidate@2": 1 / 3}


# ---------------------------------------------------------------- the embedded dataset


@pytest.fixture(scope="module")
def kestrel_audit():
    ds = read_native(KESTREL_PATH)
    return ds, audit_dataset(ds)


def test_kestrel_a001_port_statement_is_labelled(kestrel_audit):
    """Issue 25: A-001's answer is stated in architecture_overview.txt too ("The broker listens
    on port 8450 by default"); it is labelled, so the audit lists nothing for A-001."""
    ds, found = kestrel_audit
    q = next(q for q in ds.queries if q.query_id == "A-001")
    sentence = "The broker listens on port 8450 by default and the dashboard on port 8460."
    assert any(e.doc_id == "architecture_overview.txt" and e.text == sentence for e in q.evidence)
    assert found["A-001"] == []


def test_kestrel_audit_lists_only_reviewed_candidates(kestrel_audit):
    """Every candidate the audit still lists was read and judged not to state the answer
    (datasets/kestrel_kb/CHANGES.md lists them); a new one needs a review."""
    ds, found = kestrel_audit
    reviewed = json.loads((KESTREL_PATH / "audit_reviewed.json").read_text(encoding="utf-8"))
    listed = {f"{c.query_id} {c.doc_id}:{c.start}-{c.end}" for cs in found.values() for c in cs}
    assert listed <= set(reviewed), sorted(listed - set(reviewed))[:5]
