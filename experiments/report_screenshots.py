"""Write the report screenshots the README and docs/report.md show into docs/img/.

Runs the browser test of the reports (tests/reporting/test_report.py::test_reports_in_chromium:
two BM25 runs of fixed chunks on kestrel_kb in a temporary MLflow store, nested under a sweep
parent, opened in Debian's headless chromium) with ``HARNESS_SCREENSHOT_DIR=docs/img``, so
the pictures are those of a checked page::

    .venv/bin/python experiments/report_screenshots.py

Writes docs/img/report_run.png, report_documents.png, report_sweep.png and report_side_by_side.png.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    env = {**os.environ, "HARNESS_SCREENSHOT_DIR": str(ROOT / "docs" / "img")}
    test = "tests/reporting/test_report.py::test_reports_in_chromium"
    return subprocess.call([sys.executable, "-m", "pytest", test, "-n", "0", "-p", "no:cacheprovider", "-q"], cwd=ROOT, env=env)


if __name__ == "__main__":
    sys.exit(main())
