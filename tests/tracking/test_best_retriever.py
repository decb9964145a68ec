"""A sweep over retrievers names the best retriever of each chunking on its parent run."""

import pandas as pd

from harness.tracking.callbacks import best_retriever_per_chunker


def _rows(records):
    return pd.DataFrame(records, columns=["run_name", "retriever", "embedding", "recall_at_5"])


def test_best_retriever_per_chunking_and_embedding():
    rows = _rows(
        [
            ("fixed-254-0-faiss", "faiss", "e/minilm", 0.70),
            ("fixed-254-0-bm25", "bm25", "e/minilm", 0.74),
            ("fixed-254-0-hybrid", "hybrid", "e/minilm", 0.74),  # a tie goes to the retriever named first alphabetically
            ("recursive-254-0-faiss", "faiss", "e/minilm", 0.81),
            ("recursive-254-0-bm25", "bm25", "e/minilm", 0.60),
            ("recursive-254-0-faiss", "faiss", "e/static", 0.55),
            ("recursive-254-0-bm25", "bm25", "e/static", 0.60),
        ]
    )
    assert best_retriever_per_chunker(rows, "recall_at_5") == {
        "fixed-254-0 / e/minilm": "bm25 (recall_at_5 0.7400)",
        "recursive-254-0 / e/minilm": "faiss (recall_at_5 0.8100)",
        "recursive-254-0 / e/static": "bm25 (recall_at_5 0.6000)",
    }
    assert best_retriever_per_chunker(rows, "recall_at_5", lower=True)["recursive-254-0 / e/minilm"] == "bm25 (recall_at_5 0.6000)"


def test_nothing_to_name_without_two_retrievers():
    one = _rows([("fixed-254-0-faiss", "faiss", "e", 0.7), ("recursive-254-0-faiss", "faiss", "e", 0.8)])
    assert best_retriever_per_chunker(one, "recall_at_5") == {}
    lone = _rows([("fixed-254-0-faiss", "faiss", "e", 0.7), ("recursive-254-0-bm25", "bm25", "e", 0.8)])
    assert best_retriever_per_chunker(lone, "recall_at_5") == {}  # no chunking was tried with both
    assert best_retriever_per_chunker(pd.DataFrame({"run_name": ["a"], "recall_at_5": [1.0]}), "recall_at_5") == {}
