"""The commands that read runs take one ``--tracking-uri`` option, declared in harness.cli."""

from __future__ import annotations

from pathlib import Path

import pytest

import harness.cli
from harness.cli import compare as cli_compare
from harness.cli import report as cli_report

CLI = Path(harness.cli.__file__).parent


@pytest.mark.parametrize(
    "parse",
    [
        lambda: cli_compare._parser().parse_args(["list", "--tracking-uri", "file:///tmp/x"]),
        lambda: cli_compare._parser().parse_args(["runs", "a", "b", "--tracking-uri", "file:///tmp/x"]),
        lambda: cli_report._parser().parse_args(["a", "--tracking-uri", "file:///tmp/x"]),
    ],
    ids=["compare list", "compare runs", "report"],
)
def test_each_reader_accepts_the_option(parse):
    assert parse().tracking_uri == "file:///tmp/x"


def test_help_names_the_default(capsys):
    with pytest.raises(SystemExit):
        cli_report._parser().parse_args(["--help"])
    assert "MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else the project store)" in " ".join(capsys.readouterr().out.split())


def test_a_given_uri_wins_and_none_falls_back_to_the_environment(monkeypatch, tmp_path):
    assert harness.cli.tracking_uri("http://127.0.0.1:1") == "http://127.0.0.1:1"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "store").as_uri())
    assert harness.cli.tracking_uri(None) == (tmp_path / "store").as_uri()


def test_no_command_declares_the_option_itself():
    spelled = [p.name for p in CLI.glob("*.py") if p.name != "__init__.py" and '"--tracking-uri"' in p.read_text()]
    assert spelled == []
