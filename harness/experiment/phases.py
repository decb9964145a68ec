"""Phase boundaries of a run, announced to listeners (a benchmark that measures each phase).

A run calls :func:`mark` when a phase starts (``load``, ``chunk``, ``index``, ``search``,
``score``, ``diagnostics``, ``log``) and ``mark("end")`` after its last phase. With no
listener (every ordinary run) a mark costs one empty loop. :mod:`harness.studies.bench_scale`
listens to take the time and the peak memory of every phase.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator

_listeners: list[Callable[[str], None]] = []


def mark(phase: str) -> None:
    """Tell every listener that ``phase`` starts now (``"end"``: the run's phases are over)."""
    for listener in _listeners:
        listener(phase)


@contextlib.contextmanager
def listening(listener: Callable[[str], None]) -> Iterator[None]:
    """Call ``listener(phase)`` at every :func:`mark` inside the ``with`` block."""
    _listeners.append(listener)
    try:
        yield
    finally:
        _listeners.remove(listener)
