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


def test_readme_retrieval_table_is_the_scripts_table():
    """The README's retrieval-stack numbers are the script's output file, never typed in."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    table = (root / "experiments" / "retrieval_stack.md").read_text(encoding="utf-8").strip()
    block = re.search(r"<!-- retrieval-stack:start[^>]*-->\n(.*?)\n<!-- retrieval-stack:end -->", (root / "README.md").read_text(encoding="utf-8"), re.S)
    assert block is not None and block.group(1) == table
    assert table.splitlines()[0].startswith("| chunking | embedding | kestrel_kb faiss |")


def test_retrieval_stack_keeps_the_columns_of_datasets_not_rerun(tmp_path):
    """``--dataset kestrel_kb`` re-measures one dataset: the other's columns are the committed ones, digit for digit."""
    import importlib.util
    from pathlib import Path

    import pytest

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("retrieval_stack_script", root / "experiments" / "retrieval_stack.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    committed = (root / "experiments" / "retrieval_stack.md").read_text(encoding="utf-8").strip()
    # no dataset read from the (empty) store: every cell comes from the committed table, bold marks included
    assert script.table(f"sqlite:///{tmp_path / 'mlflow.db'}", (), committed) == committed
    cells = script.previous_cells(committed, {"chroma_general"})
    assert cells and {d for d, *_ in cells} == {"chroma_general"}
    assert all(0 <= v <= 1 for v in cells.values())
    with pytest.raises(SystemExit, match="no column 'other bm25'"):
        script.previous_cells("| chunking | embedding | kestrel_kb faiss |\n|---|---|---:|\n", {"other"})
