"""harness.params: the one parameter validator, checked over generated values, and a guard
that no hand-written type check or private ``_is_int``-style helper is left in ``harness/``."""

from __future__ import annotations

import ast
import math
import re

import numpy as np
import pytest
from conftest import PROJECT_ROOT
from hypothesis import given
from hypothesis import strategies as st

from harness.params import Param, check_all, is_int, is_number, is_real, require_bool, require_choice, require_int, require_number

ANYTHING = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=5), st.lists(st.integers(), max_size=2)
)


@given(st.booleans())
def test_a_bool_is_never_an_int_nor_a_number(flag):
    assert not is_int(flag)
    assert not is_int(flag, numpy=True)
    assert not is_number(flag)
    assert not is_number(flag, numpy=True)
    with pytest.raises(ValueError, match=r"^x must be an integer >= 0, got (True|False)$"):
        require_int("x", flag, low=0)
    with pytest.raises(ValueError, match=r"^x must be a number, got (True|False)$"):
        require_number("x", flag)


@given(st.integers())
def test_ints_are_ints_and_numbers(n):
    assert is_int(n) and is_number(n) and is_real(n)
    assert require_int("x", n) == n
    assert is_int(np.int64(0), numpy=True) and not is_int(np.int64(0))


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_a_float_is_a_number_never_an_int(x):
    assert is_number(x) and is_real(x)
    assert not is_int(x)
    with pytest.raises(ValueError, match=r"^n must be an integer, got "):
        require_int("n", x)


@pytest.mark.parametrize("x", [math.nan, math.inf, -math.inf])
def test_nan_and_inf_are_refused_where_finite_is_required(x):
    assert is_number(x) and not is_number(x, finite=True) and not is_real(x)
    with pytest.raises(ValueError, match=r"^t must be a number of seconds > 0, got (nan|inf|-inf)$"):
        Param("t", "number", low=0, low_open=True, noun="a number of seconds").check(x)
    # declared finite=False, +inf passes an open lower bound; NaN still fails every range
    assert Param("t", "number", low=0, low_open=True, finite=False).accepts(x) is (x == math.inf)


@given(
    st.integers(-50, 50),
    st.integers(0, 50),
    st.booleans(),
    st.booleans(),
    st.one_of(st.integers(-120, 120), st.floats(-120, 120, allow_nan=False)),
)
def test_ranges_and_open_bounds_hold(low, width, low_open, high_open, value):
    high = low + width
    p = Param("v", "number", low=low, high=high, low_open=low_open, high_open=high_open)
    inside = (low < value if low_open else low <= value) and (value < high if high_open else value <= high)
    assert p.accepts(value) is inside
    if inside:
        assert p.check(value) is value
    else:
        left, right = "(" if low_open else "[", ")" if high_open else "]"
        with pytest.raises(ValueError) as info:
            p.check(value, "retriever")
        assert str(info.value) == f"retriever.v must be a number in {left}{low}, {high}{right}, got {value!r}"


@given(st.text(alphabet="abcdefghij_", min_size=1, max_size=12), ANYTHING)
def test_the_message_names_the_parameter(name, value):
    p = Param(name, "int", low=1)
    if p.accepts(value):
        return
    with pytest.raises(ValueError) as info:
        p.check(value, "chunker")
    assert str(info.value).startswith(f"chunker.{name} must be an integer >= 1, got ")
    assert str(info.value).endswith(repr(value))


@pytest.mark.parametrize(
    ("typo", "meant"),
    [("rff", "rrf"), ("weightd", "weighted"), ("wieghted", "weighted")],
)
def test_a_misspelt_choice_suggests_the_nearest_name(typo, meant):
    with pytest.raises(ValueError) as info:
        require_choice("retriever.fusion", typo, ("rrf", "weighted"))
    assert str(info.value) == f"retriever.fusion must be one of 'rrf', 'weighted', got {typo!r} (did you mean {meant!r}?)"


def test_a_choice_far_from_every_name_gets_no_suggestion_and_none_can_be_a_choice():
    with pytest.raises(ValueError, match=r"^d must be one of None, 'ray', got 'zzzzzz'$"):
        require_choice("d", "zzzzzz", (None, "ray"))
    assert require_choice("d", None, (None, "ray")) is None


@given(ANYTHING)
def test_none_passes_only_when_allowed(value):
    strict, loose = Param("k", "int", low=1), Param("k", "int", low=1, allow_none=True, none="null or {}")
    assert strict.accepts(None) is False and loose.accepts(None) is True
    if value is not None and not strict.accepts(value):
        with pytest.raises(ValueError, match=re.escape("k must be null or an integer >= 1, got ")):
            loose.check(value)


