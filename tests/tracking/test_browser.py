"""The MLflow UI in a real browser: headless Chromium (Debian's ``chromium`` package, driven by
Playwright; no browser is downloaded) opens the tracking server started by
:func:`harness.tracking.server.start_server`, finds the experiment by name, shows the runs of three
chunk sizes with their metrics, and shows a run's ``recall_at_5`` with the value logged.

Skipped when chromium or Playwright is missing, except in CI (``CI=true``), where that fails.
Set ``HARNESS_SCREENSHOT_DIR=docs/img`` to write the screenshots used by the README there
(otherwise they go to the test's temporary folder)::

    HARNESS_SCREENSHOT_DIR=docs/img .venv/bin/python -m pytest tests/test_browser.py
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import mlflow
import pytest
from conftest import CHROMIUM_FLAGS, compose

from harness.experiment.run import execute
from harness.tracking.server import start_server

#: Fixed-size chunk sizes (model tokens) of the runs shown in the UI.
SIZES = (100, 200, 400)
#: Metric columns added to the UI's runs table (and its screenshot).
TABLE_COLUMNS = ("recall_at_5", "precision_at_5", "iou_at_5", "context_precision_at_5", "time.total_s", "chunker.chunk_size", "chunker.chunk_overlap")
#: Milliseconds Playwright waits for the UI (a loaded 2-core machine renders slowly).
UI_TIMEOUT_MS = 90_000


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _unavailable(reason: str):
    """Skip locally; in CI a missing browser is a broken setup, so fail."""
    if _in_ci():
        pytest.fail(f"{reason}; CI must run the browser test (.ci/run installs Debian's chromium)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def chromium() -> str:
    path = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    if path is None:
        _unavailable("chromium is not installed (apt-get install chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _unavailable("playwright is not installed (pip install -e '.[dev]')")
    return path


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """A tracking server with three BM25 runs of fixed chunks (sizes :data:`SIZES`) in the
    experiment ``kestrel_kb``; yields ``(server, {size: execute() result})``."""
    server = start_server(tmp_path_factory.mktemp("ui_server"))
    try:
        results = {}
        for size in SIZES:
            cfg = compose(
                [
                    "retriever=bm25",
                    "chunker=fixed",
                    f"chunker.chunk_size={size}",
                    "stats.bootstrap=0",
                    "embedding.show_progress=false",
                    f"tracking.uri={server.url}",
                ]
            )
            results[size] = execute(cfg)
        yield server, results
    finally:
        server.stop()


@pytest.fixture()
def screenshot_dir(tmp_path) -> Path:
    folder = Path(os.environ.get("HARNESS_SCREENSHOT_DIR") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _shoot(page, path: Path, height: int) -> Path:
    """Screenshot of the top ``height`` pixels of the page (PNG)."""
    page.screenshot(path=str(path), clip={"x": 0, "y": 0, "width": page.viewport_size["width"], "height": height})
    return path


@pytest.mark.slow
def test_mlflow_ui_shows_the_experiment_runs_and_recall(chromium, logged, screenshot_dir, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    server, results = logged
    client = mlflow.MlflowClient(server.url)
    exp = client.get_experiment_by_name("kestrel_kb")
    names = {size: f"fixed-{size}-0-bm25" for size in SIZES}
    best = max(SIZES, key=lambda s: results[s]["metrics"]["recall@5"])
    best_id = results[best]["run_id"]
    logged_recall = client.get_run(best_id).data.metrics["recall_at_5"]
    assert logged_recall == pytest.approx(results[best]["metrics"]["recall@5"], abs=1e-12)

    with sync_playwright() as pw:
        browser = pw.chromium.launch_persistent_context(
            str(tmp_path / "profile"),  # a fresh profile
            executable_path=chromium,
            args=CHROMIUM_FLAGS,
            headless=True,
            viewport={"width": 1400, "height": 900},
        )
        try:
            page = browser.new_page()
            page.set_default_timeout(UI_TIMEOUT_MS)
            expect.set_options(timeout=UI_TIMEOUT_MS)

            # the experiment list: find the experiment by its name and open it as model training
            page.goto(f"{server.url}/#/experiments")
            expect(page.get_by_role("link", name="kestrel_kb", exact=True)).to_be_visible()
            page.get_by_text("Model training", exact=True).click()
            page.get_by_role("link", name="kestrel_kb", exact=True).click()
            expect(page).to_have_url(re.compile(rf"#/experiments/{exp.experiment_id}/runs"))
            for name in names.values():
                expect(page.get_by_role("link", name=name, exact=True)).to_be_visible()
            close_assistant = page.get_by_role("button", name="Close")
            if close_assistant.count():
                close_assistant.first.click()
            page.get_by_role("button", name="Toggle sidebar").click()  # room for the metric columns

            # the runs table with sizes and metrics as columns (attribute columns hidden)
            page.get_by_role("button", name="Columns").click()
            for title in ("Dataset", "Source", "Models", *TABLE_COLUMNS):
                page.get_by_title(title, exact=True).last.click()
            page.keyboard.press("Escape")
            expect(page.get_by_role("columnheader", name="recall_at_5").first).to_be_visible()
            for size in SIZES:  # each run's recall_at_5 cell holds the logged value (full precision in its text)
                run_id = results[size]["run_id"]
                cell = page.locator(f'[role=row][row-id="{run_id}"] [role=gridcell][col-id="metrics.`recall_at_5`"]')
                expect(cell).to_have_text(repr(client.get_run(run_id).data.metrics["recall_at_5"]))
            _shoot(page, screenshot_dir / "mlflow_runs.png", 360)

            # the runs compared as charts: recall@5, IoU@5 and the recall@k curve (step = k)
            page.locator("label:has(input[value=CHART])").click()
            page.get_by_placeholder("Search metric charts").fill("^(recall_at_5|iou_at_5|recall_curve)$")
            for metric in ("recall_at_5", "iou_at_5", "recall_curve"):
                expect(page.get_by_text(metric, exact=True).first).to_be_visible()
            page.wait_for_timeout(1500)  # let the charts finish drawing before the screenshot
            _shoot(page, screenshot_dir / "mlflow_compare.png", 690)

            # the best run's page shows recall_at_5 with the logged value
            page.get_by_role("link", name=names[best], exact=True).click()
            expect(page).to_have_url(re.compile(rf"#/experiments/{exp.experiment_id}/runs/{best_id}"))
            page.get_by_placeholder("Search metrics").fill("recall_at_5")
            row = page.get_by_role("row").filter(has=page.get_by_role("link", name="recall_at_5", exact=True))
            expect(row).to_have_count(1)
            shown = row.get_by_role("cell").nth(1).inner_text().strip()
            assert float(shown) == pytest.approx(logged_recall, rel=1e-9), f"the run page shows recall_at_5 = {shown!r}"
            _shoot(page, screenshot_dir / "mlflow_run.png", 480)
        finally:
            browser.close()

    for name in ("mlflow_runs.png", "mlflow_compare.png", "mlflow_run.png"):
        data = (screenshot_dir / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and 10_000 < len(data) < 300_000, (name, len(data))
