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
from typing import Iterable, Iterator

from harness.params import Param

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
#: hardware (:func:`fast_bf16_cpu`), else ``fp32``; ``int8`` (dynamic int8 quantisation of the
#: linear layers) is only ever used when asked for (:data:`AUTO_MAY_PICK_INT8`).
PRECISIONS = ("auto", "fp32", "bf16", "int8")
#: Values ``HARNESS_AUTO_PRECISION`` may fix ``auto`` to.
AUTO_CHOICES = ("fp32", "bf16")
#: Quantized engines of PyTorch that run dynamically quantised ``Linear`` layers, in the
#: order one is chosen when the current engine is ``none`` (``torch.backends.quantized``).
QUANTIZED_ENGINES = ("x86", "fbgemm", "onednn", "qnnpack")
#: The rule for ``auto`` and int8: ``auto`` may pick a precision only if, against fp32 on
#: both benchmark datasets, no metric changes significantly (paired comparison, p < 0.05 at
#: the headline cut-offs 5 and 10) and every 95% CI lies within +-0.02
#: (``auto_eligible`` in ``experiments/precision_effect.py``). int8 changed no mean
#: significantly but its CIs reach -0.045 (mrr@10, kestrel_kb) and it moves nearly every
#: ranking (``docs/embeddings.md``, "Precision"), so ``auto`` never returns ``int8``.
AUTO_MAY_PICK_INT8 = False
PRECISION = Param("precision", "choice", choices=PRECISIONS)


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


#: The SIMD and matrix features a benchmark reports, when the CPU has them.
SIMD_FLAGS = ("sse4_2", "avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile")


def cpu_summary() -> dict:
    """What a benchmark records of the CPU that measured it, detected at run time: ``model``
    (:func:`cpu_model`), ``cores`` (``os.cpu_count()``), ``usable_cores`` (the process's CPU
    affinity where the OS reports it), ``simd`` (those of :data:`SIMD_FLAGS` in
    :func:`cpu_flags`) and ``load_average`` (1, 5 and 15 minutes, ``os.getloadavg``; None
    where unavailable)."""
    import os

    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        load = None
    flags = cpu_flags()
    return {"model": cpu_model(), "cores": os.cpu_count(), "usable_cores": usable, "simd": [f for f in SIMD_FLAGS if f in flags], "load_average": load}


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


def quantized_engines() -> tuple[str, ...]:
    """The quantized engines this PyTorch build supports on this CPU
    (``torch.backends.quantized.supported_engines`` without ``none``; PyTorch lists fbgemm and
    x86 only where the CPU has AVX2, detected at run time). Imports torch."""
    import torch

    return tuple(e for e in torch.backends.quantized.supported_engines if e != "none")


def choose_quantized_engine(supported: Iterable[str], current: str | None = None) -> str | None:
    """The engine int8 runs on: ``current`` (``torch.backends.quantized.engine``) when it is
    supported, else the first of :data:`QUANTIZED_ENGINES` that is; None when none is."""
    supported = tuple(supported)
    if current in supported and current in QUANTIZED_ENGINES:
        return current
    return next((e for e in QUANTIZED_ENGINES if e in supported), None)


def choose_precision(precision: str, device: str, flags: Iterable[str], engines: Iterable[str] | None, forced: str = "") -> str:
    """The rule of :func:`resolve_precision` over given facts (no probing; property-tested).

    Args:
        precision: ``embedding.precision`` as configured (one of :data:`PRECISIONS`).
        device: the torch device (``cpu``, ``cuda``, ``cuda:N``, ``mps``).
        flags: the CPU's feature flags (``/proc/cpuinfo``).
        engines: the supported quantized engines (:func:`quantized_engines`); read only for
            ``int8``, so None is fine for the others.
        forced: the value of ``HARNESS_AUTO_PRECISION`` (``""``: unset).

    Returns:
        ``fp32``, ``bf16`` or ``int8``; ``auto`` never gives ``int8`` (:data:`AUTO_MAY_PICK_INT8`).

    Raises:
        ValueError: an unknown precision (``did you mean``); ``int8`` on a device other than
            the CPU or where no quantized engine is supported; ``forced`` not in :data:`AUTO_CHOICES`.
    """
    PRECISION.check(precision, "embedding")
    if precision == "int8":
        if str(device) != "cpu":
            raise ValueError(
                f"embedding.precision=int8 runs on the CPU only (PyTorch's dynamic quantisation), but embedding.device={device!r}; use embedding.device=cpu or another precision"
            )
        if choose_quantized_engine(engines or ()) is None:
            raise ValueError(
                "embedding.precision=int8 needs a PyTorch quantized engine (x86, fbgemm, onednn or qnnpack), but this torch build supports none on "
                "this CPU (torch.backends.quantized.supported_engines); use embedding.precision=fp32"
            )
        return "int8"
    if precision != "auto":
        return precision
    if forced:
        if forced not in AUTO_CHOICES:
            raise ValueError(f"environment variable HARNESS_AUTO_PRECISION must be 'fp32' or 'bf16' (or unset), got {forced!r}")
        return forced
    flags = frozenset(flags)
    return "bf16" if str(device) == "cpu" and "amx_bf16" in flags and "amx_tile" in flags else "fp32"


def resolve_precision(precision: str, device: str = "cpu") -> str:
    """The precision an embedding model runs at: ``fp32``, ``bf16`` or ``int8``.

    ``auto`` is ``bf16`` on a CPU device where :func:`fast_bf16_cpu` holds and ``fp32``
    everywhere else (GPUs included: ask for ``bf16`` explicitly there); it never picks
    ``int8``, which changed metrics significantly (:data:`AUTO_MAY_PICK_INT8`). The
    environment variable ``HARNESS_AUTO_PRECISION`` (``fp32`` or ``bf16``) fixes what
    ``auto`` means on this machine, e.g. for a CI job whose expected values were computed
    at fp32. ``fp32`` and ``bf16`` are returned as given; ``int8`` after checking that it can
    run here (CPU device, a quantized engine: :func:`quantized_engines`, which imports torch).
    The rule itself is :func:`choose_precision`.

    Raises:
        ValueError: ``precision`` not in :data:`PRECISIONS` (naming ``embedding.precision``,
            with ``did you mean``), ``int8`` where it cannot run, or
            ``HARNESS_AUTO_PRECISION`` set to anything but ``fp32`` or ``bf16``.
    """
    PRECISION.check(precision, "embedding")
    engines = quantized_engines() if precision == "int8" else None
    return choose_precision(precision, device, cpu_flags() if precision == "auto" else (), engines, os.environ.get("HARNESS_AUTO_PRECISION", ""))
