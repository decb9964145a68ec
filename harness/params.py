"""Parameter validation: one declaration of a setting's type, range and wording, one check.

Every component, setting group and study checks its plain arguments here instead of
writing ``isinstance(x, bool) or not isinstance(x, int) or x < 1`` by hand. A setting is
declared once as a frozen :class:`Param` (kind, range with open or closed bounds, the
allowed names of a choice, whether ``None`` is allowed, default, description), and
:meth:`Param.check` either returns the value unchanged or raises the caller's error type
with a one-line message of the project's shape::

    <where>.<name> must be <requirement>, got <value!r>

e.g. ``chunker.chunk_overlap must be an integer in [0, chunk_size) = [0, 512), got -1``.
The requirement is written from the declaration (``an integer >= 1``, ``a number in (0,
1)``, ``a number of seconds > 0``, ``null or an integer >= 1``) unless the declaration
spells it out (``need=``) for a wording the generated one cannot give.

The rules every check keeps, whatever the site:

- a ``bool`` is never an integer nor a number (Python's ``True == 1`` would otherwise
  pass ``chunk_size: true`` as 1);
- an integer setting takes ``int`` only (``2.0`` is refused), a number setting takes
  ``int`` or ``float``; NumPy scalars only where the declaration says ``numpy=True``;
- a number setting refuses NaN and +-inf unless declared ``finite=False`` (NaN still fails
  any range, as every comparison with NaN is false);
- a misspelt choice gets ``(did you mean 'x'?)`` from :func:`difflib.get_close_matches`.

The model is ir_measures' ``ParamInfo`` (a measure parameter's type, default and
description, checked when a measure is parsed); this module adds ranges, open bounds and
the message. It imports nothing from :mod:`harness`, so every layer may use it.
"""

from __future__ import annotations

import difflib
import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Mapping, Sequence

Kind = Literal["int", "number", "bool", "str", "choice"]
"""What a :class:`Param` holds: ``int`` (a Python int, never a bool), ``number`` (int or
float, never a bool), ``bool``, ``str`` (non-empty unless ``low=0``) or ``choice`` (one of
``choices``)."""

KINDS: tuple[str, ...] = ("int", "number", "bool", "str", "choice")

_MISSING: Any = object()


def is_int(value: Any, numpy: bool = False) -> bool:
    """Whether ``value`` is an integer and not a ``bool``.

    Args:
        value: anything.
        numpy: also accept NumPy integer scalars (``np.int64``; any :class:`numbers.Integral`).

    Returns:
        True for ``int`` (and ``np.integer`` if ``numpy``), False for ``bool``, ``float``
        (even ``2.0``), strings and everything else.
    """
    if isinstance(value, bool):
        return False
    return isinstance(value, numbers.Integral) if numpy else isinstance(value, int)


def is_number(value: Any, finite: bool = False, numpy: bool = False) -> bool:
    """Whether ``value`` is an int or a float and not a ``bool``.

    Args:
        value: anything.
        finite: also require ``math.isfinite(value)`` (refuses NaN, +inf and -inf).
        numpy: also accept NumPy integer and floating scalars (any :class:`numbers.Real`;
            ``np.float64`` is a float subclass and is always accepted).

    Returns:
        True when ``value`` is a number of the accepted types (and finite if asked).
    """
    if isinstance(value, bool):
        return False
    if not isinstance(value, numbers.Real if numpy else (int, float)):
        return False
    return not finite or math.isfinite(float(value))


def is_real(value: Any) -> bool:
    """Whether ``value`` is a finite int or float and not a ``bool`` (``is_number(value, finite=True)``)."""
    return is_number(value, finite=True)


