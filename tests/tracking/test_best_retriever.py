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


def test_finish_sweep_tags_the_parent_with_the_best_retriever_per_chunking(tracking_uri):
    """Through a real MLflow store: child runs as a sweep leaves them, then the parent's summary."""
    import mlflow

    from harness.tracking.callbacks import finish_sweep
    from harness.tracking.tracker import JOB_TAG, Tracker

    client = mlflow.MlflowClient(tracking_uri)
    exp = client.create_experiment("stack")
    parent = client.create_run(exp, run_name="sweep").info.run_id
    jobs = [
        ("fixed-254-0-faiss", "faiss", 0.66),
        ("fixed-254-0-hybrid", "hybrid", 0.76),
        ("fixed-254-0-faiss-static", "faiss", 0.50),
        ("fixed-254-0-bm25-static", "bm25", 0.72),
    ]
    for job, (name, retriever, recall) in enumerate(jobs):
        embedding = "model2vec/static:all-MiniLM-L6-v2" if name.endswith("static") else "sentence_transformers/all-MiniLM-L6-v2"
        tags = {"mlflow.parentRunId": parent, JOB_TAG: str(job), "retriever": retriever, "embedding": embedding}
        run = client.create_run(exp, run_name=name, tags=tags).info.run_id
        client.log_metric(run, "recall_at_5", recall)
        client.set_terminated(run, "FINISHED")
    counts = finish_sweep(Tracker(tracking_uri, "stack"), parent, "FINISHED", "recall@5")
    assert counts["FINISHED"] == 4
    tags = client.get_run(parent).data.tags
    assert "sweep.summary_error" not in tags, tags.get("sweep.summary_error")
    best = {k: v for k, v in tags.items() if k.startswith("sweep.best_retriever.")}
    assert best == {
        "sweep.best_retriever.fixed-254-0 / sentence_transformers/all-MiniLM-L6-v2": "hybrid (recall_at_5 0.7600)",
        "sweep.best_retriever.fixed-254-0 / model2vec/static_all-MiniLM-L6-v2": "bm25 (recall_at_5 0.7200)",  # ":" is not allowed in a tag key
    }


def test_docs_retrieval_table_is_the_scripts_table():
    """The retrieval-stack numbers of docs/retrievers.md are the script's output file, never typed in."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    table = (root / "experiments" / "retrieval_stack.md").read_text(encoding="utf-8").strip()
    page = (root / "docs" / "retrievers.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- retrieval-stack:start[^>]*-->\n(.*?)\n<!-- retrieval-stack:end -->", page, re.S)
    assert block is not None and block.group(1) == table
    assert table.splitlines()[0].startswith("| chunking | embedding | kestrel_kb faiss |")


def test_the_retrieval_table_never_shows_an_untrained_cross_encoders_numbers(tmp_path):
    """Rerank runs over the locally built plumbing cross-encoder (an untrained head) are not a
    rerank result: the script's table leaves them out, and a retriever column no run fills."""
    import importlib.util
    from pathlib import Path

    from harness.tracking.tracker import Tracker

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("retrieval_stack", root / "experiments" / "retrieval_stack.py")
    stack = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stack)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, "kestrel_kb")
    plumbing = tmp_path / "cache" / "models" / stack.PLUMBING_FOLDER
    for name, retriever, model, recall in (
        ("fixed-254-0-faiss", "faiss", None, 0.66),
        ("fixed-254-0-bm25", "bm25", None, 0.72),
        ("fixed-254-0-rerank", "rerank", str(plumbing), 0.23),
    ):
        with tracker.run(name, tags={"retriever": retriever, "embedding": "sentence_transformers/all-MiniLM-L6-v2"}):
            if model:
                tracker.log_params({"retriever.model": model})
            tracker.log_metrics({"recall_at_5": recall})
    lines = stack.table(uri).splitlines()
    assert "rerank" not in lines[0] and "0.2300" not in "\n".join(lines)
    assert lines[0] == "| chunking | embedding | kestrel_kb faiss | kestrel_kb bm25 | chroma_general faiss | chroma_general bm25 |"  # no run: no column
    assert lines[2] == "| `fixed-254-0` | minilm | 0.6600 | **0.7200** |  |  |"
    # a trained cross-encoder's run (any other folder) is a rerank result
    with tracker.run("fixed-254-0-rerank", tags={"retriever": "rerank", "embedding": "sentence_transformers/all-MiniLM-L6-v2"}):
        tracker.log_params({"retriever.model": str(tmp_path / "ms-marco-MiniLM-L6-v2")})
        tracker.log_metrics({"recall_at_5": 0.8})
    lines = stack.table(uri).splitlines()
    assert "kestrel_kb rerank" in lines[0] and "**0.8000**" in lines[2]
