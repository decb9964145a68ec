"""``harness generate``: questions with excerpts located as exact spans, malformed
replies rejected and counted by reason, near duplicates filtered, and the written dataset
loaded and scored by ``harness.experiment.run`` -- against a scripted server and llama-cpp-python's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import mlflow
import pytest
from conftest import _SESSION_CACHE, PROJECT_ROOT, compose
from llm_servers import INVALID, FakeLLM, llama, user_message  # noqa: F401  (llama is a fixture)

from harness.datasets.generate import (
    REJECT_REASONS,
    Rejected,
    corpus_file_names,
    jaccard,
    parse_reply,
    passages,
    question_tokens,
    report,
)
from harness.experiment.run import execute
from harness.studies.generate import run


def compose_generate(overrides: list[str]):
    """Compose conf/generate.yaml (session cache folder unless ``cache.*`` is overridden)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from harness.experiment.build import register_resolvers

    register_resolvers()
    if not any(o.startswith("cache.") for o in overrides):
        overrides = [*overrides, f"cache.dir={_SESSION_CACHE}"]
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        return hydra_compose(config_name="generate", overrides=overrides)


def request_parts(body: dict) -> tuple[str, str]:
    """``(doc_id, passage)`` of a generation request."""
    m = re.match(r"Document: (.*)\n\nPassage:\n(.*)\Z", user_message(body), flags=re.DOTALL)
    return m.group(1), m.group(2)


class Writer:
    """A well-behaved model: quotes the shortest prefix (>= 40 chars, whole words) of the
    passage that occurs once in its document, and asks a question made of its words."""

    def __init__(self, kestrel):
        self.texts = {d.doc_id: d.text for d in kestrel.documents}
        self.questions: list[str] = []

    def excerpt(self, body) -> str:
        doc_id, passage = request_parts(body)
        words = list(re.finditer(r"\S+", passage))
        for w in words:
            candidate = passage[: w.end()]
            if len(candidate) >= 40 and self.texts[doc_id].count(candidate) == 1:
                return candidate
        raise AssertionError(f"no unique prefix in a passage of {doc_id}")

    def good(self, body) -> str:
        excerpt = self.excerpt(body)
        question = f"What does the guide say about {' '.join(re.findall(r'[A-Za-z]+', excerpt)[:6]).lower()}?"
        self.questions.append(question)
        return json.dumps({"question": question, "excerpt": excerpt})


def repeated_phrase(text: str) -> str:
    """A phrase of three words (>= 10 chars) that occurs at least twice in ``text``."""
    words = re.findall(r"\S+", text)
    for i in range(len(words) - 2):
        phrase = " ".join(words[i : i + 3])
        if len(phrase) >= 10 and text.count(phrase) >= 2:
            return phrase
    raise AssertionError("no repeated phrase")


# -- pieces ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "reply, expected",
    [
        ('{"question": "Why?", "excerpt": "Because."}', ("Why?", "Because.")),
        ('```json\n{"question": " Why? ", "excerpt": "Because."}\n```', ("Why?", "Because.")),
        ('{"excerpt": "B", "question": "Q", "extra": 1}', ("Q", "B")),
    ],
)
def test_parse_reply_accepts_json_objects(reply, expected):
    assert parse_reply(reply) == expected


@pytest.mark.parametrize(
    "reply", ["Why? Because.", '["Why?", "Because."]', '{"question": "Why?"}', '{"question": "", "excerpt": "x"}', '{"question": 3, "excerpt": "x"}', ""]
)
def test_parse_reply_rejects_everything_else(reply):
    with pytest.raises(Rejected) as info:
        parse_reply(reply)
    assert info.value.reason == "unparseable"


def test_question_similarity_is_token_jaccard():
    assert question_tokens("What's the TTL?") == {"what", "s", "the", "ttl"}
    assert jaccard(question_tokens("a b"), question_tokens("A c")) == pytest.approx(1 / 3)
    assert jaccard(question_tokens("How long is a lease?"), question_tokens("how long is a LEASE")) == 1.0


def test_corpus_file_names_are_safe_and_distinct():
    names = corpus_file_names(["a.md", "notes.txt", "dir/x.html", ".hidden", "a_b.txt", "a/b", "page.pdf"])
    assert names == {
        "a.md": "a.md",
        "notes.txt": "notes.txt",
        "dir/x.html": "dir_x.html.txt",
        ".hidden": "hidden.txt",
        "a_b.txt": "a_b.txt",
        "a/b": "a_b-2.txt",
        "page.pdf": "page.pdf.txt",
    }


def test_passages_respect_their_bounds(kestrel):
    found = passages(kestrel.documents, 600, 150)
    assert len(found) > 100
    for doc, (s, e) in found:
        assert 150 <= e - s <= 600 and doc.text[s:e] == doc.text[s:e].strip()


def test_bad_settings_are_named(kestrel):
    from harness.datasets.generate import generate
    from harness.llm import LLMClient

    client = LLMClient()
    for kwargs, message in [
        ({"n": 0}, "n must be an integer >= 1"),
        ({"n": 1, "min_passage_chars": 900, "passage_chars": 800}, "min_passage_chars must be <= passage_chars"),
        ({"n": 1, "dedup_threshold": 0.0}, r"dedup_threshold must be a number in \(0, 1\]"),
        ({"n": 1, "min_excerpt_chars": 0}, "min_excerpt_chars"),
    ]:
        with pytest.raises(ValueError, match=message):
            generate(kestrel.documents, client, **kwargs)


