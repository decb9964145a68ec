"""Every value a run logs is finite and inside its documented range; every logged name is
documented (:func:`harness.evaluation.metrics.value_bounds`: the metric registry plus
:data:`harness.evaluation.metrics.RUN_VALUES`). One real run (BM25, a real MLflow SQLite
store in ``tmp_path``) read back through :func:`harness.tracking.runs.run_metrics`; the
same property over generated corpora without MLflow is in ``test_pipeline_properties.py``."""

from __future__ import annotations

import json
import math

import pytest
from conftest import compose

from harness.evaluation.metrics import FAMILIES, RUN_VALUES, parse_range, value_bounds
from harness.experiment.run import execute
from harness.tracking.runs import run_metrics

DOCS = {
    "guide.md": "# Setup\n\nThe server listens on port 8450.   Restart it after a config change.\n\nCafé mode: naïve caching.",
    "faq.md": "Q: Where is the cache?\nA: In the cache folder, next to the index.\n\nQ: Which port?\nA: 8450, unless configured.",
}


def _write_dataset(root) -> None:
    """Two documents, three queries; evidence given as exact spans (found here by hand)."""
    (root / "corpus").mkdir(parents=True)
    for name, text in DOCS.items():
        (root / "corpus" / name).write_text(text, encoding="utf-8", newline="")

    def ev(doc: str, excerpt: str) -> dict:
        start = DOCS[doc].index(excerpt)
        return {"doc_id": doc, "start": start, "end": start + len(excerpt), "text": excerpt}

    queries = [
        {"query_id": "q1", "query": "which port does the server use", "evidence": [ev("guide.md", "listens on port 8450.   Restart")]},
        {"query_id": "q2", "query": "where is the cache", "evidence": [ev("faq.md", "In the cache folder"), ev("guide.md", "naïve caching")]},
        {"query_id": "q3", "query": "zebra", "evidence": [ev("faq.md", "8450, unless configured")]},  # shares no term: BM25 returns nothing
    ]
    (root / "questions.jsonl").write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in queries), encoding="utf-8")


def test_value_bounds_reads_the_registry_and_refuses_undocumented_names():
    assert parse_range("[0, 1]") == (0.0, 1.0) and parse_range("[0, ∞)") == (0.0, math.inf) and parse_range("[-1, 1]") == (-1.0, 1.0)
    assert value_bounds("recall@5") == value_bounds("recall_at_5") == value_bounds("recall_at_5_ci_high") == (0.0, 1.0)
    assert value_bounds("context_tokens_at_10") == (0.0, math.inf) and value_bounds("recall_at_512tok_ci_low") == (0.0, 1.0)
    assert value_bounds("compressed.recall@5") == (0.0, 1.0) and value_bounds("compression.precision_gain_at_5") == (-1.0, 1.0)
    assert value_bounds("retriever.ann_recall_at_10") == (0.0, 1.0) and value_bounds("time.total_s") == (0.0, math.inf)
    for family in FAMILIES.values():
        assert value_bounds(family.pattern.replace("@k", "@3").replace("@Btok", "@64tok")) == parse_range(family.range)
    for value in RUN_VALUES:
        assert value_bounds(value.example) == parse_range(value.range), value.pattern
    for undocumented in ("recal_at_5", "chunks.new_statistic", "time.total", "bogus"):
        with pytest.raises(ValueError, match=rf"logged value '{undocumented}' has no documented range"):
            value_bounds(undocumented)
    with pytest.raises(ValueError, match="expected"):
        parse_range("0 to 1")


@pytest.mark.slow
def test_every_value_a_run_logs_is_finite_and_documented(tracking_uri, tmp_path):
    _write_dataset(tmp_path / "small")
    cfg = compose(
        [
            "retriever=bm25",
            "chunker=recursive",
            "chunker.unit=words",
            "chunker.chunk_size=6",
            "metrics.ks=[1,3,10]",
            "metrics.objective=recall@3",
            "metrics.budgets=[16,64]",
            "metrics.level=document",
            "metrics.convention=chroma",
            "stats.bootstrap=50",
            "dataset.name=small",
            f"dataset.path={tmp_path / 'small'}",
            f"tracking.uri={tracking_uri}",
            f"cache.dir={tmp_path / 'cache'}",
            "embedding.show_progress=false",
        ]
    )
    result = execute(cfg)
    logged = run_metrics(tracking_uri, result["run_id"])
    for name in ("recall_at_3", "chroma_recall_at_3", "doc_ndcg_at_10", "recall_at_64tok_ci_high", "chunks.evidence_uncovered_chars", "time.total_s"):
        assert name in logged, name  # the check below reads every family of the run, not a subset
    out_of_range = {}
    for name, value in logged.items():
        lo, hi = value_bounds(name)  # a value nothing documents fails here, naming it
        if not (math.isfinite(value) and lo <= value <= hi):
            out_of_range[name] = (value, (lo, hi))
    assert not out_of_range
    # the three spaces inside q1's evidence are dropped by the word splitter: counted, and recall stops below 1
    assert logged["chunks.evidence_uncovered_chars"] >= 1
