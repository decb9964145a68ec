"""A warm rerun (every chunk set and vector in the caches, ``resume=false``) in a new process:
it imports no model library and no MLflow or matplotlib in the job's process, embeds
nothing, and logs the values of the cold run it repeats.

This guards what keeps a warm rerun cheap (``harness bench --vs-reference``, round W):
torch, sentence-transformers and transformers are imported only when a text is not in the
embedding cache, tiktoken only when a corpus is chunked with it, MLflow and matplotlib only in
the tracking worker. The child process prints which of them it imported; nothing is timed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import KESTREL_PATH, PROJECT_ROOT

from harness.tracking.runs import find_run_by_name, run_metrics

#: Modules a warm rerun's own process must not import.
HEAVY = ("torch", "sentence_transformers", "transformers", "tiktoken", "mlflow", "matplotlib")
#: Two small documents of kestrel_kb and the questions whose evidence lies in them.
DOCUMENTS = ("company_handbook.txt", "release_notes.md")

#: ``python -c``: run ``python -m harness.run ARGV`` in this process, then print the heavy modules it imported.
CHILD = """
import json, runpy, sys
argv, heavy = json.loads(sys.argv[1]), json.loads(sys.argv[2])
sys.argv = ["harness.run", *argv]
code = 0
try:
    runpy.run_module("harness.run", run_name="__main__", alter_sys=True)
except SystemExit as stop:
    code = stop.code or 0
print("IMPORTED " + json.dumps(sorted(m for m in heavy if m in sys.modules)))
sys.exit(code)
"""


def _subset(folder) -> None:
    (folder / "corpus").mkdir(parents=True)
    for name in DOCUMENTS:
        shutil.copy(KESTREL_PATH / "corpus" / name, folder / "corpus" / name)
    lines = []
    for line in (KESTREL_PATH / "questions.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record.get("evidence") and {e["doc_id"] for e in record["evidence"]} <= set(DOCUMENTS):
            lines.append(line)
    (folder / "questions.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _run(tmp_path, run_name: str, extra: list[str]) -> str:
    argv = [
        f"dataset.path={tmp_path / 'mini'}",
        "dataset.name=mini",
        "chunker=fixed",
        "chunker.tokenizer=cl100k_base",
        "chunker.chunk_size=200",
        "chunker.chunk_overlap=0",
        "retriever=faiss",
        "embedding.show_progress=false",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
        "tracking.experiment=warm-rerun",
        f"tracking.run_name={run_name}",
        f"paths.cache_dir={tmp_path / 'cache'}",
        f"cache.dir={tmp_path / 'cache'}",
        f"hydra.run.dir={tmp_path / ('out-' + run_name)}",
        *extra,
    ]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(argv), json.dumps(HEAVY)], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
def test_a_warm_rerun_imports_no_model_library_and_logs_the_cold_values(tmp_path):
    _subset(tmp_path / "mini")
    cold_out = _run(tmp_path, "cold", [])
    assert '"torch"' in cold_out.split("IMPORTED ")[-1], "the cold run embeds, so it imports torch: the check below means something"
    warm_out = _run(tmp_path, "warm", ["resume=false"])
    assert warm_out.split("IMPORTED ")[-1].strip() == "[]"
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cold, warm = find_run_by_name(uri, "warm-rerun", "cold"), find_run_by_name(uri, "warm-rerun", "warm")
    assert warm.run_id != cold.run_id and warm.status == "FINISHED"
    a, b = run_metrics(uri, cold.run_id), run_metrics(uri, warm.run_id)
    assert b["embedding.texts_embedded"] == 0 and a["embedding.texts_embedded"] > 0 and b["cache.chunks_cached"] == 1
    same = lambda values: {k: v for k, v in values.items() if not k.startswith(("time.", "cache.", "embedding.texts_embedded", "embedding.cache_hits"))}  # noqa: E731
    assert same(a) == same(b) and len(same(a)) > 100