def _bound(value: float) -> str:
    """A bound as written in a message: ``1.0`` as ``1``, ``0.5`` as ``0.5``, ``inf`` as ``inf``."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def nearest(value: Any, known: Iterable[Any]) -> str | None:
    """The closest of ``known`` to ``str(value)`` (:func:`difflib.get_close_matches`, cut-off 0.6), else None."""
    close = difflib.get_close_matches(str(value), [str(k) for k in known], n=1)
    return close[0] if close else None


@dataclass(frozen=True)
class Param:
    """One declared parameter: its kind, range, default and description, and the check.

    Attributes:
        name: the parameter's name as the user writes it (``chunk_size``); the message
            names ``<where>.<name>``.
        kind: one of :data:`KINDS`.
        low, high: the allowed range of an ``int`` or ``number`` (None: unbounded on that
            side), or the shortest/longest length of a ``str`` (``low=1`` by default for
            ``str``: an empty or blank string is refused).
        low_open, high_open: exclude the bound itself (``(0, 1)`` is ``low=0, high=1,
            low_open=True, high_open=True``).
        low_name, high_name: a bound that is another parameter, named in the message
            (``in [0, chunk_size) = [0, 512)``).
        choices: the allowed values of a ``choice``.
        allow_none: ``None`` is allowed (and returned as is).
        none: how the message words the ``None`` alternative: a template with ``{}`` for
            the rest of the requirement (``"{} or null"``, ``"null (no PCA) or {}"``).
        finite: a ``number`` must be finite (NaN and +-inf refused); default True.
        numpy: an ``int``/``number`` also accepts NumPy scalars.
        noun: what an ``int``/``number`` is called in the message before its range (default
            ``an integer`` / ``a number``; ``a number of seconds`` gives ``a number of seconds
            > 0``; ``""`` gives the bare range, ``in (0, 1)``).
        note: a parenthesised remark after the range (``characters``: ``an integer >= 1
            (characters)``).
        need: the whole requirement, replacing the generated one (for wordings the fields
            above cannot give).
        default: the default value (documentation; :data:`_MISSING` when there is none).
        desc: a one-line description (documentation).
        error: the exception type raised (``ValueError``, or the caller's own subclass).
        message: the message template, with ``{name}``, ``{need}`` and ``{value}`` fields.

    Raises:
        ValueError: on construction, an unknown ``kind``, a ``choice`` without choices, or a
            range on a ``bool`` or ``choice``.
    """

    name: str
    kind: Kind = "int"
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    low_name: str | None = None
    high_name: str | None = None
    choices: tuple[Any, ...] = ()
    allow_none: bool = False
    none: str = "{} or null"
    finite: bool = True
    numpy: bool = False
    noun: str | None = None
    note: str | None = None
    need: str | None = None
    default: Any = field(default=_MISSING, compare=False)
    desc: str = field(default="", compare=False)
    error: type[Exception] = ValueError
    message: str = "{name} must be {need}, got {value!r}"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Param {self.name!r}: kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.kind == "choice" and not self.choices:
            raise ValueError(f"Param {self.name!r}: a choice needs choices")
        if self.kind in ("bool", "choice") and (self.low is not None or self.high is not None):
            raise ValueError(f"Param {self.name!r}: a {self.kind} has no range")
        if self.kind == "choice" and not isinstance(self.choices, tuple):
            object.__setattr__(self, "choices", tuple(self.choices))

    def requirement(self) -> str:
        """What the parameter must be, as the message words it (``an integer in [1, 6]``)."""
        if self.need is not None:
            return self.need
        if self.kind == "bool":
            text = "true or false"
        elif self.kind == "choice":
            text = f"one of {', '.join(map(repr, self.choices))}"
        elif self.kind == "str":
            text = "a non-empty string" if self.low is None or self.low >= 1 else "a string"
        else:
            noun = self.noun if self.noun is not None else "an integer" if self.kind == "int" else "a number"
            text = (noun + self._range()).strip()
            if self.note:
                text += f" ({self.note})"
        return self.none.format(text) if self.allow_none else text

    def _range(self) -> str:
        low, high = self.low, self.high
        if low is None and high is None:
            return ""
        if low is None:
            return f" {'<' if self.high_open else '<='} {self.high_name or _bound(high)}"
        if high is None:
            return f" {'>' if self.low_open else '>='} {self.low_name or _bound(low)}"
        left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
        plain = f"{left}{_bound(low)}, {_bound(high)}{right}"
        if self.low_name or self.high_name:
            return f" in {left}{self.low_name or _bound(low)}, {self.high_name or _bound(high)}{right} = {plain}"
        return f" in {plain}"

    def accepts(self, value: Any) -> bool:
        """Whether :meth:`check` would return ``value`` (no exception)."""
        if value is None and self.allow_none:
            return True
        if self.kind == "choice":
            return value in self.choices  # None too, when it is one of the choices
        if value is None:
            return False
        if self.kind == "bool":
            return isinstance(value, bool)
        if self.kind == "str":
            if not isinstance(value, str):
                return False
            n = len(value.strip())
            return n >= (1 if self.low is None else self.low) and (self.high is None or n <= self.high)
        if self.kind == "int":
            if not is_int(value, numpy=self.numpy):
                return False
        elif not is_number(value, finite=self.finite, numpy=self.numpy):
            return False
        if self.low is not None and not (value > self.low if self.low_open else value >= self.low):
            return False
        if self.high is not None and not (value < self.high if self.high_open else value <= self.high):
            return False
        return True

    def check(self, value: Any, where: str = "") -> Any:
        """Return ``value`` unchanged if it is allowed, else raise :attr:`error`.

        Args:
            value: the value received.
            where: the prefix of the name in the message (``chunker`` gives
                ``chunker.<name>``; ``""``: the bare name).

        Returns:
            ``value`` itself (no conversion).

        Raises:
            error: ``"<where>.<name> must be <requirement>, got <value!r>"``; for a
                ``choice``, followed by ``(did you mean 'x'?)`` when a choice is close.
        """
        if self.accepts(value):
            return value
        name = f"{where}.{self.name}" if where else self.name
        text = self.message.format(name=name, need=self.requirement(), value=value)
        if self.kind == "choice":
            close = nearest(value, self.choices)
            text += f" (did you mean {close!r}?)" if close is not None else ""
        raise self.error(text)

    def with_bounds(self, **changes: Any) -> Param:
        """This declaration with some fields replaced (a bound known only at call time:
        ``OVERLAP.with_bounds(high=chunk_size)``)."""
        from dataclasses import replace

        return replace(self, **changes)


def check_all(params: Sequence[Param], values: Mapping[str, Any], where: str = "") -> dict[str, Any]:
    """Check each of ``params`` against ``values[param.name]``, in declaration order.

    Args:
        params: the declarations (a component's class-level tuple).
        values: parameter name -> value; every declared name must be present.
        where: the message prefix (``retriever``).

    Returns:
        ``{name: value}`` of the declared parameters, in declaration order.

    Raises:
        the first failing declaration's ``error``, as :meth:`Param.check` words it.
        KeyError: a declared name is missing from ``values`` (a programming error).
    """
    return {p.name: p.check(values[p.name], where) for p in params}


def require_int(
    name: str,
    value: Any,
    low: int | None = None,
    high: int | None = None,
    *,
    allow_none: bool = False,
    error: type[Exception] = ValueError,
    **wording: Any,
) -> Any:
    """``Param(name, "int", low, high, ...).check(value)``: ``value`` if it is an int in
    the range (a bool never is), else ``error("<name> must be an integer >= <low>, got ...")``.
    ``wording`` takes the other :class:`Param` fields (``note``, ``none``, ``need``, ``numpy``,
    ``low_open``, ``high_open``, ``low_name``, ``high_name``, ``message``)."""
    return Param(name, "int", low=low, high=high, allow_none=allow_none, error=error, **wording).check(value)


def require_number(
    name: str,
    value: Any,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
    finite: bool = True,
    allow_none: bool = False,
    error: type[Exception] = ValueError,
    **wording: Any,
) -> Any:
    """``Param(name, "number", ...).check(value)``: ``value`` if it is an int or float (not
    a bool), finite unless ``finite=False``, inside the range, else ``error(...)`` worded
    ``"<name> must be a number in [low, high], got ..."``."""
    return Param(
        name, "number", low=low, high=high, low_open=low_open, high_open=high_open, finite=finite, allow_none=allow_none, error=error, **wording
    ).check(value)


def require_bool(name: str, value: Any, error: type[Exception] = ValueError, **wording: Any) -> Any:
    """``value`` if it is ``True`` or ``False``, else ``error("<name> must be true or false, got ...")``."""
    return Param(name, "bool", error=error, **wording).check(value)


def require_choice(name: str, value: Any, choices: Sequence[Any], error: type[Exception] = ValueError, **wording: Any) -> Any:
    """``value`` if it is one of ``choices``, else ``error("<name> must be one of 'a', 'b',
    got 'x' (did you mean 'a'?)")`` (the hint only when a choice is close)."""
    return Param(name, "choice", choices=tuple(choices), error=error, **wording).check(value)
