"""The agentic chunker: LLM replies mapped to exact sentence spans, malformed replies rejected
and counted, the fallback and the size limit, the chunk contract on both datasets, and runs
through ``harness.experiment.run`` against a scripted server and llama-cpp-python's real server."""

from __future__ import annotations

import json
import re

import mlflow
import pytest
from conftest import compose
from llm_servers import INVALID, FakeLLM, free_port, llama, user_message  # noqa: F401  (llama is a fixture)
from test_configs import check_contract

from harness.chunkers.agentic import AgenticChunker, ReplyRejected, parse_groups
from harness.experiment import build
from harness.experiment.run import execute
from harness.tracking.runs import run_metrics
from harness.types import Document

TEXT = "Alpha one is first. Alpha two follows here.\n\nBeta section starts. Beta has more words. Beta ends now.\n\nGamma closes it all."
SENTENCES = ["Alpha one is first.", "Alpha two follows here.", "Beta section starts.", "Beta has more words.", "Beta ends now.", "Gamma closes it all."]
DOC = Document("toy.txt", TEXT)


def span(first: str, last: str) -> tuple[int, int]:
    """Span from the start of sentence ``first`` to the end of sentence ``last`` in TEXT."""
    return (TEXT.index(first), TEXT.index(last) + len(last))


def threes(body: dict) -> str:
    """A well-behaved model: numbered sentences grouped three at a time."""
    n = len(re.findall(r"^\[\d+\]", user_message(body), flags=re.MULTILINE))
    return "\n".join(f"{i}-{min(i + 2, n)}" for i in range(1, n + 1, 3))


def chunker(base_url: str, **kwargs) -> AgenticChunker:
    llm = {"base_url": base_url, "retries": 0, **kwargs.pop("llm", {})}
    return AgenticChunker(llm=llm, **{"unit": "chars", "max_chunk_size": 1000, **kwargs})


# -- reply parsing --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "reply, n, groups",
    [
        ("1-2\n3-3", 3, [(0, 2), (2, 3)]),
        ("1-3", 3, [(0, 3)]),
        ("3-3\n1-2", 3, [(0, 2), (2, 3)]),  # any order: sorted
        ("```\n1-2\n3\n```", 3, [(0, 2), (2, 3)]),  # code fence and a single number
        ("  1 \u2013 2 \n\n 3-4 ", 4, [(0, 2), (2, 4)]),  # en dash, spaces, blank line
    ],
)
def test_valid_replies_map_to_sentence_groups(reply, n, groups):
    assert parse_groups(reply, n) == groups


@pytest.mark.parametrize(
    "reply, reason",
    [
        ("1-4", "out_of_bounds"),
        ("0-2\n3-3", "out_of_bounds"),
        ("3-1", "out_of_bounds"),
        ("1-2\n2-3", "overlapping"),
        ("1-3\n1-3", "overlapping"),
        ("1-1\n3-3", "not_covering"),
        ("1-2", "not_covering"),
        ("Sure! Here are the chunks:\n1-3", "unparseable"),
        ("1-2, 3-3", "unparseable"),
        ("", "unparseable"),
        ("[[1, 2], [3, 3]]", "unparseable"),
    ],
)
def test_malformed_replies_are_rejected_with_their_reason(reply, reason):
    with pytest.raises(ReplyRejected) as info:
        parse_groups(reply, 3)
    assert info.value.reason == reason


# -- the chunker against a scripted server --------------------------------------------------
def test_accepted_and_rejected_windows_give_exact_spans_and_counts():
    with FakeLLM(["1-2\n3-3", "this is not a grouping"]) as server:
        ch = chunker(server.base_url, window_sentences=3)
        chunks = ch.chunk(DOC)
    assert [c.spans[0] for c in chunks] == [
        span(SENTENCES[0], SENTENCES[1]),  # LLM: 1-2
        span(SENTENCES[2], SENTENCES[2]),  # LLM: 3-3
        span(SENTENCES[3], SENTENCES[5]),  # rejected: sentence packing under 1000 chars = one chunk
    ]
    assert [c.metadata["grouped_by"] for c in chunks] == ["llm", "llm", "fallback"]
    assert all(c.text == TEXT[c.start : c.end] for c in chunks)
    first_prompt = user_message(server.requests[0]).splitlines()
    assert first_prompt == [f"[{i}] ({len(s)} chars) {s}" for i, s in enumerate(SENTENCES[:3], start=1)]
    stats = ch.stats()
    assert stats["llm.calls"] == 2 and stats["llm.replies"] == 2
    assert stats["llm.rejected_replies"] == 1 and stats["llm.rejected.unparseable"] == 1
    assert stats["agentic.windows"] == 2 and stats["agentic.fallback_windows"] == 1
    assert ch.rejections[0]["doc_id"] == "toy.txt" and ch.rejections[0]["window"] == 1


