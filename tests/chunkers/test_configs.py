"""Every config file composes and builds; every chunker config keeps the chunk contract on
the embedded dataset and on chroma_general, so a new strategy is tested the moment its
``conf/chunker/<name>.yaml`` exists."""

import pytest
from conftest import PROJECT_ROOT, compose

from harness.experiment import build
from harness.text.units import get_counter

CHUNKER_CONFIGS = sorted(p.stem for p in (PROJECT_ROOT / "conf" / "chunker").glob("*.yaml"))
#: Strategies that call an external service: setting overrides that point it at a closed local
#: port, and the setting the error must name. Here they must fail clearly without the
#: service; their chunk contract is checked against local servers in tests/test_agentic.py.
NEEDS_SERVICE = {"agentic": ("chunker.llm.base_url", ["chunker.llm.retries=0"])}
GROUPS = {
    g: sorted(p.stem for p in (PROJECT_ROOT / "conf" / g).glob("*.yaml")) for g in ("dataset", "retriever", "embedding", "metrics", "tracking", "experiment")
}


def test_there_are_configs():
    assert {"fixed", "recursive", "semantic"} <= set(CHUNKER_CONFIGS)
    assert {"faiss", "bm25"} <= set(GROUPS["retriever"])


@pytest.mark.parametrize("group, name", [(g, n) for g, names in GROUPS.items() for n in names])
def test_every_config_file_composes(group, name):
    cfg = compose([f"{group}={name}"])
    assert cfg.chunker._target_.startswith("harness.chunkers.")
    if group == "retriever":
        try:
            retriever = build.build_retriever(cfg, encoder=None)
        except ValueError as exc:  # rerank's default cross-encoder is a hub id: built only where it is available offline
            assert name == "rerank" and "retriever.model" in str(exc), exc
        else:
            assert retriever.name == name


def check_contract(chunker, documents, chunks):
    """The invariants of :class:`harness.chunkers.base.Chunker` (see its docstring); the size
    limit is measured on the embedded text ``chunk.text``, not only on the span text."""
    docs = {d.doc_id: d for d in documents}
    assert chunks, "no chunks"
    limit = chunker.size_limit()
    counter = get_counter(limit[0], limit[1]) if limit else None
    seen_spans = set()
    last_start: dict[str, int] = {}
    covered = {d: bytearray(len(doc.text)) for d, doc in docs.items()}
    for c in chunks:
        doc = docs[c.doc_id]
        assert all(0 <= s < e <= len(doc.text) for s, e in c.spans), c.chunk_id
        parts = [doc.text[s:e] for s, e in c.spans]
        meta = c.metadata
        assert c.text == meta.get("prefix", "") + meta.get("joiner", "").join(parts) + meta.get("suffix", ""), c.chunk_id
        source = "".join(parts)
        assert source.strip(), f"whitespace-only chunk {c.chunk_id}"
        if counter is not None:
            # the limit holds for what is embedded (prefix, joiners and suffix included), and
            # each chunk records that size in the limit's unit
            n = counter.count(c.text)
            assert n <= limit[2], (c.chunk_id, n, limit)
            assert (meta.get("size"), meta.get("unit")) == (n, limit[0]), (c.chunk_id, meta.get("size"), meta.get("unit"), n, limit)
        assert c.spans not in seen_spans or c.parent_id, f"duplicate spans {c.chunk_id}"
        seen_spans.add(c.spans)
        if chunker.contiguous:
            assert len(c.spans) == 1
            assert c.start >= last_start.get(c.doc_id, 0), f"start went backwards at {c.chunk_id}"
            last_start[c.doc_id] = c.start
        for s, e in c.spans:
            covered[c.doc_id][s:e] = b"\x01" * (e - s)
    # what the generator receives (parents for small-to-big strategies) is span-exact too
    for returned in chunker.expand(chunks[:7], docs):
        doc = docs[returned.doc_id]
        assert all(0 <= s < e <= len(doc.text) for s, e in returned.spans)
        assert returned.text.strip()
    if chunker.partitions:
        for d, doc in docs.items():
            missing = [i for i, ch in enumerate(doc.text) if not covered[d][i] and not ch.isspace()]
            assert not missing, f"{d}: {len(missing)} non-whitespace characters in no chunk, first at {missing[0]}"


@pytest.mark.parametrize("name", sorted(NEEDS_SERVICE))
def test_chunker_needing_a_service_fails_clearly_without_it(name, kestrel):
    import socket

    setting, extra = NEEDS_SERVICE[name]
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    chunker = build.build_chunker(compose([f"chunker={name}", f"{setting}={url}", *extra]))
    with pytest.raises(Exception, match=f"{setting}={url}"):
        chunker.chunk_all(kestrel.documents[:1])


#: Strategies that embed every sentence of what they chunk (the slow part of their contract test).
EMBEDS_SENTENCES = frozenset({"semantic", "cluster_semantic", "topic"})


@pytest.mark.slow
@pytest.mark.parametrize("dataset_fixture", ["kestrel", "chroma"])
@pytest.mark.parametrize("name", [n for n in CHUNKER_CONFIGS if n not in NEEDS_SERVICE])
def test_chunker_contract(name, dataset_fixture, request, encoder):
    dataset = request.getfixturevalue(dataset_fixture)
    # chunkers that embed every sentence run on a third of the documents (at least one), for time
    documents = dataset.documents[: max(1, len(dataset.documents) // 3)] if name in EMBEDS_SENTENCES else dataset.documents
    cfg = compose([f"chunker={name}"])
    chunker = build.build_chunker(cfg, encoder)
    chunks = chunker.chunk_all(documents)
    check_contract(chunker, documents, chunks)
    # deterministic: a second, freshly built chunker gives identical chunks and ids
    again = build.build_chunker(cfg, encoder).chunk_all(documents)
    assert [(c.chunk_id, c.text) for c in again] == [(c.chunk_id, c.text) for c in chunks]