def test_requirements_read_as_the_messages_say():
    assert Param("o", "int", low=0, high=8, high_open=True, high_name="chunk_size").requirement() == "an integer in [0, chunk_size) = [0, 8)"
    assert Param("h", "int", low=2, high=6, low_name="min_header_level").requirement() == "an integer in [min_header_level, 6] = [2, 6]"
    assert Param("c", "number", low=0, high=1, low_open=True, high_open=True, noun="").requirement() == "in (0, 1)"
    assert Param("b", "int", low=1, note="in compression.unit").requirement() == "an integer >= 1 (in compression.unit)"
    assert Param("d", "int", low=1, allow_none=True, none="{} or null for max(k, 100)").requirement() == "an integer >= 1 or null for max(k, 100)"
    assert Param("a", "number", low=0.0, high=0.5, low_open=True, high_open=True).requirement() == "a number in (0, 0.5)"


def test_the_error_type_and_template_are_the_callers():
    class GateError(Exception):
        pass

    with pytest.raises(GateError, match=r"^g: field 'seed': expected an integer >= 0, got -1$"):
        Param("g: field 'seed'", "int", low=0, error=GateError, message="{name}: expected {need}, got {value!r}").check(-1)
    with pytest.raises(ValueError, match=r"^x must be true or false, got 1$"):
        require_bool("x", 1)


def test_check_all_checks_in_declaration_order_and_returns_the_values():
    params = (Param("a", "int", low=1), Param("b", "number", low=0, high=1))
    assert check_all(params, {"a": 3, "b": 0.5}) == {"a": 3, "b": 0.5}
    with pytest.raises(ValueError, match=r"^x\.a must be"):
        check_all(params, {"a": 0, "b": 7}, "x")


def test_a_declaration_is_itself_checked():
    with pytest.raises(ValueError, match="kind must be one of"):
        Param("p", "integer")
    with pytest.raises(ValueError, match="needs choices"):
        Param("p", "choice")
    with pytest.raises(ValueError, match="has no range"):
        Param("p", "bool", low=0)


# -- the guard: no hand-written check is left --------------------------------------------------

PACKAGE = PROJECT_ROOT / "harness"
PRIVATE_HELPERS = {"_is_int", "_is_number", "_is_real", "_is_integer", "_is_float", "_check_int", "_check_resamples", "_check_confidence"}


#: The one module below params.py (params imports it), which keeps its own span check.
BELOW = {PACKAGE / "types.py", PACKAGE / "params.py"}


def _isinstance_of(node: ast.AST, names: set[str]) -> bool:
    """``node`` is ``isinstance(x, T)`` with ``T`` (or a member of a tuple ``T``) in ``names``."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance" and len(node.args) == 2):
        return False
    kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
    return any(isinstance(k, ast.Name) and k.id in names for k in kinds)


def _hand_written_checks(tree: ast.AST) -> list[int]:
    """Lines of a boolean expression that tests ``isinstance(x, bool)`` (or its negation) beside
    ``isinstance(x, int | float)`` (or its negation), in either order: every spelling of the
    "an int but not a bool" test that :func:`harness.params.is_int` / ``is_number`` replace."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.BoolOp):
            continue
        parts = [v.operand if isinstance(v, ast.UnaryOp) and isinstance(v.op, ast.Not) else v for v in node.values]
        has_bool = any(_isinstance_of(p, {"bool"}) for p in parts)
        has_number = any(_isinstance_of(p, {"int", "float"}) and not _isinstance_of(p, {"bool"}) for p in parts)
        if has_bool and has_number:
            found.append(node.lineno)
    return found


@pytest.mark.parametrize(
    "source",
    [
        "isinstance(x, bool) or not isinstance(x, int) or x < 1",
        "isinstance(v, int) and not isinstance(v, bool)",
        "not isinstance(v, int) or isinstance(v, bool)",
        "isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0",
    ],
)
def test_the_guard_sees_every_spelling(source):
    assert _hand_written_checks(ast.parse(source)) == [1]


def test_the_guard_leaves_other_checks_alone():
    assert _hand_written_checks(ast.parse("isinstance(v, bool) or isinstance(v, str)\nnot isinstance(v, kind) or isinstance(v, bool)")) == []


def test_no_hand_written_type_check_or_private_helper_is_left_in_harness():
    left = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path in BELOW:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        rel = path.relative_to(PROJECT_ROOT)
        left += [f"{rel}:{line}: hand-written type check" for line in _hand_written_checks(tree)]
        left += [
            f"{rel}:{node.lineno}: def {node.name}"
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in PRIVATE_HELPERS
        ]
    assert left == [], "use harness.params (Param, is_int, is_number, require_*):\n" + "\n".join(left)
