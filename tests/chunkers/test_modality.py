"""The modality strategy (text, table and image streams), adaptive routing of extracted
documents, and the issue's acceptance run: a generated PDF, an HTML page and a markdown file
with five labelled questions, end to end through ``harness.experiment.run`` with ``chunker=modality``
and ``chunker=adaptive`` (BM25 and FAISS, real MLflow store), where the table question's
evidence comes back as one table chunk at rank 1.

Expected spans are the element offsets worked out by hand in ``test_ingest.py``
(``harbour.pdf``: title 0-22, paragraphs 24-85 and 87-156, caption 158-182, table 184-291,
image 293-308, figure caption 310-349, page 2 351-405; ``museum.html``: text 0-113,
caption 115-137, table 139-239, last paragraph 241-281).
"""

import mlflow
import pytest
from conftest import compose
from ingest_samples import FIGURE_CAPTION, TABLE_CAPTION, TABLE_MD, make_folder
from test_configs import check_contract

from harness.chunkers.adaptive import AdaptiveChunker, sniff_type
from harness.chunkers.modality import ModalityChunker, infer_elements
from harness.datasets.folder import load_folder
from harness.experiment import build
from harness.experiment.run import execute
from harness.types import Document


def chars(size: int) -> dict:
    return {"_target_": "harness.chunkers.recursive.RecursiveChunker", "chunk_size": size, "unit": "chars"}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_folder(tmp_path_factory.mktemp("modality") / "harbour_docs")


@pytest.fixture(scope="module")
def docs(folder):
    return load_folder(folder)


def layout(chunks):
    return [(c.doc_id, c.spans[0], c.metadata["modality"], c.metadata.get("page")) for c in chunks]


def test_streams_on_extracted_pdf_html_and_markdown(docs):
    chunker = ModalityChunker(builder=build.build_sub_chunker)
    chunks = chunker.chunk_all(docs.documents)
    assert layout(chunks) == [
        ("guides/bakery.md", (0, 142), "text", None),
        ("harbour.pdf", (0, 156), "text", 1),
        ("harbour.pdf", (158, 291), "table", 1),  # caption + table
        ("harbour.pdf", (293, 349), "image", 1),  # image + caption
        ("harbour.pdf", (351, 405), "text", 2),
        ("museum.html", (0, 113), "text", None),
        ("museum.html", (115, 239), "table", None),
        ("museum.html", (241, 281), "text", None),
    ]
    table, image = chunks[2], chunks[3]
    assert table.text == TABLE_CAPTION + "\n\n" + TABLE_MD  # no prefix: the caption is inside the span
    assert {k: table.metadata[k] for k in ("format", "table", "caption", "rows")} == {
        "format": "markdown",
        "table": 0,
        "caption": TABLE_CAPTION,
        "rows": [0, 2],
    }
    assert "prefix" not in table.metadata
    assert image.text == "[image: I1.png]\n\n" + FIGURE_CAPTION
    assert {k: image.metadata[k] for k in ("name", "caption", "width", "height", "ocr")} == {
        "name": "I1.png",
        "caption": FIGURE_CAPTION,
        "width": 400,
        "height": 100,
        "ocr": False,
    }
    assert chunker.contiguous and chunker.partitions and chunker.size_limit() == ("tokens", "model", 254)
    check_contract(chunker, docs.documents, chunks)


def test_oversize_table_split_between_rows_with_caption_and_header_prefix(docs):
    html = docs.by_id["museum.html"]
    chunker = ModalityChunker(builder=build.build_sub_chunker, text_chunker=chars(80))
    tables = [c for c in chunker.chunk(html) if c.metadata["modality"] == "table"]
    # caption+header = 115..183 (68 chars) fits 80, adding row 1 (to 212) would not. Later pieces
    # repeat caption + header as a prefix that counts against the limit; at 69 characters it is
    # longer than half of 80, so it is cut to its first 38 characters + "\n" (39 <= 40). Then
    # prefix + row 1 (28 chars) = 67 fits, prefix + rows 1-2 (55) = 94 does not: one row each.
    assert [c.spans for c in tables] == [((115, 183),), ((184, 212),), ((213, 239),)]
    assert [c.metadata["rows"] for c in tables] == [[0, 0], [1, 1], [2, 2]]
    assert "prefix" not in tables[0].metadata
    cut = "Table 2: Opening hours\n| Day | Opens |\n"
    assert [c.metadata.get("prefix") for c in tables[1:]] == [cut, cut]
    assert all(c.metadata["prefix_truncated"] for c in tables[1:])
    assert tables[1].text == cut + "| Saturday | 10:00 | 16:00 |"
    assert all(len(c.text) <= 80 for c in tables)
    check_contract(chunker, [html], chunker.chunk(html))
    keep = ModalityChunker(builder=build.build_sub_chunker, text_chunker=chars(80), oversize_tables="keep")
    assert keep.size_limit() is None
    assert [c.spans for c in keep.chunk(html) if c.metadata["modality"] == "table"] == [((115, 239),)]


