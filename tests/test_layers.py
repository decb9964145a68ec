"""The import rules between the layers of ``harness/`` (``harness/__init__.py`` states them),
checked on the source with :mod:`ast`: every ``import`` statement counts, also those inside
functions (the project imports heavy libraries lazily, so a rule checked only at module
level would miss most of them)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import PROJECT_ROOT

PACKAGE = PROJECT_ROOT / "harness"
#: The command modules (``harness/cli/<command>.py``).
COMMANDS = ("run", "compare", "report", "check", "tune", "bench", "generate", "server", "cache", "datasets")


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, root: Path = PROJECT_ROOT) -> list[tuple[int, str]]:
    """``(line, imported module)`` for every import in ``path``; ``from a import b`` yields
    both ``a`` and ``a.b`` (``b`` may be a submodule); relative imports are resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = _module_name(path, root).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names if alias.name != "*"]
    return found


def _sources(folder: str = "") -> list[Path]:
    return sorted((PACKAGE / folder).rglob("*.py"))


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _violations(paths, forbidden) -> list[str]:
    return [f"{p.relative_to(PROJECT_ROOT)}:{line} imports {name}" for p in paths for line, name in imports_of(p) if forbidden(name)]


def test_the_checker_sees_lazy_from_and_relative_imports(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    probe = pkg / "probe.py"
    probe.write_text("import os\n\ndef f():\n    from mlflow.entities import Metric\n    from . import sibling\n    import harness.cli.run as r\n")
    names = [name for _, name in imports_of(probe, root=tmp_path)]
    assert names == ["os", "mlflow.entities", "mlflow.entities.Metric", "pkg", "pkg.sibling", "harness.cli.run"]


def test_commands_never_import_another_command():
    commands = [p for p in _sources("cli") if p.name != "__init__.py"]
    assert sorted(p.stem for p in commands) == sorted(COMMANDS)
    bad = _violations(commands, lambda name: _under(name, "harness.cli") and name not in ("harness.cli", "harness.cli.prepare_process"))
    assert not bad, "a command imports another command (move the shared code into a library layer):\n" + "\n".join(bad)


def test_only_the_tracking_layer_imports_mlflow():
    outside = [p for p in _sources() if "tracking" not in p.relative_to(PACKAGE).parts]
    bad = _violations(outside, lambda name: _under(name, "mlflow"))
    assert not bad, "MLflow used outside harness/tracking:\n" + "\n".join(bad)


#: Imports of harness/text that break its rule today, each to be removed with its fix:
#: ``text/units.py`` asks the embedding package where the model's tokenizer file is.
TEXT_KNOWN: set[tuple[str, str]] = set()


def test_text_layer_imports_only_the_core_types():
    found = {
        (str(p.relative_to(PROJECT_ROOT)), name)
        for p in _sources("text")
        for _, name in imports_of(p)
        if _under(name, "harness") and not (_under(name, "harness.types") or _under(name, "harness.text"))
    }
    modules = {(path, name) for path, name in found if (path, name.rsplit(".", 1)[0]) not in found}  # drop the imported names
    assert modules - TEXT_KNOWN == set(), "harness/text imports a layer above it"
    assert TEXT_KNOWN - modules == set(), "a known exception is gone: remove it from TEXT_KNOWN"


@pytest.mark.parametrize(
    "layer, above",
    [
        ("evaluation", ("harness.experiment", "harness.cli", "harness.chunkers", "harness.retrievers")),
        ("tracking", ("harness.experiment", "harness.cli")),
    ],
)
def test_layer_never_imports_the_layers_above(layer, above):
    bad = _violations(_sources(layer), lambda name: any(_under(name, a) for a in above))
    assert not bad, f"harness/{layer} imports a layer above it:\n" + "\n".join(bad)


@pytest.mark.parametrize("renderer", ["harness.reporting", "harness.evaluation.plots", "matplotlib", "jinja2"])
def test_tracking_logs_what_it_is_given_and_renders_nothing(renderer):
    """Figures and HTML are drawn by harness/reporting (called from harness/experiment), which
    hands the tracker the bytes or the rendering step to run (``Tracker.log_rendered``)."""
    bad = _violations(_sources("tracking"), lambda name: _under(name, renderer))
    assert not bad, f"harness/tracking imports {renderer}:\n" + "\n".join(bad)


def test_one_module_draws_every_figure():
    """``harness/reporting/charts.py`` draws the PNG artifacts and the pages' SVG from the same
    drawing functions; no other module draws (imports matplotlib)."""
    drawing = sorted(str(p.relative_to(PROJECT_ROOT)) for p in _sources() for _, name in imports_of(p) if _under(name, "matplotlib"))
    assert set(drawing) == {"harness/reporting/charts.py"}
