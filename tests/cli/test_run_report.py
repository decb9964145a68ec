"""How ``harness run`` reports an error that is neither a configuration error nor a one-line
error: with the project's own code (no private Hydra function), the traceback from the task
function down, Hydra's frames cut, the hint about ``HYDRA_FULL_ERROR``, exit 1; with
``HYDRA_FULL_ERROR=1`` the whole traceback. A real subprocess through Hydra's real job runner,
whose ``execute`` is replaced by one that raises (no dataset read, no MLflow run)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import PROJECT_ROOT

HINT = "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace."

#: Runs ``harness run`` with an ``execute`` that fails two calls deep.
SCRIPT = """
import sys
import harness.cli.run as cli_run

def failing_execute(cfg):
    def deeper():
        raise RuntimeError("the run broke: spans out of order")
    deeper()

cli_run.execute = failing_execute
sys.exit(cli_run.run_command(sys.argv[1:]))
"""


def _run(tmp_path, full_error: bool) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    if full_error:
        env["HYDRA_FULL_ERROR"] = "1"
    args = ["retriever=bm25", f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"hydra.run.dir={tmp_path / 'out'}", f"cache.dir={tmp_path / 'cache'}"]
    return subprocess.run([sys.executable, "-c", SCRIPT, *args], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("full_error", [False, True], ids=["cut", "HYDRA_FULL_ERROR=1"])
def test_an_unexpected_error_is_reported_with_its_traceback_and_exit_1(tmp_path, full_error):
    import hydra

    proc = _run(tmp_path, full_error)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-3000:]
    err = proc.stderr
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines[-1 if full_error else -2] == "RuntimeError: the run broke: spans out of order", err
    assert "Traceback (most recent call last):" in err and "in failing_execute" in err and "in deeper" in err
    hydra_frames = [ln for ln in err.splitlines() if ln.strip().startswith(f'File "{os.path.dirname(hydra.__file__)}')]
    run_command_frames = [ln for ln in err.splitlines() if ln.strip().startswith("File ") and ln.rstrip().endswith("in run_command")]
    if full_error:  # Python's own report: every frame, Hydra's job runner included, no hint
        assert any(ln.rstrip().endswith("in run_job") for ln in hydra_frames) and run_command_frames, err
        assert HINT not in err
    else:  # from the task function down: nothing of Hydra, nothing of the command around it
        assert hydra_frames == [] and run_command_frames == [], err
        assert lines[-1] == HINT and err.endswith(f"\n\n{HINT}\n"), err
        first_frame = next(ln for ln in err.splitlines() if ln.strip().startswith("File "))
        assert first_frame.rstrip().endswith("in main"), err  # harness.cli.run.main, the task function Hydra called
