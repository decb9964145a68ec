"""Run, sweep and side-by-side reports built from a real MLflow store: two BM25 runs of fixed
chunks on kestrel_kb made by ``execute`` (one module-scoped store), turned into a sweep by
nesting them under a parent run closed with :func:`harness.tracking.callbacks.finish_sweep`.

The numbers on the pages are compared with the values MLflow holds, the highlighted spans
with the dataset's evidence text, and the pages are opened in headless Chromium (Debian's,
driven by Playwright as ``tests/tracking/test_browser.py`` does; skipped when missing, except
in CI). Set ``HARNESS_SCREENSHOT_DIR=docs/img`` to keep the screenshots
(``experiments/report_screenshots.py`` does that for the README).
"""

from __future__ import annotations

import gzip
import html as html_lib
import json
import math
import os
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import mlflow
import pandas as pd
import pytest
from conftest import CHROMIUM_FLAGS, compose, fresh_store
from hypothesis import given
from hypothesis import strategies as st

from harness.cli.report import main as report_main
from harness.experiment.run import execute
from harness.reporting.charts import pareto_front
from harness.tracking.runs import run_metrics
from harness.tracking.tracker import JOB_TAG, PARENT_TAG, SWEEP_TAG, Tracker

SIZES = (100, 300)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """``(uri, {size: execute() result}, parent run id, artifact folder of each run)``."""
    root = tmp_path_factory.mktemp("report_store")
    uri = fresh_store(root / "mlflow.db")
    results = {}
    for size in SIZES:
        cfg = compose(
            [
                "retriever=bm25",
                "chunker=fixed",
                f"chunker.chunk_size={size}",
                "stats.bootstrap=200",
                "embedding.show_progress=false",
                f"tracking.uri={uri}",
                "tracking.report=true",
            ]
        )
        results[size] = execute(cfg)
    tracker = Tracker(uri, "kestrel_kb")
    parent = tracker.start("sweep chunker.chunk_size=100,300", {SWEEP_TAG: "parent", "sweep.objective": "recall@5"})
    client = mlflow.MlflowClient(uri)
    for job, size in enumerate(SIZES, 1):
        client.set_tag(results[size]["run_id"], PARENT_TAG, parent)
        client.set_tag(results[size]["run_id"], JOB_TAG, str(job))
    from harness.experiment.report import sweep_report_page
    from harness.reporting.charts import objective_png
    from harness.tracking.callbacks import finish_sweep

    finish_sweep(tracker, parent, "FINISHED", "recall@5", objective_png=objective_png, report_page=sweep_report_page)
    out = root / "downloads"
    arts = {size: Path(client.download_artifacts(results[size]["run_id"], "", str(out / str(size)))) for size in SIZES}
    arts["parent"] = Path(client.download_artifacts(parent, "", str(out / "parent")))
    return uri, results, parent, arts


