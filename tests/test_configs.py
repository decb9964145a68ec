"""Every config file composes and builds; every chunker config keeps the chunk contract on
the embedded dataset and on chroma_general, so a new strategy is tested the moment its
``conf/chunker/<name>.yaml`` exists."""

from pathlib import Path

import pytest

from conftest import PROJECT_ROOT, compose
from harness import build
from harness.chunkers.units import get_counter

CHUNKER_CONFIGS = sorted(p.stem for p in (PROJECT_ROOT / "conf" / "chunker").glob("*.yaml"))
GROUPS = {g: sorted(p.stem for p in (PROJECT_ROOT / "conf" / g).glob("*.yaml")) for g in ("dataset", "retriever", "embedding", "metrics", "tracking", "experiment")}


def test_there_are_configs():
    assert {"fixed", "recursive", "semantic"} <= set(CHUNKER_CONFIGS)
    assert {"faiss", "bm25"} <= set(GROUPS["retriever"])


@pytest.mark.parametrize("group, name", [(g, n) for g, names in GROUPS.items() for n in names])
def test_every_config_file_composes(group, name):
    cfg = compose([f"{group}={name}"])
    assert cfg.chunker._target_.startswith("harness.chunkers.")
    if group == "retriever":
        assert build.build_retriever(cfg, encoder=None).name == name


def _limit(chunker):
    if hasattr(chunker, "chunk_size"):
        return chunker.unit, getattr(chunker, "tokenizer", "model"), chunker.chunk_size
    if hasattr(chunker, "max_chunk_size"):
        return "tokens", chunker.tokenizer, chunker.max_chunk_size
    return None, None, None


@pytest.mark.slow
@pytest.mark.parametrize("dataset_fixture", ["kestrel", "chroma"])
@pytest.mark.parametrize("name", CHUNKER_CONFIGS)
def test_chunker_contract(name, dataset_fixture, request, encoder):
    dataset = request.getfixturevalue(dataset_fixture)
    cfg = compose([f"chunker={name}"])
    chunker = build.build_chunker(cfg, encoder)
    chunks = chunker.chunk_all(dataset.documents)
    docs = dataset.by_id
    assert chunks, "no chunks"
    unit, tokenizer, limit = _limit(chunker)
    counter = get_counter(unit, tokenizer) if unit else None
    ids = set()
    for c in chunks:
        doc = docs[c.doc_id]
        assert all(0 <= s < e <= len(doc.text) for s, e in c.spans)
        source = "".join(doc.text[s:e] for s, e in c.spans)
        if "prefix" not in c.metadata:
            assert c.text == source, c.chunk_id
        if counter is not None:
            assert counter.count(source) <= limit, (c.chunk_id, counter.count(source), limit)
        assert c.chunk_id not in ids
        ids.add(c.chunk_id)
    # every document yields at least one chunk
    assert {c.doc_id for c in chunks} == set(docs)
