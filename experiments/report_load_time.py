"""How long a run report of a large corpus takes to open in headless Chromium.

Builds the report of a synthetic run over a corpus of about ``--mb`` MB (the kestrel_kb
documents copied until the size is reached, each copy its own document; fixed 800-character
chunks; kestrel_kb's queries with their evidence in the first copy and ten hits each), then
opens it in Debian's chromium ``--repeat`` times and prints the seconds from navigation to the
page being ready (the first document drawn), and to drawing the largest document::

    .venv/bin/python experiments/report_load_time.py --mb 5

The target (docs/report.md) is under 3 s for a 5 MB corpus. Timings depend on the machine
and its load; the script prints the load average next to them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking", "--disable-component-update", "--no-first-run"]


def synthetic_view(megabytes: float):
    """A :class:`harness.reporting.model.RunView` over about ``megabytes`` MB of text."""
    import pandas as pd

    from harness.datasets.native import load_native
    from harness.reporting.model import ChunkView, build_run_view

    kb = load_native(ROOT / "datasets" / "kestrel_kb")
    documents, total, copy = [], 0, 0
    while total < megabytes * 1e6:
        for d in kb.documents:
            documents.append((d.doc_id if copy == 0 else f"copy{copy}/{d.doc_id}", d.text))
            total += len(d.text.encode("utf-8"))
        copy += 1
    chunks = [
        ChunkView(f"{doc}#{s}-{min(s + 800, len(text))}", doc, ((s, min(s + 800, len(text))),), 200, None)
        for doc, text in documents
        for s in range(0, len(text), 800)
    ]
    ids = [c.chunk_id for c in chunks]
    rows, ranking = [], {}
    for n, q in enumerate(kb.queries):
        hits = [ids[(n * 37 + j * 101) % len(ids)] for j in range(10)]
        ranking[q.query_id] = (hits, [10.0 - j for j in range(10)])
        rows.append({"query_id": q.query_id, "recall@5": 0.0, "miss_reason_at_5": "rank_miss", "retrieved": ";".join(hits)})
    per_query = pd.DataFrame(rows)
    return build_run_view(
        run_id="0" * 32,
        name=f"synthetic {megabytes:g} MB",
        experiment="report_load_time",
        labels={"dataset": "kestrel_kb copies"},
        metrics={"recall@5": 0.0},
        cis={},
        confidence=0.95,
        per_query=per_query,
        chunks=chunks,
        ranking=ranking,
        documents=documents,
        queries=kb.queries,
        max_seq_length=256,
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", type=float, default=5.0, help="corpus size in MB (default 5)")
    p.add_argument("--repeat", type=int, default=3, help="page loads measured (default 3)")
    args = p.parse_args()
    from playwright.sync_api import sync_playwright

    from harness.reporting.html import run_report

    view = synthetic_view(args.mb)
    t0 = time.perf_counter()
    html = run_report(view)
    render_s = time.perf_counter() - t0
    corpus = sum(len(t.encode("utf-8")) for t in view.documents.values())
    largest = max(range(len(view.documents)), key=lambda i: len(list(view.documents.values())[i]))
    with tempfile.TemporaryDirectory() as tmp:
        page_file = Path(tmp) / "report.html"
        page_file.write_text(html, encoding="utf-8")
        print(f"corpus {corpus / 1e6:.2f} MB in {len(view.documents)} documents, {len(view.chunks)} chunks, {len(view.queries)} queries")
        print(f"report {len(html.encode('utf-8')) / 1e6:.2f} MB, rendered in {render_s:.2f} s; load average {os.getloadavg()[0]:.1f}")
        opened, drawn = [], []
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=FLAGS, headless=True)
            try:
                for _ in range(args.repeat):
                    page = browser.new_page(viewport={"width": 1400, "height": 900})
                    t0 = time.perf_counter()
                    page.goto(page_file.as_uri())
                    page.wait_for_selector("body[data-ready='1']", timeout=120_000)
                    opened.append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    page.evaluate(f"window.harnessOpenDoc({largest})")
                    drawn.append(time.perf_counter() - t0)
                    page.close()
            finally:
                browser.close()
    print(f"open to ready (s): {[round(x, 2) for x in opened]} median {statistics.median(opened):.2f}")
    print(f"draw the largest document (s): {[round(x, 3) for x in drawn]} median {statistics.median(drawn):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
