"""``notebooks/compare_runs.ipynb`` executed top to bottom (nbclient, the venv's ipykernel)
against four real BM25 runs (fixed and recursive chunks of 100 and 200 tokens on kestrel_kb)
in an MLflow SQLite store under a temporary folder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from conftest import PROJECT_ROOT, compose, fresh_store
from nbclient import NotebookClient

from harness.experiment.run import execute

NOTEBOOK = PROJECT_ROOT / "notebooks" / "compare_runs.ipynb"


def _venv_kernel(monkeypatch) -> None:
    """Make kernel name ``python3`` resolve to this interpreter's ipykernel spec.

    ipykernel's wheel installs ``share/jupyter/kernels/python3`` under ``sys.prefix`` (the
    venv); ``python -m ipykernel install --sys-prefix`` writes it when absent. Putting that
    folder first on ``JUPYTER_PATH`` keeps a user-level ``python3`` spec from winning.
    """
    share = Path(sys.prefix) / "share" / "jupyter"
    if not (share / "kernels" / "python3" / "kernel.json").is_file():
        subprocess.run([sys.executable, "-m", "ipykernel", "install", "--sys-prefix"], check=True, capture_output=True)
    monkeypatch.setenv("JUPYTER_PATH", str(share))


def _text(output) -> str:
    """All text an output carries (stream text, text/plain and text/html data)."""
    if output.output_type == "stream":
        return output.text
    data = output.get("data", {})
    return "\n".join(str(data.get(k, "")) for k in ("text/plain", "text/html", "text/markdown"))


def _pareto(points: dict[str, tuple[float, float]]) -> set[str]:
    """Names of runs not dominated in (cost lower, recall higher); worked out here, not in the notebook."""
    front = set()
    for name, (cost, gain) in points.items():
        if not any(c <= cost and g >= gain and (c, g) != (cost, gain) for other, (c, g) in points.items() if other != name):
            front.add(name)
    return front


@pytest.mark.slow
def test_notebook_runs_top_to_bottom_against_created_runs(tmp_path, monkeypatch):
    uri = fresh_store(tmp_path / "mlflow.db")
    results = {}
    for chunker in ("fixed", "recursive"):
        for size in (100, 200):
            cfg = compose(
                [
                    "retriever=bm25",
                    f"chunker={chunker}",
                    f"chunker.chunk_size={size}",
                    "stats.bootstrap=0",
                    "embedding.show_progress=false",
                    f"tracking.uri={uri}",
                    "tracking.experiment=nb_test",
                ]
            )
            results[f"{chunker}-{size}-0-bm25"] = execute(cfg)["metrics"]
    assert len(results) == 4
    recall = {name: m["recall@5"] for name, m in results.items()}
    worst = min(recall, key=recall.get)
    best = max((n for n in recall if n != worst), key=recall.get)
    front = _pareto({name: (m["context_tokens@5"], m["recall@5"]) for name, m in results.items()})

    monkeypatch.setenv("HARNESS_TRACKING_URI", uri)
    monkeypatch.setenv("HARNESS_EXPERIMENT", "nb_test")
    monkeypatch.setenv("HARNESS_BASELINE_RUN", worst)
    _venv_kernel(monkeypatch)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("print('CMP', comparison[['metric', 'run', 'baseline run', 'diff']].to_json(orient='records'))"))
    nb.cells.append(nbformat.v4.new_code_cell("import sys; print('KERNEL', sys.executable)"))
    NotebookClient(nb, kernel_name="python3", timeout=600, resources={"metadata": {"path": str(tmp_path)}}).execute()

    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert not [o for o in outputs if o.output_type == "stream" and o.name == "stderr" and "Traceback" in o.text]
    # the kernel is this interpreter (the venv's python), not another one on the machine
    assert f"KERNEL {sys.executable}" in _text(outputs[-1])
    # three figures: recall by chunk size, the Pareto view, the recall@k curves
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 3
    everything = "\n".join(_text(o) for o in outputs)
    assert "4 configurations with recall@5, from 4 finished runs" in everything
    front_line = next(line for line in everything.splitlines() if line.startswith("Pareto front: "))
    assert set(front_line.removeprefix("Pareto front: ").split(", ")) == front

    (cmp_cell,) = [c for c in nb.cells if "comparison" in c.metadata.get("tags", [])]
    shown = "\n".join(_text(o) for o in cmp_cell.outputs)
    assert f"**best run** `{best}` vs **baseline** `{worst}`" in shown and "191 paired queries" in shown
    html = next(o.data["text/html"] for o in cmp_cell.outputs if "text/html" in o.get("data", {}))
    for name in (best, worst):
        assert name in html
    for metric in ("recall@5", "context_precision@5", "mrr@10", "iou@5"):
        assert metric in html
    # the notebook's comparison table, read back as JSON: recall@5's diff is the difference of the runs' logged means
    records = json.loads(_text(outputs[-2]).split("CMP ", 1)[1])
    (rec,) = [r for r in records if r["metric"] == "recall@5"]
    assert rec["run"].startswith(best) and rec["baseline run"].startswith(worst)
    assert rec["diff"] == pytest.approx(recall[best] - recall[worst], abs=1e-9)
