"""Process-level helpers: long-lived imports in long-running jobs (a sweep runs many jobs
in one process), torch device checks, and the CPU's bf16 support behind
``embedding.precision=auto`` (:func:`resolve_precision`).

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
import functools
import gc
import os
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


#: Embedding precisions: ``auto`` picks ``bf16`` where the CPU multiplies bf16 matrices in
#: hardware (:func:`fast_bf16_cpu`), else ``fp32``.
PRECISIONS = ("auto", "fp32", "bf16")


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU feature flags the Linux kernel reports (``flags`` in ``/proc/cpuinfo``);
    empty where that file does not exist (macOS, Windows) or cannot be read."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU's model name as the machine reports it at run time (``model name`` in
    ``/proc/cpuinfo``, else :func:`platform.processor`, else ``"unknown CPU"``), for
    benchmark output: a timing names the CPU that measured it."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return " ".join(line.partition(":")[2].split())
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown CPU"


def fast_bf16_cpu() -> bool:
    """True when this CPU multiplies bf16 matrices in hardware tiles: Intel AMX (flags
    ``amx_bf16`` and ``amx_tile``, which Linux reports only when the kernel can hand AMX
    state to a process).

    Detected, never assumed: ``avx512_bf16`` alone is not enough. On a Xeon that reports
    ``avx512_bf16`` without AMX, MiniLM under bf16 autocast took about 1.4x the CPU time of
    fp32 (100 texts of 1,200 characters, one thread, three alternating rounds: 10.4 s against
    7.4 s); on one with AMX it was 2.7x faster (``docs/embeddings.md``). Anything else
    (another OS, another architecture) counts as no.
    """
    flags = cpu_flags()
    return "amx_bf16" in flags and "amx_tile" in flags


def package_versions(names) -> dict[str, str]:
    """Installed version of each distribution name (``"missing"`` when absent), for provenance.

    Args:
        names: distribution names as pip knows them (``"faiss-cpu"``, ``"rank-bm25"``).

    Returns:
        name -> version string (``importlib.metadata.version``), in the order given.
    """
    from importlib import metadata

    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "missing"
    return out


def resolve_precision(precision: str, device: str = "cpu") -> str:
    """The precision an embedding model runs at: ``fp32`` or ``bf16``.

    ``auto`` is ``bf16`` on a CPU device where :func:`fast_bf16_cpu` holds and ``fp32``
    everywhere else (GPUs included: ask for ``bf16`` explicitly there). The environment
    variable ``HARNESS_AUTO_PRECISION`` (``fp32`` or ``bf16``) fixes what ``auto`` means on
    this machine, e.g. for a CI job whose expected values were computed at fp32. ``fp32``
    and ``bf16`` are returned as given.

    Raises:
        ValueError: ``precision`` not in :data:`PRECISIONS` (naming ``embedding.precision``),
            or ``HARNESS_AUTO_PRECISION`` set to anything but ``fp32`` or ``bf16``.
    """
    if precision not in PRECISIONS:
        import difflib

        close = difflib.get_close_matches(str(precision), PRECISIONS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"embedding.precision must be one of 'auto', 'fp32', 'bf16', got {precision!r}{hint}")
    if precision != "auto":
        return precision
    forced = os.environ.get("HARNESS_AUTO_PRECISION", "")
    if forced:
        if forced not in ("fp32", "bf16"):
            raise ValueError(f"environment variable HARNESS_AUTO_PRECISION must be 'fp32' or 'bf16' (or unset), got {forced!r}")
        return forced
    return "bf16" if str(device) == "cpu" and fast_bf16_cpu() else "fp32"