# -- against a scripted server --------------------------------------------------------------
@pytest.mark.slow
def test_scripted_replies_are_counted_by_reason_and_the_dataset_is_scored(kestrel, tmp_path, tracking_uri):
    writer = Writer(kestrel)
    texts = writer.texts

    def duplicate(body):  # a new, valid excerpt with the first question again
        return json.dumps({"question": writer.questions[0], "excerpt": writer.excerpt(body)})

    def ambiguous(body):
        return json.dumps({"question": "Which phrase repeats?", "excerpt": repeated_phrase(texts[request_parts(body)[0]])})

    script = [
        writer.good,
        "I think a good question would be: what is Kestrel?",
        json.dumps({"question": "Where is the moon base?", "excerpt": "The moon base is on the dark side of Neptune."}),
        duplicate,
        json.dumps({"question": "Short?", "excerpt": "a b c"}),
        ambiguous,
        INVALID,
        lambda body: "```json\n" + writer.good(body) + "\n```",
    ]
    out = tmp_path / "generated"
    with FakeLLM(script) as server:
        cfg = compose_generate(["n=8", f"llm.base_url={server.base_url}", "llm.model=scripted", f"output={out}"])
        generation, folder = run(cfg)
    assert len(server.requests) == 8
    c = generation.counts
    assert c["asked"] == 8 and c["accepted"] == 2 and c["rejected"] == 6
    assert {r: c[f"rejected.{r}"] for r in REJECT_REASONS} == {
        "invalid_response": 1,
        "unparseable": 1,
        "excerpt_too_short": 1,
        "excerpt_not_found": 1,
        "excerpt_ambiguous": 1,
        "duplicate_question": 1,
    }
    assert "rejected excerpt_ambiguous: 1" in report(generation, folder)
    records = [json.loads(line) for line in (folder / "excerpts.jsonl").read_text().splitlines()]
    assert [r["query"] for r in records] == [writer.questions[0], writer.questions[1]]
    for r in records:
        s, e = r["span"]
        assert texts[r["doc_id"]][s:e] == r["excerpts"][0] and texts[r["doc_id"]].count(r["excerpts"][0]) == 1
        assert r["generator"] == {"model": "scripted", "prompt_version": "generate-v1"}
    meta = json.loads((folder / "generation.json").read_text())
    assert meta["generator"]["model"] == "scripted" and meta["prompt_version"] == "generate-v1"
    assert meta["counts"] == c and meta["source"]["dataset"] == "kestrel_kb" and meta["source"]["fingerprint"] == kestrel.fingerprint()
    assert len(meta["rejections"]) == 6
    assert sorted(p.name for p in (folder / "corpus").iterdir()) == sorted(texts)
    # the written dataset loads with dataset=excerpts and harness.experiment.run scores it
    run_cfg = compose(["dataset=excerpts", f"dataset.path={folder}", "retriever=bm25", f"tracking.uri={tracking_uri}", "stats.bootstrap=0"])
    result = execute(run_cfg)
    logged = mlflow.MlflowClient(tracking_uri).get_run(result["run_id"])
    assert logged.info.status == "FINISHED" and logged.data.tags["n_queries"] == "2"
    assert 0.0 <= logged.data.metrics["recall_at_5"] <= 1.0


def _cli(args, cwd=PROJECT_ROOT):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "harness", "generate", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_cli_writes_reuses_cached_replies_and_refuses_to_overwrite(kestrel, tmp_path):
    writer = Writer(kestrel)
    out = tmp_path / "gen"
    with FakeLLM(default=writer.good) as server:
        args = [
            "dataset=kestrel_kb",
            "n=3",
            "seed=7",
            f"llm.base_url={server.base_url}",
            f"output={out}",
            f"cache.dir={tmp_path / 'cache'}",
            f"hydra.run.dir={tmp_path / 'h'}",
        ]
        first = _cli(args)
        assert first.returncode == 0, first.stderr
        assert "asked 3" in first.stdout and "accepted 3, rejected 0" in first.stdout
        assert len(server.requests) == 3
        again = _cli(args)
        assert again.returncode == 2 and "overwrite=true" in again.stderr
        forced = _cli([*args, "overwrite=true"])
        assert forced.returncode == 0, forced.stderr
        assert len(server.requests) == 3  # same prompts: every reply came from the cache
    assert len((out / "excerpts.jsonl").read_text().splitlines()) == 3


def test_cli_without_a_server_exits_2_naming_base_url(tmp_path):
    from llm_servers import free_port

    url = f"http://127.0.0.1:{free_port()}/v1"
    proc = _cli(["n=1", f"llm.base_url={url}", "llm.retries=0", f"output={tmp_path / 'g'}", f"cache.dir={tmp_path / 'c'}", f"hydra.run.dir={tmp_path / 'h'}"])
    assert proc.returncode == 2 and f"llm.base_url={url}" in proc.stderr
    assert not (tmp_path / "g").exists()


# -- against the real llama-cpp-python server -----------------------------------------------
@pytest.mark.slow
def test_llama_server_generation_counts_add_up(llama, tmp_path):  # noqa: F811
    out = tmp_path / "generated"
    cfg = compose_generate(
        ["n=4", f"llm.base_url={llama}", "llm.model=tinycoder", "llm.max_tokens=64", "passage_chars=400", "min_passage_chars=100", f"output={out}"]
    )
    generation, folder = run(cfg)
    c = generation.counts
    assert c["asked"] == 4 == c["accepted"] + c["rejected"]
    assert c["rejected"] == sum(c[f"rejected.{r}"] for r in REJECT_REASONS)
    meta = json.loads((folder / "generation.json").read_text())
    assert meta["counts"] == c and meta["llm_counters"]["llm.calls"] == 4
    lines = (folder / "excerpts.jsonl").read_text().splitlines()
    assert len(lines) == c["accepted"]