def test_streams_can_be_turned_off_and_captions_not_adjacent_become_prefixes(docs):
    pdf = docs.by_id["harbour.pdf"]
    no_tables = ModalityChunker(builder=build.build_sub_chunker, tables=False).chunk(pdf)
    assert [c.metadata["modality"] for c in no_tables] == ["text", "image", "text"]
    assert no_tables[0].spans == ((0, 291),)
    text_only = ModalityChunker(builder=build.build_sub_chunker, tables=False, images=False).chunk(pdf)
    # one text region, the whole document (about 100 model tokens): one chunk, page of its start
    assert [(c.spans, c.metadata["modality"], c.metadata["page"]) for c in text_only] == [(((0, 405),), "text", 1)]
    # a caption separated from its table by another paragraph stays text and becomes a prefix
    text = "Table 9: Tolls\n\nTolls are paid at the gate.\n\n| a | b |\n| --- | --- |\n| 1 | 2 |"
    el = [{"type": "table", "start": 45, "end": 78, "caption": "Table 9: Tolls", "caption_start": 0, "caption_end": 14}]
    doc = Document("tolls.md", text, {"elements": el})
    chunks = ModalityChunker(builder=build.build_sub_chunker).chunk(doc)
    assert [(c.spans, c.metadata["modality"]) for c in chunks] == [(((0, 43),), "text"), (((45, 78),), "table")]
    assert chunks[1].metadata["prefix"] == "Table 9: Tolls\n" and chunks[1].text == "Table 9: Tolls\n" + text[45:78]
    assert ModalityChunker(builder=build.build_sub_chunker, caption_prefix=False).chunk(doc)[1].text == text[45:78]


def test_elements_are_inferred_for_plain_documents():
    md = "Intro line.\n\nTable 3: Moorings\n\n| berth | fee |\n|---|---|\n| A1 | 12 |\n\nAfter the table.\n"
    doc = Document("moorings.md", md)
    assert infer_elements(doc) == [
        {"type": "table", "start": 32, "end": 69, "format": "markdown", "caption": "Table 3: Moorings", "caption_start": 13, "caption_end": 30}
    ]
    chunks = ModalityChunker(builder=build.build_sub_chunker).chunk(doc)
    assert [(c.spans, c.metadata["modality"]) for c in chunks] == [(((0, 11),), "text"), (((13, 69),), "table"), (((71, 87),), "text")]
    csv_doc = Document("fees.csv", "berth,fee\nA1,12\nA2,14\n")
    assert infer_elements(csv_doc) == [{"type": "table", "start": 0, "end": 21, "format": "csv"}]
    split = ModalityChunker(builder=build.build_sub_chunker, text_chunker=chars(12)).chunk(csv_doc)
    # header "berth,fee" (0-9); rows "A1,12" (10-15) and "A2,14" (16-21): 0..15 is 15 chars > 12.
    # The repeated header "berth,fee\n" (10 chars) is longer than half the limit (6): cut to
    # "berth\n"; "berth\n" + "A1,12" = 11 fits, with both rows (17) it does not.
    assert [c.spans for c in split] == [((0, 9),), ((10, 15),), ((16, 21),)]
    assert [c.metadata["prefix"] for c in split[1:]] == ["berth\n", "berth\n"]
    assert all(len(c.text) <= 12 for c in split)
    assert infer_elements(Document("tool.py", "x = '| a | b |'\n")) == []
    assert ModalityChunker(builder=build.build_sub_chunker, infer_elements=False).chunk(doc)[0].spans == ((0, 87),)


def test_invalid_parameters_and_elements():
    with pytest.raises(ValueError, match="chunker.oversize_tables"):
        ModalityChunker(builder=build.build_sub_chunker, oversize_tables="drop")
    with pytest.raises(ValueError, match="chunker.tables must be true or false"):
        ModalityChunker(builder=build.build_sub_chunker, tables="yes")
    with pytest.raises(ValueError, match="chunker.text_chunker"):
        ModalityChunker(builder=build.build_sub_chunker, text_chunker={"chunk_size": 5})
    hier = ModalityChunker(builder=build.build_sub_chunker, text_chunker={"_target_": "harness.chunkers.hierarchical.HierarchicalChunker"})
    with pytest.raises(ValueError, match="replaces hits at retrieval"):
        hier.chunk(Document("a.txt", "text"))
    bad = Document("a.md", "short", {"elements": [{"type": "table", "start": 2, "end": 50}]})
    with pytest.raises(ValueError, match=r"'a.md': elements\[0\] span \[2, 50\) is not inside its text"):
        ModalityChunker(builder=build.build_sub_chunker).chunk(bad)


