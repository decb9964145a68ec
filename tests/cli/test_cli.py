"""The console script ``harness`` as installed in the venv: the command table, an unknown
command, and a few commands run end to end in subprocesses (nothing is mocked; every write
goes to ``tmp_path``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import KESTREL_PATH, PROJECT_ROOT

HARNESS = Path(sys.executable).parent / "harness"
#: The nine commands the project documents (README, docs/architecture.md).
COMMANDS = ("run", "compare", "report", "check", "tune", "bench", "generate", "server", "cache", "datasets")


def _harness(*args: str, cwd: Path = PROJECT_ROOT, timeout: float = 300) -> subprocess.CompletedProcess:
    if not HARNESS.is_file():
        pytest.fail(f"console script {HARNESS} missing: install the project into the venv (pip install -e .)")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run([str(HARNESS), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_help_lists_every_command():
    proc = _harness("--help")
    assert proc.returncode == 0, proc.stderr
    listed = [line.split()[0] for line in proc.stdout.splitlines() if line.startswith("  ") and line.strip()]
    assert listed == list(COMMANDS)
    assert proc.stdout.startswith("usage: harness <command>")


def test_no_arguments_prints_the_usage_and_exits_2():
    proc = _harness()
    assert proc.returncode == 2
    assert "usage: harness <command>" in proc.stdout


def test_unknown_command_exits_2_with_the_closest_name():
    proc = _harness("compar", "--help")
    assert proc.returncode == 2
    assert "unknown command 'compar'" in proc.stderr and "did you mean 'compare'?" in proc.stderr
    far = _harness("zzzz")
    assert far.returncode == 2
    assert "unknown command 'zzzz'" in far.stderr and "did you mean" not in far.stderr


def test_cache_info_on_an_empty_folder(tmp_path):
    folder = tmp_path / "cache"
    proc = _harness("cache", "info", "--dir", str(folder), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"cache folder {folder}"
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    assert set(rows) == {"embeddings", "chunks", "llm", "total"}
    for kind in ("embeddings", "chunks", "llm"):
        assert rows[kind][0] == "0" and rows[kind][-2:] == ["0", "B"]  # 0 entries, 0 bytes
    assert rows["total"] == ["0", "B"]


def test_compare_help_from_python_dash_m_and_the_console_script():
    module = subprocess.run([sys.executable, "-m", "harness", "compare", "runs", "--help"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)
    script = _harness("compare", "runs", "--help")
    for proc in (module, script):
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith("usage: harness compare runs") and "--tracking-uri" in proc.stdout and "RUN_ID" in proc.stdout
    assert module.stdout == script.stdout  # one parser behind both spellings


#: The commands whose arguments argparse parses (run and generate hand theirs to Hydra).
ARGPARSE_COMMANDS = ("compare", "report", "check", "tune", "bench", "server", "cache", "datasets")


@pytest.mark.parametrize("name", ARGPARSE_COMMANDS)
def test_every_commands_usage_names_the_console_script(name, capsys):
    import importlib

    module = importlib.import_module(f"harness.cli.{name}")
    with pytest.raises(SystemExit) as exc:
        module.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: harness {name} ") and f"python -m harness.{name}" not in out


def test_only_the_run_command_keeps_a_python_dash_m_shim():
    package = PROJECT_ROOT / "harness"
    shims = sorted(p.name for p in package.glob("*.py") if p.stem in COMMANDS)
    assert shims == ["run.py"]  # python -m harness.run, the documented entry point of a run
    mains = sorted(str(p.relative_to(package)) for p in package.rglob("__main__.py"))
    assert mains == ["__main__.py"]  # python -m harness <command>


def test_datasets_validate_the_bundled_dataset():
    proc = _harness("datasets", "validate", "datasets/kestrel_kb")
    assert proc.returncode == 0, proc.stderr
    n_docs = sum(1 for p in (KESTREL_PATH / "corpus").iterdir() if p.is_file())
    questions = [json.loads(line) for line in (KESTREL_PATH / "questions.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    assert f"  documents:       {n_docs} (" in proc.stdout
    assert f"  queries:         {len(questions)} (" in proc.stdout
    assert "dropped or unresolved: none" in proc.stdout


def test_datasets_validate_names_a_missing_folder(tmp_path):
    proc = _harness("datasets", "validate", str(tmp_path / "nowhere"), cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.startswith("INVALID: ") and "nowhere" in proc.stderr


def test_every_command_module_exposes_run_command():
    import importlib

    for name in COMMANDS:
        module = importlib.import_module(f"harness.cli.{name}")
        assert callable(getattr(module, "run_command", None)), name


# ------------------------------------------------------------------ warnings as one line


def _warn_in_a_command(code: str) -> str:
    script = f"import warnings\nfrom harness.cli import prepare_process\nprepare_process()\n{code}\n"
    proc = subprocess.run([sys.executable, "-c", script], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


def test_a_commands_warning_prints_as_one_line_without_the_source_line():
    err = _warn_in_a_command("warnings.warn('chunker.chunk_size=16 is smaller than most evidence')")
    assert err == "warning: chunker.chunk_size=16 is smaller than most evidence\n"
    # a multi-line message stays one line; another library's category keeps its name and origin, never the code line
    err = _warn_in_a_command("warnings.warn('first\\nsecond', FutureWarning)")
    assert err.count("\n") == 1 and err.startswith("warning: first second (FutureWarning, ") and "warnings.warn" not in err


def test_one_line_warning_formatting_property():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from harness.cli import format_warning

    @settings(max_examples=50, deadline=None)
    @given(st.text(max_size=80), st.sampled_from([UserWarning, RuntimeWarning, DeprecationWarning]))
    def check(message, category):
        out = format_warning(message, category, "/x/lib.py", 12, "source line here")
        assert out.startswith("warning: ") and out.endswith("\n") and out.count("\n") == 1
        assert "source line here" not in out
        assert " ".join(message.split()) in out  # every word of the message, whitespace folded

    check()
