"""Issue 24, class 6: Unicode normalisation forms.

``café`` can be stored precomposed (NFC: ``c a f é``, 4 code points) or decomposed (NFD:
``c a f e U+0301``, 5 code points); the two are canonically equivalent, the same text by
Unicode's definition. The BM25 analyser must match them whichever form the chunk and the
query use (it folds both sides to NFC), while chunk texts and spans keep the stored form
(offsets count the stored code points). Evidence whose stored excerpt differs from the
document only by normalisation is refused with a one-line error that says so ("NFC vs
NFD"). Expected values are written by hand or computed with :mod:`unicodedata` directly.
"""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.datasets.validate import DatasetError, check_dataset
from harness.retrievers.bm25 import BM25Retriever, bm25_tokenize
from harness.types import Chunk, Dataset, Document, Evidence, Query

NFC_CAFE = "caf\u00e9"
NFD_CAFE = "cafe\u0301"


def nfc(s: str) -> str:
    return unicodedata.normalize("NFC", s)


def nfd(s: str) -> str:
    return unicodedata.normalize("NFD", s)


def corpus(texts: list[str]) -> list[Chunk]:
    out = []
    for i, t in enumerate(texts):
        out.append(Chunk.from_spans(Document(f"doc{i}", t), [(0, len(t))]))
    return out


def q(text: str, qid: str = "q1") -> Query:
    return Query(qid, text, (Evidence("doc0", 0, 1),))


def test_decomposed_document_is_found_by_a_precomposed_query_and_keeps_its_offsets():
    assert len(NFC_CAFE) == 4 and len(NFD_CAFE) == 5 and nfc(NFD_CAFE) == NFC_CAFE
    text = f"the {NFD_CAFE} opens at nine"
    cs = corpus([text, "the bakery opens at eight", "trains leave hourly"])
    retr = BM25Retriever()
    retr.index(cs)
    run = retr.search([q(f"{NFC_CAFE} opening"), q(f"{NFD_CAFE} opening", "q2")], k=3)
    assert list(run["q1"]) == [cs[0].chunk_id] == list(run["q2"])
    assert run["q1"] == run["q2"]
    # the chunk is untouched: its text is the stored (decomposed) form and its span counts those code points
    assert cs[0].text == text and cs[0].spans == ((0, len(text)),) and cs[0].chunk_id == f"doc0#0-{len(text)}"
    assert bm25_tokenize(text) == bm25_tokenize(nfc(text)) == ["the", NFC_CAFE, "opens", "at", "nine"]


# letters with and without precomposed accented forms, and combining marks
LETTERS = st.sampled_from(list("aceinouyz") + ["\u00e9", "\u00f1", "\u00fc", "\u00c5", "\u1e9b", "\u0391"])
MARKS = st.sampled_from(["", "", "\u0301", "\u0308", "\u0323\u0302", "\u030a"])
WORD = st.lists(st.tuples(LETTERS, MARKS).map("".join), min_size=1, max_size=5).map("".join)
TEXT = st.lists(WORD, min_size=1, max_size=6).map(" ".join)


@settings(max_examples=40, deadline=None)
@given(st.lists(TEXT, min_size=1, max_size=5), TEXT)
def test_bm25_scores_are_the_same_whatever_form_either_side_uses(texts, query):
    runs = []
    for doc_form in (nfc, nfd):
        cs = corpus([doc_form(t) for t in texts])
        retr = BM25Retriever()
        retr.index(cs)
        for query_form in (nfc, nfd):
            run = retr.search([q(query_form(query))], k=len(texts))["q1"]
            runs.append({cid.split("#")[0]: score for cid, score in run.items()})  # ids by document (offsets differ by form)
    assert all(r == runs[0] for r in runs[1:])
    assert bm25_tokenize(nfd(query)) == bm25_tokenize(nfc(query))


def dataset(doc_text: str, excerpt: str, start: int, end: int) -> Dataset:
    return Dataset(
        name="forms",
        documents=(Document("d1", doc_text),),
        queries=(Query("Q1", "where is the cafe?", (Evidence("d1", start, end, excerpt),)),),
    )


def test_evidence_differing_only_by_normalisation_is_refused_naming_both_forms():
    doc = f"Meet at the {NFD_CAFE} on the corner."
    start = doc.index(NFD_CAFE)
    # the labeller stored the precomposed excerpt over the decomposed text's offsets
    with pytest.raises(DatasetError) as info:
        check_dataset(dataset(doc, NFC_CAFE, start, start + len(NFD_CAFE)))
    message = str(info.value)
    assert "\n" not in message
    assert "query 'Q1'" in message and "evidence #0" in message and "'d1'" in message
    assert "only by Unicode normalisation" in message and "evidence NFC vs document NFD" in message
    # the other way round
    doc_c = nfc(doc)
    start_c = doc_c.index(NFC_CAFE)
    with pytest.raises(DatasetError, match=r"only by Unicode normalisation \(evidence NFD vs document NFC\)"):
        check_dataset(dataset(doc_c, NFD_CAFE, start_c, start_c + len(NFC_CAFE)))


def test_offsets_counted_in_the_other_form_are_refused_saying_so():
    # offsets of the NFC text (shorter) used on the NFD document: the slice is cut short
    doc = f"Notes: {NFD_CAFE} and {NFD_CAFE}s."
    with pytest.raises(DatasetError, match=r"evidence NFC vs document NFD") as info:
        check_dataset(dataset(doc, "and " + NFC_CAFE + "s", 13, 13 + len("and " + NFC_CAFE + "s")))
    assert "offsets" in str(info.value) and "\n" not in str(info.value)
    # a real mismatch (another word) says nothing about normalisation
    with pytest.raises(DatasetError) as other:
        check_dataset(dataset(doc, "bistro", 7, 13))
    assert "normalisation" not in str(other.value)
    # equal forms pass
    check_dataset(dataset(doc, NFD_CAFE, 7, 12))


def test_squad_answer_and_unlocated_excerpt_say_when_only_the_form_differs(tmp_path):
    import json

    from harness.datasets.excerpts import load_excerpts
    from harness.datasets.squad import load_squad

    context = f"Meet at the {NFD_CAFE} on the corner."
    squad = {
        "data": [
            {
                "title": "t",
                "paragraphs": [{"context": context, "qas": [{"id": "s1", "question": "Where?", "answers": [{"text": NFC_CAFE, "answer_start": 12}]}]}],
            }
        ]
    }
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(squad), encoding="utf-8")
    with pytest.raises(
        DatasetError, match=r"answers\[0\]: context\[12:16\].*occurs in the document only under Unicode normalisation \(evidence NFC vs document NFD\)"
    ) as info:
        load_squad(path)
    assert "\n" not in str(info.value)

    folder = tmp_path / "ex"
    (folder / "corpus").mkdir(parents=True)
    (folder / "corpus" / "notes.md").write_text(context, encoding="utf-8")
    (folder / "excerpts.jsonl").write_text(json.dumps({"query_id": "e1", "query": "Where?", "excerpts": [f"the {NFC_CAFE} on"]}) + "\n", encoding="utf-8")
    with pytest.raises(
        DatasetError,
        match=r"excerpts\[0\] 'the café on' not found in any document \(query 'e1'\); it occurs in the document only under Unicode normalisation \(evidence NFC vs document NFD\)",
    ):
        load_excerpts(folder)
