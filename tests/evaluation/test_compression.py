"""Contextual compression: hand-worked sentence selection with the real MiniLM encoder, the
greedy budget rule, the pipeline hook with a real BM25 retriever, and MLflow-safe names.

Hand-worked corpus (offsets counted by hand, BlingFire agrees):

``harbour.txt`` (130 chars): s1 = [0, 52) "The lighthouse on Gull Island was first lit in 1862.",
s2 = [53, 91) "Gulls nest on the cliffs every spring.", s3 = [92, 130) "The bakery sells rye
bread on Fridays."

``mill.txt`` (103 chars): m1 = [0, 37) "The tide mill ground corn until 1921.", m2 = [38, 66)
"Its wheel turned on the ebb.", m3 = [67, 103) "Visitors may climb to its top floor."

``ferry.txt`` (46 chars) holds no evidence; with three documents every term found in one
document has a positive BM25 idf (with two, rank-bm25's idf of such a term is 0).
"""

import pytest
from conftest import compose

from harness.chunkers.recursive import RecursiveChunker
from harness.evaluation.compression import Compressor, from_config
from harness.evaluation.metrics import mlflow_key
from harness.experiment import build
from harness.experiment.pipeline import EvaluationTools, evaluate
from harness.experiment.settings import default_metric_settings
from harness.retrievers.bm25 import BM25Retriever
from harness.types import Chunk, Dataset, Document, Evidence, Query

HARBOUR = "The lighthouse on Gull Island was first lit in 1862. Gulls nest on the cliffs every spring. The bakery sells rye bread on Fridays."
MILL = "The tide mill ground corn until 1921. Its wheel turned on the ebb. Visitors may climb to its top floor."
FERRY = "The ferry leaves North Quay at noon every day."
SIZES = {"harbour.txt": 130, "mill.txt": 103, "ferry.txt": 46}


def dataset() -> Dataset:
    docs = (Document("harbour.txt", HARBOUR), Document("mill.txt", MILL), Document("ferry.txt", FERRY))
    queries = (
        Query("light", "When was the lighthouse first lit?", (Evidence("harbour.txt", 0, 52, HARBOUR[:52]),)),
        Query("mill", "Until when did the tide mill grind corn?", (Evidence("mill.txt", 0, 37, MILL[:37]),)),
    )
    return Dataset("compression_sample", docs, queries)


def test_hand_made_offsets():
    assert (len(HARBOUR), len(MILL), len(FERRY)) == (130, 103, 46)
    assert HARBOUR[53:91] == "Gulls nest on the cliffs every spring." and HARBOUR[92:] == "The bakery sells rye bread on Fridays."
    assert MILL[38:66] == "Its wheel turned on the ebb." and MILL[67:] == "Visitors may climb to its top floor."


def test_select_is_greedy_by_score_and_skips_what_overflows():
    c = Compressor(budget=10, unit="chars")
    # by score: #2 (size 8) fits; #0 (size 5) would make 13 > 10: skipped; #3 (size 2) fits -> 10; #1 (1) -> 11: skipped
    assert c.select([0.5, 0.1, 0.9, 0.3], [5, 1, 8, 2], [0, 0, 0, 0], [0, 10, 20, 30]) == [2, 3]
    # ties on score: better ranked chunk first, then earlier start
    assert c.select([0.5, 0.5, 0.5], [6, 6, 6], [1, 0, 0], [0, 9, 3]) == [2]
    assert c.select([], [], [], []) == []


def test_candidate_sentences_are_exact_spans_deduplicated_by_rank():
    docs = {"harbour.txt": Document("harbour.txt", HARBOUR)}
    doc = docs["harbour.txt"]
    whole = Chunk.from_spans(doc, [(0, 130)])
    tail = Chunk.from_spans(doc, [(53, 130)])
    c = Compressor(budget=10, unit="chars")
    assert c.sentences([tail, whole], docs) == [(0, "harbour.txt", (53, 91)), (0, "harbour.txt", (92, 130)), (1, "harbour.txt", (0, 52))]