@pytest.mark.parametrize(
    "reply, reason",
    [("1-4", "out_of_bounds"), ("1-2\n2-3", "overlapping"), ("1-1\n3-3", "not_covering"), ("Here you go.", "unparseable"), (INVALID, "invalid_response")],
)
def test_every_kind_of_bad_reply_falls_back_and_is_counted(reply, reason):
    with FakeLLM([reply, "1-3"]) as server:
        ch = chunker(server.base_url, window_sentences=3)
        chunks = ch.chunk(DOC)
    assert [c.spans[0] for c in chunks] == [span(SENTENCES[0], SENTENCES[2]), span(SENTENCES[3], SENTENCES[5])]
    assert [c.metadata["grouped_by"] for c in chunks] == ["fallback", "llm"]
    stats = ch.stats()
    assert stats["llm.rejected_replies"] == 1 and stats[f"llm.rejected.{reason}"] == 1
    assert sum(stats[f"llm.rejected.{r}"] for r in ("unparseable", "out_of_bounds", "overlapping", "not_covering", "invalid_response")) == 1


def test_an_oversize_group_is_split_to_respect_the_limit():
    # sentences 1-3 span 19 + 1 + 23 + 2 + 20 = 65 chars; the limit is 45
    with FakeLLM(["1-3", "1-3"]) as server:
        ch = chunker(server.base_url, window_sentences=3, max_chunk_size=45)
        chunks = ch.chunk(DOC)
    assert [c.spans[0] for c in chunks][:2] == [span(SENTENCES[0], SENTENCES[1]), span(SENTENCES[2], SENTENCES[2])]
    assert all(c.end - c.start <= 45 for c in chunks)
    assert ch.stats()["agentic.oversize_groups_split"] == 2 and ch.stats()["llm.rejected_replies"] == 0


def test_a_one_sentence_window_needs_no_call():
    with FakeLLM(["1-5", "1-1"]) as server:
        chunks = chunker(server.base_url, window_sentences=5).chunk(DOC)
    assert len(server.requests) == 1  # window 2 holds sentence 6 alone
    assert chunks[-1].spans[0] == span(SENTENCES[5], SENTENCES[5]) and chunks[-1].metadata["grouped_by"] == "single"


def test_sentences_shown_to_the_model_are_cut_to_preview_chars():
    with FakeLLM(["1-3", "1-3"]) as server:
        chunker(server.base_url, window_sentences=3, preview_chars=8).chunk(DOC)
    assert user_message(server.requests[0]).splitlines()[0] == "[1] (19 chars) Alpha on\u2026"


def test_no_server_fails_with_a_message_naming_the_setting():
    port = free_port()
    ch = chunker(f"http://127.0.0.1:{port}/v1", window_sentences=3)
    with pytest.raises(Exception, match=rf"chunker\.llm\.base_url=http://127\.0\.0\.1:{port}/v1"):
        ch.chunk(DOC)


def test_a_refused_request_stops_with_a_hint_at_the_window_size():
    from harness.llm import LLMRequestError

    with FakeLLM([400]) as server:
        with pytest.raises(LLMRequestError, match=r"HTTP 400.*lower chunker\.window_sentences or chunker\.preview_chars"):
            chunker(server.base_url, window_sentences=3).chunk(DOC)


def test_replies_are_cached_on_disk(tmp_path):
    with FakeLLM(default=threes) as server:
        first = chunker(server.base_url, window_sentences=3, cache_dir=str(tmp_path)).chunk(DOC)
        again = chunker(server.base_url, window_sentences=3, cache_dir=str(tmp_path))
        assert again.chunk(DOC) == first
    assert len(server.requests) == 2 and again.stats()["llm.cache_hits"] == 2


@pytest.mark.slow
@pytest.mark.parametrize("dataset_fixture", ["kestrel", "chroma"])
def test_chunk_contract_on_both_datasets(dataset_fixture, request):
    dataset = request.getfixturevalue(dataset_fixture)
    with FakeLLM(default=threes) as server:
        cfg = compose(["chunker=agentic", f"chunker.llm.base_url={server.base_url}"])
        ch = build.build_chunker(cfg)
        chunks = ch.chunk_all(dataset.documents)
        check_contract(ch, dataset.documents, chunks)
        again = build.build_chunker(cfg).chunk_all(dataset.documents)
    assert [(c.chunk_id, c.text) for c in again] == [(c.chunk_id, c.text) for c in chunks]
    stats = ch.stats()
    assert stats["llm.rejected_replies"] == 0 and stats["llm.calls"] == stats["agentic.llm_windows"] > 0