class _Values(HTMLParser):
    """Every element's ``data-metric`` -> ``data-value`` (first wins) and the CI attributes of cards."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, float] = {}
        self.cis: list[tuple[float, float]] = []
        self._card: str | None = None
        self.card_cis: dict[str, tuple[float, float]] = {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "data-metric" in a and "data-value" in a and a["data-value"]:
            self.values.setdefault(a["data-metric"], float(a["data-value"]))
            if "card" in a.get("class", ""):
                self._card = a["data-metric"]
        if "data-ci-low" in a and self._card:
            self.card_cis[self._card] = (float(a["data-ci-low"]), float(a["data-ci-high"]))


def _page_values(html: str) -> _Values:
    parser = _Values()
    parser.feed(html)
    return parser


def _logged(uri: str, run_id: str) -> dict[str, float]:
    """Every value the run recorded: its MLflow metrics and its metrics table (CIs, the metrics
    outside the headline list)."""
    return run_metrics(uri, run_id)


@pytest.mark.slow
def test_logged_report_shows_the_logged_metrics_and_cis(store):
    uri, results, _, arts = store
    for size in SIZES:
        logged = _logged(uri, results[size]["run_id"])
        page = _page_values((arts[size] / "report.html").read_text(encoding="utf-8"))
        assert {"recall@5", "precision@5", "iou@5", "context_precision@5", "ndcg@10", "mrr@10", "recall@1024tok"} <= set(page.values)
        for name, value in page.values.items():
            assert value == logged[name.replace("@", "_at_")], name  # the same float, not a rounding of it
        for name, (low, high) in page.card_cis.items():
            key = name.replace("@", "_at_")
            assert (low, high) == (logged[f"{key}_ci_low"], logged[f"{key}_ci_high"])
            assert low <= page.values[name] <= high
        assert "time.report_s" in logged and logged["time.report_s"] < logged["time.log_s"]


@pytest.mark.slow
def test_compact_artifacts_hold_every_chunk_and_the_ranking(store, kestrel):
    _, results, _, arts = store
    per_query = pd.read_csv(arts[100] / "per_query.csv", dtype={"query_id": str, "retrieved": str}, keep_default_na=False)
    with gzip.open(arts[100] / "chunks.jsonl.gz", "rt") as fh:
        chunks = [json.loads(line) for line in fh]
    assert len(chunks) == _logged(store[0], results[100]["run_id"])["chunks.n_chunks"]
    texts = {d.doc_id: d.text for d in kestrel.documents}
    for c in chunks:  # spans inside their document, ids as the chunk ids of the run
        assert c["id"] == f"{c['doc']}#" + "+".join(f"{s}-{e}" for s, e in c["spans"])
        assert all(0 <= s < e <= len(texts[c["doc"]]) for s, e in c["spans"])
        assert c["tokens"] > 0
    with gzip.open(arts[100] / "ranking.jsonl.gz", "rt") as fh:
        ranking = {r["query"]: r for r in map(json.loads, fh)}
    for row in per_query.itertuples():
        r = ranking[row.query_id]
        assert r["ids"] == row.retrieved.split(";")
        assert r["scores"] == sorted(r["scores"], reverse=True)  # BM25 scores every judged unit, best first


def test_cli_report_from_the_store_equals_the_logged_values(store, tmp_path, capsys):
    uri, results, _, _ = store
    run_id = results[300]["run_id"]
    out = tmp_path / "run.html"
    assert report_main([run_id, "--tracking-uri", uri, "--out", str(out)]) == 0
    page = _page_values(out.read_text(encoding="utf-8"))
    logged = _logged(uri, run_id)
    assert page.values["recall@5"] == logged["recall_at_5"]
    assert page.card_cis["recall@5"] == (logged["recall_at_5_ci_low"], logged["recall_at_5_ci_high"])
    assert "wrote" in capsys.readouterr().out


def test_cli_refuses_what_it_cannot_report(store, capsys):
    uri, results, parent, _ = store
    assert report_main([parent, "--tracking-uri", uri]) == 2  # a sweep parent has no chunks
    assert "has no per_query.csv, chunks.jsonl.gz" in capsys.readouterr().err
    assert report_main(["--sweep", results[100]["run_id"], "--tracking-uri", uri]) == 2
    assert "is not a sweep's parent run" in capsys.readouterr().err
    assert report_main(["a", "b", "c"]) == 2
    assert report_main([results[100]["run_id"], "--baseline", "x"]) == 2


def test_sweep_report_ranks_the_jobs_and_compares_best_with_baseline(store):
    uri, results, parent, arts = store
    html = (arts["parent"] / "report.html").read_text(encoding="utf-8")
    tags = mlflow.MlflowClient(uri).get_run(parent).data.tags
    assert "sweep.report_error" not in tags
    best = tags["sweep.best_run_id"]
    assert re.search(rf'<tr data-run="{best}" class="best">', html)
    recalls = {s: _logged(uri, results[s]["run_id"])["recall_at_5"] for s in SIZES}
    for size in SIZES:  # the job table holds each job's logged recall@5
        row = re.search(rf'<tr data-run="{results[size]["run_id"]}".*?</tr>', html, re.S).group(0)
        assert f'data-metric="recall@5" data-value="{recalls[size]!r}"' in row
    diff = re.search(r'id="comparison-table".*?data-metric="recall@5">.*?data-value="([^"]+)"', html, re.S).group(1)
    worse = min(SIZES, key=lambda s: recalls[s])
    assert float(diff) == pytest.approx(max(recalls.values()) - recalls[worse], abs=1e-12)
    # the best job's own report is inside the sweep's page: its cuts and misses on one page
    frame = re.search(r'<iframe class="embedded-report"[^>]*srcdoc="([^"]*)"', html)
    assert frame is not None
    best_size = next(s for s in SIZES if results[s]["run_id"] == best)
    assert html_lib.unescape(frame.group(1)) == (arts[best_size] / "report.html").read_text(encoding="utf-8")


def test_run_report_says_what_each_miss_reason_means(store):
    _, _, _, arts = store
    html = (arts[100] / "report.html").read_text(encoding="utf-8")
    reasons = re.search(r'<dl class="reasons">(.*?)</dl>', html, re.S).group(1)
    for reason in ("not_covered", "boundary_split", "rank_miss"):  # docs/evaluation.md, Diagnostics
        assert re.search(rf'<dt><span class="reason {reason}">{reason}</span></dt><dd>[^<]{{20,}}</dd>', reasons), reason
    assert "truncated" not in reasons  # BM25 runs: no model window, nothing truncated (explained with a window only)
    assert "docs/diagnostics.md" not in html  # no link to a page that does not exist


@given(st.lists(st.tuples(st.floats(0, 1e4, allow_nan=False), st.floats(0, 1, allow_nan=False)), max_size=30))
def test_pareto_front_is_exactly_the_undominated_points(points):
    front = set(pareto_front(points))

    def dominated(i):
        x, y = points[i]
        return any((x2 <= x and y2 >= y) and (x2 < x or y2 > y) for j, (x2, y2) in enumerate(points) if j != i)

    for i in range(len(points)):
        if dominated(i):
            assert i not in front
    # every undominated point is on the front or duplicates a point that is
    kept = {points[i] for i in front}
    assert all(points[i] in kept for i in range(len(points)) if not dominated(i))


# ---------------------------------------------------------------------------- in a real browser


@pytest.fixture(scope="module")
def chromium() -> str:
    path = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    in_ci = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        path = None
    if path is None:
        if in_ci:
            pytest.fail("chromium or playwright missing; CI must run the browser tests")
        pytest.skip("chromium or playwright is not installed")
    return path


@pytest.mark.slow
def test_reports_in_chromium(store, chromium, kestrel, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    uri, results, parent, arts = store
    shots = Path(os.environ.get("HARNESS_SCREENSHOT_DIR") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    a_id, b_id = results[300]["run_id"], results[100]["run_id"]
    pair = tmp_path / "pair.html"
    assert report_main([a_id, b_id, "--tracking-uri", uri, "--out", str(pair)]) == 0
    logged = _logged(uri, a_id)
    per_query = pd.read_csv(arts[300] / "per_query.csv", dtype={"query_id": str}, keep_default_na=False)
    texts = {d.doc_id: d.text for d in kestrel.documents}
    queries = {q.query_id: q for q in kestrel.queries}
    errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.set_default_timeout(60_000)
            expect.set_options(timeout=60_000)

            # the run report: headline numbers, a missed query's evidence highlighted in its document
            page.goto((arts[300] / "report.html").as_uri())
            expect(page.locator("body[data-ready='1']")).to_have_count(1)
            card = page.locator('.card[data-metric="recall@5"] .value')
            assert float(card.inner_text()) == pytest.approx(logged["recall_at_5"], abs=5e-5)
            page.screenshot(path=str(shots / "report_run.png"))
            missed = per_query[per_query["miss_reason_at_5"] != ""]
            page.locator("#misses-only").check()
            expect(page.locator("tr.q:visible")).to_have_count(len(missed))
            qid = missed["query_id"].iloc[0]
            page.locator(f'tr.q[data-query="{qid}"]').click()
            ev = queries[qid].evidence[0]
            page.locator(f'.qdetail button[data-focus="{ev.start}-{ev.end}"]').first.click()
            segments = page.locator(f'[data-docview] .seg[data-ev~="{ev.start}-{ev.end}"]')
            assert "".join(segments.all_text_contents()) == texts[ev.doc_id][ev.start : ev.end] == ev.text
            assert page.locator("#doc-title-0").inner_text() == ev.doc_id
            hits = page.locator(".qdetail .hit[data-rank]")
            expect(hits).to_have_count(len(per_query.loc[per_query["query_id"] == qid, "retrieved"].iloc[0].split(";")))
            page.locator("#documents").scroll_into_view_if_needed()
            page.screenshot(path=str(shots / "report_documents.png"))

            # the sweep report: the best job marked, sortable by recall@5
            page.goto((arts["parent"] / "report.html").as_uri())
            best = mlflow.MlflowClient(uri).get_run(parent).data.tags["sweep.best_run_id"]
            expect(page.locator("tr.best")).to_have_attribute("data-run", best)
            page.locator("#job-table th", has_text="recall@5").first.click()  # ascending
            page.locator("#job-table th", has_text="recall@5").first.click()  # descending: best first
            expect(page.locator("#job-table tbody tr").first).to_have_attribute("data-run", best)
            page.screenshot(path=str(shots / "report_sweep.png"), full_page=True)

            # side by side: both chunkings of one document, the win counts of each run
            page.goto(pair.as_uri())
            expect(page.locator("body[data-ready='1']")).to_have_count(1)
            b_table = pd.read_csv(arts[100] / "per_query.csv", dtype={"query_id": str}, keep_default_na=False).set_index("query_id")
            a_table = per_query.set_index("query_id")
            a_wins = int((a_table["recall@5"] > b_table.loc[a_table.index, "recall@5"]).sum())
            b_wins = int((a_table["recall@5"] < b_table.loc[a_table.index, "recall@5"]).sum())
            expect(page.locator('table[data-side="a"] tr.q')).to_have_count(a_wins)
            expect(page.locator('table[data-side="b"] tr.q')).to_have_count(b_wins)
            left, right = page.locator('[data-docview][data-run="0"] .cut'), page.locator('[data-docview][data-run="1"] .cut')
            assert right.count() > left.count() > 0  # 100-token chunks cut the same document more often than 300-token ones
            page.locator("#documents").scroll_into_view_if_needed()
            page.screenshot(path=str(shots / "report_side_by_side.png"))
        finally:
            browser.close()
    assert not errors, errors
    for name in ("report_run.png", "report_documents.png", "report_sweep.png", "report_side_by_side.png"):
        assert (shots / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not math.isnan(logged["recall_at_5"])


def test_tracking_report_is_hash_neutral_and_must_be_a_boolean():
    from harness.experiment.build import config_hash
    from harness.experiment.settings import RunSettings

    on, off = compose(["tracking.report=true"]), compose(["tracking.report=false"])
    assert on.tracking.report is True and config_hash(on) == config_hash(off)
    assert RunSettings.from_config(off).report is False
    with pytest.raises(ValueError, match=r"tracking.report must be true or false, got 'yes'"):
        RunSettings.from_config(compose(["tracking.report=yes"]))


def _tiny_view(window, embedding):
    from harness.reporting.model import ChunkView, build_run_view
    from harness.types import Evidence, Query

    text = "alpha beta gamma delta"
    queries = [Query(query_id="q1", text="beta?", evidence=(Evidence(doc_id="d", start=6, end=10, text="beta"),))]
    per_query = pd.DataFrame({"query_id": ["q1"], "recall@5": [0.0], "miss_reason_at_5": ["rank_miss"], "retrieved": [""]})
    return build_run_view(
        run_id="r" * 32,
        name="tiny",
        experiment="e",
        labels={"chunker": "fixed", "retriever": "bm25" if window is None else "faiss", "embedding": embedding, "chunk_overlap": None},
        metrics={"recall@5": 0.0},
        cis={},
        confidence=0.95,
        per_query=per_query,
        chunks=[ChunkView("d#0-11", "d", ((0, 11),), None if window is None else 3), ChunkView("d#11-22", "d", ((11, 22),), None if window is None else 3)],
        ranking={},
        documents=[("d", text)],
        queries=queries,
        max_seq_length=window,
    )


@pytest.mark.parametrize("embedding", ["none", None])
def test_a_bm25_report_names_no_embedding_model_and_does_not_explain_truncation(embedding):
    from harness.reporting.html import run_report

    page = run_report(_tiny_view(None, embedding))
    header = re.search(r'<div class="sub">(.*?)</div>', page, re.S).group(1)
    assert "embedding" not in header and "None" not in header and "retriever <b>bm25</b>" in header
    reasons = re.search(r'<dl class="reasons">(.*?)</dl>', page, re.S).group(1)
    assert "truncated" not in reasons and "window" not in reasons and "rank_miss" in reasons
    shown = re.sub(r"<script.*?</script>", "", page, flags=re.S)  # the viewer's script has the text for windowed runs
    assert "model window" not in shown and "embedding model" not in shown


def test_a_report_with_a_model_window_keeps_the_embedding_and_truncation():
    from harness.reporting.html import run_report

    page = run_report(_tiny_view(256, "sentence_transformers/all-MiniLM-L6-v2"))
    assert "embedding <b>sentence_transformers/all-MiniLM-L6-v2</b>" in page
    reasons = re.search(r'<dl class="reasons">(.*?)</dl>', page, re.S).group(1)
    assert '<span class="reason truncated">truncated</span>' in reasons and "256-token window" in page
