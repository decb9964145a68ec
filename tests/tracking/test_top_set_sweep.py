"""A sweep names the set of jobs not significantly worse than the best (not one winner on a
point estimate), on the console, on the parent run and in the sweep report, and compares the
best with the shipped default configuration, never with job 1 by position.

One real sweep through the CLI: BM25 on the small SQuAD file, a real MLflow SQLite store in
tmp_path. ``stats.seed`` changes the config hash but not one number while ``stats.bootstrap=0``,
so the two jobs of each chunk size are exactly tied; 12-character chunks are far worse."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import mlflow
import pandas as pd
import pytest
from conftest import _SESSION_CACHE, PROJECT_ROOT, fresh_store

from harness.tracking.tracker import SWEEP_TAG

SQUAD = [
    "dataset=squad",
    "dataset.path=tests/data/squad_saltmere/saltmere_squad.json",
    "dataset.name=saltmere_squad",
    "retriever=bm25",
    "chunker=fixed",
    "chunker.unit=chars",
    "stats.bootstrap=0",
    "embedding.show_progress=false",
    f"cache.dir={_SESSION_CACHE}",
]


@pytest.mark.slow
def test_a_sweep_with_two_tied_top_jobs_names_both(tmp_path):
    uri = fresh_store(tmp_path / "mlflow.db")
    # jobs: 1 = (12, seed 1), 2 = (12, seed 0), 3 = (254, seed 1), 4 = (254, seed 0) = the defaults
    cmd = [sys.executable, "-m", "harness.run", "-m", *SQUAD, "chunker.chunk_size=12,254", "stats.seed=1,0", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(cmd, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]

    client = mlflow.MlflowClient(uri)
    exp = client.get_experiment_by_name("saltmere_squad")
    runs = client.search_runs([exp.experiment_id])
    (parent,) = [r for r in runs if r.data.tags.get(SWEEP_TAG) == "parent"]
    children = {int(r.data.tags["harness.sweep_job"]): r for r in runs if r.data.tags.get(SWEEP_TAG) != "parent"}
    recall = {job: r.data.metrics["recall_at_5"] for job, r in children.items()}
    # the premise, from the logged values: each size's two jobs are tied exactly, 254 beats 12
    assert recall[3] == recall[4] and recall[1] == recall[2] and recall[3] > recall[1] + 0.3

    # console: the top set names both tied jobs, and neither 12-character job
    line = next(x for x in proc.stdout.splitlines() if x.startswith("top set by recall@5"))
    assert re.search(r"job 3 fixed-chars-254-0-bm25 .*job 4 fixed-chars-254-0-bm25", line), line
    assert "job 1 " not in line and "job 2 " not in line
    assert "paired one-sided sign-flip test against the best, Holm, alpha 0.05, margin 0" in line
    assert any(x.startswith("tie-breakers among the 2 jobs of the top set: fewest context tokens") for x in proc.stdout.splitlines())

    # the parent's tags list both
    tags = parent.data.tags
    assert tags["sweep.top_set_jobs"] == "3,4" and tags["sweep.top_set_size"] == "2"
    assert "job 3 fixed-chars-254-0-bm25" in tags["sweep.top_set"] and "job 4 fixed-chars-254-0-bm25" in tags["sweep.top_set"]
    assert tags["sweep.top_set_test"].startswith("paired one-sided sign-flip test against the best, Holm, alpha 0.05, margin 0")
    assert tags["sweep.default_job"] == "4"  # chunk_size 254 is fixed's default, seed 0 the shipped one
    assert "sweep.report_error" not in tags and "sweep.summary_error" not in tags
    # the tied pair chose the same on every rule (identical results): the lower job number
    assert tags["sweep.tie_break.chunks.n_chunks"].startswith("job 3 ")

    # the report: both members in the top-set table, and the baseline is the default job (4), not job 1
    html_path = client.download_artifacts(parent.info.run_id, "report.html", str(tmp_path / "dl"))
    html = open(html_path, encoding="utf-8").read()
    table = re.search(r'id="top-set-table".*?</table>', html, re.S).group(0)
    assert re.findall(r'<tr data-job="(\d+)"', table) == ["3", "4"]
    rule = re.search(r'id="baseline-rule"[^>]*>(.*?)</p>', html, re.S).group(1)
    assert "shipped default configuration" in rule and "job 4" in rule
    summary = pd.read_csv(client.download_artifacts(parent.info.run_id, "sweep_summary.csv", str(tmp_path / "dl2")))
    assert set(summary.loc[summary["top_set"], "job"]) == {3, 4}