def test_nested_chunker_configs_are_built_only_by_the_builder():
    """The strategies that nest chunker configs build nothing themselves: without the
    builder's factory they refuse, with a recording factory every nested config goes through it."""
    doc = Document("a.txt", "Some prose.")  # sniffed as prose
    with pytest.raises(ValueError, match=r"chunker.text_chunker: no builder for nested chunker configs"):
        ModalityChunker().chunk(doc)
    with pytest.raises(ValueError, match=r"chunker.routes.prose: no builder for nested chunker configs"):
        AdaptiveChunker().chunk(doc)
    seen = []

    def recording(where, node, encoder):
        seen.append((where, node["_target_"]))
        return build.build_sub_chunker(where, node, encoder)

    AdaptiveChunker(builder=recording).chunk(Document("x.pdf", "Title\n\nText.", {"type": "pdf"}))
    # the modality route is built by the factory, and its text stream by the builder's own factory
    assert seen == [("chunker.routes.document", "harness.chunkers.modality.ModalityChunker")]
    assert build.build_chunker(compose(["chunker=modality"])).builder is build.build_sub_chunker
    assert build.build_chunker(compose(["chunker=adaptive"])).route("document").builder is build.build_sub_chunker


def test_adaptive_routes_extracted_pdf_and_html_to_modality(docs):
    assert {d.doc_id: sniff_type(d) for d in docs.documents} == {"guides/bakery.md": "markdown", "harbour.pdf": "document", "museum.html": "document"}
    chunker = build.build_chunker(compose(["chunker=adaptive"]), encoder=None)
    chunks = chunker.chunk_all(docs.documents)
    routed = {(c.doc_id, c.metadata["doc_type"], c.metadata["routed_to"]) for c in chunks}
    assert routed == {("guides/bakery.md", "markdown", "markdown"), ("harbour.pdf", "document", "modality"), ("museum.html", "document", "modality")}
    table = next(c for c in chunks if c.doc_id == "harbour.pdf" and c.metadata["modality"] == "table")
    assert table.spans == ((158, 291),)
    assert chunker.size_limit() == ("tokens", "model", 254)
    check_contract(chunker, docs.documents, chunks)
    # a routes config written before the document type existed: modality over its prose route
    routes = {t: chars(200) for t in ("code", "markdown", "table", "faq", "prose")}
    routes["chat"] = {"_target_": "harness.chunkers.timestamp.TimestampChunker", "max_chunk_size": 200, "unit": "chars"}
    old = AdaptiveChunker(builder=build.build_sub_chunker, routes=routes)
    assert old.route("document").inner.size_limit() == ("chars", "model", 200)


# ------------------------------------------------------------------------------ acceptance
def _run(folder, uri, chunker, retriever):
    cfg = compose(
        [
            "dataset=folder",
            f"dataset.path={folder}",
            f"chunker={chunker}",
            f"retriever={retriever}",
            f"tracking.uri={uri}",
            "stats.bootstrap=0",
            "embedding.show_progress=false",
        ]
    )
    return execute(cfg)


@pytest.mark.slow
@pytest.mark.parametrize("retriever", ["bm25", "faiss"])
@pytest.mark.parametrize("chunker", ["modality", "adaptive"])
def test_table_question_retrieves_the_whole_table_as_one_chunk(folder, tracking_uri, chunker, retriever):
    result = _run(folder, tracking_uri, chunker, retriever)
    client = mlflow.MlflowClient(tracking_uri)
    run = client.get_run(result["run_id"])
    assert run.info.status == "FINISHED"
    assert run.data.tags["n_documents"] == "3" and run.data.tags["n_queries"] == "5"
    ev = result["evaluation"]
    by_id = {c.chunk_id: c for c in ev.chunks}
    row = ev.per_query.set_index("query_id").loc["ferry_table"]
    top1 = by_id[row["retrieved"].split(";")[0]]
    assert top1.doc_id == "harbour.pdf" and top1.metadata["modality"] == "table"
    assert top1.spans == ((158, 291),)  # caption + table; the evidence is [184, 291)
    assert top1.start <= 184 and top1.end >= 291
    assert row["recall@1"] == 1.0
    assert row["precision@1"] == pytest.approx(107 / 133)  # evidence 107 chars of the 133-char chunk
    table_chunks = [c for c in ev.chunks if c.metadata.get("modality") == "table"]
    assert sorted(c.chunk_id for c in table_chunks) == ["harbour.pdf#158-291", "museum.html#115-239"]
    assert run.data.metrics["recall_at_1"] == pytest.approx(ev.metrics["recall@1"])
    assert ev.metrics["recall@10"] == 1.0  # every question's evidence is somewhere in the top 10 of 8 chunks
