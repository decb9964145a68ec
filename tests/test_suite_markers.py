"""The quick subset (``-m "not slow"``) still covers every package of ``harness/``.

Tests mirror the package (``tests/<package>/`` for ``harness/<package>/``), so a package
whose test folder holds only tests marked ``slow`` would go unchecked by the subset a
developer runs on every change. Read from the sources (no second collection of the suite):
a test counts as slow when its function, its class or its module (``pytestmark``) carries
``pytest.mark.slow``, or when every one of its ``pytest.param`` cases does.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import PROJECT_ROOT

TESTS = PROJECT_ROOT / "tests"


def _is_slow_mark(node: ast.AST) -> bool:
    """``pytest.mark.slow`` (or ``mark.slow``), called or not."""
    if isinstance(node, ast.Call):
        node = node.func
    if not (isinstance(node, ast.Attribute) and node.attr == "slow"):
        return False
    owner = node.value
    return (isinstance(owner, ast.Attribute) and owner.attr == "mark") or (isinstance(owner, ast.Name) and owner.id == "mark")


def _marks(node: ast.AST) -> list[ast.AST]:
    """The marks of a ``pytestmark = ...`` value (one mark or a list of them)."""
    return list(node.elts) if isinstance(node, (ast.List, ast.Tuple)) else [node]


def _all_params_slow(decorator: ast.AST) -> bool:
    """``@pytest.mark.parametrize(..., [pytest.param(..., marks=pytest.mark.slow), ...])`` with every case slow."""
    if not (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute) and decorator.func.attr == "parametrize"):
        return False
    if len(decorator.args) < 2 or not isinstance(decorator.args[1], (ast.List, ast.Tuple)) or not decorator.args[1].elts:
        return False
    for case in decorator.args[1].elts:
        marks = [kw.value for kw in case.keywords if kw.arg == "marks"] if isinstance(case, ast.Call) else []
        if not any(_is_slow_mark(m) for value in marks for m in _marks(value)):
            return False
    return True


def _slow_by_decorators(decorators: list[ast.AST]) -> bool:
    return any(_is_slow_mark(d) or _all_params_slow(d) for d in decorators)


def quick_tests(path: Path) -> list[str]:
    """Names of the test functions of the file at ``path`` that ``-m "not slow"`` runs."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in stmt.targets):
            if any(_is_slow_mark(m) for m in _marks(stmt.value)):
                return []
    found = []
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name.startswith("test"):
            if not _slow_by_decorators(stmt.decorator_list):
                found.append(stmt.name)
        elif isinstance(stmt, ast.ClassDef) and stmt.name.startswith("Test") and not _slow_by_decorators(stmt.decorator_list):
            for item in stmt.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test"):
                    if not _slow_by_decorators(item.decorator_list):
                        found.append(f"{stmt.name}.{item.name}")
    return found


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "test_sample.py"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_reader_sees_every_way_a_test_is_marked_slow(tmp_path):
    sample = _write(
        tmp_path,
        "import pytest\n"
        "from pytest import mark\n"
        "def test_plain(): pass\n"
        "@pytest.mark.slow\n"
        "def test_marked(): pass\n"
        "@mark.slow\n"
        "def test_marked_short(): pass\n"
        "@pytest.mark.parametrize('x', [pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=[pytest.mark.slow])])\n"
        "def test_every_case_slow(x): pass\n"
        "@pytest.mark.parametrize('x', [pytest.param(1, marks=pytest.mark.slow), 2])\n"
        "def test_one_case_quick(x): pass\n"
        "@pytest.mark.slow\n"
        "class TestSlow:\n"
        "    def test_inside(self): pass\n"
        "class TestMixed:\n"
        "    def test_quick(self): pass\n"
        "    @pytest.mark.slow\n"
        "    def test_slow(self): pass\n"
        "def helper(): pass\n",
    )
    assert quick_tests(sample) == ["test_plain", "test_one_case_quick", "TestMixed.test_quick"]
    assert quick_tests(_write(tmp_path, "import pytest\npytestmark = [pytest.mark.slow]\ndef test_a(): pass\n")) == []
    assert quick_tests(_write(tmp_path, "import pytest\npytestmark = pytest.mark.filterwarnings('ignore')\ndef test_a(): pass\n")) == ["test_a"]


PACKAGES = sorted(p.name for p in (PROJECT_ROOT / "harness").iterdir() if p.is_dir() and (p / "__init__.py").is_file())


def test_the_packages_are_found():
    assert {"chunkers", "evaluation", "experiment", "retrievers", "studies", "text", "tracking"} <= set(PACKAGES)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_package_has_a_quick_test(package):
    folder = TESTS / package
    assert folder.is_dir(), f"harness/{package}/ has no test folder tests/{package}/"
    quick = {f"{path.relative_to(TESTS)}::{name}" for path in sorted(folder.rglob("test_*.py")) for name in quick_tests(path)}
    assert quick, f"every test in tests/{package}/ is marked slow: `pytest -m \"not slow\"` would not check harness/{package}/"


def test_the_core_types_have_a_quick_test():
    assert quick_tests(TESTS / "test_types.py")
