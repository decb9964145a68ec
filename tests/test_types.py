import pytest

from harness.types import Chunk, Document, Evidence, make_chunk_id


def test_chunk_id_is_deterministic_and_built_from_spans():
    doc = Document("a.md", "hello world, hello world")
    c1 = Chunk.from_spans(doc, [(0, 5)])
    c2 = Chunk.from_spans(doc, [(0, 5)])
    c3 = Chunk.from_spans(doc, [(13, 18)])
    assert c1.chunk_id == c2.chunk_id == "a.md#0-5"
    assert c3.chunk_id == "a.md#13-18"  # same text, different place, different id
    assert c1.text == c3.text == "hello"


def test_multi_span_chunk_text_and_size():
    doc = Document("d", "abcdefghij")
    c = Chunk.from_spans(doc, [(0, 2), (5, 8)])
    assert c.text == "abfgh"
    assert c.n_chars == 5
    assert c.chunk_id == make_chunk_id("d", [(0, 2), (5, 8)]) == "d#0-2+5-8"


@pytest.mark.parametrize("spans", [[], [(3, 3)], [(5, 2)], [(-1, 2)], [(0, 5), (3, 8)], [(5, 8), (0, 2)]])
def test_invalid_chunk_spans_raise(spans):
    doc = Document("d", "abcdefghij")
    with pytest.raises(ValueError):
        Chunk.from_spans(doc, spans)


def test_span_outside_document_raises():
    with pytest.raises(ValueError, match="outside document"):
        Chunk.from_spans(Document("d", "abc"), [(0, 4)])


def test_evidence_rejects_empty_span():
    with pytest.raises(ValueError):
        Evidence("d", 4, 4)