# -- runs through harness.experiment.run ---------------------------------------------------------------
def small_dataset(folder, kestrel, doc_ids=("company_handbook.txt", "release_notes.md")):
    """An ``excerpts`` dataset of two kestrel documents and their questions."""
    (folder / "corpus").mkdir(parents=True)
    for doc in kestrel.documents:
        if doc.doc_id in doc_ids:
            with open(folder / "corpus" / doc.doc_id, "w", encoding="utf-8", newline="") as fh:
                fh.write(doc.text)
    lines = []
    for q in kestrel.queries:
        if all(e.doc_id in doc_ids for e in q.evidence):
            lines.append(json.dumps({"query_id": q.query_id, "query": q.text, "excerpts": [e.text for e in q.evidence]}))
    (folder / "excerpts.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines)


def run_agentic(base_url, folder, tracking_uri, *overrides):
    cfg = compose(
        [
            "dataset=excerpts", f"dataset.path={folder}", "dataset.allow_unlocated=true", "retriever=bm25",
            "chunker=agentic", f"chunker.llm.base_url={base_url}", f"tracking.uri={tracking_uri}",
            "embedding.show_progress=false", "stats.bootstrap=0", *overrides,
        ]
    )  # fmt: skip
    result = execute(cfg)
    client = mlflow.MlflowClient(tracking_uri)
    return result, client.get_run(result["run_id"])


@pytest.mark.slow
def test_run_with_a_scripted_server_logs_llm_counters(tmp_path, kestrel, tracking_uri):
    n_queries = small_dataset(tmp_path / "data", kestrel)
    replies = iter(range(10_000))

    def mostly_good(body):  # every third reply is malformed
        return "no ranges here" if next(replies) % 3 == 2 else threes(body)

    with FakeLLM(default=mostly_good) as server:
        result, run = run_agentic(server.base_url, tmp_path / "data", tracking_uri, "chunker.window_sentences=10")
    assert run.info.status == "FINISHED" and run.info.run_name == "agentic-254-bm25"
    ev = result["evaluation"]
    check_contract(build.build_chunker(compose(["chunker=agentic"])), list(_docs(tmp_path / "data")), ev.chunks)
    asked = len(server.requests)
    m = run_metrics(tracking_uri, run.info.run_id)  # llm.* / agentic.* counters are in the run's metrics table
    assert m["llm.calls"] == asked == m["agentic.llm_windows"]
    assert m["llm.rejected_replies"] == m["llm.rejected.unparseable"] == asked // 3 == m["agentic.fallback_windows"]
    assert 0.0 <= m["recall_at_5"] <= 1.0 and len(ev.per_query) <= n_queries
    assert {"llm", "fallback"} <= {c.metadata["grouped_by"] for c in ev.chunks} <= {"llm", "fallback", "single"}


def _docs(folder):
    from harness.datasets.native import read_corpus_folder

    return read_corpus_folder(folder / "corpus")


@pytest.mark.slow
def test_run_against_the_llama_server(llama, tmp_path, kestrel, tracking_uri):  # noqa: F811
    small_dataset(tmp_path / "data", kestrel)
    overrides = ["chunker.window_sentences=8", "chunker.preview_chars=80", "chunker.llm.max_tokens=48", "chunker.llm.model=tinycoder"]
    result, run = run_agentic(llama, tmp_path / "data", tracking_uri, *overrides)
    assert run.info.status == "FINISHED"
    ev = result["evaluation"]
    # whatever the model says, the chunks keep the contract
    check_contract(build.build_chunker(compose(["chunker=agentic"])), list(_docs(tmp_path / "data")), ev.chunks)
    m = run_metrics(tracking_uri, run.info.run_id)  # llm.* / agentic.* counters are in the run's metrics table
    assert m["llm.calls"] == m["agentic.llm_windows"] > 10
    assert m["llm.server_requests"] == m["llm.calls"] - m["llm.cache_hits"]
    assert m["llm.replies"] == m["llm.calls"]  # every request got a chat completion back
    reasons = sum(m[f"llm.rejected.{r}"] for r in ("unparseable", "out_of_bounds", "overlapping", "not_covering", "invalid_response"))
    assert m["llm.rejected_replies"] == reasons == m["agentic.fallback_windows"]
    assert sum(c.metadata["grouped_by"] == "fallback" for c in ev.chunks) >= m["agentic.fallback_windows"]
    assert m["llm.prompt_tokens"] > 0
