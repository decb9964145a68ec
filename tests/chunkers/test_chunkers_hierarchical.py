"""Hierarchical (small-to-big) chunking: parents, children, expansion and scoring."""

import pytest

from harness.chunkers.hierarchical import HierarchicalChunker, heading_starts
from harness.experiment.pipeline import EvaluationTools, evaluate
from harness.experiment.settings import default_metric_settings
from harness.retrievers.bm25 import BM25Retriever
from harness.types import Document

MD = (
    "# Guide\n\nIntro text for the guide.\n\n"
    "## Setup\n\nRun this:\n\n```bash\n# not a header\nkestrelctl init\n```\n\n"
    "## Usage\n\nSubmit a job with kestrelctl submit.\n"
)


def test_heading_detection_skips_fenced_comment_lines():
    starts = heading_starts(MD)
    assert [MD[s : MD.index("\n", s)] for s in starts] == ["# Guide", "## Setup", "## Usage"]


def test_heading_detection_plain_text_forms():
    text = "Title\n=====\n\nbody.\n\n = = History = = \n old times.\n\n2.1 Install on Linux\n\ntext.\n"
    found = [text[s : text.index("\n", s)] for s in heading_starts(text)]
    assert found == ["Title", " = = History = = ", "2.1 Install on Linux"]
    assert heading_starts("# a comment\nx = 1\n", atx=False) == []


def test_parents_children_and_parent_ids():
    doc = Document("g.md", MD)
    h = HierarchicalChunker(mode="headings", parent_size=200, child_size=8, unit="words")
    parents = h.parent_spans(MD)
    assert [MD[s:e].split("\n")[0] for s, e in parents] == ["# Guide", "## Setup", "## Usage"]
    children = h.chunk(doc)
    for c in children:
        ps, pe = c.metadata["parent_span"]
        assert ps <= c.start < c.end <= pe
        assert c.parent_id == f"g.md#{ps}-{pe}"
        assert len(c.text.split()) <= 8
    # the fence's lines are in the Setup parent
    setup = next(c for c in children if "kestrelctl init" in c.text)
    assert MD[slice(*setup.metadata["parent_span"])].startswith("## Setup")


def test_expand_returns_deduplicated_parents_in_rank_order():
    doc = Document("g.md", MD)
    h = HierarchicalChunker(mode="headings", parent_size=200, child_size=5, unit="words")
    children = h.chunk(doc)
    setup_children = [c for c in children if c.metadata["parent_span"][0] == MD.index("## Setup")]
    usage_child = next(c for c in children if "submit" in c.text)
    assert len(setup_children) >= 2
    ranked = [setup_children[1], usage_child, setup_children[0]]
    out = h.expand(ranked, {"g.md": doc})
    assert [c.text.split("\n")[0] for c in out] == ["## Setup", "## Usage"]


def test_window_return_is_clipped_to_parent():
    doc = Document("g.md", MD)
    h = HierarchicalChunker(mode="headings", parent_size=200, child_size=5, unit="words", return_unit="window", window_chars=10)
    child = next(c for c in h.chunk(doc) if "submit" in c.text)
    (out,) = h.expand([child], {"g.md": doc})
    ps, pe = child.metadata["parent_span"]
    assert ps <= out.start <= child.start and child.end <= out.end <= pe
    assert out.end - out.start <= child.end - child.start + 20


def test_markers_mode():
    text = "part one text\n---\npart two text\n---\npart three"
    h = HierarchicalChunker(mode="markers", markers=[r"^---$"], parent_size=50, child_size=3, unit="words")
    parents = [text[s:e] for s, e in h.parent_spans(text)]
    assert parents == ["part one text", "---\npart two text", "---\npart three"]


@pytest.mark.parametrize(
    "kwargs, param",
    [
        ({"parent_size": 100, "child_size": 100}, "parent_size"),
        ({"mode": "markers"}, "markers"),
        ({"mode": "x"}, "mode"),
        ({"return_unit": "doc"}, "return_unit"),
        ({"child_overlap": 200}, "child_overlap"),
        ({"mode": "markers", "markers": ["("]}, "markers"),
    ],
)
def test_invalid_parameters(kwargs, param):
    with pytest.raises(ValueError, match=rf"chunker\.{param}"):
        HierarchicalChunker(**kwargs)


def test_metrics_score_what_the_generator_receives(kestrel):
    h = HierarchicalChunker(mode="headings", parent_size=512, child_size=64)
    ev = evaluate(kestrel, h, BM25Retriever(), default_metric_settings(ks=[1, 5]), EvaluationTools(context_token_counter=len), progress=False)
    for _, row in ev.per_query.head(30).iterrows():
        returned = row["retrieved"].split(";")
        assert len(returned) == len(set(returned)) == 5
        for cid in returned:  # returned ids are parent spans, not children
            doc_id, span = cid.rsplit("#", 1)
            s, e = map(int, span.split("-"))
            assert (s, e) in {tuple(c.metadata["parent_span"]) for c in ev.chunks if c.doc_id == doc_id}
    # recall with parents >= recall of the same children returned unexpanded
    flat = HierarchicalChunker(mode="headings", parent_size=512, child_size=64, return_unit="child")
    ev_flat = evaluate(kestrel, flat, BM25Retriever(), default_metric_settings(ks=[1, 5]), EvaluationTools(context_token_counter=len), progress=False)
    assert ev.metrics["recall@5"] >= ev_flat.metrics["recall@5"]
    assert ev.metrics["context_tokens@5"] > ev_flat.metrics["context_tokens@5"]