@pytest.mark.slow
def test_compression_keeps_the_evidence_sentence_and_raises_precision(encoder, tracking_uri):
    ds = dataset()
    compressor = Compressor(enabled=True, budget=60, unit="chars", encoder=encoder)
    ev = evaluate(
        ds,
        RecursiveChunker(chunk_size=500, unit="chars"),
        BM25Retriever(),
        default_metric_settings(ks=(1, 2), budgets=()),
        EvaluationTools(context_token_counter=len, compressor=compressor),
        progress=False,
    )
    pq = ev.per_query.set_index("query_id")
    assert pq.loc["light", "retrieved"].split(";")[0] == "harbour.txt#0-130"
    assert pq.loc["mill", "retrieved"].split(";")[0] == "mill.txt#0-103"
    # k=1, "light": candidates s1 (52), s2 (38), s3 (38); s1 is the most similar and fits 60;
    # s2 or s3 would make 90 > 60. Kept = s1 = the evidence.
    light, mill = pq.loc["light"], pq.loc["mill"]
    assert light["precision@1"] == pytest.approx(52 / 130)
    assert light["compressed.precision@1"] == 1.0 and light["compressed.recall@1"] == 1.0 and light["compressed.iou@1"] == 1.0
    assert light["compression.precision_gain@1"] == pytest.approx(1 - 52 / 130)
    assert light["compressed.context_tokens@1"] == 52 and light["compression.tokens_saved@1"] == 130 - 52
    # k=1, "mill": m1 (37) kept; m2 (28) -> 65 > 60 and m3 (36) -> 73 > 60 skipped
    assert mill["compressed.precision@1"] == 1.0 and mill["compression.tokens_saved@1"] == 103 - 37
    assert mill["precision@1"] == pytest.approx(37 / 103)
    # k=2: the second document's sentences join the candidates; s1 still wins and fills the budget
    second = light["retrieved"].split(";")[1].split("#")[0]
    top2 = 130 + SIZES[second]
    assert light["compressed.precision@2"] == 1.0 and light["precision@2"] == pytest.approx(52 / top2)
    assert light["compression.tokens_saved@2"] == top2 - 52
    means = ev.metrics
    assert means["compressed.precision@1"] == 1.0
    assert means["compression.tokens_saved@1"] == pytest.approx(((130 - 52) + (103 - 37)) / 2)
    assert means["compressed.precision@1"] > means["precision@1"]
    # the names are loggable next to the uncompressed ones
    from harness.tracking.tracker import Tracker, artifact_root_for

    tracker = Tracker(tracking_uri, "compression", artifact_root_for(tracking_uri, "."))
    with tracker.run("compressed"):
        tracker.log_metrics(ev.metrics)
    logged = tracker.client.get_run(tracker.run_id).data.metrics
    assert mlflow_key("compressed.precision@1") == "compressed.precision_at_1"
    assert logged["compressed.precision_at_1"] == 1.0
    assert logged["compression.tokens_saved_at_1"] == pytest.approx(72.0)
    assert logged["precision_at_1"] == pytest.approx(means["precision@1"])


def test_disabled_compression_adds_nothing_and_bad_settings_fail():
    ev = evaluate(
        dataset(),
        RecursiveChunker(chunk_size=500, unit="chars"),
        BM25Retriever(),
        default_metric_settings(ks=(1,), budgets=()),
        EvaluationTools(compressor=Compressor()),
        progress=False,
    )
    assert not any(k.startswith(("compressed.", "compression.")) for k in ev.metrics)
    for kwargs, fragment in [
        ({"budget": 0}, "compression.budget must be an integer >= 1"),
        ({"unit": "lines"}, "compression.unit must be one of"),
        ({"tokenizer": "gpt9"}, "compression.tokenizer"),
        ({"enabled": "yes"}, "compression.enabled must be true or false"),
        ({"enabled": True}, "needs an encoder"),
    ]:
        with pytest.raises(ValueError, match=fragment):
            Compressor(**kwargs)
    with pytest.raises(ValueError, match="compression.enabled is false"):
        Compressor().evaluate([], {}, [1], {})


def test_compression_config_group(encoder):
    cfg = compose([])
    assert build.to_container(cfg.compression) == {
        "_target_": "harness.evaluation.compression.Compressor",
        "enabled": False,
        "budget": 256,
        "unit": "tokens",
        "tokenizer": "model",
        "split_paragraphs": True,
    }
    assert from_config(build.to_container(cfg.compression), encoder) is None  # disabled
    on = from_config(build.to_container(compose(["compression.enabled=true", "compression.budget=128"]).compression), encoder)
    assert isinstance(on, Compressor) and on.budget == 128 and on.encoder is encoder
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['budgett'\]"):
        from_config({"enabled": True, "budgett": 5}, encoder)


def test_results_text_lists_compression_metrics_by_k():
    from harness.experiment.run import _compression_table

    text = _compression_table({"compressed.recall@1": 0.5, "compressed.recall@5": 0.75, "compression.tokens_saved@5": 12.0, "recall@5": 0.9})
    lines = text.splitlines()
    assert lines[0].split() == ["@1", "@5"]
    assert lines[1].split() == ["compressed.recall", "0.5000", "0.7500"]
    assert lines[2].split() == ["compression.tokens_saved", "12.0000"]
    assert _compression_table({"recall@5": 0.9}) == ""
