"""Process-level helpers for long-running jobs (a sweep runs many jobs in one process).

:func:`long_lived` wraps the first import of libraries whose objects live as long as the process:
imported modules (MLflow, torch, sentence-transformers) and a loaded model. CPython's
cyclic garbage collector walks every tracked object in each full (generation 2)
collection; after those imports that is millions of objects, about 0.2-0.4 s per full
collection on the benchmark machine, and a cold run triggered about ten of them (1.7 s of
a 22 s run, measured with ``gc.callbacks``). Inside the block the collector is paused;
on leaving the outermost block every object then tracked is moved to the permanent
generation with :func:`gc.freeze` (Python >= 3.7, "Garbage Collector interface" in the
standard library documentation), so later collections skip them. The price: cyclic
garbage created inside the block is never reclaimed (import-time garbage, small), and
frozen objects are not collected if they die later.
"""

from __future__ import annotations

import contextlib
import gc
import sys
from typing import Iterator

_depth = 0


@contextlib.contextmanager
def long_lived(first_import: str) -> Iterator[None]:
    """Pause the cyclic garbage collector in the block; freeze the tracked objects after it.

    Acts only while module ``first_import`` is not imported yet, i.e. once per process:
    freezing again later (the next job of a sweep) would also pin that job's objects.
    Nested blocks act once, at the outermost exit. A collector disabled before the block
    (e.g. by a caller measuring time) is left disabled and nothing is frozen.

    Args:
        first_import: dotted module name the block imports (``"torch"``, ``"mlflow"``).
    """
    global _depth
    if first_import in sys.modules or (_depth == 0 and not gc.isenabled()):
        yield
        return
    _depth += 1
    if _depth == 1:
        gc.disable()
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0:
            gc.freeze()
            gc.enable()


def check_torch_device(setting: str, device: str) -> None:
    """Refuse a torch ``device`` this build cannot use; ``setting`` names it in the message
    (``embedding.device``, ``retriever.device``). Imports torch, so call it where the model loads.

    Raises:
        ValueError: ``cuda``/``cuda:N`` without a CUDA device, or ``mps`` without MPS.
    """
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"{setting}={device!r} but this torch build has no CUDA device; use 'cpu'")
    if device == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"{setting}='mps' but MPS is not available here; use 'cpu'")
